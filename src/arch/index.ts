import { Option } from 'commander';
import type { Capability } from '../capability.ts';
import { durationOption, atLeast } from '../command/flags.ts';
import { POLICY_GROUP } from '../policy/crd.ts';
import { RegistryClient } from '../registry/index.ts';
import { archCommand, cleanArch, registryOptions } from './cli.ts';
import { clusterCidrs, SERVICE_CIDRS } from './cluster-ranges.ts';
import type { PolicyKit } from '../policy/kit.ts';
import type { PolicyContext } from '../policy/reconciler.ts';
import { interning, nodeInformer, slimMeta, slimMetadata } from '../policy/slim.ts';
import type { ImageInspector } from '../registry/types.ts';
import { Resources, type KubeObject } from '../runtime/api/meta.ts';
import type { Informer } from '../runtime/cache/informer.ts';
import type { Controller } from '../runtime/controller/controller.ts';
import { Trigger } from '../runtime/controller/trigger.ts';
import type { WebhookSpec } from '../runtime/webhook/registration.ts';
import { NodeReconciler, setupNodeReconciler } from './controllers/node.ts';
import { PodReconciler, setupPodReconciler } from './controllers/pod.ts';
import { setupRegateReconciler } from './controllers/regate.ts';
import { setupStatusWriter, type StatusWriter } from './controllers/status.ts';
import type { Policy } from './decide/policies.ts';
import { parsePolicies, type ParseCache } from './decide/parse.ts';
import { webhookServiceNamespaces, type ArchPod } from './decide/pods.ts';
import { explainArchPlacement, explainPodArch } from './explain.ts';
import { planArchObjects } from './plan.ts';
import {
  ARCH_KEYS,
  FAILURE_ANNOTATION,
  FIELD_MANAGER,
  POLICY_ANNOTATION,
  PULL_SECRET_RULE,
  RESULT_ANNOTATION,
  SKIP_ANNOTATION,
  STATE_LABEL,
  type ArchPlacementStatus,
} from './types.ts';
import { ArchPlacement } from './crd.ts';
import { ADMISSION_BUDGET_MS } from './decide/admission.ts';
import { POD_WEBHOOK, podTerms, podWebhook } from './webhook.ts';
import { INSPECT_WAIT_MS } from './admit.ts';
import { AdmissionScope } from '../policy/admission.ts';
import { archPage } from './view.ts';

