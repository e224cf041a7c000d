import { counter } from '../runtime/observability/metrics.ts';

// Derived labels: the evictions that follow a derived label's removal.
export const evictionMetrics = {
  total: counter(
    'berth_evictions_total',
    'Evictions on removal of a derived label, by rule and result (evicted, blocked by a PodDisruptionBudget, dryrun, failed).',
    ['rule', 'result'],
  ),
};
