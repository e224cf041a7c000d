// The API of federation on a management plane (federated placement, part 2, second slice): a
// Workload is part 1's instance template with placements by city; the management plane fans it out
// as one WorkloadDeployment per placement and city, in one cell serving that city, and rolls the
// cells' counts back up into the Workload's status.
import { z } from 'zod';
import { k8s, type CustomObject } from '../runtime/api/crd.ts';
import { DNS1123_LABEL } from '../runtime/api/meta.ts';
import { defineBerthResource, observedStatus, type ObservedStatus } from '../policy/crd.ts';
import { cityCode } from '../cells/types.ts';
import { labelSelectorSchema } from '../policy/match/schema.ts';
import { instanceTemplate, MAX_REPLICAS, replicaColumns } from '../workloads/types.ts';

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

const placement = k8s(
  z.object({
    name: z
      .string()
      .min(1)
      .max(20)
      .regex(DNS1123_LABEL, 'a DNS label')
      .describe(
        "Names the placement; part of its WorkloadDeployments' names (<workload>-<placement>-<city>).",
      ),
    cityCodes: k8s(z.array(cityCode).min(1).max(64), { 'x-kubernetes-list-type': 'set' })
      .optional()
      .describe('The cities to run in: one WorkloadDeployment in one cell serving each.'),
    locationSelector: labelSelectorSchema
      .optional()
      .describe(
        'Selects Locations by their labels: their cities are run in too (beside cityCodes). A Location relabelled moves the placement.',
      ),
    scaleSettings: z.object({
      minReplicas: z.number().int().min(0).max(MAX_REPLICAS).describe('Instances in each city.'),
    }),
    failover: z
      .object({
        afterSeconds: z
          .number()
          .int()
          .min(0)
          .max(86400)
          .describe('How long its cell must be unreachable before another cell of the city takes it.'),
      })
      .optional()
      .describe(
        'Opt-in: a city whose cell is unreachable moves to another Ready, schedulable cell of the city (absent: it waits for its cell).',
      ),
  }),
  {
    'x-kubernetes-validations': [
      {
        rule: 'has(self.cityCodes) || has(self.locationSelector)',
        message: 'a placement needs cityCodes or a locationSelector',
      },
    ],
  },
);
export type Placement = z.output<typeof placement>;

const rollout = z
  .object({
    type: z
      .enum(['All', 'Progressive'])
      .default('All')
      .describe(
        'All: every cell gets a new template at once. Progressive: a few cells at a time, each waiting for the ones before.',
      ),
    maxConcurrency: z.number().int().min(1).max(1000).default(1).describe('Cells updated at once.'),
    minSuccessTime: z
      .number()
      .int()
      .min(0)
      .max(86400)
      .default(0)
      .describe('Seconds a cell soaks once Available on the new template before the next one starts.'),
    progressDeadline: z
      .number()
      .int()
      .min(1)
      .max(86400)
      .optional()
      .describe(
        'Seconds a cell may take to become Available on the new template before it counts as failed.',
      ),
    maxFailures: z
      .number()
      .int()
      .min(0)
      .max(1000)
      .default(0)
      .describe('Failed cells tolerated before the rollout stops.'),
  })
  .describe('How a new template reaches the cells (absent: All).');
export type Rollout = z.output<typeof rollout>;

const workloadSpec = z.object({
  template: instanceTemplate,
  rollout: rollout.optional(),
  placements: k8s(z.array(placement).min(1).max(32), {
    'x-kubernetes-list-type': 'map',
    'x-kubernetes-list-map-keys': ['name'],
  }),
});
export type WorkloadSpec = z.output<typeof workloadSpec>;

const counts = {
  replicas: z.number().int().optional().describe('Instances that exist.'),
  readyReplicas: z.number().int().optional(),
  updatedReplicas: z.number().int().optional().describe('Instances on the current template.'),
  desiredReplicas: z.number().int().optional(),
};

const cityStatus = z.object({
  city: z.string(),
  cell: z.string().optional().describe('The cell that runs this city, if any.'),
  ...counts,
  reason: z.string().optional().describe('Why the city is not available, when it is not.'),
  message: z.string().optional(),
});
export type CityStatus = z.output<typeof cityStatus>;

const placementStatus = z.object({
  name: z.string(),
  reason: z.string().optional().describe('Why the placement has no city, when it has none.'),
  message: z.string().optional(),
  cities: k8s(z.array(cityStatus), {
    'x-kubernetes-list-type': 'map',
    'x-kubernetes-list-map-keys': ['city'],
  }).optional(),
  ...counts,
});
export type PlacementStatus = z.output<typeof placementStatus>;

/** One cell's (placement × city's) turn in a progressive rollout. */
const rolloutCell = z.object({
  name: z.string().describe('<placement>/<city>.'),
  state: z.enum(['Updating', 'Soaking', 'Updated', 'Failed']),
  since: z
    .string()
    .describe(
      'Updating and Failed: when it started; Soaking and Updated: when it became Available on the new template.',
    ),
  reason: z.string().optional(),
  message: z.string().optional(),
});
export type RolloutCell = z.output<typeof rolloutCell>;

const rolloutStatus = z.object({
  templateHash: z.string().describe('The template being rolled out.'),
  cells: k8s(z.array(rolloutCell), {
    'x-kubernetes-list-type': 'map',
    'x-kubernetes-list-map-keys': ['name'],
  })
    .optional()
    .describe('The cells that started: the others still run their old template.'),
  updatedCells: z.number().int().optional(),
  totalCells: z.number().int().optional(),
  soakingUntil: z.string().optional().describe('When the last cell to soak is done soaking.'),
});
export type RolloutStatus = z.output<typeof rolloutStatus>;

const workloadStatus = observedStatus({
  rollout: rolloutStatus.optional().describe('A progressive rollout: where it stands.'),
  ...counts,
  placements: k8s(z.array(placementStatus), {
    'x-kubernetes-list-type': 'map',
    'x-kubernetes-list-map-keys': ['name'],
  }).optional(),
});
export type WorkloadStatus = ObservedStatus<typeof workloadStatus>;

export const Workload = defineBerthResource({
  kind: 'Workload',
  shortNames: ['wl'],
  scope: 'Namespaced',
  spec: workloadSpec,
  status: workloadStatus,
  // A Workload has no spec.replicas (its placements have): desired is their sum, in its status.
  printerColumns: replicaColumns('.status.desiredReplicas'),
});

export type WorkloadObject = CustomObject<WorkloadSpec, WorkloadStatus>;
