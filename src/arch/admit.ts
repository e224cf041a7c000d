// The Pod CREATE admission, as the webhook thread runs it (webhook.ts registers it): places the pods an ArchPlacement selects when the controller knows their
// images, and gates the others (the registry is the controller's: admission sends it no request). A
// pod with an image not known yet (or pulled Always: its tag not revalidated since the pod came)
// hints the controller to read it, and waits a moment (INSPECT_WAIT_MS) for the answer to reach its
// state: the first pods of a new image are then placed at admission too, where a gate would cost
// each of them a write and two watch deliveries. It always allows, and is registered with
// failurePolicy Ignore and a short timeout: an unavailable Berth never blocks a pod, it only leaves
// the pod unplaced. It is served from the webhook thread (runtime/webhook/thread.ts), where the
// pods' informer cannot hold its answers; the controller sends it an ArchAdmissionState whenever
// one of its parts changes. The thread has no API client, so a pod's namespace that the state does
// not hold yet is waited for (briefly, in the state the controller sends next), not read from the
// apiserver. What this module imports is what the thread loads: pure decisions only (no zod, no
// client).
import { rootLogger, type Logger } from '../runtime/observability/log.ts';
import type { AdmissionHandler, AdmissionRequest, AdmissionResult } from '../runtime/webhook/admission.ts';
import { threadHandler, whenStateHolds } from '../runtime/webhook/threaded.ts';
import { counter } from '../runtime/observability/metrics.ts';
import { cachedFrom, type KnownImages } from '../registry/known.ts';
import type { Inspection, ImageInspector } from '../registry/types.ts';
import { withNamespaceLabels } from '../policy/namespace.ts';
import { choosePolicy, namespaceDecides, type Policy } from './decide/policies.ts';
import { gateExemption, type ArchPod, type ExemptionContext } from './decide/pods.ts';
import {
  gated,
  gatePod,
  nodesTainted,
  placedAtAdmission,
  toPlaceAgain,
  type AdmissionPlacement,
} from './decide/patches.ts';
import { podImages, unlistedRegistry, pullSecretRefs, type PodImage } from './decide/images.ts';
import { imageWait, type ImageWait } from './decide/admission.ts';
import { INSPECT_WAIT_MS } from './types.ts';

export const webhookDecisions = counter(
  'berth_arch_admissions_total',
  'Pods the architecture webhook saw, by outcome (placed at admission, gated, exempt, unselected, error)',
  ['outcome'],
);

export const inspectWaits = counter(
  'berth_arch_admission_inspect_waits_total',
  'Pods the architecture webhook held for an image the controller was reading, by result (known, failed, timeout)',
  ['result'],
);

/** Reviews held at once: past it a pod is gated without a wait, so waits never fill the server's limit. */
export const MAX_WAITING = 100;
// Images remembered as asked at most; past it the memory starts again.
const MAX_ASKED = 10_000;

/** What the webhook asks the controller to read: a pod's images, with the pull secrets it names. */
export interface InspectHint {
  namespace: string;
  /** Each with whether its tag is to be revalidated (imagePullPolicy Always). */
  images: PodImage[];
  imagePullSecrets: string[];
}

export interface ArchWebhookDeps extends ExemptionContext {
  /** The live policies, highest priority first. */
  policies(): Policy[];
  /** A namespace's labels ({} for none), or undefined while the cache does not know it. */
  namespaceLabels(namespace: string): Record<string, string> | undefined;
  /** Platforms known without a request (admission sends none: it asks the controller, `inspect`). */
  cached: ImageInspector['cached'];
  /** `--arch-pull-secret` (`namespace/name`): what it read answers every pod. */
  pullSecret?: string;
  /** How long a review waits for the cache to learn a new namespace (NAMESPACE_WAIT_MS). */
  namespaceWaitMs?: number;
  /** Asks the controller to read images `cached` does not know; absent, the pod is gated at once. */
  inspect?: (hint: InspectHint) => void;
  /** Whether the controller's read of an image for admission failed lately (INSPECT_MISS_MS). */
  failed?: (image: string) => boolean;
  /** How long a new image's pods wait for `cached` to know it once asked (INSPECT_WAIT_MS); 0 never. */
  inspectWaitMs?: number;
  /** The state `cached` reads, when it is one (the webhook thread's): read again only once it is new. */
  state?: () => unknown;
  now?: () => number;
  logger?: Logger;
}

/**
 * A lookup of a tag pulled Always, answered at or after `since`; off the cache metrics, where it
 * would count a miss by design for each such pod.
 */
const revalidatedSince = (since: number) => ({ revalidate: true, revalidatedSince: since, counted: false });

export function podGateHandler(deps: ArchWebhookDeps): AdmissionHandler {
  const webhook = new PodGateWebhook(deps);
  return (req) => webhook.review(req);
}

