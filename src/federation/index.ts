import type { Capability } from '../capability.ts';
import { workers } from '../command/flags.ts';
import { POLICY_GROUP } from '../policy/kinds.ts';
import { WORKLOAD } from './types.ts';

// What every `berth` command reads of federation; what runs is loaded when called (setup.ts,
// explain.ts, plan.ts, view.ts), so a Berth that does not run it loads none of it.
export const federationCapability: Capability = {
  name: 'federation',
  description:
    'Workloads on a management plane: one WorkloadDeployment per placement and city, in one cell serving the city, their status rolled up, and read-only mirrors of their Instances',
  roles: ['management'],
  options: () => [
    workers('--federation-workers <n>', 'Workloads the federation controller reconciles at once', 16),
    workers('--mirror-workers <n>', 'Instance mirrors the mirror controller writes at once', 16),
  ],
  kinds: [WORKLOAD],
  crds: async () => {
    const crd = await import('./crd.ts');
    return [crd.Workload];
  },
  // Workloads are read from the cache; their finalizer is a server-side apply (patch), their status too.
  // Cells and Locations say where each city runs. In the cells Berth acts with each cell's kubeconfig.
  rbac: [
    { apiGroups: [POLICY_GROUP], resources: ['workloads'], verbs: ['list', 'watch', 'patch'] },
    {
      apiGroups: [POLICY_GROUP],
      resources: ['workloads'],
      verbs: ['get'],
      why: 'confirms a Workload is gone before its leftovers in a cell are deleted: only when a cell holds one',
    },
    { apiGroups: [POLICY_GROUP], resources: ['workloads/status'], verbs: ['patch'] },
    // This plane's identity, written on its copies in the cells (PLANE_LABEL).
    { apiGroups: [''], resources: ['namespaces'], resourceNames: ['kube-system'], verbs: ['get'] },
    { apiGroups: [POLICY_GROUP], resources: ['cells', 'locations'], verbs: ['list', 'watch'] },
    {
      apiGroups: [POLICY_GROUP],
      resources: ['cells'],
      verbs: ['get'],
      why: 'confirms a Cell is gone before its mirrors are deleted or their names taken: only when the cache does not have it',
    },
    // Mirrors of the cells' Instances: applied (the first apply of one is authorized as create too),
    // their status applied, deleted once their instance is gone.
    {
      apiGroups: [POLICY_GROUP],
      resources: ['instances'],
      verbs: ['list', 'watch', 'create', 'patch', 'delete'],
    },
    {
      apiGroups: [POLICY_GROUP],
      resources: ['instances'],
      verbs: ['get'],
      why: "reads an Instance that holds a new mirror's name (its apply was refused) to say whose it is: only then",
    },
    { apiGroups: [POLICY_GROUP], resources: ['instances/status'], verbs: ['patch'] },
  ],
  // In each cell: its copies of Workloads (WorkloadDeployments) applied and deleted, the cell's
  // Instances watched for their mirrors, and the Workload's namespace made where the cell lacks it.
  cellRbac: [
    {
      apiGroups: [POLICY_GROUP],
      resources: ['workloaddeployments'],
      verbs: ['list', 'watch', 'create', 'patch', 'delete'],
    },
    { apiGroups: [POLICY_GROUP], resources: ['instances'], verbs: ['list', 'watch'] },
    // The namespaces Berth made in the cell, watched to remove each once it is empty (decision 0027).
    { apiGroups: [''], resources: ['namespaces'], verbs: ['list', 'watch'] },
    {
      apiGroups: [''],
      resources: ['namespaces'],
      verbs: ['create', 'delete'],
      why: "a Workload's namespace is made in a cell whose Cell sets createNamespaces, and removed once empty; a cell whose namespaces its admin makes may leave it out",
    },
    {
      apiGroups: [''],
      resources: ['namespaces'],
      verbs: ['get'],
      why: 'a refused create of a namespace is followed by a read: the namespace may be there all the same',
    },
  ],
  setup: async (ctx) => (await import('./setup.ts')).setup(ctx),
  // Cells and Locations are the cells capability's kinds, but what changing them does is where
  // federation runs the Workloads: planned here, from the same decision.
  plan: {
    Workload: async (ctx) => (await import('./plan.ts')).planWorkloads(ctx),
    Cell: async (ctx) => (await import('./plan.ts')).planCells(ctx),
    Location: async (ctx) => (await import('./plan.ts')).planLocations(ctx),
  },
  page: async () => (await import('./view.ts')).federationPage,
  explainKinds: [
    {
      name: 'workload',
      aliases: ['wl'],
      resource: WORKLOAD,
      description: 'Where each placement and city of a Workload runs, in which cell, and what it waits for',
      explain: async ({ client, object }) => ({
        lines: await (await import('./explain.ts')).explainWorkload(client, object),
      }),
    },
  ],
};
