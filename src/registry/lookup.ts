// The name lookup of the registry client's sockets: the addresses a connection may use are those
// the egress rules allow (egress.ts), checked in the lookup the socket connects with. So the
// address checked is the address connected to: a name that resolves to a public address for a
// check and to an internal one for the connection (DNS rebinding) has no second resolution to use.
import { lookup as dnsLookup, type LookupAddress, type LookupOptions } from 'node:dns';
import type { LookupFunction } from 'node:net';
import { addressRefusal, type ClusterRanges } from './egress.ts';

/** A connection Berth did not make: the name resolves only to addresses it may not reach. */
export class EgressRefused extends Error {
  readonly code = 'EBERTHEGRESS';
  constructor(host: string, why: string) {
    super(`${host} resolves to ${why}`);
    this.name = 'EgressRefused';
  }
}

/**
 * A `lookup` for net.connect that resolves as usual and keeps the addresses Berth may reach; none
 * left fails the connection before it is made. Answers in the shape asked (`all` or one address).
 */
export function egressLookup(cluster: ClusterRanges): LookupFunction {
  return (hostname, options: LookupOptions, callback) => {
    dnsLookup(hostname, { ...options, all: true }, (err, addresses: LookupAddress[]) => {
      if (err) return callback(err, '');
      const allowed = addresses.filter((a) => addressRefusal(a.address, cluster) === undefined);
      if (!allowed.length) {
        const why = addresses.length ? addressRefusal(addresses[0]!.address, cluster)! : 'no address';
        return callback(new EgressRefused(hostname, why), '');
      }
      if (options.all) return callback(null, allowed);
      callback(null, allowed[0]!.address, allowed[0]!.family);
    });
  };
}
