// Architecture-aware placement: the reconcile loops. The pod controller takes each pod the webhook
// gated, reads every image's platforms from its registry (ImageInspector), and in one patch places
// the pod on the architectures all its images support and takes the gate off. The status writer
// counts per ArchPlacement from what the pods carry, and its finalizer releases a deleted policy's
// pods. In Taints mode a node controller keeps each node tainted with its architecture.
import type { PolicyKit } from '../policy/kit.ts';
import { namespaceLabelsByName } from '../policy/namespace.ts';
import { PolicyStatusWriter, type StatusReport } from '../policy/status.ts';
import {
  annotationsChanged,
  changed,
  deletionChanged,
  generationChanged,
  labelsChanged,
  onChanges,
  or,
  valueChanged,
} from '../policy/predicates.ts';
import { nodeInformer, slimMeta, slimMetadata, type SlimNode } from '../policy/slim.ts';
import type { ApplyNodeWriter } from '../policy/nodes/apply.ts';
import { Controller, type Result } from '../runtime/controller/controller.ts';
import type { EventRecorder } from '../runtime/events/recorder.ts';
import { keyOf, type Informer } from '../runtime/cache/informer.ts';
import { ApiError, isForbidden, isNotFound } from '../runtime/client/client.ts';
import { deniedVerbs } from '../runtime/client/restmapper.ts';
import { podOs } from '../policy/pods.ts';
import { errorText, type Logger } from '../runtime/observability/log.ts';
import { archMetrics } from './metrics.ts';
import type { Manager } from '../runtime/manager/manager.ts';
import { Resources, type KubeObject } from '../runtime/api/meta.ts';
import type { WebhookSpec } from '../runtime/webhook/registration.ts';
import { Flights, TtlCache } from '../registry/cache.ts';
import { InspectionError, type ImageInspector, type Inspection, type PullSecret } from '../registry/types.ts';
import {
  gated,
  imagesText,
  intersection,
  nextTry,
  nodeArchitectures,
  nodeArchTaint,
  nodesTainted,
  refusedByRegistry,
  parsePolicies,
  placePatch,
  podImages,
  pullSecretRefs,
  relabelPatch,
  tooManyImages,
  releasePatch,
  report,
  unlistedRegistry,
  unplacedRelease,
  standingOf,
  UNLABELLED_UNBOUND,
  webhookServiceNamespaces,
  type ArchPod,
  type ParseCache,
  type Placement,
  placedAtAdmission,
  type Policy,
  type Retries,
  type Standing,
} from './decide.ts';
import {
  archAdmission,
  INSPECT_MISS_MS,
  INSPECT_WAIT_MS,
  type ArchAdmissionState,
  type InspectHint,
} from './webhook.ts';
import {
  ARCH_FINALIZER,
  ARCH_KEYS,
  ArchPlacement,
  FIELD_MANAGER,
  POLICY_ANNOTATION,
  STATE_LABEL,
  type ArchPlacementStatus,
} from './types.ts';

type PolicyObject = KubeObject & { spec?: unknown; status?: ArchPlacementStatus };
type Count = 'gated' | 'placed' | 'failed';
/** The regate controller's key of its sweep; pod keys are `namespace/name`. */
const SWEEP = 'sweep';
/** How long a pull secret read is used without reading it again. */
const PULL_SECRET_TTL_MS = 10_000;
/** How long one pod's inspections may take, by default, before they count as a transient failure. */
const INSPECT_TIMEOUT_MS = 30_000;
/** How long the answer to whether Secrets may be read in a namespace is kept. */
const SECRET_ACCESS_TTL_MS = 60_000;
/** What reading a pod's images gave, and the pull secrets it names that could not be used. */
interface Read {
  results: PromiseSettledResult<Inspection>[];
  /** `namespace/name` of the pod's own pull secrets that were missing or unreadable. */
  missing: string[];
}
/** A parked pod: the images (and pull policies) being read, then what reading them gave. */
interface Parked {
  images: string;
  read?: Read;
}