export const archCapability: Capability = {
  name: 'arch',
  description: 'Architecture-aware placement: pods land on nodes whose architecture all their images support',
  roles: ['cluster'],
  commands: () => [archCommand()],
  options: () => [
    new Option(
      '--arch-workers <n>',
      'pods the arch controller patches at once (a pod waiting on its registry holds none)',
    )
      .default(32)
      .argParser(atLeast(1)),
    durationOption(
      '--arch-admission-wait <duration>',
      "how long a new image's first pods wait at admission for Berth to read it, to be placed there rather than gated (0: gate them at once)",
      INSPECT_WAIT_MS / 1000,
      0,
      ADMISSION_BUDGET_MS / 1000,
    ),
    new Option(
      '--arch-registries <file>',
      'registries configuration (YAML): mirrors tried in order, a CA bundle per registry, insecure registries and registries on private addresses (allowPrivate) by opt-in',
    ),
    new Option(
      '--arch-registry-ca <file>',
      'a PEM bundle trusted by every registry that names no CA of its own',
    ),
    new Option(
      '--arch-pull-secret <namespace/name>',
      "a pull secret tried for every pod's images after the pod's own (a cluster-wide registry login)",
    ),
  ],
  crds: [ArchPlacement],
  keys: ARCH_KEYS,
  // Its records on the pods it gated, and the skip flag. A record names at most MAX_POD_IMAGES
  // images of at most 520 characters each, with their platforms: within 64 KiB.
  annotations: [
    { key: POLICY_ANNOTATION },
    { key: RESULT_ANNOTATION, max: 64 * 1024 },
    { key: FAILURE_ANNOTATION, max: 64 * 1024 },
    { key: SKIP_ANNOTATION },
  ],
  // Pull secrets, read by name: pods' own where the install opts their namespace in, and
  // --arch-pull-secret by its name where the install names it (RbacOptions.archPullSecret).
  userNamespaceRbac: [PULL_SECRET_RULE],
  rbac: [
    // Informers list and watch; pods are ungated by patch, the rest written by server-side apply.
    // A gated pod the informer loses is read again (get): its state label may have been taken off.
    { apiGroups: [''], resources: ['pods'], verbs: ['get', 'list', 'watch', 'patch'] },
    { apiGroups: [''], resources: ['namespaces'], verbs: ['list', 'watch'] },
    // Asked before a pull secret is read: may Berth read Secrets in the pod's namespace?
    { apiGroups: ['authorization.k8s.io'], resources: ['selfsubjectaccessreviews'], verbs: ['create'] },
    // Taints mode: the architecture taint.
    { apiGroups: [''], resources: ['nodes'], verbs: ['list', 'watch', 'patch'] },
    // Registry egress: the service ranges, refused like private addresses (cluster-ranges.ts).
    { apiGroups: [SERVICE_CIDRS.group], resources: [SERVICE_CIDRS.resource], verbs: ['list'] },
    // Pods in namespaces that serve admission webhooks are never gated (see docs/decisions/0012).
    {
      apiGroups: ['admissionregistration.k8s.io'],
      resources: ['mutatingwebhookconfigurations', 'validatingwebhookconfigurations'],
      verbs: ['list', 'watch'],
    },
    { apiGroups: [POLICY_GROUP], resources: ['archplacements'], verbs: ['list', 'watch', 'patch'] },
    { apiGroups: [POLICY_GROUP], resources: ['archplacements/status'], verbs: ['patch'] },
  ],
  explainPod: ({ client, object, berthNamespace }) => explainPodArch(client, object, berthNamespace),
  plan: { ArchPlacement: (ctx) => planArchObjects(ctx) },
  page: archPage,
  explainKinds: [
    {
      name: 'archplacement',
      aliases: ['archp'],
      resource: ArchPlacement.ref,
      subjects: 'pod',
      status: true,
      description: 'Which pods an ArchPlacement gated and placed on which architectures (--pod: one pod)',
      async explain({ client, object, berthNamespace, focus }) {
        const [objects, namespaces, nodes] = await Promise.all([
          client.list(ArchPlacement.ref).then((l) => l.items),
          client.list(Resources.namespaces).then((l) => l.items),
          client.list(Resources.nodes).then((l) => l.items),
        ]);
        const [ns, pod] = focus?.pod ? focus.pod.split('/') : [];
        const pods = pod
          ? [await client.get(Resources.pods, pod, ns)]
          : (await client.list(Resources.pods)).items;
        const { policies, errors } = parsePolicies(objects);
        const name = object.metadata!.name!;
        const said = explainArchPlacement(
          name,
          policies,
          pods as ArchPod[],
          new Map(namespaces.map((n) => [n.metadata!.name!, n.metadata?.labels ?? {}])),
          nodes,
          berthNamespace,
        );
        const error = errors.get(name);
        return error ? { lines: [`  invalid, applies nothing: ${error}`] } : said;
      },
    },
  ],
  async setup({ kit, options, berthNamespace }) {
    const arch = setupArch(kit, {
      inspector: new RegistryClient({
        ...registryOptions({ registries: options['archRegistries'], registryCa: options['archRegistryCa'] }),
        clusterCidrs: await clusterCidrs(kit.manager.client(), kit.manager.log),
      }),
      berthNamespace,
      workers: Number(options['archWorkers'] ?? 32),
      admissionWaitMs: 1000 * Number(options['archAdmissionWait'] ?? INSPECT_WAIT_MS / 1000),
      ...(typeof options['archPullSecret'] === 'string' ? { pullSecret: options['archPullSecret'] } : {}),
    });
    return { webhooks: [arch.webhook] };
  },
  // Deleting the ArchPlacements released their pods; what stays on them is Berth's record of it.
  uninstall: ({ client, say, dryRun }) => cleanArch(client, { say, dryRun, records: true }),
};

export type PolicyObject = KubeObject & { spec?: unknown; status?: ArchPlacementStatus };

export interface ArchOptions {
  inspector: ImageInspector;
  berthNamespace: string;
  /** Pods reconciled at once: each waits on its patch (not on registries: see PodReconciler's inspections()). */
  workers?: number;
  /** `namespace/name` of a pull secret tried for every pod after its own. */
  pullSecret?: string;
  /** How long one pod's inspections may take before they count as a transient failure (INSPECT_TIMEOUT_MS). */
  inspectTimeoutMs?: number;
  /** How long a new image's pods wait at admission for its read (INSPECT_WAIT_MS); 0 never. */
  admissionWaitMs?: number;
}

/** What the arch controllers and webhook share: built once, in setupArch. */
export interface Arch extends PolicyContext {
  readonly opts: ArchOptions;
  /** Only the pods Berth gated: the webhook labels them, so this cache never holds the others. */
  readonly pods: Informer<ArchPod>;
  readonly namespaces: Informer<KubeObject>;
  readonly webhookConfigs: Informer<KubeObject>[];
  readonly webhookNamespaces: (() => Set<string>)[];
  readonly policyObjects: Informer<PolicyObject>;
  readonly parsed: () => { policies: Policy[]; errors: Map<string, string> };
  /** The live policies, highest priority first. */
  policies(): Policy[];
  /** The pods the webhook is sent: those a live policy selects. */
  readonly admission: AdmissionScope<PolicyObject>;
}

