// The install manifests, generated from the capabilities: their CRDs, one ClusterRole with every
// permission they declare and what the runtime itself needs cluster-wide (events, webhook
// configurations), and Roles for what Berth needs only in its own namespace (the webhook
// certificate's Secret; the Lease of leader election; each capability's own rules there, such as the
// cells' kubeconfig Secrets); the pod writes of workloads only in the namespaces that run them; and
// the role a management plane needs in a cell.
import { cellRules, type Capability } from './capability.ts';
import {
  LEADER_ELECTION_ID,
  NAMESPACE,
  SERVICE_ACCOUNT,
  WEBHOOK_CERT_SECRET,
  WEBHOOK_CONFIGURATION,
} from './policy/namespace.ts';
import { capabilities } from './capabilities.ts';
import {
  clusterRole,
  clusterRoleBinding,
  role,
  roleBinding,
  type DeclaredRule,
  type ServiceAccountSubject,
} from './runtime/api/rbac.ts';
import { crdName, DNS1123_SUBDOMAIN, isDnsLabel, type KubeObject } from './runtime/api/meta.ts';

/** What the names in Berth's roles are; the defaults are `berth run`'s and the kustomize base's. */
export interface RbacOptions {
  /** The roles, their bindings and the ServiceAccount they bind (Helm: the release's full name). */
  name?: string;
  /** Berth's namespace: its ServiceAccount, Lease and webhook certificate Secret. */
  namespace?: string;
  /** The Lease of leader election (`--leader-election-id`). */
  lease?: string;
  /** The Mutating- and ValidatingWebhookConfiguration Berth registers. */
  webhookConfiguration?: string;
  /** The Secret where Berth keeps its webhook certificate (`--webhook-cert-secret`). */
  webhookCertSecret?: string;
  /**
   * Owner kinds that an AgentPlacement's `finalizer` may be put on, as `resource.group`
   * (`deployments.apps`; `replicationcontrollers` for the core group). None by default: watching and
   * patching a workload kind lets Berth change every pod template of that kind, so each is opted into.
   */
  finalizerOwners?: string[];
  /** `berth run --install-crds`: Berth writes its own CRDs at start (never granted by default). */
  installCrds?: boolean;
  /**
   * Namespaces whose Secrets pods may name as imagePullSecrets for Berth to read their images'
   * platforms with (architecture-aware placement): a Role in each with the capabilities'
   * userNamespaceRbac; `*` grants it cluster-wide. None by default: such a pod's images are read
   * without its secret (a private registry refuses that, and the pod is released with a Warning
   * naming the opt-in).
   */
  pullSecretNamespaces?: string[];
  /**
   * `--arch-pull-secret` as `namespace/name`: a Role in that namespace lets Berth get that Secret,
   * by name. None by default: Berth reads no Secret in its own namespace but its certificate's.
   */
  archPullSecret?: string;
  /**
   * Namespaces where the workloads controllers may create Instances and create, patch and delete
   * Pods: a RoleBinding in each to the ClusterRole of those verbs (workloadPodsRoleName); `*` binds
   * it cluster-wide. None by default: a Pod of any ServiceAccount in any namespace (kube-system's)
   * is as good as cluster-admin, and a WorkloadDeployment elsewhere would multiply its template there.
   */
  workloadNamespaces?: string[];
}

/** What the capabilities need in the users' namespaces an install opts in. */
export const userNamespaceRules = (caps: Capability[] = capabilities): DeclaredRule[] =>
  caps.flatMap((c) => c.userNamespaceRbac ?? []);

/** The Role each opted-in namespace gets for its pull secrets, beside the roles named `name`. */
export const pullSecretRoleName = (name: string): string => `${name}-pull-secrets`;

/** A namespace an install names for some grant (`what`): a DNS label, or `*` for every namespace. */
const namedNamespace =
  (what: string) =>
  (ns: string): string => {
    if (ns !== '*' && !isDnsLabel(ns))
      throw new Error(`${what} namespace "${ns}" is not a namespace name (or * for every namespace)`);
    return ns;
  };

/** A namespace named for pull secrets: a DNS label, or `*` for every namespace. */
export const pullSecretNamespace = namedNamespace('pull secret');

/** A namespace named for workloads' Pods: a DNS label, or `*` for every namespace. */
export const workloadNamespace = namedNamespace('workload');

/** What the capabilities need in the namespaces that run workloads (RbacOptions.workloadNamespaces). */
export const workloadNamespaceRules = (caps: Capability[] = capabilities): DeclaredRule[] =>
  caps.flatMap((c) => c.workloadNamespaceRbac ?? []);