/**
 * The webhook's reviews, over its own state: when each image not known was first asked of the
 * controller, and how many reviews wait for one.
 */
class PodGateWebhook {
  private readonly deps: ArchWebhookDeps;
  private readonly log: Logger;
  private readonly now: () => number;
  /** When each image not known was first asked of the controller: its deadline, then its miss. */
  private readonly asked = new Map<string, number>();
  private waiting = 0;

  constructor(deps: ArchWebhookDeps) {
    this.deps = deps;
    this.log = (deps.logger ?? rootLogger).child({ webhook: 'arch' });
    this.now = deps.now ?? Date.now;
  }

  review(req: AdmissionRequest): AdmissionResult | Promise<AdmissionResult> {
    const pod = req.object as ArchPod | undefined;
    if (req.operation !== 'CREATE' || req.kind.kind !== 'Pod' || req.subResource || !pod?.spec) {
      return { allowed: true };
    }
    // Gated at a first call (the apiserver asks again after a later webhook changes the pod): the
    // controller reads the pod as stored, every image.
    if (gated(pod)) return { allowed: true };
    const r: Review = {
      pod,
      // A pod made from a template has no namespace of its own at admission.
      namespace: pod.metadata?.namespace || req.namespace || '',
      arrived: this.now(),
      dryRun: req.dryRun === true,
      // Placed by Berth at a first call: its arch constraint is Berth's, which exempts nothing.
      first: placedAtAdmission(pod),
    };
    try {
      if (gateExemption(pod, r.namespace, this.deps, r.first !== undefined)) {
        webhookDecisions.inc({ outcome: 'exempt' });
        return { allowed: true };
      }
      // A namespace created a moment before its pod: its labels are on their way to the cache, and
      // deciding without them would let the pod through ungated.
      const answer = withNamespaceLabels(
        this.deps.namespaceLabels,
        r.namespace,
        () => namespaceDecides(this.deps.policies(), pod, r.namespace, this.deps.berthNamespace),
        (labels) => this.admit(r, labels),
        (waitedMs) =>
          this.log.warn(
            { namespace: r.namespace, waitedMs },
            "namespace not in Berth's cache: policies with a namespaceSelector pass the pod by (fail open)",
          ),
        this.deps.namespaceWaitMs,
      );
      // The answer may be a promise of one (a namespace waited for, then images): one promise.
      return answer instanceof Promise ? answer.then((a) => a).catch((err) => this.failOpen(r, err)) : answer;
    } catch (err) {
      return this.failOpen(r, err);
    }
  }

  /** A thrown error would be answered allowed=false; this webhook fails open instead. */
  private failOpen(r: Review, err: unknown): AdmissionResult {
    webhookDecisions.inc({ outcome: 'error' });
    this.log.error(
      { namespace: r.namespace, name: r.pod.metadata?.name || r.pod.metadata?.generateName, err },
      'pod admitted ungated',
    );
    return { allowed: true };
  }

  private admit(
    r: Review,
    namespaceLabels: Record<string, string> | undefined,
  ): AdmissionResult | Promise<AdmissionResult> {
    const policy = choosePolicy(
      this.deps.policies(),
      r.pod,
      r.namespace,
      namespaceLabels,
      this.deps.berthNamespace,
    );
    if (!policy) {
      webhookDecisions.inc({ outcome: 'unselected' });
      return { allowed: true };
    }
    // Placed at a first call, and its images the same at this one: it stays as placed.
    const from = r.first && toPlaceAgain(r.pod, policy, r.first);
    if (r.first && !from) return { allowed: true };
    return this.afterInspection(r, policy, from);
  }

  /** `from`: a pod placed at a first call, as toPlaceAgain leaves it to be decided anew. */
  private decide(
    pod: ArchPod,
    policy: Policy,
    known: Inspection[] | undefined,
    from: ArchPod | undefined,
  ): AdmissionResult {
    const { patch, placed } = gatePod(pod, policy, known, {
      archTainted: nodesTainted(this.deps.policies()),
      ...(from ? { from } : {}),
    });
    webhookDecisions.inc({ outcome: placed ? 'placed' : 'gated' });
    return { allowed: true, patch };
  }

