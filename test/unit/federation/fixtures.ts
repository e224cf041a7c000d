// Workloads, cells and their WorkloadDeployments as the federation's decisions see them (shared by
// the decide and rollout tests).
import type { Writer } from '../../../src/federation/decide/copies.ts';
import type { CellView, DeploymentObject, Placed, Target } from '../../../src/federation/decide/placement.ts';
import {
  CITY_LABEL,
  PLACEMENT_LABEL,
  WORKLOAD_NAME_LABEL,
  WORKLOAD_NAMESPACE_LABEL,
  type WorkloadObject,
} from '../../../src/federation/types.ts';
import type { Condition } from '../../../src/runtime/api/conditions.ts';
import type { CellObject } from '../../../src/cells/types.ts';

export const HASH = 'abc123';

/** A writer with neither label: as a copy written before them. */
export const NOBODY: Writer = { plane: undefined, cellUid: undefined };

export function workload(placements: [string, string[], number][], name = 'web'): WorkloadObject {
  return {
    apiVersion: 'berth.dev/v1alpha1',
    kind: 'Workload',
    metadata: { name, namespace: 'shop', uid: 'uid-1', generation: 3 },
    spec: {
      template: { containers: [{ name: 'app', image: 'web:1' }] },
      placements: placements.map(([n, cityCodes, minReplicas]) => ({
        name: n,
        cityCodes,
        scaleSettings: { minReplicas },
      })),
    },
  };
}

export const cell = (name: string, cities: string[], o: Partial<CellView> = {}): CellView => ({
  name,
  cities,
  unschedulable: false,
  reachable: true,
  ready: true,
  probing: false,
  listed: true,
  namespaces: ['shop'],
  createNamespaces: false,
  ...o,
});

/** A federation WorkloadDeployment in a cell, as the cell's informer shows it. */
export function placed(
  cellName: string,
  t: Pick<Target, 'name' | 'city' | 'placement' | 'replicas'>,
  status?: DeploymentObject['status'],
  o: { hash?: string; generation?: number; image?: string } = {},
): Placed {
  const generation = o.generation ?? 1;
  return {
    cell: cellName,
    object: {
      apiVersion: 'berth.dev/v1alpha1',
      kind: 'WorkloadDeployment',
      metadata: {
        name: t.name,
        namespace: 'shop',
        uid: `${cellName}-${t.name}`,
        generation,
        labels: {
          [WORKLOAD_NAMESPACE_LABEL]: 'shop',
          [WORKLOAD_NAME_LABEL]: 'web',
          [CITY_LABEL]: t.city,
          [PLACEMENT_LABEL]: t.placement,
        },
      },
      spec: {
        workloadRef: { name: 'web', templateHash: o.hash ?? HASH },
        template: { containers: [{ name: 'app', image: o.image ?? 'web:1' }] },
        replicas: t.replicas,
        instanceManagementPolicy: 'OrderedReady',
        progressDeadlineSeconds: 600,
      },
      ...(status ? { status: { observedGeneration: generation, ...status } } : {}),
    },
  };
}

export const cond = (
  type: string,
  status: 'True' | 'False',
  reason: string,
  message = reason,
): Condition => ({
  type,
  status,
  reason,
  message,
  lastTransitionTime: '2026-11-23T04:00:00Z',
});

export const serving = (n: number, ready = n) => ({
  replicas: n,
  readyReplicas: ready,
  updatedReplicas: n,
  conditions: [
    cond(
      'Available',
      ready >= n ? 'True' : 'False',
      ready >= n ? 'MinimumReplicasAvailable' : 'Provisioning',
    ),
    cond('Progressing', 'True', 'NewTemplateAvailable'),
  ],
});

export const ALL = new Set(['DFW', 'LHR', 'NRT', 'SIN']);

/** A Cell as the management plane stores it, serving `locations`. */
export const cellObject = (name: string, locations: string[], status: CellObject['status']): CellObject => ({
  apiVersion: 'berth.dev/v1alpha1',
  kind: 'Cell',
  metadata: { name, uid: `uid-${name}`, resourceVersion: '1' },
  spec: {
    kubeconfigSecretRef: { namespace: 'berth', name: `cell-${name}-kubeconfig`, key: 'kubeconfig' },
    locations,
    unschedulable: false,
    namespaces: ['shop'],
    createNamespaces: false,
  },
  ...(status ? { status } : {}),
});

/** A Cell's status: Reachable and Ready both `status` for `reason`, since `since`. */
export const reachable = (status: 'True' | 'False', reason: string, since: string): CellObject['status'] => ({
  conditions: ['Reachable', 'Ready'].map((type) => ({
    type,
    status,
    reason,
    message: reason,
    lastTransitionTime: since,
  })),
});
