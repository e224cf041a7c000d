// The Workload CRD, from its zod schema (the API's constants and types are in types.ts).
import * as z from '../runtime/platform/zod.ts';
import { k8s } from '../runtime/api/crd.ts';
import { DNS1123_LABEL } from '../runtime/api/meta.ts';
import { defineBerthResource, observedStatus } from '../policy/crd.ts';
import { cityCode } from '../cells/crd.ts';
import { labelSelectorSchema } from '../policy/match/schema.ts';
import { MAX_REPLICAS } from '../workloads/types.ts';
import { instanceTemplate, replicaColumns } from '../workloads/crd.ts';
import { WORKLOAD } from './types.ts';

export const placement = k8s(
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

export const rollout = z
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

export const workloadSpec = z.object({
  template: instanceTemplate,
  rollout: rollout.optional(),
  placements: k8s(z.array(placement).min(1).max(32), {
    'x-kubernetes-list-type': 'map',
    'x-kubernetes-list-map-keys': ['name'],
  }),
});

const counts = {
  replicas: z.number().int().optional().describe('Instances that exist.'),
  readyReplicas: z.number().int().optional(),
  updatedReplicas: z.number().int().optional().describe('Instances on the current template.'),
  desiredReplicas: z.number().int().optional(),
};

export const cityStatus = z.object({
  city: z.string(),
  cell: z.string().optional().describe('The cell that runs this city, if any.'),
  ...counts,
  reason: z.string().optional().describe('Why the city is not available, when it is not.'),
  message: z.string().optional(),
});

export const placementStatus = z.object({
  name: z.string(),
  reason: z.string().optional().describe('Why the placement has no city, when it has none.'),
  message: z.string().optional(),
  cities: k8s(z.array(cityStatus), {
    'x-kubernetes-list-type': 'map',
    'x-kubernetes-list-map-keys': ['city'],
  }).optional(),
  ...counts,
});

/** One cell's (placement × city's) turn in a progressive rollout. */
export const rolloutCell = z.object({
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

export const rolloutStatus = z.object({
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

export const workloadStatus = observedStatus({
  rollout: rolloutStatus.optional().describe('A progressive rollout: where it stands.'),
  ...counts,
  placements: k8s(z.array(placementStatus), {
    'x-kubernetes-list-type': 'map',
    'x-kubernetes-list-map-keys': ['name'],
  }).optional(),
});

export const Workload = defineBerthResource({
  ref: WORKLOAD,
  shortNames: ['wl'],
  spec: workloadSpec,
  status: workloadStatus,
  // A Workload has no spec.replicas (its placements have): desired is their sum, in its status.
  printerColumns: replicaColumns('.status.desiredReplicas'),
});
