// arch-pod: takes each pod the webhook gated, reads every image's platforms from its registry
// (the ImageInspector), and in one patch places the pod on the architectures all its images support
// and takes the gate off. What each pod carries is its policy's standing, for arch-status.
import { podOs } from '../../policy/pods.ts';
import { annotationsChanged, changed, labelsChanged, valueChanged } from '../../policy/predicates.ts';
import { Flights, TtlCache } from '../../registry/cache.ts';
import { InspectionError, type Inspection, type PullSecret } from '../../registry/types.ts';
import { Resources, type KubeObject } from '../../runtime/api/meta.ts';
import { keyOf } from '../../runtime/cache/informer.ts';
import { ApiError, isForbidden, isNotFound } from '../../runtime/client/client.ts';
import { deniedVerbs } from '../../runtime/client/restmapper.ts';
import {
  Controller,
  type FirstPass,
  type Reconciler,
  type Result,
} from '../../runtime/controller/controller.ts';
import type { Trigger } from '../../runtime/controller/trigger.ts';
import { errorText } from '../../runtime/observability/log.ts';
import {
  gated,
  nodesTainted,
  placedAtAdmission,
  placePatch,
  releasePatch,
  unplacedRelease,
} from '../decide/patches.ts';
import {
  imagesText,
  intersection,
  podImages,
  pullSecretRefs,
  tooManyImages,
  unlistedRegistry,
  type Placement,
} from '../decide/images.ts';
import { nextTry, refusedByRegistry, type Retries } from '../decide/retries.ts';
import { standingOf } from '../decide/status.ts';
import { type ArchPod } from '../decide/pods.ts';
import type { Policy } from '../decide/policies.ts';
import type { Arch } from '../setup.ts';
import { archMetrics } from '../metrics.ts';
import { FIELD_MANAGER, POLICY_ANNOTATION } from '../types.ts';
import { INSPECT_MISS_MS } from '../decide/admission.ts';
import type { InspectHint } from '../admit.ts';
import { policyChanged, type StatusWriter } from './status.ts';

/** How long a pull secret read is used without reading it again. */
const PULL_SECRET_TTL_MS = 10_000;
/** How long one pod's inspections may take, by default, before they count as a transient failure. */
export const INSPECT_TIMEOUT_MS = 30_000;
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

/** The first failed inspection of a read, as an InspectionError (an unexpected one is Unreachable). */
function firstFailure(results: PromiseSettledResult<Inspection>[]): InspectionError | undefined {
  const rejected = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  return (
    rejected &&
    (rejected.reason instanceof InspectionError
      ? rejected.reason
      : new InspectionError('Unreachable', '', errorText(rejected.reason), true))
  );
}

export class PodReconciler implements Reconciler {
  private readonly a: Arch;
  private readonly status: StatusWriter;
  /** arch-pod's own trigger: a pod whose inspections settle comes back through it. */
  private readonly trigger: Trigger;
  /** Transient failures in a row, per pod, until it is placed or given up on. */
  private readonly retries = new Map<string, Retries>();
  /** Images whose read for admission failed, until when the webhook is told so (failedForAdmission). */
  private readonly admissionFailures = new Map<string, number>();
  /** Those that send the webhook its state again (onAdmissionChange). */
  private readonly admissionListeners: (() => void)[] = [];
  /** Pull secrets read lately, by `namespace/name`. */
  private readonly secrets = new TtlCache<PullSecret>(1024);
  /** Whether Berth may read Secrets in a namespace, as the apiserver said lately, by namespace. */
  private readonly secretAccess = new TtlCache<{ allowed: boolean }>(1024);
  private readonly secretFlights = new Flights<PullSecret | 'forbidden' | undefined>();
  /** Gated pods whose inspections run in the background, then their results until reconciled. */
  private readonly parked = new Map<string, Parked>();
  /** Pods placed at admission whose event this process wrote (they had no uid to name then). */
  private readonly announced = new Set<string>();

  constructor(a: Arch, status: StatusWriter, trigger: Trigger) {
    this.a = a;
    this.status = status;
    this.trigger = trigger;
  }

  async reconcile(key: string): Promise<Result | void> {
    const pod = this.a.pods.get(key);
    const s = pod && standingOf(pod);
    this.status.set(key, s ? new Map([[s.policy, s.standing]]) : pod ? new Map() : undefined);
    if (!pod || !gated(pod) || pod.metadata?.deletionTimestamp) return this.forget(key, pod);
    const name = pod.metadata!.annotations?.[POLICY_ANNOTATION];
    const policies = this.a.policies();
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
    const err = unlisted ?? firstFailure(read.results);
    if (err) return this.afterFailure(key, pod, policy, err, read.missing, archTainted);
    return this.place(pod, policy, read.results, archTainted);
  }

  /** A pod no longer gated (or gone): nothing more to read for it; one placed at admission is said. */
  private forget(key: string, pod: ArchPod | undefined): void {
    this.retries.delete(key);
    this.parked.delete(key);
    if (!pod) this.announced.delete(key);
    else this.announceAdmission(key, pod);
  }

