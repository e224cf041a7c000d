import { Option } from 'commander';
import type { Capability } from '../capability.ts';
import { POLICY_GROUP } from '../policy/crd.ts';
import { DeploymentController } from './deployment.ts';
import { explainInstance, explainWorkloadDeployment } from './explain.ts';
import { InstanceController } from './instance.ts';
import { QuotaController } from './quota.ts';
import { Instance, InstanceType, Quota, WorkloadDeployment } from './types.ts';

export const workloadsCapability: Capability = {
  name: 'workloads',
  description:
    'Workloads in a cell: a WorkloadDeployment runs as Instances by ordinal, each one Pod, gated by quota',
  roles: ['cluster', 'cell'],
  options: () => [
    new Option('--workload-workers <n>', 'WorkloadDeployments the workloads controller reconciles at once')
      .default(8)
      .argParser(Number),
    new Option('--instance-workers <n>', 'Instances the instance controller reconciles at once')
      .default(16)
      .argParser(Number),
    new Option('--quota-workers <n>', 'namespaces the quota controller decides at once')
      .default(4)
      .argParser(Number),
  ],
  crds: [WorkloadDeployment, Instance, Quota, InstanceType],
  rbac: [
    // Deployments create and delete their instances; statuses are applied (patch), a Quota's is
    // written with its resourceVersion (update).
    { apiGroups: [POLICY_GROUP], resources: ['workloaddeployments', 'quotas'], verbs: ['list', 'watch'] },
    {
      apiGroups: [POLICY_GROUP],
      resources: ['instances'],
      verbs: ['get', 'list', 'watch', 'create', 'delete'],
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
    { apiGroups: [''], resources: ['pods'], verbs: ['get', 'list', 'watch', 'create', 'patch'] },
  ],
  setup({ manager, options }) {
    new DeploymentController(manager, { workers: Number(options['workloadWorkers'] ?? 8) });
    // Part 1 keeps Quotas in the cluster that runs the instances; part 2 passes the management plane.
    const quota = new QuotaController(manager, { workers: Number(options['quotaWorkers'] ?? 4) });
    new InstanceController(manager, { workers: Number(options['instanceWorkers'] ?? 16), quota });
    return {};
  },
  explainKinds: [
    {
      name: 'instance',
      aliases: ['inst'],
      resource: Instance.ref,
      description: 'What an Instance waits for (quota, image, scheduling) and since when',
      lines: ({ client, object }) => explainInstance(client, object),
    },
    {
      name: 'workloaddeployment',
      aliases: ['wd'],
      resource: WorkloadDeployment.ref,
      description: 'What a WorkloadDeployment waits for (instances, rollout) and since when',
      lines: ({ client, object }) => explainWorkloadDeployment(client, object),
    },
  ],
};