/** The arch controllers (arch-pod, arch-regate, arch-node, arch-status) on the kit's manager, and the webhook to serve. */
export function setupArch(
  kit: PolicyKit,
  opts: ArchOptions,
): Arch & {
  podController: Controller;
  regateController: Controller;
  nodeController: Controller;
  status: StatusWriter;
  webhook: WebhookSpec;
} {
  const manager = kit.manager;
  const pods = manager.informer<ArchPod>(Resources.pods, {
    labelSelector: STATE_LABEL,
    transform: interning('arch-pod', archPod),
  });
  pods.addIndexer('policy', (p) => {
    const name = p.metadata?.annotations?.[POLICY_ANNOTATION];
    return name ? [name] : [];
  });
  const nodes = nodeInformer(manager);
  const namespaces = manager.informer(Resources.namespaces, { transform: slimMeta });
  const services = interning('webhook-services', webhookServices);
  const webhookConfigs = [
    manager.informer(Resources.mutatingWebhookConfigurations, { transform: services }),
    manager.informer(Resources.validatingWebhookConfigurations, { transform: services }),
  ];
  const policyObjects = manager.informer<PolicyObject>(ArchPlacement.ref);
  const cache: ParseCache = new Map();
  const parsed = policyObjects.derive((objs) => parsePolicies(objs, cache));
  const log = manager.log.child({ capability: 'arch' });
  const a: Arch = {
    manager,
    opts,
    pods,
    nodes,
    namespaces,
    webhookConfigs,
    webhookNamespaces: webhookConfigs.map((i) =>
      i.derive((objs) => new Set(objs.flatMap((o) => (o['namespaces'] as string[]) ?? []))),
    ),
    policyObjects,
    parsed,
    policies: () => parsed().policies,
    admission: new AdmissionScope({
      webhook: POD_WEBHOOK,
      objects: policyObjects,
      terms: () => podTerms(parsed().policies),
      log,
    }),
    events: manager.recorder('arch'),
    log,
  };
  kit.keys.declare('arch', ARCH_KEYS, (signal) => policyObjects.waitForSync(signal));
  const writer = kit.applyWriter(FIELD_MANAGER, nodes);

  // arch-pod records each pod's standing in the status writer, which waits for its first pass; its
  // trigger brings back a pod whose images were read, or whose deleted policy waits for it.
  const podTrigger = new Trigger();
  const status = setupStatusWriter(a, podTrigger);
  const podReconciler = new PodReconciler(a, status, podTrigger);
  const podController = setupPodReconciler(a, podReconciler, {
    workers: opts.workers ?? 32,
    firstPass: status.firstPass,
    trigger: podTrigger,
  });
  const regateController = setupRegateReconciler(a);
  const nodeController = setupNodeReconciler(a, new NodeReconciler(a, writer, status));
  return {
    ...a,
    podController,
    regateController,
    nodeController,
    status,
    webhook: podWebhook(a, podReconciler),
  };
}

/** What the controller keeps of a pod it gated: what it reads, and what its patch rewrites. */
function archPod(obj: KubeObject): ArchPod {
  const spec = (obj['spec'] ?? {}) as ArchPod['spec'];
  const container = (c: ArchPod['spec']['containers'][number]) => ({
    name: c.name,
    image: c.image,
    ...(c.imagePullPolicy ? { imagePullPolicy: c.imagePullPolicy } : {}),
  });
  const kept: ArchPod['spec'] = { containers: (spec.containers ?? []).map(container) };
  if (spec.initContainers?.length) kept.initContainers = spec.initContainers.map(container);
  for (const k of [
    'nodeName',
    'nodeSelector',
    'affinity',
    'tolerations',
    'schedulingGates',
    'imagePullSecrets',
    'os',
  ] as const)
    if (spec[k] !== undefined) (kept as Record<string, unknown>)[k] = spec[k];
  const metadata = slimMetadata(obj.metadata);
  if (obj.metadata?.creationTimestamp) metadata.creationTimestamp = obj.metadata.creationTimestamp;
  return { apiVersion: 'v1', kind: 'Pod', metadata, spec: kept };
}

/** Namespaces whose Services an admission webhook calls. */
function webhookServices(obj: KubeObject): KubeObject {
  return {
    apiVersion: obj.apiVersion,
    kind: obj.kind,
    metadata: slimMetadata(obj.metadata),
    namespaces: webhookServiceNamespaces(obj),
  };
}
