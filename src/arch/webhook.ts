// The Pod CREATE webhook: places the pods an ArchPlacement selects when the controller knows their
// images, and gates the others (the registry is the controller's business, never admission's). A
// pod with an image not known yet hints the controller to read it, and waits a moment
// (INSPECT_WAIT_MS) for the answer to reach its state: the first pods of a new image are then placed
// at admission too, where a gate would cost each of them a write and two watch deliveries. It
// always allows, and is registered with failurePolicy Ignore and a short timeout: an unavailable
// Berth never blocks a pod, it only leaves the pod unplaced. It is served from the webhook thread
// (runtime/webhook/thread.ts), where the pods' informer cannot hold its answers; the controller
// sends it an ArchAdmissionState whenever one of its parts changes. The thread has no API client,
// so a pod's namespace that the state does not hold yet is waited for (briefly, in the state the
// controller sends next), not read from the apiserver.
import { rootLogger, type Logger } from '../runtime/observability/log.ts';
import type { AdmissionHandler, AdmissionResult } from '../runtime/webhook/admission.ts';
import { threadHandler, whenStateHolds } from '../runtime/webhook/threaded.ts';
import { counter } from '../runtime/observability/metrics.ts';
import { cachedFrom, type KnownImages } from '../registry/known.ts';
import type { Inspection, ImageInspector } from '../registry/types.ts';
import { withNamespaceLabels } from '../policy/namespace.ts';
import {
  choosePolicy,
  exemption,
  gatePod,
  namespaceDecides,
  podImages,
  type ArchPod,
  type ExemptionContext,
  type Policy,
} from './decide.ts';

export const webhookDecisions = counter(
  'berth_arch_admissions_total',
  'Pods the architecture webhook saw, by outcome (placed at admission, gated, exempt, unselected, error)',
  ['outcome'],
);

export const inspectWaits = counter(
  'berth_arch_admission_inspect_waits_total',
  'Pods the architecture webhook held for an image the controller was reading, by result (known, timeout)',
  ['result'],
);

/**
 * How long a review waits for the controller to read a pod's new images: an inspection takes tens
 * of milliseconds from a nearby registry, and this stays, with the wait for a new namespace
 * (NAMESPACE_WAIT_MS), well within the 2 s the apiserver gives the webhook.
 */
export const INSPECT_WAIT_MS = 500;
/**
 * An image the controller did not read within the wait is not waited for again for this long: a
 * registry that is slow or down costs the pods after it no wait (they are gated, as without one).
 */
export const INSPECT_MISS_MS = 30_000;
// Images remembered as missed at most; past it the memory starts again.
const MAX_MISSED = 10_000;

/** What the webhook asks the controller to read: a pod's images, with the pull secrets it names. */
export interface InspectHint {
  namespace: string;
  images: string[];
  imagePullSecrets: string[];
}

export interface ArchWebhookDeps extends ExemptionContext {
  /** The live policies, highest priority first. */
  policies(): Policy[];
  /** A namespace's labels ({} for none), or undefined while the cache does not know it. */
  namespaceLabels(namespace: string): Record<string, string> | undefined;
  /** Platforms known without a request (admission sends none: it asks the controller, `inspect`). */
  cached: ImageInspector['cached'];
  /** How long a review waits for the cache to learn a new namespace (NAMESPACE_WAIT_MS). */
  namespaceWaitMs?: number;
  /** Asks the controller to read images `cached` does not know; absent, the pod is gated at once. */
  inspect?: (hint: InspectHint) => void;
  /** How long a review waits for `cached` to know them once asked (INSPECT_WAIT_MS). */
  inspectWaitMs?: number;
  /** The state `cached` reads, when it is one (the webhook thread's): read again only once it is new. */
  state?: () => unknown;
  now?: () => number;
  logger?: Logger;
}

