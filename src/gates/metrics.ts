import { gauge, histogram } from '../runtime/observability/metrics.ts';

// Startup gates: how long nodes are held, and how many each gate holds now.
export const gateMetrics = {
  duration: histogram(
    'berth_gate_duration_seconds',
    'Time from a startup gate tainting a node to releasing it, by gate and outcome (Ready, Timeout, Removed, Manual)',
    ['gate', 'outcome'],
    [1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600],
  ),
  nodes: gauge('berth_gate_nodes', 'Nodes a startup gate selects, by state (gated, released, timed_out)', [
    'gate',
    'state',
  ]),
};
