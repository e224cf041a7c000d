import type { Capability } from '../capability.ts';
import { POLICY_GROUP } from '../policy/crd.ts';
import { FederationController } from './controller.ts';
import { Workload } from './types.ts';

export const federationCapability: Capability = {
  name: 'federation',
  description:
    'Workloads on a management plane: one WorkloadDeployment per placement and city, in one cell serving the city, and their status rolled up',
  roles: ['management'],
  crds: [Workload],
  // Workloads are read from the cache; their finalizer is a server-side apply (patch), their status too.
  // Cells and Locations say where each city runs. In the cells Berth acts with each cell's kubeconfig.
  rbac: [
    { apiGroups: [POLICY_GROUP], resources: ['workloads'], verbs: ['list', 'watch', 'patch'] },
    { apiGroups: [POLICY_GROUP], resources: ['workloads/status'], verbs: ['patch'] },
    { apiGroups: [POLICY_GROUP], resources: ['cells', 'locations'], verbs: ['list', 'watch'] },
  ],
  setup({ manager }) {
    new FederationController(manager);
    return {};
  },
};
