// The API of federation on a management plane (federated placement, part 2, second slice): a
// Workload is part 1's instance template with placements by city; the management plane fans it out
// as one WorkloadDeployment per placement and city, in one cell serving that city, and rolls the
// cells' counts back up into the Workload's status. Its CRD, from a zod schema, is crd.ts: what reads
// only these (every command's capability list) loads no zod.
import type * as z from '../runtime/platform/zod.ts';
import type { CustomObject } from '../runtime/api/crd.ts';
import type { ObservedStatus } from '../policy/crd.ts';
import { berthKind } from '../policy/kinds.ts';
import type {
  cityStatus,
  placement,
  placementStatus,
  rollout,
  rolloutCell,
  rolloutStatus,
  workloadSpec,
  workloadStatus,
} from './crd.ts';

/** The field manager of everything the federation controller writes, upstream and in the cells. */
export const FEDERATION_MANAGER = 'berth-federation';
/** On a Workload: its WorkloadDeployments in the cells are deleted before it goes. */
export const FEDERATION_FINALIZER = 'federation.berth.dev/cells';

// On the WorkloadDeployments it writes in a cell: the upstream owner (owner references cannot cross
// clusters). Only objects carrying these are ever deleted by the federation controller.
export const WORKLOAD_NAMESPACE_LABEL = 'federation.berth.dev/workload-namespace';
export const WORKLOAD_NAME_LABEL = 'federation.berth.dev/workload';
export const WORKLOAD_UID_LABEL = 'federation.berth.dev/workload-uid';
export const PLACEMENT_LABEL = 'federation.berth.dev/placement';
export const CITY_LABEL = 'federation.berth.dev/city';
/**
 * The uid of the Cell (in the management plane) it was written through: which management plane
 * wrote it, so that a plane deletes the copies of a Workload gone from it only where they are its
 * own, never another plane's in a cell they share.
 */
export const CELL_UID_LABEL = 'federation.berth.dev/cell-uid';
/**
 * The uid of the management plane's kube-system Namespace, the identity a cluster keeps for its
 * life (as KEP-2149's cluster ID): which plane wrote it, whatever Cell it was written through, so
 * that the copies a plane left through a Cell since deleted and joined again are still its own.
 */
export const PLANE_LABEL = 'federation.berth.dev/plane';
/**
 * On a namespace Berth created in a cell (the Cell allowing it): deleted by the plane that made it
 * (its PLANE_LABEL and CELL_UID_LABEL say which) once nothing of Berth's is in it and no Workload
 * maps there. A namespace without it is never deleted.
 */
export const NAMESPACE_CREATED_LABEL = 'federation.berth.dev/created-namespace';

export const WORKLOAD = berthKind('Workload', 'Namespaced');

export type Placement = z.output<typeof placement>;
export type Rollout = z.output<typeof rollout>;
export type WorkloadSpec = z.output<typeof workloadSpec>;
export type CityStatus = z.output<typeof cityStatus>;
export type PlacementStatus = z.output<typeof placementStatus>;
export type RolloutCell = z.output<typeof rolloutCell>;
export type RolloutStatus = z.output<typeof rolloutStatus>;
export type WorkloadStatus = ObservedStatus<typeof workloadStatus>;

export type WorkloadObject = CustomObject<WorkloadSpec, WorkloadStatus>;
