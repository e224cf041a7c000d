// Which addresses the registry client may reach (egress.ts), and the lookup its sockets connect with
// (lookup.ts): the classification is ipaddr.js's, the policy Berth's.
import assert from 'node:assert/strict';
import type { LookupAddress } from 'node:dns';
import { describe, test } from 'node:test';
import {
  addressRefusal,
  allowsPrivate,
  literalAddress,
  parseCidrs,
  type ClusterRanges,
} from '../../../src/registry/egress.ts';
import { EgressRefused, egressLookup } from '../../../src/registry/lookup.ts';

const none: ClusterRanges = { cidrs: [] };

describe('addressRefusal', () => {
  test('global unicast addresses are reached', () => {
    for (const a of ['8.8.8.8', '140.82.112.3', '2606:4700::6810:84e5', '64:ff9b::808:808'])
      assert.equal(addressRefusal(a, none), undefined, a);
  });

  test('loopback, private, shared, link-local, unspecified and multicast addresses are not', () => {
    const cases: [string, RegExp][] = [
      ['127.0.0.1', /loopback/],
      ['127.255.0.9', /loopback/],
      ['::1', /loopback/],
      ['::ffff:127.0.0.1', /loopback/],
      ['10.96.0.1', /private \(RFC 1918\)/],
      ['172.16.4.4', /private \(RFC 1918\)/],
      ['192.168.1.1', /private \(RFC 1918\)/],
      ['::ffff:192.168.1.1', /private/],
      ['fd12:3456::1', /unique local/],
      ['100.64.0.10', /CGNAT/],
      ['169.254.169.254', /link-local/],
      ['fe80::1', /link-local/],
      ['0.0.0.0', /unspecified/],
      ['::', /unspecified/],
      ['224.0.0.251', /multicast/],
      ['ff02::1', /multicast/],
      ['255.255.255.255', /broadcast/],
      // NAT64 reaches the IPv4 address it embeds: here 10.0.0.1.
      ['64:ff9b::a00:1', /private/],
      ['192.0.2.7', /special-purpose \(reserved\)/],
      ['not-an-address', /not an IP address/],
    ];
    for (const [a, why] of cases) assert.match(addressRefusal(a, none) ?? 'reached', why, a);
  });

  test("the cluster's own ranges are refused even when public", () => {
    // GKE's service range is public: 34.118.224.0/20.
    const cluster = { cidrs: parseCidrs(['35.1.2.3', '34.118.224.0/20', '2001:4860::/32']) };
    assert.match(addressRefusal('35.1.2.3', cluster)!, /cluster's own/);
    assert.match(addressRefusal('34.118.230.77', cluster)!, /cluster's own/);
    assert.match(addressRefusal('2001:4860::8888', cluster)!, /cluster's own/);
    assert.equal(addressRefusal('8.8.8.8', cluster), undefined);
  });
});

describe('parseCidrs', () => {
  test('takes CIDRs and addresses, and names what is neither', () => {
    assert.deepEqual(
      parseCidrs(['10.0.0.0/8', '::1', '1.2.3.4']).map(([a, bits]) => `${a.toString()}/${bits}`),
      ['10.0.0.0/8', '::1/128', '1.2.3.4/32'],
    );
    assert.throws(() => parseCidrs(['10.0.0.0/33']), /"10\.0\.0\.0\/33" is neither/);
  });
});

describe('literalAddress', () => {
  test('an address in a URL, bracketed or not; a name is none', () => {
    assert.equal(literalAddress(new URL('https://127.0.0.1:5000').hostname), '127.0.0.1');
    assert.equal(literalAddress(new URL('https://[::1]:5000').hostname), '::1');
    assert.equal(literalAddress(new URL('https://registry.example').hostname), undefined);
  });
});

describe('allowsPrivate', () => {
  const ep = (url: string, allowPrivate: boolean) => ({ url: new URL(url), allowPrivate });
  test("an allowed registry's own host name, on any port; never another host, never unallowed", () => {
    assert.equal(
      allowsPrivate(ep('https://10.0.0.5:5000', true), new URL('https://10.0.0.5:5001/token')),
      true,
    );
    assert.equal(allowsPrivate(ep('https://10.0.0.5:5000', true), new URL('https://10.0.0.6/token')), false);
    assert.equal(allowsPrivate(ep('https://reg.internal', true), new URL('https://localhost/token')), false);
    assert.equal(
      allowsPrivate(ep('https://10.0.0.5:5000', false), new URL('https://10.0.0.5:5000/v2/')),
      false,
    );
  });
});

describe('egressLookup', () => {
  const lookup = (host: string, all: boolean) =>
    new Promise<{ err: NodeJS.ErrnoException | null; address: string | LookupAddress[] }>((resolve) =>
      egressLookup(none)(host, { all }, (err, address) => resolve({ err, address })),
    );

  test('a name that resolves only to loopback fails before any connection', async () => {
    for (const all of [false, true]) {
      const { err } = await lookup('localhost', all);
      assert.ok(err instanceof EgressRefused, String(err));
      assert.equal(err.code, 'EBERTHEGRESS');
      assert.match(err.message, /^localhost resolves to a loopback address$/);
    }
  });
});
