// Minimal Kubernetes object shapes. Controllers work on plain JSON; each capability declares the
// fields it reads in its own types.ts.

/** A DNS-1123 label's form (namespaces, versions, cluster names); isDnsLabel adds its bound. */
export const DNS1123_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
/** A DNS-1123 subdomain's form, labels joined by dots (API groups, label key prefixes). */
export const DNS1123_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
/** A DNS-1123 label: its form, in at most 63 characters. */
export const isDnsLabel = (s: string): boolean => s.length <= 63 && DNS1123_LABEL.test(s);

export interface OwnerReference {
  apiVersion: string;
  kind: string;
  name: string;
  uid: string;
  controller?: boolean;
  blockOwnerDeletion?: boolean;
}

export interface ObjectMeta {
  name?: string;
  generateName?: string;
  namespace?: string;
  uid?: string;
  resourceVersion?: string;
  generation?: number;
  creationTimestamp?: string;
  deletionTimestamp?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  ownerReferences?: OwnerReference[];
  finalizers?: string[];
  managedFields?: unknown[];
}

export interface KubeObject {
  apiVersion?: string;
  kind?: string;
  metadata?: ObjectMeta;
  [field: string]: unknown;
}

/** Where a kind lives in the API: group ('' for core), version, plural resource, and scope. */
export interface ResourceRef {
  group: string;
  version: string;
  resource: string;
  kind: string;
  namespaced: boolean;
}

export const apiVersionOf = (ref: ResourceRef): string =>
  ref.group ? `${ref.group}/${ref.version}` : ref.version;

/** The name of a custom kind's CustomResourceDefinition: `<plural>.<group>`. */
export const crdName = (ref: ResourceRef): string => `${ref.resource}.${ref.group}`;

const core = (resource: string, kind: string, namespaced: boolean): ResourceRef => ({
  group: '',
  version: 'v1',
  resource,
  kind,
  namespaced,
});

export const Resources = {
  nodes: core('nodes', 'Node', false),
  pods: core('pods', 'Pod', true),
  namespaces: core('namespaces', 'Namespace', false),
  configMaps: core('configmaps', 'ConfigMap', true),
  secrets: core('secrets', 'Secret', true),
  serviceAccounts: core('serviceaccounts', 'ServiceAccount', true),
  daemonSets: { group: 'apps', version: 'v1', resource: 'daemonsets', kind: 'DaemonSet', namespaced: true },
  deployments: {
    group: 'apps',
    version: 'v1',
    resource: 'deployments',
    kind: 'Deployment',
    namespaced: true,
  },
  podDisruptionBudgets: {
    group: 'policy',
    version: 'v1',
    resource: 'poddisruptionbudgets',
    kind: 'PodDisruptionBudget',
    namespaced: true,
  },
  replicaSets: {
    group: 'apps',
    version: 'v1',
    resource: 'replicasets',
    kind: 'ReplicaSet',
    namespaced: true,
  },
  leases: {
    group: 'coordination.k8s.io',
    version: 'v1',
    resource: 'leases',
    kind: 'Lease',
    namespaced: true,
  },
  events: { group: 'events.k8s.io', version: 'v1', resource: 'events', kind: 'Event', namespaced: true },
  serviceCidrs: {
    group: 'networking.k8s.io',
    version: 'v1',
    resource: 'servicecidrs',
    kind: 'ServiceCIDR',
    namespaced: false,
  },
  crds: {
    group: 'apiextensions.k8s.io',
    version: 'v1',
    resource: 'customresourcedefinitions',
    kind: 'CustomResourceDefinition',
    namespaced: false,
  },
  mutatingWebhookConfigurations: {
    group: 'admissionregistration.k8s.io',
    version: 'v1',
    resource: 'mutatingwebhookconfigurations',
    kind: 'MutatingWebhookConfiguration',
    namespaced: false,
  },
  validatingWebhookConfigurations: {
    group: 'admissionregistration.k8s.io',
    version: 'v1',
    resource: 'validatingwebhookconfigurations',
    kind: 'ValidatingWebhookConfiguration',
    namespaced: false,
  },
  validatingAdmissionPolicies: {
    group: 'admissionregistration.k8s.io',
    version: 'v1',
    resource: 'validatingadmissionpolicies',
    kind: 'ValidatingAdmissionPolicy',
    namespaced: false,
  },
  validatingAdmissionPolicyBindings: {
    group: 'admissionregistration.k8s.io',
    version: 'v1',
    resource: 'validatingadmissionpolicybindings',
    kind: 'ValidatingAdmissionPolicyBinding',
    namespaced: false,
  },
  clusterRoles: {
    group: 'rbac.authorization.k8s.io',
    version: 'v1',
    resource: 'clusterroles',
    kind: 'ClusterRole',
    namespaced: false,
  },
  clusterRoleBindings: {
    group: 'rbac.authorization.k8s.io',
    version: 'v1',
    resource: 'clusterrolebindings',
    kind: 'ClusterRoleBinding',
    namespaced: false,
  },
  roles: {
    group: 'rbac.authorization.k8s.io',
    version: 'v1',
    resource: 'roles',
    kind: 'Role',
    namespaced: true,
  },
  roleBindings: {
    group: 'rbac.authorization.k8s.io',
    version: 'v1',
    resource: 'rolebindings',
    kind: 'RoleBinding',
    namespaced: true,
  },
} satisfies Record<string, ResourceRef>;

/** The well-known resource of `kind` (the objects Berth generates are all of well-known kinds). */
export function resourceOfKind(kind: string): ResourceRef {
  const ref: ResourceRef | undefined = Object.values(Resources).find((r) => r.kind === kind);
  if (!ref) throw new Error(`no well-known resource of kind ${kind}`);
  return ref;
}

/** A Kubernetes Time, as the API writes it: RFC 3339 in UTC, to the second. */
export const apiTime = (ms: number): string => new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');

/** A Kubernetes MicroTime: RFC 3339 in UTC with exactly six fractional digits. */
export const microTime = (ms: number): string => new Date(ms).toISOString().replace(/Z$/, '000Z');