export interface ArchControllerOptions {
  inspector: ImageInspector;
  berthNamespace: string;
  /** Pods reconciled at once: each waits on its patch (not on registries: see inspections()). */
  workers?: number;
  /** `namespace/name` of a pull secret tried for every pod after its own. */
  pullSecret?: string;
  /** How long one pod's inspections may take before they count as a transient failure (INSPECT_TIMEOUT_MS). */
  inspectTimeoutMs?: number;
  /** How long a new image's pods wait at admission for its read (INSPECT_WAIT_MS); 0 never. */
  admissionWaitMs?: number;
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

export class ArchController {
  readonly pods: Informer<ArchPod>;
  readonly nodes: Informer<SlimNode>;
  readonly namespaces: Informer<KubeObject>;
  readonly webhookConfigs: Informer<KubeObject>[];
  private readonly webhookNamespaces: (() => Set<string>)[];
  readonly policyObjects: Informer<PolicyObject>;
  readonly podController: Controller;
  /** Finds the gated pods that lost their state label, and labels them again (see the constructor). */
  readonly regateController: Controller;
  readonly nodeController: Controller;
  readonly status: PolicyStatusWriter<PolicyObject, Standing, Count>;
  readonly manager: Manager;
  readonly events: EventRecorder;
  readonly log: Logger;
  private readonly writer: ApplyNodeWriter;
  private readonly opts: ArchControllerOptions;
  readonly parsed: () => { policies: Policy[]; errors: Map<string, string> };
  /** Transient failures in a row, per pod, until it is placed or given up on. */
  private readonly retries = new Map<string, Retries>();
  /** Images whose read for admission failed, until when the webhook is told so (failedForAdmission). */
  private readonly admissionFailures = new Map<string, number>();
  /** Sends the webhook its state again; set once the webhook is registered. */
  private admissionChanged: () => void = () => {};
  /** Pull secrets read lately, by `namespace/name`. */
  private readonly secrets = new TtlCache<PullSecret>(1024);
  /** Whether Berth may read Secrets in a namespace, as the apiserver said lately, by namespace. */
  private readonly secretAccess = new TtlCache<{ allowed: boolean }>(1024);
  private readonly secretFlights = new Flights<PullSecret | 'forbidden' | undefined>();
  /** Gated pods whose inspections run in the background, then their results until reconciled. */
  private readonly parked = new Map<string, Parked>();
  /** Pods placed at admission whose event this process wrote (they had no uid to name then). */
  private readonly announced = new Set<string>();