  /**
   * The pod's answer, once the controller has read its new images if it may wait for them: not in a
   * dry run (which must have no effect outside its answer), nor an image whose read failed or missed
   * its deadline lately. An image pulled Always is known only from a read its registry answered
   * after the pod came (the tag revalidated for this pod, as the controller would for a gated one).
   */
  private afterInspection(
    r: Review,
    policy: Policy,
    from: ArchPod | undefined,
  ): AdmissionResult | Promise<AdmissionResult> {
    const { pod, namespace, arrived } = r;
    // A registry the policy does not list: gated, nothing read, for the controller to release.
    if (unlistedRegistry(pod, policy)) return this.decide(pod, policy, undefined, from);
    const images = podImages(pod);
    // Only what was read anonymously or with one of the pod's pull secrets answers for it.
    const secrets = pullSecretRefs(pod, namespace, this.deps.pullSecret);
    const lookup = (counted: boolean) =>
      images.map((i) =>
        this.deps.cached(i.image, { ...(i.revalidate ? revalidatedSince(arrived) : { counted }), secrets }),
      );
    const cached = lookup(true);
    const unknown = images.filter((_, n) => !cached[n]);
    if (unknown.length === 0) return this.decide(pod, policy, cached as Inspection[], from);
    this.forgetRevalidated(unknown, secrets);
    const failed = (i: { image: string }) => this.deps.failed?.(i.image) === true;
    const w = imageWait({
      unknown,
      asked: this.asked,
      now: this.now(),
      arrived,
      waitMs: this.deps.inspectWaitMs ?? INSPECT_WAIT_MS,
    });
    if (
      !this.deps.inspect ||
      r.dryRun ||
      this.waiting >= MAX_WAITING ||
      w.waitFor <= 0 ||
      unknown.some(failed)
    )
      return this.decide(pod, policy, undefined, from);
    this.ask(w, pod, namespace);
    this.waiting++;
    const read = () => (unknown.some(failed) ? 'failed' : allKnown(lookup(false)));
    return whenStateHolds(read, w.waitFor, this.deps.state)
      .then((known) => {
        inspectWaits.inc({ result: known === 'failed' ? 'failed' : known ? 'known' : 'timeout' });
        if (known && known !== 'failed') for (const i of unknown) this.asked.delete(i.image);
        return this.decide(pod, policy, known === 'failed' ? undefined : known, from);
      })
      .finally(() => this.waiting--);
  }

  /**
   * A miss of an image pulled Always ends with the late read's answer: the registry was slow once,
   * and that image, never known for long, would otherwise be gated without a wait for 30 s.
   */
  private forgetRevalidated(unknown: PodImage[], secrets: string[]): void {
    for (const i of unknown) {
      const since = this.asked.get(i.image);
      if (
        i.revalidate &&
        since !== undefined &&
        this.deps.cached(i.image, { ...revalidatedSince(since), secrets })
      )
        this.asked.delete(i.image);
    }
  }

  /** Notes the images asked now, and hints the controller to read them. */
  private ask(w: ImageWait, pod: ArchPod, namespace: string): void {
    if (this.asked.size + w.ask.length > MAX_ASKED) this.asked.clear();
    for (const i of w.ask) this.asked.set(i.image, w.at);
    if (w.hinted.length > 0)
      this.deps.inspect!({
        namespace,
        images: w.hinted,
        imagePullSecrets: (pod.spec.imagePullSecrets ?? []).map((s) => s.name),
      });
  }
}

/** One review, as the webhook reads it once. */
interface Review {
  pod: ArchPod;
  namespace: string;
  arrived: number;
  dryRun: boolean;
  first: AdmissionPlacement | undefined;
}

const allKnown = (known: (Inspection | undefined)[]): Inspection[] | undefined =>
  known.every((k) => k !== undefined) ? (known as Inspection[]) : undefined;

/** What the webhook decides from, as a value the webhook thread holds. */
export interface ArchAdmissionState {
  /** The live policies, highest priority first. */
  policies: Policy[];
  berthNamespace: string;
  /** Every namespace the controller's cache holds: one missing is not known yet (namespaceLabelsByName). */
  namespaceLabels: Map<string, Record<string, string>>;
  /** The namespaces of the Services that webhook configurations call. */
  webhookNamespaces: Set<string>;
  /** What the registry client knows without a request. */
  images: KnownImages;
  /** `--arch-pull-secret`: whose reads answer every pod. */
  pullSecret?: string;
  /** Images whose read for admission failed lately (INSPECT_MISS_MS): no review waits for them. */
  failedImages: Set<string>;
  /** `--arch-admission-wait`: how long a new image's pods wait for its read (INSPECT_WAIT_MS). */
  inspectWaitMs: number;
}

export const archAdmission = threadHandler(
  import.meta.url,
  'archAdmission',
  (state: () => ArchAdmissionState, inspect?: (hint: InspectHint) => void) =>
    podGateHandler({
      ...(inspect ? { inspect } : {}),
      state,
      failed: (image) => state().failedImages.has(image),
      get inspectWaitMs() {
        return state().inspectWaitMs;
      },
      policies: () => state().policies,
      namespaceLabels: (ns) => state().namespaceLabels.get(ns),
      cached: (image, options) => cachedFrom(state().images)(image, options),
      get pullSecret() {
        return state().pullSecret;
      },
      get berthNamespace() {
        return state().berthNamespace;
      },
      servesWebhook: (ns) => state().webhookNamespaces.has(ns),
    }),
);