/** The ClusterRole of the workloads' Pod writes, bound in each namespace that runs workloads. */
export const workloadPodsRoleName = (name: string): string => `${name}-workload-pods`;

/** The Role that reads `--arch-pull-secret`, by name, in its namespace. */
export const archPullSecretRoleName = (name: string): string => `${name}-arch-pull-secret`;

/** `namespace/name` of `--arch-pull-secret`, checked. */
export function archPullSecretRef(ref: string): { namespace: string; name: string } {
  const [namespace = '', name = '', ...rest] = ref.split('/');
  if (!isDnsLabel(namespace) || !DNS1123_SUBDOMAIN.test(name) || rest.length)
    throw new Error(`arch pull secret "${ref}" is not NAMESPACE/NAME`);
  return { namespace, name };
}

/** The built-in workload kinds a pod's controller chain ends at, for the kustomize component that opts them in. */
export const BUILTIN_OWNER_KINDS = [
  'cronjobs.batch',
  'daemonsets.apps',
  'deployments.apps',
  'statefulsets.apps',
];

const EXPLAIN_WHY =
  "the page's explain (`--ui-bind-address`) reads the object it explains, as `berth explain` does; only when someone asks";

/** What the runtime needs cluster-wide whatever is enabled: events, registering webhooks. */
export const runtimeRules = (webhookConfiguration: string = WEBHOOK_CONFIGURATION): DeclaredRule[] => [
  // Reading them is for the page (`--ui-bind-address`), which lists the last hour's Warning events.
  { apiGroups: ['events.k8s.io'], resources: ['events'], verbs: ['create', 'patch', 'list', 'watch'] },
  { apiGroups: [''], resources: ['nodes', 'pods', 'namespaces'], verbs: ['get'], why: EXPLAIN_WHY },
  // The page's rows are nodes and their pods, whatever capabilities run (a management plane's too).
  { apiGroups: [''], resources: ['nodes', 'pods'], verbs: ['list', 'watch'] },
  // Informers of custom resources wait for a missing CRD to appear.
  { apiGroups: ['apiextensions.k8s.io'], resources: ['customresourcedefinitions'], verbs: ['list', 'watch'] },
  {
    apiGroups: ['apiextensions.k8s.io'],
    resources: ['customresourcedefinitions'],
    verbs: ['get'],
    why: "an informer whose list answers 404 reads its CRD to tell a missing CRD from a passing 404; with Berth's CRDs installed it never does",
  },
  // Registration, and every CA rotation after, is a server-side apply (PATCH) of Berth's own
  // configurations, by name. The install creates them empty (emptyWebhookConfigurations), so
  // Berth needs no create, which no name could limit.
  {
    apiGroups: ['admissionregistration.k8s.io'],
    resources: ['mutatingwebhookconfigurations', 'validatingwebhookconfigurations'],
    resourceNames: [webhookConfiguration],
    verbs: ['patch'],
  },
];

/**
 * What Berth needs in its own namespace only, in two Roles: the Lease of leader election, and the
 * Secret its replicas share for the webhook's serving certificate (Helm renders each only when used).
 * Read and update are limited to their names; create cannot be (the object does not exist yet, so
 * there is no name to check), so it is limited to the namespace.
 */
export const leaseRules = (lease: string = LEADER_ELECTION_ID): DeclaredRule[] => [
  { apiGroups: ['coordination.k8s.io'], resources: ['leases'], verbs: ['create'] },
  {
    apiGroups: ['coordination.k8s.io'],
    resources: ['leases'],
    resourceNames: [lease],
    verbs: ['get', 'update'],
  },
];

export const certSecretRules = (secret: string = WEBHOOK_CERT_SECRET): DeclaredRule[] => [
  { apiGroups: [''], resources: ['secrets'], verbs: ['create'] },
  { apiGroups: [''], resources: ['secrets'], resourceNames: [secret], verbs: ['get'] },
  {
    apiGroups: [''],
    resources: ['secrets'],
    resourceNames: [secret],
    verbs: ['patch'],
    why: 'a replica renews the serving certificate (a third of its year left) or the CA; a run of minutes never does',
  },
];

/** What an owner kind needs to carry an AgentPlacement's finalizer: watched for its UIDs, patched for the finalizer. */
export function finalizerOwnerRule(kind: string): DeclaredRule {
  const dot = kind.indexOf('.');
  const [resource, group] = dot < 0 ? [kind, ''] : [kind.slice(0, dot), kind.slice(dot + 1)];
  if (!/^[a-z0-9]+$/.test(resource) || (dot >= 0 && !DNS1123_SUBDOMAIN.test(group)))
    throw new Error(`owner kind "${kind}" is not resource.group in lower case (deployments.apps)`);
  return { apiGroups: [group], resources: [resource], verbs: ['list', 'watch', 'patch'] };
}

