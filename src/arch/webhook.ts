// The Pod CREATE webhook: gates the pods an ArchPlacement selects, from what the controller knows
// only (the registry is the controller's business, never admission's). It always allows, and is
// registered with failurePolicy Ignore and a short timeout: an unavailable Berth never blocks a pod,
// it only leaves the pod unplaced. It is served from the webhook thread
// (runtime/webhook/thread.ts), where the pods' informer cannot hold its answers; the controller
// sends it an ArchAdmissionState whenever one of its parts changes. The thread has no API client,
// so a pod's namespace that the state does not hold yet is waited for (briefly, in the state the
// controller sends next), not read from the apiserver.
import { rootLogger, type Logger } from '../runtime/observability/log.ts';
import type { AdmissionHandler, AdmissionResult } from '../runtime/webhook/admission.ts';
import { threadHandler } from '../runtime/webhook/threaded.ts';
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

export interface ArchWebhookDeps extends ExemptionContext {
  /** The live policies, highest priority first. */
  policies(): Policy[];
  /** A namespace's labels ({} for none), or undefined while the cache does not know it. */
  namespaceLabels(namespace: string): Record<string, string> | undefined;
  /** Platforms known without a request (admission never waits on a registry). */
  cached: ImageInspector['cached'];
  /** How long a review waits for the cache to learn a new namespace (NAMESPACE_WAIT_MS). */
  namespaceWaitMs?: number;
  logger?: Logger;
}

export function podGateHandler(deps: ArchWebhookDeps): AdmissionHandler {
  const log = (deps.logger ?? rootLogger).child({ webhook: 'arch' });
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
    const admit = (namespaceLabels: Record<string, string> | undefined): AdmissionResult => {
      const policy = choosePolicy(deps.policies(), pod, namespace, namespaceLabels, deps.berthNamespace);
      if (!policy) {
        webhookDecisions.inc({ outcome: 'unselected' });
        return { allowed: true };
      }
      const known = podImages(pod).map((i) => deps.cached(i.image, { revalidate: i.revalidate }));
      const { patch, placed } = gatePod(
        pod,
        policy,
        known.every((k) => k !== undefined) ? (known as Inspection[]) : undefined,
      );
      webhookDecisions.inc({ outcome: placed ? 'placed' : 'gated' });
      return { allowed: true, patch };
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
      return answer instanceof Promise ? answer.catch(failOpen) : answer;
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
  (state: () => ArchAdmissionState) =>
    podGateHandler({
      policies: () => state().policies,
      namespaceLabels: (ns) => state().namespaceLabels.get(ns),
      cached: (image, options) => cachedFrom(state().images)(image, options),
      get berthNamespace() {
        return state().berthNamespace;
      },
      servesWebhook: (ns) => state().webhookNamespaces.has(ns),
    }),
);