export function podGateHandler(deps: ArchWebhookDeps): AdmissionHandler {
  const log = (deps.logger ?? rootLogger).child({ webhook: 'arch' });
  const now = deps.now ?? Date.now;
  const missed = new Map<string, number>();
  const decide = (pod: ArchPod, policy: Policy, known: Inspection[] | undefined): AdmissionResult => {
    const { patch, placed } = gatePod(pod, policy, known);
    webhookDecisions.inc({ outcome: placed ? 'placed' : 'gated' });
    return { allowed: true, patch };
  };
  /**
   * The pod's answer once the controller has read its new images, or gated after the wait. Not for
   * an image pulled Always (admission cannot know it revalidated) or one that missed a wait lately.
   */
  const afterInspection = (
    pod: ArchPod,
    namespace: string,
    policy: Policy,
  ): AdmissionResult | Promise<AdmissionResult> => {
    const images = podImages(pod);
    const cached = images.map((i) => deps.cached(i.image, { revalidate: i.revalidate }));
    const allOf = (known: (Inspection | undefined)[]) =>
      known.every((k) => k !== undefined) ? (known as Inspection[]) : undefined;
    const unknown = images.filter((_, n) => !cached[n]);
    const t = now();
    if (
      unknown.length === 0 ||
      !deps.inspect ||
      unknown.some((i) => i.revalidate || (missed.get(i.image) ?? -Infinity) > t - INSPECT_MISS_MS)
    )
      return decide(pod, policy, allOf(cached));
    deps.inspect({
      namespace,
      images: unknown.map((i) => i.image),
      imagePullSecrets: (pod.spec.imagePullSecrets ?? []).map((s) => s.name),
    });
    const lookup = () => allOf(images.map((i) => deps.cached(i.image, { revalidate: i.revalidate })));
    return whenStateHolds(lookup, deps.inspectWaitMs ?? INSPECT_WAIT_MS, deps.state).then((read) => {
      inspectWaits.inc({ result: read ? 'known' : 'timeout' });
      if (!read) {
        if (missed.size >= MAX_MISSED) missed.clear();
        for (const i of unknown) missed.set(i.image, now());
      }
      return decide(pod, policy, read);
    });
  };
  return (req) => {
    const pod = req.object as ArchPod | undefined;
    if (req.operation !== 'CREATE' || req.kind.kind !== 'Pod' || req.subResource || !pod?.spec) {
      return { allowed: true };
    }
    // A pod made from a template has no namespace of its own at admission.
    const namespace = pod.metadata?.namespace || req.namespace || '';
    // A thrown error would be answered allowed=false; this webhook fails open instead.
    const failOpen = (err: unknown): AdmissionResult => {
      webhookDecisions.inc({ outcome: 'error' });
      log.error(
        { namespace, name: pod.metadata?.name || pod.metadata?.generateName, err },
        'pod admitted ungated',
      );
      return { allowed: true };
    };
    const admit = (
      namespaceLabels: Record<string, string> | undefined,
    ): AdmissionResult | Promise<AdmissionResult> => {
      const policy = choosePolicy(deps.policies(), pod, namespace, namespaceLabels, deps.berthNamespace);
      if (!policy) {
        webhookDecisions.inc({ outcome: 'unselected' });
        return { allowed: true };
      }
      return afterInspection(pod, namespace, policy);
    };
    try {
      const reason = exemption(pod, namespace, deps);
      if (reason) {
        webhookDecisions.inc({ outcome: 'exempt' });
        return { allowed: true };
      }
      // A namespace created a moment before its pod: its labels are on their way to the cache, and
      // deciding without them would let the pod through ungated.
      const answer = withNamespaceLabels(
        deps.namespaceLabels,
        namespace,
        () => namespaceDecides(deps.policies(), pod, namespace, deps.berthNamespace),
        admit,
        (waitedMs) =>
          log.warn(
            { namespace, waitedMs },
            "namespace not in Berth's cache: policies with a namespaceSelector pass the pod by (fail open)",
          ),
        deps.namespaceWaitMs,
      );
      return answer instanceof Promise ? answer.then((a) => a).catch(failOpen) : answer;
    } catch (err) {
      return failOpen(err);
    }
  };
}

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
}

export const archAdmission = threadHandler(
  import.meta.url,
  'archAdmission',
  (state: () => ArchAdmissionState, inspect?: (hint: InspectHint) => void) =>
    podGateHandler({
      ...(inspect ? { inspect } : {}),
      state,
      policies: () => state().policies,
      namespaceLabels: (ns) => state().namespaceLabels.get(ns),
      cached: (image, options) => cachedFrom(state().images)(image, options),
      get berthNamespace() {
        return state().berthNamespace;
      },
      servesWebhook: (ns) => state().webhookNamespaces.has(ns),
    }),
);
