import { Option } from 'commander';
import type { Capability } from '../capability.ts';
import { POLICY_GROUP } from '../policy/crd.ts';
import { DeploymentController } from './deployment.ts';
import { InstanceController } from './instance.ts';
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
  ],
  crds: [WorkloadDeployment, Instance, Quota, InstanceType],
  rbac: [
    {
      apiGroups: [POLICY_GROUP],
      resources: ['workloaddeployments', 'instances', 'quotas'],
      verbs: ['get', 'list', 'watch', 'create', 'delete', 'patch', 'update'],
    },
    {
      apiGroups: [POLICY_GROUP],
      resources: ['workloaddeployments/status', 'instances/status', 'quotas/status'],
      verbs: ['get', 'patch', 'update'],
    },
    { apiGroups: [POLICY_GROUP], resources: ['instancetypes'], verbs: ['get', 'list', 'watch'] },
    { apiGroups: [''], resources: ['pods'], verbs: ['get', 'list', 'watch', 'create', 'delete', 'patch'] },
  ],
  setup({ manager, options }) {
    new DeploymentController(manager, { workers: Number(options['workloadWorkers'] ?? 8) });
    new InstanceController(manager, { workers: Number(options['instanceWorkers'] ?? 16) });
    return {};
  },
};
