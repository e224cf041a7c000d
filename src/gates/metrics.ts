import { Gauge, Histogram } from 'prom-client';
import { registry } from '../runtime/observability/metrics.ts';

// Startup gates: how long nodes are held, and how many each gate holds now.
export const gateMetrics = {
  duration: new Histogram({
    name: 'berth_gate_duration_seconds',
    help: 'Time from a startup gate tainting a node to releasing it, by gate and outcome (Ready, Timeout, Removed, Manual)',
    labelNames: ['gate', 'outcome'],
    buckets: [1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600],
    registers: [registry],
  }),
  nodes: new Gauge({
    name: 'berth_gate_nodes',
    help: 'Nodes a startup gate selects, by state (gated, released, timed_out)',
    labelNames: ['gate', 'state'],
    registers: [registry],
  }),
};
