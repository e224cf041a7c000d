// What `berth run` builds for architecture-aware placement: the registry client, its controllers
// and webhook (Capability.setup), loaded only when arch runs.
import type { CapabilityContext, Served } from '../capability.ts';
import { RegistryClient } from '../registry/index.ts';
import { registryOptions } from './cli.ts';
import { clusterCidrs } from './cluster-ranges.ts';
import type { PolicyKit } from '../policy/kit.ts';
import type { PolicyContext } from '../policy/reconciler.ts';
import { interning } from '../policy/intern.ts';
import { nodeInformer, slimMeta, slimMetadata } from '../policy/slim.ts';
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
import {
  ARCH_KEYS,
  FIELD_MANAGER,
  INSPECT_WAIT_MS,
  POLICY_ANNOTATION,
  STATE_LABEL,
  type ArchPlacementStatus,
} from './types.ts';
import { ArchPlacement } from './crd.ts';
import { POD_WEBHOOK, podTerms, podWebhook } from './webhook.ts';
import { AdmissionScope } from '../policy/admission.ts';

/** Capability.setup: the registry client, the arch controllers, and their webhook to serve. */
export async function setup({ kit, options, berthNamespace }: CapabilityContext): Promise<Served> {
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
}

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
