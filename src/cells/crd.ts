// The Location and Cell CRDs, from their zod schemas (the API's constants and types are in types.ts).
import * as z from '../runtime/platform/zod.ts';
import { AGE_COLUMN, column, conditionColumn, k8s } from '../runtime/api/crd.ts';
import { defineBerthResource, observedStatus } from '../policy/crd.ts';
import { DNS1123_LABEL } from '../runtime/api/meta.ts';
import { CELL, KUBECONFIG_KEY, LOCATION } from './types.ts';

/** An IATA-style city code: three capital letters. */
export const cityCode = z
  .string()
  .regex(/^[A-Z]{3}$/, 'an IATA-style city code: three capital letters, such as DFW');

export const locationSpec = z.object({
  cityCode: cityCode.describe('The city this location is in (IATA-style, e.g. DFW).'),
  topology: z
    .object({
      region: z.string().min(1).max(63).optional(),
      zone: z.string().min(1).max(63).optional(),
    })
    .optional()
    .describe('Where the location sits in the provider topology.'),
  class: z.string().min(1).max(63).optional().describe('The class of location (e.g. edge, core).'),
});

export const Location = defineBerthResource({
  ref: LOCATION,
  shortNames: ['loc'],
  spec: locationSpec,
  printerColumns: [
    column('City', '.spec.cityCode'),
    column('Region', '.spec.topology.region'),
    column('Zone', '.spec.topology.zone'),
    column('Class', '.spec.class'),
    AGE_COLUMN,
  ],
});

export const cellSpec = z.object({
  kubeconfigSecretRef: z
    .object({
      namespace: z.string().min(1).max(63),
      name: z.string().min(1).max(253),
      key: z.string().min(1).max(253).default(KUBECONFIG_KEY),
    })
    .describe("The Secret (in Berth's namespace) that holds the cell's kubeconfig, and its key."),
  locations: k8s(z.array(cityCode).max(64), { 'x-kubernetes-list-type': 'set' })
    .default([])
    .describe('The city codes of the Locations this cell serves.'),
  unschedulable: z
    .boolean()
    .default(false)
    .describe('Cordons the cell: it stays watched but is not Ready for new workloads.'),
  namespaces: k8s(z.array(z.string().min(1).max(63).regex(DNS1123_LABEL, 'a namespace name')).max(256), {
    'x-kubernetes-list-type': 'set',
  })
    .default([])
    .describe(
      "The management plane's namespaces this cell serves: a Workload of one is placed here, in the cell's namespace of that name. None listed: nothing is written into the cell.",
    ),
  createNamespaces: z
    .boolean()
    .default(false)
    .describe(
      'Berth may create a listed namespace the cell lacks; it marks the ones it creates and deletes them once they hold no WorkloadDeployment and no Workload maps there.',
    ),
});

export const cellStatus = observedStatus({
  lastContactTime: z
    .string()
    .optional()
    .describe('The last successful probe of the cell, refreshed at most once a minute.'),
  serverVersion: z.string().optional().describe("The cell apiserver's gitVersion."),
  crdsInstalled: z
    .boolean()
    .optional()
    .describe("Whether the cell serves Berth's WorkloadDeployment and Instance kinds."),
});

export const Cell = defineBerthResource({
  ref: CELL,
  spec: cellSpec,
  status: cellStatus,
  printerColumns: [
    column('Locations', '.spec.locations'),
    conditionColumn('Reachable', 'Reachable'),
    conditionColumn('Ready', 'Ready'),
    column('Version', '.status.serverVersion'),
    conditionColumn('Reason', 'Ready', 'reason', 1),
    AGE_COLUMN,
  ],
});
