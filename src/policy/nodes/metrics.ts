import { counter } from '../../runtime/observability/metrics.ts';

// Writes to nodes by each of Berth's field managers, every capability's, all through the
// WriteLoopBreaker: what "one patch per change" is judged by, and how a fight would show.
export const nodeWriteMetrics = {
  writes: counter(
    'berth_node_writes_total',
    'Patches sent to nodes (server-side apply and JSON patches), by field manager',
    ['field_manager'],
  ),
  loops: counter(
    'berth_node_write_loops_total',
    'Times a field manager was stopped from writing a key of a node that Berth had written too often within a minute (the loop breaker)',
    ['field_manager'],
  ),
};