/**
 * What one capability needs cluster-wide: its declared rules, and reading the kinds it explains
 * (the page's explain). The ClusterRole grants the capabilities an install runs (`--controllers`).
 */
export const capabilityRules = (c: Capability): DeclaredRule[] => [
  ...(c.explainKinds ?? []).map((k) => ({
    apiGroups: [k.resource.group],
    resources: [k.resource.resource],
    verbs: ['get'],
    why: EXPLAIN_WHY,
  })),
  ...c.rbac,
];

/** What `--install-crds` needs: applying the capabilities' CRDs, by name. */
export const installCrdsRules = (caps: Capability[] = capabilities): DeclaredRule[] => [
  {
    apiGroups: ['apiextensions.k8s.io'],
    resources: ['customresourcedefinitions'],
    resourceNames: crdNames(caps),
    verbs: ['patch'],
  },
  {
    apiGroups: ['apiextensions.k8s.io'],
    resources: ['customresourcedefinitions'],
    verbs: ['create'],
    why: 'the apply of a CRD not installed yet is authorized as create too, which resourceNames cannot limit',
  },
];

/** Every rule the ClusterRole grants, as declared (with their `why`), before merging. */
export function clusterRules(caps: Capability[] = capabilities, opts: RbacOptions = {}): DeclaredRule[] {
  return [
    ...runtimeRules(opts.webhookConfiguration),
    ...caps.flatMap(capabilityRules),
    ...(opts.finalizerOwners ?? []).map(finalizerOwnerRule),
    ...(opts.installCrds ? installCrdsRules(caps) : []),
    ...((opts.pullSecretNamespaces ?? []).map(pullSecretNamespace).includes('*')
      ? userNamespaceRules(caps)
      : []),
  ];
}

/** The rule that reads `--arch-pull-secret`, named `secret`: the capabilities' pull secret rule, by that name. */
export const archPullSecretRules = (secret: string, caps: Capability[] = capabilities): DeclaredRule[] =>
  userNamespaceRules(caps).map((r) => ({ ...r, resourceNames: [secret] }));

/** The capabilities' CRDs, each built from its zod schema here (Capability.crds). */
export async function crdManifests(caps: Capability[] = capabilities): Promise<KubeObject[]> {
  const crds = await Promise.all(caps.map((c) => c.crds()));
  return crds.flat().map((r) => r.crd);
}

/** The name of the Role for the Lease, beside the one named `name` for the certificate Secret. */
export const leaderElectionRoleName = (name: string): string => `${name}-leader-election`;

export function rbacManifests(caps: Capability[] = capabilities, opts: RbacOptions = {}): KubeObject[] {
  const name = opts.name ?? SERVICE_ACCOUNT;
  const namespace = opts.namespace ?? NAMESPACE;
  const subject = { kind: 'ServiceAccount' as const, name, namespace };
  const lease = leaderElectionRoleName(name);
  // The builders merge the rules, which leaves `why` out: it is for the code, not the cluster.
  return [
    clusterRole(name, clusterRules(caps, opts)),
    clusterRoleBinding(name, name, subject),
    role(name, namespace, certSecretRules(opts.webhookCertSecret)),
    roleBinding(name, namespace, { kind: 'Role', name }, subject),
    role(lease, namespace, leaseRules(opts.lease)),
    roleBinding(lease, namespace, { kind: 'Role', name: lease }, subject),
    ...(opts.pullSecretNamespaces ?? [])
      .map(pullSecretNamespace)
      .filter((ns) => ns !== '*')
      .flatMap((ns) => {
        const own = pullSecretRoleName(name);
        return [
          role(own, ns, userNamespaceRules(caps)),
          roleBinding(own, ns, { kind: 'Role', name: own }, subject),
        ];
      }),
    ...workloadPodsManifests(caps, opts, subject),
    ...archPullSecretManifests(caps, opts, subject),
    ...caps.flatMap((c) => {
      if (!c.namespaceRbac) return [];
      // A capability's own Role, apart from the webhook certificate's, which reads that one Secret only.
      const own = `${name}-${c.name}`;
      return [
        role(own, namespace, c.namespaceRbac),
        roleBinding(own, namespace, { kind: 'Role', name: own }, subject),
      ];
    }),
  ];
}

/**
 * The workloads' Pod writes: a ClusterRole of them, bound by a RoleBinding in each namespace the
 * install names, or by a ClusterRoleBinding for `*`; nothing when no capability writes Pods.
 */
