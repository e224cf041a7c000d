// Workloads: the instances in the cache by their Ready condition, and the quota's verdicts.
import type { Informer } from '../runtime/cache/informer.ts';
import { findCondition } from '../runtime/api/conditions.ts';
import { counter, gauge } from '../runtime/observability/metrics.ts';
import type { CachedInstance } from './decide/instances.ts';

let instances: Pick<Informer<CachedInstance>, 'list'> | undefined;
// Reasons are Berth's own words, but an instance's status is an object a cluster may let others
// write: the first few seen are named, any later one is `other`, so the series stay few.
const MAX_REASONS = 32;
const reasons = new Set<string>();
const reasonLabel = (r: string): string => {
  if (!reasons.has(r) && reasons.size < MAX_REASONS) reasons.add(r);
  return reasons.has(r) ? r : 'other';
};

export const workloadMetrics = {
  instances: gauge(
    'berth_instances',
    'Instances of this cluster by their Ready condition: status (True, False, Unknown) and reason ' +
      '(Ready, Provisioning, QuotaExceeded, ImageUnavailable, InstanceCrashing, …)',
    ['ready', 'reason'],
    (g) => {
      g.reset();
      for (const i of instances?.list() ?? []) {
        const ready = findCondition(i.status?.conditions, 'Ready');
        g.inc({ ready: ready?.status ?? 'Unknown', reason: reasonLabel(ready?.reason ?? 'Pending') });
      }
    },
  ),
  verdicts: counter(
    'berth_quota_verdicts_total',
    'Quota verdicts the quota controller sent to instances, by result (granted, denied)',
    ['result'],
  ),
};

/** The informer the instance gauge counts (the instance controller's). */
export function countInstances(informer: Pick<Informer<CachedInstance>, 'list'>): void {
  instances = informer;
}
