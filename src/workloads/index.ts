import { Option } from 'commander';
import type { Capability } from '../capability.ts';
import { workers } from '../command/flags.ts';
import { POLICY_GROUP } from '../policy/kinds.ts';
import { INSTANCE, INSTANCE_TYPE, QUOTA, WORKLOAD_DEPLOYMENT } from './types.ts';

// What every `berth` command reads of workloads and quota; what runs is loaded when called
// (setup.ts, explain.ts, plan.ts, view.ts), so a Berth that does not run them loads none of it.
export const workloadsCapability: Capability = {
  name: 'workloads',
  description:
    'Workloads in a cell: a WorkloadDeployment runs as Instances by ordinal, each one Pod, gated by quota',
  roles: ['cluster', 'cell'],
  options: () => [
    workers('--workload-workers <n>', 'WorkloadDeployments the workloads controller reconciles at once', 8),
    workers('--instance-workers <n>', 'Instances the instance controller reconciles at once', 16),
    workers('--quota-workers <n>', 'namespaces the quota controller decides at once', 4),
    new Option(
      '--quota-source <where>',
      'who grants quota to the instances here: this Berth, from the Quotas of this cluster (local), or the ' +
        "management plane's, from its Quotas, counted across all its cells (management: this Berth grants " +
        'nothing, and an instance waits with PendingEvaluation while the management plane is away)',
    )
      .choices(['local', 'management'])
      .default('local'),
  ],
  kinds: [WORKLOAD_DEPLOYMENT, INSTANCE, QUOTA, INSTANCE_TYPE],
  crds: async () => {
    const crd = await import('./crd.ts');
    return [crd.WorkloadDeployment, crd.Instance, crd.Quota, crd.InstanceType];
  },
  // A namespace's budget: its users read it, its admin sets it (issue 59).
  adminKinds: [QUOTA],
  rbac: [
    // Deployments delete their instances and adopt orphaned ones (patch; they create them only where
    // workloads run, below); statuses are applied (patch), a Quota's is written with its
    // resourceVersion (update).
    { apiGroups: [POLICY_GROUP], resources: ['workloaddeployments', 'quotas'], verbs: ['list', 'watch'] },
    {
      apiGroups: [POLICY_GROUP],
      resources: ['instances'],
      verbs: ['get', 'list', 'watch', 'patch', 'delete'],
    },
    {
      apiGroups: [POLICY_GROUP],
      resources: ['workloaddeployments/status', 'instances/status'],
      verbs: ['patch'],
    },
    { apiGroups: [POLICY_GROUP], resources: ['quotas/status'], verbs: ['update'] },
    {
      apiGroups: [POLICY_GROUP],
      resources: ['workloaddeployments/finalizers', 'instances/finalizers'],
      verbs: ['update'],
      why:
        'owner references with blockOwnerDeletion (instances, pods) are authorized as an update of ' +
        "the owner's finalizers where OwnerReferencesPermissionEnforcement is on: a check, never a request",
    },
    { apiGroups: [POLICY_GROUP], resources: ['instancetypes'], verbs: ['list', 'watch'] },
    { apiGroups: [''], resources: ['pods'], verbs: ['get', 'list', 'watch'] },
  ],
  // Writing Pods only where the install runs workloads (a Pod may run as any ServiceAccount of its
  // namespace: in kube-system, as good as cluster-admin): an instance's Pod is created, ungated
  // (patch) and deleted with the instance, a hop before the garbage collector would. Creating
  // Instances there only too: a WorkloadDeployment elsewhere makes none (issue 59), so its replicas
  // never multiply into another namespace's objects.
  workloadNamespaceRbac: [
    { apiGroups: [''], resources: ['pods'], verbs: ['create', 'patch', 'delete'] },
    { apiGroups: [POLICY_GROUP], resources: ['instances'], verbs: ['create'] },
  ],
  setup: async (ctx) => (await import('./setup.ts')).setup(ctx),
  plan: {
    Quota: async (ctx) => (await import('./plan.ts')).planQuotaObjects(ctx, 'local'),
    WorkloadDeployment: async (ctx) => (await import('./plan.ts')).planDeploymentObjects(ctx),
    InstanceType: async (ctx) => (await import('./plan.ts')).planInstanceTypes(ctx),
  },
  page: async () => (await import('./view.ts')).workloadsPage,
  explainKinds: [
    {
      name: 'instance',
      aliases: ['inst'],
      resource: INSTANCE,
      description: 'What an Instance waits for (quota, image, scheduling) and since when',
      explain: async ({ client, object }) => ({
        lines: await (await import('./explain.ts')).explainInstance(client, object),
      }),
    },
    {
      name: 'workloaddeployment',
      aliases: ['wd'],
      resource: WORKLOAD_DEPLOYMENT,
      description: 'What a WorkloadDeployment waits for (instances, rollout) and since when',
      explain: async ({ client, object }) => ({
        lines: await (await import('./explain.ts')).explainWorkloadDeployment(client, object),
      }),
    },
    {
      name: 'quota',
      aliases: ['bquota'],
      resource: QUOTA,
      status: true,
      description: 'Which instances of its namespace a Quota grants, and which wait, in which order',
      explain: async ({ client, object }) =>
        (await import('./explain.ts')).explainQuotaObject(client, object),
    },
  ],
};

/**
 * Quota across cells: the quota controller on a management plane, keeping the Quotas there and
 * granting the instances of every engaged cell (whose Berths run `--quota-source=management`), so a
 * namespace's budget holds across all its cells. Mirrors of instances are never counted.
 */
export const quotaCapability: Capability = {
  name: 'quota',
  description:
    "Quota across cells on a management plane: a namespace's Quota here grants the instances of every cell",
  roles: ['management'],
  // Its kinds are the workloads capability's CRDs (Quota, Instance, InstanceType), installed with it.
  kinds: [],
  crds: async () => [],
  // Here: the Quotas and their ledgers (written by PUT with the resourceVersion read), and the
  // Instances and InstanceTypes every cluster is watched for (here, mirrors only, left out by their
  // label). In the cells it reads and grants instances with each cell's kubeconfig.
  rbac: [
    {
      apiGroups: [POLICY_GROUP],
      resources: ['quotas', 'instances', 'instancetypes'],
      verbs: ['list', 'watch'],
    },
    { apiGroups: [POLICY_GROUP], resources: ['quotas/status'], verbs: ['update'] },
  ],
  // In each cell: its Instances and InstanceTypes watched, instances granted in their QuotaGranted
  // condition (applied), and a claim whose instance the cache lacks read before it is released.
  cellRbac: [
    { apiGroups: [POLICY_GROUP], resources: ['instances', 'instancetypes'], verbs: ['list', 'watch'] },
    { apiGroups: [POLICY_GROUP], resources: ['instances/status'], verbs: ['patch'] },
    {
      apiGroups: [POLICY_GROUP],
      resources: ['instances'],
      verbs: ['get'],
      why: "a claim on an instance the cell's cache does not show is confirmed gone before it is released",
    },
  ],
  // A management plane's Quotas grant the cells' instances, as their mirrors here show them.
  plan: { Quota: async (ctx) => (await import('./plan.ts')).planQuotaObjects(ctx, 'management') },
  setup: async (ctx) => (await import('./setup.ts')).setupQuota(ctx),
};
