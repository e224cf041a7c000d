// The API of cells on a management plane (federated placement, part 2, first slice): a Location is a
// city a cell serves, a Cell is a cluster Berth reaches with the kubeconfig kept in a Secret. The
// management plane probes each cell and says whether it answers and can take workloads.
// Their CRDs, from zod schemas, are crd.ts: what reads only these (every command's capability list)
// loads no zod.
import type * as z from '../runtime/platform/zod.ts';
import type { CustomObject } from '../runtime/api/crd.ts';
import type { ObservedStatus } from '../policy/crd.ts';
import { berthKind } from '../policy/kinds.ts';
import type { cellSpec, cellStatus, locationSpec } from './crd.ts';
import type { Timing } from './decide.ts';

/** The field manager of the cell controller's status writes and of `berth cells join`. */
export const CELLS_MANAGER = 'berth-cells';
/** The key of the kubeconfig in a cell's Secret when the Cell names none. */
export const KUBECONFIG_KEY = 'kubeconfig';
/** On the Secrets `berth cells join` writes: the Cell they belong to. */
export const CELL_LABEL = 'cells.berth.dev/cell';

export const LOCATION = berthKind('Location', 'Cluster');
export const CELL = berthKind('Cell', 'Cluster');

export type LocationSpec = z.output<typeof locationSpec>;
export type CellSpec = z.output<typeof cellSpec>;
export type CellStatus = ObservedStatus<typeof cellStatus>;

export type CellObject = CustomObject<CellSpec, CellStatus>;
export type LocationObject = CustomObject<LocationSpec, unknown>;

export interface CellTiming extends Timing {
  /** How often each cell is probed. */
  probePeriodMs: number;
  /** How long one probe may take before it counts as no answer. */
  probeTimeoutMs: number;
}

/**
 * The defaults: a probe every 2 s that may take 3 s, and Unreachable after 6 s without an answer,
 * so a cell that stops answering is Reachable=False within unreachableAfter + period + timeout = 11 s
 * (counted from its last answer, the time it is unreachable since).
 */
export const defaultTiming: CellTiming = {
  probePeriodMs: 2000,
  probeTimeoutMs: 3000,
  unreachableAfterMs: 6000,
  contactRefreshMs: 60_000,
};
