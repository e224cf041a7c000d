// The API of cells on a management plane (federated placement, part 2, first slice): a Location is a
// city a cell serves, a Cell is a cluster Berth reaches with the kubeconfig kept in a Secret. The
// management plane probes each cell and says whether it answers and can take workloads.
import { z } from 'zod';
import { AGE_COLUMN, column, conditionColumn, type CustomObject, k8s } from '../runtime/api/crd.ts';
import { defineBerthResource, observedStatus, type ObservedStatus } from '../policy/crd.ts';
import { DNS1123_LABEL } from '../runtime/api/meta.ts';
import type { Timing } from './decide.ts';

/** The field manager of the cell controller's status writes and of `berth cells join`. */
export const CELLS_MANAGER = 'berth-cells';
/** The key of the kubeconfig in a cell's Secret when the Cell names none. */
export const KUBECONFIG_KEY = 'kubeconfig';
/** On the Secrets `berth cells join` writes: the Cell they belong to. */
export const CELL_LABEL = 'cells.berth.dev/cell';

/** An IATA-style city code: three capital letters. */
export const cityCode = z
  .string()
  .regex(/^[A-Z]{3}$/, 'an IATA-style city code: three capital letters, such as DFW');

const locationSpec = z.object({
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
export type LocationSpec = z.output<typeof locationSpec>;

export const Location = defineBerthResource({
  kind: 'Location',
  shortNames: ['loc'],
  scope: 'Cluster',
  spec: locationSpec,
  printerColumns: [
    column('City', '.spec.cityCode'),
    column('Region', '.spec.topology.region'),
    column('Zone', '.spec.topology.zone'),
    column('Class', '.spec.class'),
    AGE_COLUMN,
  ],
});

const cellSpec = z.object({
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
export type CellSpec = z.output<typeof cellSpec>;

const cellStatus = observedStatus({
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
export type CellStatus = ObservedStatus<typeof cellStatus>;

export const Cell = defineBerthResource({
  kind: 'Cell',
  scope: 'Cluster',
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
