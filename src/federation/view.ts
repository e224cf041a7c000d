// What the page shows of federated Workloads: each one's share in each cell, from its status,
// which the cells' map shows under the cell (PageView.cities, cells' view).
import type { PageHooks } from '../capability.ts';
import type { KubeObject } from '../runtime/api/meta.ts';
import type { CellWorkload } from '../ui/types.ts';
import { Workload } from './crd.ts';

interface WorkloadLike extends KubeObject {
  status?: {
    placements?: {
      name: string;
      cities?: {
        city: string;
        cell?: string;
        readyReplicas?: number;
        desiredReplicas?: number;
        reason?: string;
      }[];
    }[];
  };
}

/** Each federated Workload's share per cell, from the Workloads' status: cell name → shares. */
export function workloadsByCell(workloads: KubeObject[]): Map<string, CellWorkload[]> {
  const out = new Map<string, CellWorkload[]>();
  for (const w of workloads as WorkloadLike[])
    for (const p of w.status?.placements ?? [])
      for (const c of p.cities ?? []) {
        if (!c.cell) continue;
        const shares = out.get(c.cell) ?? [];
        shares.push({
          namespace: w.metadata?.namespace ?? '',
          name: w.metadata?.name ?? '',
          placement: p.name,
          city: c.city,
          ready: c.readyReplicas ?? 0,
          desired: c.desiredReplicas ?? 0,
          reason: c.reason ?? '',
        });
        out.set(c.cell, shares);
      }
  return out;
}

export const federationPage: PageHooks = {
  kinds: { [Workload.kind]: { sections: ['workloads', 'policies'] } },
  view(ctx) {
    const workloads = ctx.informer(Workload);
    return { cellShares: () => workloadsByCell(workloads.list()) };
  },
};