function workloadPodsManifests(
  caps: Capability[],
  opts: RbacOptions,
  subject: ServiceAccountSubject,
): KubeObject[] {
  const rules = workloadNamespaceRules(caps);
  if (!rules.length) return [];
  const own = workloadPodsRoleName(subject.name);
  const ref = { kind: 'ClusterRole' as const, name: own };
  const namespaces = (opts.workloadNamespaces ?? []).map(workloadNamespace);
  return [
    clusterRole(own, rules),
    ...(namespaces.includes('*')
      ? [clusterRoleBinding(own, own, subject)]
      : namespaces.map((ns) => roleBinding(own, ns, ref, subject))),
  ];
}

/** The role (and ServiceAccount) in a cell whose kubeconfig a management plane is given. */
export const CELL_ROLE = 'berth-management-plane';

/**
 * `berth manifests --cell`: for a cell, the ClusterRole of what the management plane does there and
 * its binding to a ServiceAccount (in `namespace`), whose token makes the kubeconfig to join with.
 * Cluster-wide: the management plane watches all namespaces of a cell.
 */
export function cellRbacManifests(
  caps: Capability[] = capabilities,
  opts: { name?: string; namespace?: string } = {},
): KubeObject[] {
  const name = opts.name ?? CELL_ROLE;
  const subject = { kind: 'ServiceAccount' as const, name, namespace: opts.namespace ?? NAMESPACE };
  return [clusterRole(name, cellRules(caps)), clusterRoleBinding(name, name, subject)];
}

/** The Role that reads `--arch-pull-secret` by its name, in its namespace, and its binding. */
function archPullSecretManifests(
  caps: Capability[],
  opts: RbacOptions,
  subject: ServiceAccountSubject,
): KubeObject[] {
  if (!opts.archPullSecret || !userNamespaceRules(caps).length) return [];
  const secret = archPullSecretRef(opts.archPullSecret);
  const own = archPullSecretRoleName(subject.name);
  return [
    role(own, secret.namespace, archPullSecretRules(secret.name, caps)),
    roleBinding(own, secret.namespace, { kind: 'Role', name: own }, subject),
  ];
}

/** The ValidatingAdmissionPolicy (and its binding) that bounds Berth's writes to existing Pods. */
export const podPatchPolicyName = (name: string): string => `${name}-pod-patches`;

/** Label and annotation keys Berth writes on pods it did not create (arch's state, result, failure). */
const OWN_POD_KEYS = 'arch.berth.dev/';

/**
 * Arch patches pods cluster-wide (it ungates them wherever its webhook gated them), and a pod patch
 * may change a container's image: this policy refuses any update of a Pod by Berth's ServiceAccount
 * that changes more than what Berth writes to pods (the removal of scheduling gates, node affinity,
 * tolerations, its own `arch.berth.dev/` labels and annotations). The other spec fields are
 * immutable already (the apiserver's pod update validation), but for the images, the
 * activeDeadlineSeconds and the terminationGracePeriodSeconds, which the policy keeps as they were.
 */
export function podPatchPolicyManifests(opts: { name?: string; namespace?: string } = {}): KubeObject[] {
  const name = podPatchPolicyName(opts.name ?? SERVICE_ACCOUNT);
  const user = `system:serviceaccount:${opts.namespace ?? NAMESPACE}:${opts.name ?? SERVICE_ACCOUNT}`;
  const same = (field: string) => ({
    expression: `has(object.${field}) == has(oldObject.${field}) && (!has(object.${field}) || object.${field} == oldObject.${field})`,
    message: `Berth may not change a Pod's ${field}`,
  });
  // Keys outside Berth's own keep their values: none added, changed or removed.
  const othersKept = (map: string) => ({
    expression:
      `variables.new${map}.all(k, k.startsWith('${OWN_POD_KEYS}') || (k in variables.old${map} && variables.old${map}[k] == variables.new${map}[k])) && ` +
      `variables.old${map}.all(k, k.startsWith('${OWN_POD_KEYS}') || k in variables.new${map})`,
    message: `Berth may change only its own (${OWN_POD_KEYS}) ${map.toLowerCase()} of a Pod`,
  });
  const policy = {
    apiVersion: 'admissionregistration.k8s.io/v1',
    kind: 'ValidatingAdmissionPolicy',
    metadata: { name },
    spec: {
      failurePolicy: 'Fail',
      matchConstraints: {
        // The Pod itself: not its subresources (evictions, status, bindings).
        resourceRules: [
          { apiGroups: [''], apiVersions: ['v1'], operations: ['UPDATE'], resources: ['pods'] },
        ],
      },
      matchConditions: [{ name: 'berth', expression: `request.userInfo.username == '${user}'` }],
      variables: ['Labels', 'Annotations'].flatMap((map) => [
        { name: `new${map}`, expression: `object.metadata.?${map.toLowerCase()}.orValue({})` },
        { name: `old${map}`, expression: `oldObject.metadata.?${map.toLowerCase()}.orValue({})` },
      ]),
      validations: [
        same('spec.containers'),
        same('spec.initContainers'),
        same('spec.activeDeadlineSeconds'),
        same('spec.terminationGracePeriodSeconds'),
        same('metadata.ownerReferences'),
        same('metadata.finalizers'),
        othersKept('Labels'),
        othersKept('Annotations'),
      ],
    },
  };
  const binding = {
    apiVersion: 'admissionregistration.k8s.io/v1',
    kind: 'ValidatingAdmissionPolicyBinding',
    metadata: { name },
    spec: { policyName: name, validationActions: ['Deny'] },
  };
  return [policy, binding];
}

