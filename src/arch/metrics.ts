import { counter, histogram } from '../runtime/observability/metrics.ts';

// Architecture placement: what became of gated pods, and how long they waited for it.
export const archMetrics = {
  pods: counter(
    'berth_arch_pods_total',
    'Gated pods the controller decided, by outcome (placed, failed, released)',
    ['outcome'],
  ),
  ungate: histogram(
    'berth_arch_ungate_seconds',
    'Time from a gated pod’s creation to Berth taking its gate off',
    ['outcome'],
    [0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300],
  ),
};