  /** After a failed read: try again later, or give up as the policy's onFailure says. */
  private async afterFailure(
    key: string,
    pod: ArchPod,
    policy: Policy,
    err: InspectionError,
    missing: string[],
    archTainted: boolean,
  ): Promise<Result | void> {
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
        this.a.events.event(pod, 'Warning', 'InspectionBounded', 'Inspect', `${err.message}; retrying`);
      this.a.log.info(
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

  /** Every image read: the pod goes to the architectures all of them support (if any). */
  private place(
    pod: ArchPod,
    policy: Policy,
    results: PromiseSettledResult<Inspection>[],
    archTainted: boolean,
  ): Promise<Result | void> {
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
      this.a.opts.inspector.cached(i.image, { revalidate: i.revalidate, secrets: readers }),
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
    const signal = AbortSignal.timeout(this.a.opts.inspectTimeoutMs ?? INSPECT_TIMEOUT_MS);
    void Promise.allSettled(
      images.map((i) =>
        this.a.opts.inspector.inspect(i.image, {
          pullSecrets: secrets,
          revalidate: i.revalidate,
          // Registry requests in flight are shared fairly between namespaces (registry/fairness.ts).
          namespace: pod.metadata?.namespace ?? '',
          signal,
        }),
      ),
    ).then((results) => {
      if (this.parked.get(key) !== entry) return;
      entry.read = { results, missing };
      this.trigger.send(key);
    });
    return undefined;
  }

  /** Calls `listener` whenever what the webhook reads of this reconciler changes (an image failed for admission). */
  onAdmissionChange(listener: () => void): void {
    this.admissionListeners.push(listener);
  }

  /**
   * Reads the images the webhook asks about (a pod at admission whose images are not known), so
   * that their platforms reach its state while the review waits. What fails is reported by the
   * controller, when it reconciles the pod the webhook gated meanwhile.
   */
  inspectForAdmission(hint: InspectHint): void {
    const pod: ArchPod = {
      metadata: { namespace: hint.namespace },
      spec: { containers: [], imagePullSecrets: hint.imagePullSecrets.map((name) => ({ name })) },
    };
    const signal = AbortSignal.timeout(this.a.opts.inspectTimeoutMs ?? INSPECT_TIMEOUT_MS);
    // Failed: in the state for INSPECT_MISS_MS, so that no review waits on it meanwhile.
    const failed = (images: string[], err: unknown) => {
      this.a.log.debug({ err, images }, 'inspection for admission failed');
      for (const image of images) this.admissionFailures.set(image, Date.now() + INSPECT_MISS_MS);
      for (const listener of this.admissionListeners) listener();
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
            this.a.opts.inspector
              .inspect(image, { pullSecrets: secrets, revalidate, namespace: hint.namespace, signal })
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
  failedForAdmission(): Set<string> {
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
      await patchPod(this.a, pod, patch);
    } catch (e) {
      if (isNotFound(e)) return;
      // A test failed: an image, the gates or the affinity changed since the cache saw the pod.
      if (e instanceof ApiError && (e.status === 409 || e.status === 422)) return { requeue: true };
      throw e;
    }
    this.retries.delete(key);
    this.a.events.event(pod, type, reason, 'Place', note);
    (type === 'Warning' ? this.a.log.warn : this.a.log.info).call(this.a.log, { pod: key, reason }, note);
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
    this.a.events.event(pod, 'Normal', 'Placed', 'Place', note);
    this.a.log.info({ pod: key, reason: 'Placed' }, note);
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
        this.a.events.event(pod, 'Warning', 'PullSecretForbidden', 'Inspect', note);
        this.a.log.warn({ pod: keyOf(pod), secret: ref }, note);
      } else if (secret) out.push(secret);
      else this.a.log.debug({ pod: keyOf(pod), secret: ref }, 'pull secret not found');
    }
    return { secrets: out, missing };
  }

  /** `namespace/name` of each secret the pod names. */
  private podPullSecretRefs(pod: ArchPod): string[] {
    return pullSecretRefs(pod, pod.metadata!.namespace!);
  }

  /** `namespace/name` of each secret the pod's images may be read with: its own, then the cluster-wide one. */
  private pullSecretRefs(pod: ArchPod): string[] {
    return pullSecretRefs(pod, pod.metadata!.namespace!, this.a.opts.pullSecret);
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
        s = await this.a.manager.client().get(Resources.secrets, name, namespace);
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
    const denied = await deniedVerbs(
      this.a.manager.client(),
      Resources.secrets,
      ['get'],
      namespace,
      {},
      name,
    );
    this.secretAccess.set(ref, { allowed: denied.length === 0 }, SECRET_ACCESS_TTL_MS);
    return denied.length === 0;
  }
}

/** The arch-pod controller: a gated pod's changes, and its policy's, bring it back. */
export function setupPodReconciler(
  a: Arch,
  reconciler: PodReconciler,
  opts: { workers: number; firstPass: FirstPass; trigger: Trigger },
): Controller {
  const { trigger, ...options } = opts;
  const controller = new Controller({ name: 'arch-pod', logger: a.log, reconciler, ...options })
    .reconcileOn(trigger)
    .watch(a.pods, keyOf, {
      update: changed(
        labelsChanged,
        annotationsChanged,
        valueChanged((p: ArchPod) => gated(p)),
      ),
    })
    // A policy deleted, or changed, reaches the pods it holds.
    .watch(a.policyObjects, (o) => a.pods.byIndex('policy', o.metadata!.name!).map(keyOf), {
      update: policyChanged,
    });
  a.manager.add(controller);
  return controller;
}

/** A JSON patch of the pod, guarded by the tests it carries, under Berth's field manager. */
export function patchPod(a: Arch, pod: ArchPod, patch: unknown): Promise<KubeObject> {
  return a.manager.client().patch(Resources.pods, pod.metadata!.name!, patch, {
    namespace: pod.metadata!.namespace!,
    type: 'json',
    fieldManager: FIELD_MANAGER,
  });
}