  constructor(kit: PolicyKit, opts: ArchControllerOptions) {
    const manager = kit.manager;
    this.manager = manager;
    this.opts = opts;
    this.log = manager.log.child({ capability: 'arch' });
    this.events = manager.recorder('arch');
    // Only the pods Berth gated: the webhook labels them, so this cache never holds the others.
    this.pods = manager.informer<ArchPod>(Resources.pods, {
      labelSelector: STATE_LABEL,
      transform: { name: 'arch-pod', fn: archPod },
    });
    this.pods.addIndexer('policy', (p) => {
      const name = p.metadata?.annotations?.[POLICY_ANNOTATION];
      return name ? [name] : [];
    });
    this.nodes = nodeInformer(manager);
    this.namespaces = manager.informer(Resources.namespaces, { transform: slimMeta });
    const services = { name: 'webhook-services', fn: webhookServices };
    this.webhookConfigs = [
      manager.informer(Resources.mutatingWebhookConfigurations, { transform: services }),
      manager.informer(Resources.validatingWebhookConfigurations, { transform: services }),
    ];
    this.webhookNamespaces = this.webhookConfigs.map((i) =>
      i.derive((objs) => new Set(objs.flatMap((o) => (o['namespaces'] as string[]) ?? []))),
    );
    this.policyObjects = manager.informer<PolicyObject>(ArchPlacement.ref);
    const cache: ParseCache = new Map();
    this.parsed = this.policyObjects.derive((objs) => parsePolicies(objs, cache));
    kit.keys.declare('arch', ARCH_KEYS, (signal) => this.policyObjects.waitForSync(signal));
    this.writer = kit.applyWriter(FIELD_MANAGER, this.nodes);

    const policyChanged = changed<PolicyObject>(generationChanged, deletionChanged);
    this.podController = new Controller({
      name: 'arch-pod',
      workers: opts.workers ?? 32,
      logger: this.log,
      reconciler: { reconcile: (key) => this.reconcilePod(key) },
    })
      .watch(this.pods, keyOf, {
        update: changed(
          labelsChanged,
          annotationsChanged,
          valueChanged((p: ArchPod) => gated(p)),
        ),
      })
      // A policy deleted, or changed, reaches the pods it holds.
      .watch(this.policyObjects, (o) => this.pods.byIndex('policy', o.metadata!.name!).map(keyOf), {
        update: policyChanged,
      });
    manager.add(this.podController);

    // A gated pod whose state label someone takes off leaves the informer above, which selects the
    // label: nothing would take its gate off. Watching every pod instead would cache the whole
    // cluster's, and the apiserver selects on no scheduling gate; so Berth looks only where such a
    // pod can be. Each gated pod the informer loses is read again (the watch says DELETED for a
    // pod deleted and for one unlabelled alike): one GET per gated pod gone, where a list per loss
    // would read every pending pod each time. And a leader, once it starts, lists the unbound pods
    // without the label, for the labels taken off while no Berth watched (no event tells of
    // those). A pod that still carries the gate gets its label back, and the pod controller, seeing
    // it again, places or releases it.
    this.regateController = new Controller({
      name: 'arch-regate',
      workers: 4,
      logger: this.log,
      reconciler: { reconcile: (key, signal) => (key === SWEEP ? this.sweep(signal) : this.regate(key)) },
      // Only the leader's losses: a follower's queue would grow for as long as it follows, and the
      // sweep covers what happened before it leads.
    }).watch(this.pods, keyOf, {
      add: () => false,
      update: () => false,
      delete: (p) => this.manager.isLeader() && gated(p),
    });
    // Once per leadership: a replica that loses the lease exits.
    this.regateController.queue.add(SWEEP);
    manager.add(this.regateController);

    // Taints mode: each node carries its architecture's taint while a Taints policy lives.
    this.nodeController = new Controller({
      name: 'arch-node',
      workers: 4,
      logger: this.log,
      reconciler: { reconcile: (name) => this.reconcileNode(name) },
    })
      .watch(this.nodes, (n) => n.metadata!.name!, { update: changed(labelsChanged, annotationsChanged) })
      .watch(this.policyObjects, () => this.nodes.keys(), { update: policyChanged });
    manager.add(this.nodeController);

    this.status = new PolicyStatusWriter(
      { manager, nodeController: this.podController, nodes: this.pods, events: this.events, log: this.log },
      this.policyObjects,
      {
        name: 'arch-status',
        fieldManager: FIELD_MANAGER,
        objectChanged: policyChanged,
        report: (obj, standings) => this.report(obj, standings),
        warnings: [
          { type: 'Invalid', status: 'True' },
          { type: 'ArchitecturesSchedulable', status: 'False' },
          { type: 'InspectionsFailing', status: 'True' },
        ],
        finalizer: { name: ARCH_FINALIZER, cleanup: (obj) => this.released(obj.metadata!.name!) },
      },
    );
    // Nodes coming and going change which placed pods have a node of their architectures.
    this.status.controller.watch(this.nodes, () => this.policyObjects.keys(), {
      update: changed(labelsChanged),
    });
  }

  /** The live policies, highest priority first. */
  policies(): Policy[] {
    return this.parsed().policies;
  }

  private admissionState(): ArchAdmissionState {
    return {
      policies: this.policies(),
      berthNamespace: this.opts.berthNamespace,
      namespaceLabels: namespaceLabelsByName(this.namespaces),
      webhookNamespaces: new Set(this.webhookNamespaces.flatMap((namespaces) => [...namespaces()])),
      images: this.opts.inspector.known(),
      ...(this.opts.pullSecret ? { pullSecret: this.opts.pullSecret } : {}),
      failedImages: this.failedForAdmission(),
      inspectWaitMs: this.opts.admissionWaitMs ?? INSPECT_WAIT_MS,
    };
  }