const crdNames = (caps: Capability[]): string[] => caps.flatMap((c) => c.kinds.map(crdName));

/**
 * Every custom resource of the capabilities, by API group (aggregated roles, the uninstall's reads);
 * `admin`: only those only a namespace's admin writes (adminKinds), `edit`: all others.
 */
function kindsByGroup(
  caps: Capability[],
  only?: 'admin' | 'edit',
): { apiGroups: string[]; resources: string[] }[] {
  const groups = new Map<string, string[]>();
  for (const c of caps)
    for (const r of c.kinds) {
      if (only && (only === 'admin') !== (c.adminKinds ?? []).includes(r)) continue;
      groups.set(r.group, [...(groups.get(r.group) ?? []), r.resource]);
    }
  return [...groups].map(([group, resources]) => ({ apiGroups: [group], resources: resources.sort() }));
}

/** The Helm chart's pre-install and pre-upgrade hook, `berth install --crds-only`: apply and read back the CRDs. */
export const crdsHookRules = (caps: Capability[] = capabilities): DeclaredRule[] => [
  ...installCrdsRules(caps),
  {
    apiGroups: ['apiextensions.k8s.io'],
    resources: ['customresourcedefinitions'],
    resourceNames: crdNames(caps),
    verbs: ['get'],
  },
];

/**
 * The Helm chart's post-delete hook, `berth uninstall` (cluster-wide): count the objects of Berth's
 * kinds, take back what each capability left on nodes and pods, delete the webhook configurations
 * Berth registered and its CRDs (by name). Not bound by the Pod patch policy, which names Berth's
 * own ServiceAccount: this one runs only once Berth is gone.
 */
export const uninstallHookRules = (caps: Capability[] = capabilities): DeclaredRule[] => [
  ...kindsByGroup(caps).map((g) => ({ ...g, verbs: ['list'] })),
  { apiGroups: [''], resources: ['nodes', 'pods'], verbs: ['list', 'patch'] },
  {
    apiGroups: [''],
    resources: ['pods'],
    verbs: ['get'],
    why: 'arch clean reads a pod back after patching it',
  },
  {
    apiGroups: ['admissionregistration.k8s.io'],
    resources: ['mutatingwebhookconfigurations', 'validatingwebhookconfigurations'],
    verbs: ['list', 'delete'],
  },
  {
    apiGroups: ['apiextensions.k8s.io'],
    resources: ['customresourcedefinitions'],
    resourceNames: crdNames(caps),
    verbs: ['get', 'delete'],
  },
];

/** The post-delete hook in Berth's namespace: the cells' kubeconfig Secrets, the certificate's Secret, the Lease. */
export const uninstallHookNamespaceRules = (): DeclaredRule[] => [
  { apiGroups: [''], resources: ['secrets'], verbs: ['get', 'list', 'delete'] },
  { apiGroups: ['coordination.k8s.io'], resources: ['leases'], verbs: ['get', 'delete'] },
];

/**
 * Rules for the ClusterRoles Kubernetes aggregates into its `view`, `edit` and `admin` roles:
 * reading Berth's kinds, writing them (status stays Berth's), and writing the budgets `edit` only
 * reads (adminKinds: a tenant with `edit` cannot lift its own Quota).
 */
export const aggregatedRules = (
  access: 'view' | 'edit' | 'admin',
  caps: Capability[] = capabilities,
): DeclaredRule[] =>
  kindsByGroup(caps, access === 'view' ? undefined : access).map((g) => ({
    ...g,
    verbs:
      access === 'view'
        ? ['get', 'list', 'watch']
        : ['create', 'delete', 'deletecollection', 'patch', 'update'],
  }));
