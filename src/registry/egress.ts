// Which addresses the registry client may connect to (decision 0025), without I/O. An image name
// is a tenant's input: left free, it makes Berth a scanner of the cluster's own network. So only
// global unicast addresses are reached, and not the cluster's own (its apiserver, its service and
// pod ranges), unless the admin allows a registry (`allowPrivate` in the registries configuration).
// IP classes are ipaddr.js's (its `range()`: IANA's special-purpose registries).
import ipaddr from 'ipaddr.js';

type Address = ipaddr.IPv4 | ipaddr.IPv6;
export type Cidr = [Address, number];

/** The cluster's own ranges, refused like private ones: the apiserver's address, service and pod ranges. */
export interface ClusterRanges {
  cidrs: Cidr[];
}

/** Names of ipaddr.js's ranges as a refusal says them. */
const spoken: Record<string, string> = {
  loopback: 'a loopback',
  private: 'a private (RFC 1918)',
  uniqueLocal: 'a private (unique local)',
  carrierGradeNat: 'a shared (CGNAT)',
  linkLocal: 'a link-local',
  unspecified: 'an unspecified',
  multicast: 'a multicast',
  broadcast: 'a broadcast',
};

/** NAT64's well-known prefix (RFC 6052): the IPv4 address it embeds is what is reached. */
const nat64: Cidr = ipaddr.parseCIDR('64:ff9b::/96');

/** The address itself: an IPv4-mapped or NAT64 IPv6 address as the IPv4 address it reaches. */
function reached(a: Address): Address {
  if (a.kind() === 'ipv6' && a.match(nat64)) {
    const p = (a as ipaddr.IPv6).parts;
    return new ipaddr.IPv4([p[6]! >> 8, p[6]! & 0xff, p[7]! >> 8, p[7]! & 0xff]);
  }
  return a;
}

/** Parses CIDRs and plain addresses (a /32 or /128); throws naming the first that is neither. */
export function parseCidrs(values: string[]): Cidr[] {
  return values.map((v) => {
    if (ipaddr.isValidCIDR(v)) return ipaddr.parseCIDR(v);
    if (ipaddr.isValid(v)) {
      const a = ipaddr.process(v);
      return [a, a.kind() === 'ipv4' ? 32 : 128];
    }
    throw new Error(`"${v}" is neither an IP address nor a CIDR`);
  });
}

/**
 * Why Berth does not connect to `address`, as `a loopback address`, or undefined when it may:
 * global unicast and outside the cluster's ranges. Anything unparsable is refused too.
 */
export function addressRefusal(address: string, cluster: ClusterRanges): string | undefined {
  if (!ipaddr.isValid(address)) return 'not an IP address';
  const a = reached(ipaddr.process(address));
  const range = a.range();
  if (range !== 'unicast') return `${spoken[range] ?? `a special-purpose (${range})`} address`;
  if (cluster.cidrs.some(([net, bits]) => net.kind() === a.kind() && a.match(net, bits)))
    return "an address of the cluster's own (its apiserver, services or pods)";
  return undefined;
}

/** The host of a URL as an IP address, when it is one (`[::1]` unbracketed), else undefined. */
export function literalAddress(hostname: string): string | undefined {
  const h = hostname.startsWith('[') ? hostname.slice(1, -1) : hostname;
  return ipaddr.isValid(h) ? h : undefined;
}

/**
 * Whether a request to `url` made for a registry endpoint may reach private addresses: only when
 * the admin allowed that registry, and only on the endpoint's own host name (its token realm on
 * another port, a redirect to itself). A realm or a redirect elsewhere is checked on its own.
 */
export const allowsPrivate = (endpoint: { url: URL; allowPrivate: boolean }, url: URL): boolean =>
  endpoint.allowPrivate && url.hostname === endpoint.url.hostname;
