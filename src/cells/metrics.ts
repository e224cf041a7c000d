// Each cell's reachability and probe round trip. Cells are a management plane's administrator's
// objects, a few per plane: a label per cell stays small.
import { gauge, histogram } from '../runtime/observability/metrics.ts';

export const cellMetrics = {
  reachable: gauge(
    'berth_cell_reachable',
    'Whether a cell answered its probes (its Reachable condition): 1 reachable, 0 not',
    ['cell'],
  ),
  probe: histogram(
    'berth_cell_probe_duration_seconds',
    'Round trip of one probe of a cell (its /version, discovery and, now and then, access reviews), answered or not',
    ['cell'],
    [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
  ),
};

/** A deleted cell's series go with it. */
export function forgetCell(cell: string): void {
  cellMetrics.reachable.remove({ cell });
  cellMetrics.probe.remove({ cell });
}
