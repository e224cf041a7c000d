// The install manifests, generated from the capabilities: their CRDs, one ClusterRole with every
// permission they declare, and what the runtime itself needs (leases, events).
import type { Capability } from './capability.ts';
import { NAMESPACE, SERVICE_ACCOUNT } from './policy/namespace.ts';
import { capabilities } from './capabilities.ts';
import { clusterRole, clusterRoleBinding, mergeRules, type PolicyRule } from './runtime/api/rbac.ts';
import type { KubeObject } from './runtime/api/meta.ts';

/** What the runtime needs whatever is enabled: leader election, events, registering webhooks. */
export const runtimeRules: PolicyRule[] = [
  { apiGroups: ['coordination.k8s.io'], resources: ['leases'], verbs: ['get', 'create', 'update'] },
  { apiGroups: ['events.k8s.io'], resources: ['events'], verbs: ['create', 'patch'] },
  // Informers of custom resources tell a missing CRD from a passing 404, and wait for it to appear.
  {
    apiGroups: ['apiextensions.k8s.io'],
    resources: ['customresourcedefinitions'],
    verbs: ['get', 'list', 'watch'],
  },
  // Server-side apply is a PATCH, authorized as create too when the object does not exist yet.
  {
    apiGroups: ['admissionregistration.k8s.io'],
    resources: ['mutatingwebhookconfigurations', 'validatingwebhookconfigurations'],
    verbs: ['get', 'create', 'patch'],
  },
];

export function crdManifests(caps: Capability[] = capabilities): KubeObject[] {
  return caps.flatMap((c) => c.crds.map((r) => r.crd));
}

export function rbacManifests(caps: Capability[] = capabilities): KubeObject[] {
  const rules = mergeRules([...runtimeRules, ...caps.flatMap((c) => c.rbac)]);
  return [
    clusterRole('berth', rules),
    clusterRoleBinding('berth', 'berth', {
      kind: 'ServiceAccount',
      name: SERVICE_ACCOUNT,
      namespace: NAMESPACE,
    }),
  ];
}
