import { Counter } from 'prom-client';
import { registry } from '../../runtime/observability/metrics.ts';

// Writes to nodes by each of Berth's field managers, every capability's, all through the
// WriteLoopBreaker: what "one patch per change" is judged by, and how a fight would show.
export const nodeWriteMetrics = {
  writes: new Counter({
    name: 'berth_node_writes_total',
    help: 'Patches sent to nodes (server-side apply and JSON patches), by field manager',
    labelNames: ['field_manager'],
    registers: [registry],
  }),
  loops: new Counter({
    name: 'berth_node_write_loops_total',
    help: 'Times a field manager was stopped from writing a key of a node that Berth had written too often within a minute (the loop breaker)',
    labelNames: ['field_manager'],
    registers: [registry],
  }),
};
