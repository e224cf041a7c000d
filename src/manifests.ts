// The install manifests, generated from the capabilities: their CRDs, one ClusterRole with every
// permission they declare, and what the runtime itself needs (leases, events), and a Role for what
// Berth needs only in its own namespace (the webhook certificate's Secret), and one Role there for each
// capability that declares rules of its own in that namespace (the cells' kubeconfig Secrets).
import type { Capability } from './capability.ts';
import { NAMESPACE, SERVICE_ACCOUNT, WEBHOOK_CERT_SECRET } from './policy/namespace.ts';
import { capabilities } from './capabilities.ts';
import {
  clusterRole,
  clusterRoleBinding,
  mergeRules,
  role,
  roleBinding,
  type PolicyRule,
} from './runtime/api/rbac.ts';
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

/**
 * What Berth needs in its own namespace only: the Secret its replicas share for the webhook's serving
 * certificate. Create cannot be limited to a name (the object does not exist yet); read and update can.
 */
export const namespaceRules = (secret: string = WEBHOOK_CERT_SECRET): PolicyRule[] => [
  { apiGroups: [''], resources: ['secrets'], verbs: ['create'] },
  { apiGroups: [''], resources: ['secrets'], resourceNames: [secret], verbs: ['get', 'patch'] },
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
    role('berth', NAMESPACE, namespaceRules()),
    roleBinding(
      'berth',
      NAMESPACE,
      { kind: 'Role', name: 'berth' },
      { kind: 'ServiceAccount', name: SERVICE_ACCOUNT, namespace: NAMESPACE },
    ),
    ...caps.flatMap((c) => (c.namespaceRbac ? capabilityRole(c.name, c.namespaceRbac) : [])),
  ];
}

/**
 * A capability's own Role in Berth's namespace and its binding: kept apart from the webhook
 * certificate's Role, which reads that one Secret only.
 */
function capabilityRole(capability: string, rules: PolicyRule[]): KubeObject[] {
  const name = `berth-${capability}`;
  return [
    role(name, NAMESPACE, mergeRules(rules)),
    roleBinding(
      name,
      NAMESPACE,
      { kind: 'Role', name },
      { kind: 'ServiceAccount', name: SERVICE_ACCOUNT, namespace: NAMESPACE },
    ),
  ];
}