  webhook(): WebhookSpec {
    return {
      name: 'pods.arch.berth.dev',
      path: '/arch/mutate-pod',
      kind: 'mutating',
      // In the webhook thread, from what this controller knows, sent again whenever it changes.
      handler: archAdmission.fed(
        () => this.admissionState(),
        // Only what admission reads: a policy's status changes with every pod it places.
        (changed) => {
          this.policyObjects.addEventHandler(onChanges(or(generationChanged, deletionChanged), changed));
          this.namespaces.addEventHandler(onChanges(labelsChanged, changed));
          const services = valueChanged((o: KubeObject) => String(o['namespaces']));
          for (const configs of this.webhookConfigs) configs.addEventHandler(onChanges(services, changed));
          this.opts.inspector.onLearn(changed);
          this.admissionChanged = changed;
        },
        (hint) => this.inspectForAdmission(hint),
      ),
      rules: [{ operations: ['CREATE'], apiGroups: [''], apiVersions: ['v1'], resources: ['pods'] }],
      // Fail open: Berth down leaves pods ungated, never uncreated.
      failurePolicy: 'Ignore',
      // Asked again after a later webhook changes the pod (a sidecar injected, an image rewritten):
      // a pod placed at admission is placed on the images it is created with.
      reinvocationPolicy: 'IfNeeded',
      // A pod with nodeName can carry no gate: the apiserver need not ask.
      matchConditions: [{ name: 'no-node-name', expression: '!has(object.spec.nodeName)' }],
      timeoutSeconds: 2,
    };
  }

  private async reconcilePod(key: string): Promise<Result | void> {
    const pod = this.pods.get(key);
    const s = pod && standingOf(pod);
    this.status.set(key, s ? new Map([[s.policy, s.standing]]) : pod ? new Map() : undefined);
    if (!pod || !gated(pod) || pod.metadata?.deletionTimestamp) {
      this.retries.delete(key);
      this.parked.delete(key);
      if (!pod) this.announced.delete(key);
      else this.announceAdmission(key, pod);
      return;
    }
    const name = pod.metadata!.annotations?.[POLICY_ANNOTATION];
    const policies = this.policies();
    const policy = policies.find((p) => p.name === name);
    // Wherever nodes may carry the arch taint, a pod tolerates it: any value released unplaced (its own
    // policy's taint, which the node controller takes off meanwhile, or another live Taints policy's),
    // its architectures' placed.
    const archTainted = nodesTainted(policies);
    if (!policy || policy.deleting) {
      const why = unplacedRelease(name, policy);
      const patch = releasePatch(pod, why, { mode: policy?.spec.mode ?? 'NodeAffinity', archTainted });
      return this.write(pod, patch, 'released', 'Normal', 'Released', why);
    }
    // An image of a registry the policy does not list is not read at all.
    const unlisted = unlistedRegistry(pod, policy);
    const read = unlisted ? { results: [], missing: [] } : await this.inspections(key, pod);
    // Parked: the inspections go on without a worker, and requeue the pod when they settle.
    if (!read) return;
    const { results, missing } = read;
    const rejected = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    const err =
      unlisted ??
      (rejected &&
        (rejected.reason instanceof InspectionError
          ? rejected.reason
          : new InspectionError('Unreachable', '', errorText(rejected.reason), true)));
    if (err) {
      const refused = refusedByRegistry(err);
      // Refused, or hidden as not found (what some registries answer for a private repository):
      // the next try reads the pod's secrets again, in case they were rotated.
      if (refused) for (const ref of this.pullSecretRefs(pod)) this.secrets.delete(ref);
      const retry = nextTry(err, this.retries.get(key) ?? { attempts: 0 }, policy.spec.onFailure.retries, {
        now: Date.now(),
        secretsMissing: missing.length > 0,
      });
      if (retry) {
        this.retries.set(key, retry.retries);
        // Held by Berth's own bound on registry reads, not by the registry: the pod says so.
        if (err.reason === 'Bounded')
          this.events.event(pod, 'Warning', 'InspectionBounded', 'Inspect', `${err.message}; retrying`);
        this.log.info(
          { pod: key, reason: err.reason, attempt: retry.retries.attempts, err: err.message },
          `inspection failed; retrying in ${Math.ceil(retry.afterMs / 1000)} s`,
        );
        return { requeueAfterMs: retry.afterMs };
      }
      const fallback =
        policy.spec.onFailure.action === 'Fallback' ? policy.spec.onFailure.fallbackArchitecture : undefined;
      const placement: Placement = { kind: 'Failed', reason: err.reason, message: err.message, fallback };
      const unused =
        refused && missing.length ? ` (pull secrets missing or unreadable: ${missing.join(', ')})` : '';
      const note =
        `could not read ${err.image || 'an image'}: ${err.reason}: ${err.message}${unused}; ` +
        (fallback ? `placed on the fallback architecture ${fallback}` : 'released unplaced (fail open)');
      return this.write(
        pod,
        placePatch(pod, placement, { ...policy.spec, archTainted }),
        'failed',
        'Warning',
        'InspectionFailed',
        note,
      );
    }
    const inspections = results.map((r) => (r as PromiseFulfilledResult<Inspection>).value);
    const architectures = intersection(pod, inspections);
    const placement: Placement = { kind: 'Placed', architectures, inspections };
    const patch = placePatch(pod, placement, { ...policy.spec, archTainted });
    if (architectures.length === 0)
      return this.write(
        pod,
        patch,
        'placed',
        'Warning',
        'NoCommonArchitecture',
        `no architecture is supported by every image: ${imagesText(inspections, podOs(pod))}; the pod cannot be scheduled`,
      );
    return this.write(
      pod,
      patch,
      'placed',
      'Normal',
      'Placed',
      `${policy.spec.mode === 'Taints' ? 'tolerates' : 'placed on'} ${architectures.join(', ')}: ${imagesText(inspections, podOs(pod))}`,
    );
  }

