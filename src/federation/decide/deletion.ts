// The deletion of a Workload: which cells hold it back while they cannot say what they run.
import type { WorkloadObject, WorkloadStatus } from '../types.ts';
import { type CellView, type LabelledLocation, placementCities } from './placement.ts';

/** The cells that hold a deleting Workload back, and what its Released=False condition says. */
export interface DeletionHold {
  cells: string[];
  reason: 'CellUnreachable' | 'CellNotReady';
  message: string;
}

/**
 * The cells that may hold a WorkloadDeployment of a deleting Workload that cannot be deleted now;
 * undefined when none does. A listed cell is known: an unreachable one holds the Workload while it
 * has one there (`copies`). One not listed shows none, so it holds the Workload when its status
 * names the cell, or the cell serves a city its placements or its status name: but not when the
 * cell has been Reachable=False since before the Workload was created (nothing is written into an
 * unreachable cell, so none of this Workload's is there). A cell that is none of these (one whose
 * Secret went, in cities the Workload never had) holds nothing: it must not hold every deletion.
 */
export function deletionHold(
  w: WorkloadObject,
  status: WorkloadStatus | undefined,
  cells: readonly CellView[],
  copies: (cell: string) => number,
  labelled: readonly LabelledLocation[] = [],
): DeletionHold | undefined {
  // The status keeps what the placements had when last reconciled (a city since removed, its cell).
  const recorded = (status?.placements ?? []).flatMap((p) => p.cities ?? []);
  const cities = new Set([
    ...w.spec.placements.flatMap((p) => placementCities(p, labelled)),
    ...recorded.map((c) => c.city),
  ]);
  const named = new Set(recorded.flatMap((c) => c.cell ?? []));
  const created = Date.parse(w.metadata.creationTimestamp ?? '');
  const holding = cells.filter((c) => {
    if (c.listed) return !c.reachable && copies(c.name) > 0;
    if (named.has(c.name)) return true;
    // NaN (no time known) compares false: such a cell may hold it.
    if (Date.parse(c.unreachableSince ?? '') < created) return false;
    return c.cities.some((city) => cities.has(city));
  });
  if (!holding.length) return undefined;
  const why = (c: CellView) =>
    c.listed
      ? `unreachable since ${c.unreachableSince ?? 'unknown'}`
      : c.reachable
        ? 'its WorkloadDeployments not listed yet; it may hold some'
        : // Ready repeats Reachable's reason and message: SecretMissing says which Secret, say.
          `${c.notReady?.reason ?? 'unreachable'} since ${c.unreachableSince ?? 'unknown'}: ${c.notReady?.message ?? ''}; it may hold some`;
  return {
    cells: holding.map((c) => c.name),
    reason: holding.some((c) => !c.reachable) ? 'CellUnreachable' : 'CellNotReady',
    message:
      `waiting to delete this workload's WorkloadDeployments in ${holding.map((c) => `cell ${c.name} (${why(c)})`).join(', ')}: ` +
      `each is deleted once its cell answers and lists them`,
  };
}
