// The cluster's own addresses, which the registry client refuses like private ones (decision 0025):
// the apiserver's, the service ranges (ServiceCIDR objects) and the nodes' pod ranges, read once
// when Berth starts. Most clusters' ranges are private anyway; these matter where they are public
// (GKE's default service range is 34.118.224.0/20).
import { lookup } from 'node:dns/promises';
import { literalAddress } from '../registry/egress.ts';
import { servedItems } from '../runtime/client/absent.ts';
import type { KubeClient } from '../runtime/client/client.ts';
import { Resources, type KubeObject } from '../runtime/api/meta.ts';
import type { Logger } from '../runtime/observability/log.ts';

type WithCidrs = KubeObject & { spec?: { cidrs?: string[]; podCIDRs?: string[]; podCIDR?: string } };

/** What the objects' specs name: a ServiceCIDR's `cidrs`, a node's `podCIDRs` (or older `podCIDR`). */
export const specCidrs = (objects: KubeObject[]): string[] =>
  (objects as WithCidrs[]).flatMap(
    (o) => o.spec?.cidrs ?? o.spec?.podCIDRs ?? (o.spec?.podCIDR ? [o.spec.podCIDR] : []),
  );

/**
 * The apiserver's addresses and the cluster's service and pod ranges. A part that cannot be read
 * (a kind not served, a list forbidden, a name that does not resolve) is left out with a warning:
 * the private ranges are refused all the same.
 */
export async function clusterCidrs(client: KubeClient, log: Logger): Promise<string[]> {
  const host = client.server.hostname;
  const parts: [string, () => Promise<string[]>][] = [
    [
      'the apiserver',
      async () => {
        const literal = literalAddress(host);
        return literal ? [literal] : (await lookup(host, { all: true })).map((a) => a.address);
      },
    ],
    ['ServiceCIDRs', async () => specCidrs((await servedItems(client, Resources.serviceCidrs)) ?? [])],
    [
      "the nodes' pod ranges",
      async () => specCidrs((await client.list(Resources.nodes, { query: { resourceVersion: '0' } })).items),
    ],
  ];
  const read = await Promise.all(
    parts.map(([what, read]) =>
      read().catch((err: unknown) => {
        log.warn(
          { err },
          `registry egress: ${what} not read; their addresses are not refused unless private`,
        );
        return [];
      }),
    ),
  );
  return read.flat();
}