  /** A gated pod the informer lost: read again, it gets its label back if it still carries the gate. */
  private async regate(key: string): Promise<void> {
    // Back in the cache (labelled again meanwhile): the pod controller has it.
    if (this.pods.get(key)) return;
    const [namespace, name] = key.split('/') as [string, string];
    let pod: ArchPod;
    try {
      pod = await this.manager.client().get<ArchPod>(Resources.pods, name, namespace);
    } catch (e) {
      if (isNotFound(e)) return;
      throw e;
    }
    await this.relabel(pod);
  }

  /**
   * The unbound pods without the state label, a page at a time (none kept): the gated ones get it
   * back. Ends early when Berth stops, so that the Lease is released without waiting for it.
   */
  private async sweep(signal: AbortSignal): Promise<void> {
    let cont: string | undefined;
    do {
      // The first page from the apiserver's watch cache (resourceVersion 0), not from etcd: the
      // selector is sparse, and etcd would read every pod for it. Later pages follow the continue token.
      const page = await this.manager.client().list<ArchPod>(Resources.pods, {
        query: {
          ...UNLABELLED_UNBOUND,
          limit: 500,
          ...(cont ? { continue: cont } : { resourceVersion: '0' }),
        },
      });
      for (const pod of page.items) {
        if (signal.aborted) return;
        await this.relabel(pod);
      }
      cont = page.metadata.continue || undefined;
    } while (cont && !signal.aborted);
  }

  /** A JSON patch of the pod, guarded by the tests it carries, under Berth's field manager. */
  private patchPod(pod: ArchPod, patch: unknown): Promise<KubeObject> {
    return this.manager.client().patch(Resources.pods, pod.metadata!.name!, patch, {
      namespace: pod.metadata!.namespace!,
      type: 'json',
      fieldManager: FIELD_MANAGER,
    });
  }

  private async relabel(pod: ArchPod): Promise<void> {
    const patch = relabelPatch(pod);
    if (!patch.length) return;
    try {
      await this.patchPod(pod, patch);
    } catch (e) {
      // Deleted, or its gate taken off meanwhile (the patch tests it): nothing holds it any more.
      if (isNotFound(e) || (e instanceof ApiError && e.status === 422)) return;
      throw e;
    }
    this.log.warn(
      { pod: keyOf(pod) },
      `gated pod without its ${STATE_LABEL} label: labelled again, so that it is placed`,
    );
  }

  /**
   * The results of the pod's inspections once they are all in, or undefined while they run. Images
   * known without a request are answered at once; otherwise the inspections start in the background
   * and the worker goes on to other pods: a worker waiting on a registry would hold up every pod
   * behind it in the queue, including those whose images are already known (bench:arch measured
   * the queue as most of a gated pod's wait).
   */
  private async inspections(key: string, pod: ArchPod): Promise<Read | undefined> {
    const images = podImages(pod);
    // Only what was read anonymously or with one of the pod's own secrets answers for it.
    const readers = this.pullSecretRefs(pod);
    const known = images.map((i) =>
      this.opts.inspector.cached(i.image, { revalidate: i.revalidate, secrets: readers }),
    );
    if (known.every((k) => k !== undefined)) {
      this.parked.delete(key);
      return { results: known.map((value) => ({ status: 'fulfilled' as const, value })), missing: [] };
    }
    // Results for other images (the pod's images changed meanwhile) are dropped and read again.
    const wanted = images.map((i) => `${i.image}|${i.revalidate}`).join(' ');
    const parked = this.parked.get(key);
    if (parked?.images === wanted) {
      if (parked.read) this.parked.delete(key);
      return parked.read;
    }
    const bound = tooManyImages(images);
    if (bound) return { results: [{ status: 'rejected', reason: bound }], missing: [] };
    const { secrets, missing } = await this.pullSecrets(pod);
    const entry: Parked = { images: wanted };
    this.parked.set(key, entry);
    const signal = AbortSignal.timeout(this.opts.inspectTimeoutMs ?? INSPECT_TIMEOUT_MS);
    void Promise.allSettled(
      images.map((i) =>
        this.opts.inspector.inspect(i.image, { pullSecrets: secrets, revalidate: i.revalidate, signal }),
      ),
    ).then((results) => {
      if (this.parked.get(key) !== entry) return;
      entry.read = { results, missing };
      this.podController.queue.add(key);
    });
    return undefined;
  }

  /**
   * Reads the images the webhook asks about (a pod at admission whose images are not known), so
   * that their platforms reach its state while the review waits. What fails is reported by the
   * controller, when it reconciles the pod the webhook gated meanwhile.
   */
  private inspectForAdmission(hint: InspectHint): void {
    const pod: ArchPod = {
      metadata: { namespace: hint.namespace },
      spec: { containers: [], imagePullSecrets: hint.imagePullSecrets.map((name) => ({ name })) },
    };
    const signal = AbortSignal.timeout(this.opts.inspectTimeoutMs ?? INSPECT_TIMEOUT_MS);
    // Failed: in the state for INSPECT_MISS_MS, so that no review waits on it meanwhile.
    const failed = (images: string[], err: unknown) => {
      this.log.debug({ err, images }, 'inspection for admission failed');
      for (const image of images) this.admissionFailures.set(image, Date.now() + INSPECT_MISS_MS);
      this.admissionChanged();
    };
    const bound = tooManyImages(hint.images);
    if (bound)
      return failed(
        hint.images.map((i) => i.image),
        bound,
      );
    void this.pullSecrets(pod, { warn: false }).then(
      ({ secrets }) =>
        Promise.all(
          hint.images.map(({ image, revalidate }) =>
            this.opts.inspector
              .inspect(image, { pullSecrets: secrets, revalidate, signal })
              .catch((err: unknown) => failed([image], err)),
          ),
        ),
      (err: unknown) =>
        failed(
          hint.images.map((i) => i.image),
          err,
        ),
    );
  }

  /** The images whose read for admission failed within INSPECT_MISS_MS; the older ones forgotten. */
  private failedForAdmission(): Set<string> {
    const now = Date.now();
    for (const [image, until] of this.admissionFailures)
      if (until <= now) this.admissionFailures.delete(image);
    return new Set(this.admissionFailures.keys());
  }

  /** Sends the pod's one patch; the event, log line and metrics follow a write that went through. */
  private async write(
    pod: ArchPod,
    patch: unknown,
    outcome: 'placed' | 'failed' | 'released',
    type: 'Normal' | 'Warning',
    reason: string,
    note: string,
  ): Promise<Result | void> {
    const key = keyOf(pod);
    try {
      await this.patchPod(pod, patch);
    } catch (e) {
      if (isNotFound(e)) return;
      // A test failed: an image, the gates or the affinity changed since the cache saw the pod.
      if (e instanceof ApiError && (e.status === 409 || e.status === 422)) return { requeue: true };
      throw e;
    }
    this.retries.delete(key);
    this.events.event(pod, type, reason, 'Place', note);
    (type === 'Warning' ? this.log.warn : this.log.info).call(this.log, { pod: key, reason }, note);
    archMetrics.pods.inc({ outcome });
    const created = Date.parse(pod.metadata?.creationTimestamp ?? '');
    if (!Number.isNaN(created))
      archMetrics.ungate.observe({ outcome }, Math.max(0, (Date.now() - created) / 1000));
  }

  /**
   * The Placed event and metrics of a pod the webhook placed at admission, once it exists. Only for
   * a pod created in the last minute: a restarted Berth, listing every pod again, does not repeat
   * the events of those it placed long ago.
   */
  private announceAdmission(key: string, pod: ArchPod): void {
    const result = placedAtAdmission(pod);
    if (!result || this.announced.has(key)) return;
    this.announced.add(key);
    const created = Date.parse(pod.metadata?.creationTimestamp ?? '');
    if (Number.isNaN(created) || Date.now() - created > 60_000) return;
    const note = `placed on ${result.architectures.join(', ')} at admission (every image's platforms known by then)`;
    this.events.event(pod, 'Normal', 'Placed', 'Place', note);
    this.log.info({ pod: key, reason: 'Placed' }, note);
    archMetrics.pods.inc({ outcome: 'placed' });
    archMetrics.ungate.observe({ outcome: 'placed' }, 0);
  }

  /**
   * The pod's own pull secrets, then the cluster-wide one; a missing secret is skipped, as the
   * kubelet does, and so is one Berth may not read, with a Warning naming the opt-in (unless `warn`
   * is false: a pod at admission has no uid to carry it). `missing` names the pod's own that were
   * skipped.
   */
  private async pullSecrets(
    pod: ArchPod,
    { warn = true } = {},
  ): Promise<{ secrets: PullSecret[]; missing: string[] }> {
    const out: PullSecret[] = [];
    const missing: string[] = [];
    const own = new Set(this.podPullSecretRefs(pod));
    for (const ref of this.pullSecretRefs(pod)) {
      const secret = await this.pullSecret(ref);
      if (!secret && own.has(ref)) missing.push(ref);
      if (secret === 'forbidden') {
        if (!warn) continue;
        const ns = ref.slice(0, ref.indexOf('/'));
        const note =
          `Berth may not read the pull secret ${ref}, so this pod's images are read without it: ` +
          `opt the namespace in (berth manifests --pull-secret-namespace ${ns}, Helm arch.pullSecretNamespaces)`;
        this.events.event(pod, 'Warning', 'PullSecretForbidden', 'Inspect', note);
        this.log.warn({ pod: keyOf(pod), secret: ref }, note);
      } else if (secret) out.push(secret);
      else this.log.debug({ pod: keyOf(pod), secret: ref }, 'pull secret not found');
    }
    return { secrets: out, missing };
  }

  /** `namespace/name` of each secret the pod names. */
  private podPullSecretRefs(pod: ArchPod): string[] {
    return pullSecretRefs(pod, pod.metadata!.namespace!);
  }

  /** `namespace/name` of each secret the pod's images may be read with: its own, then the cluster-wide one. */
  private pullSecretRefs(pod: ArchPod): string[] {
    return pullSecretRefs(pod, pod.metadata!.namespace!, this.opts.pullSecret);
  }

  /**
   * A pull secret by `namespace/name`, kept for a few seconds: the pods of one workload name the
   * same secrets, and one GET each would double the API requests of placing them. Not found is not
   * kept (a secret created next is used at once); a pod refused by a registry drops its secrets
   * (a rotated password is read again).
   */
  private pullSecret(ref: string): Promise<PullSecret | 'forbidden' | undefined> {
    const known = this.secrets.get(ref);
    if (known) return Promise.resolve(known);
    return this.secretFlights.run(ref, undefined, async () => {
      const [namespace, name] = ref.split('/') as [string, string];
      if (!(await this.maySecret(namespace, name))) return 'forbidden';
      let s;
      try {
        s = await this.manager.client().get(Resources.secrets, name, namespace);
      } catch (e) {
        if (isNotFound(e)) return undefined;
        if (isForbidden(e)) return 'forbidden';
        throw e;
      }
      const secret = {
        name: ref,
        type: String(s['type'] ?? ''),
        data: (s['data'] ?? {}) as Record<string, string>,
      };
      this.secrets.set(ref, secret, PULL_SECRET_TTL_MS);
      return secret;
    });
  }

  /**
   * Whether the install lets Berth read the Secret `namespace/name` (pull secrets are opted in per
   * namespace, --arch-pull-secret by its name): asked, not tried, so a namespace left out costs no
   * denied request in the audit log, and kept a minute, so an opt-in is seen within one.
   */
  private async maySecret(namespace: string, name: string): Promise<boolean> {
    const ref = `${namespace}/${name}`;
    const known = this.secretAccess.get(ref);
    if (known) return known.allowed;
    const denied = await deniedVerbs(this.manager.client(), Resources.secrets, ['get'], namespace, {}, name);
    this.secretAccess.set(ref, { allowed: denied.length === 0 }, SECRET_ACCESS_TTL_MS);
    return denied.length === 0;
  }

  /** Taints mode: the node's architecture taint while some Taints policy lives, once every gated pod was seen. */
  private async reconcileNode(name: string): Promise<Result | void> {
    const node = this.nodes.get(name);
    if (!node) {
      this.writer.forget(name);
      return;
    }
    const taints = nodesTainted(this.policies());
    // Tolerations before taints: until every gated pod has been through once, a taint could strand one.
    if (taints && !this.status.firstPassDone()) return { requeueAfterMs: 250 };
    const r = await this.writer.sync(node, {
      labels: {},
      annotations: {},
      taints: taints ? nodeArchTaint(node) : [],
    });
    if (r.retryAfterMs !== undefined) return { requeueAfterMs: r.retryAfterMs };
  }

  /** A deleted policy is released once no pod it gated still carries the gate. */
  private async released(name: string): Promise<Result | 'released'> {
    const held = this.pods.byIndex('policy', name).filter(gated);
    if (held.length) {
      for (const p of held) this.podController.queue.add(keyOf(p));
      return { requeueAfterMs: 500 };
    }
    this.log.info({ policy: name }, 'ArchPlacement deleted: none of its pods is gated');
    return 'released';
  }

  private report(obj: PolicyObject, standings: Standing[]): StatusReport<Count> {
    const name = obj.metadata!.name!;
    const error = this.parsed().errors.get(name);
    const r = report(standings, nodeArchitectures(this.nodes.list()));
    const unschedulable = [...r.unschedulable].map(([archs, n]) => `${n} pod(s) run only on ${archs}`);
    const failures = [...r.failures].map(([reason, n]) => `${n} pod(s): ${reason}`);
    const noNodes = unschedulable.length
      ? `no node has the architectures of ${unschedulable.join('; ')} (berth explain pod)`
      : '';
    return {
      counts: { gated: r.gated, placed: r.placed, failed: r.failed },
      conditions: [
        { type: 'Invalid', status: !!error, reason: error ? 'InvalidSpec' : 'Valid', message: error ?? '' },
        {
          type: 'ArchitecturesSchedulable',
          status: !noNodes,
          reason: noNodes ? 'NoNodeOfArchitecture' : 'Schedulable',
          message: noNodes,
        },
        {
          type: 'InspectionsFailing',
          status: failures.length > 0,
          reason: failures.length ? 'InspectionFailed' : 'Inspecting',
          message: failures.length ? `images could not be read: ${failures.join('; ')}` : '',
        },
        {
          type: 'Ready',
          status: !error && !noNodes,
          reason: error ? 'Invalid' : noNodes ? 'NoNodeOfArchitecture' : 'Placing',
          message: error ?? noNodes,
        },
      ],
    };
  }
}
