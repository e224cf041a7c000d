// The Pod CREATE webhook: gates the pods an ArchPlacement selects, from what the controller knows
// only (the registry is the controller's business, never admission's). It always allows, and is
// registered with failurePolicy Ignore and a short timeout: an unavailable Berth never blocks a pod,
// it only leaves the pod unplaced. It is served from the webhook thread
// (runtime/webhook/thread.ts), where the pods' informer cannot hold its answers; the controller
// sends it an ArchAdmissionState whenever one of its parts changes.
import { rootLogger, type Logger } from '../runtime/observability/log.ts';
import type { AdmissionHandler, AdmissionResult } from '../runtime/webhook/admission.ts';
import { threadHandler } from '../runtime/webhook/threaded.ts';
import { counter } from '../runtime/observability/metrics.ts';
import { cachedFrom, type KnownImages } from '../registry/known.ts';
import type { Inspection, ImageInspector } from '../registry/types.ts';
import {
  choosePolicy,
  exemption,
  gatePod,
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
  namespaceLabels(namespace: string): Record<string, string> | undefined;
  /** Platforms known without a request (admission never waits on a registry). */
  cached: ImageInspector['cached'];
  logger?: Logger;
}

export function podGateHandler(deps: ArchWebhookDeps): AdmissionHandler {
  const log = (deps.logger ?? rootLogger).child({ webhook: 'arch' });
  return (req): AdmissionResult => {
    const pod = req.object as ArchPod | undefined;
    if (req.operation !== 'CREATE' || req.kind.kind !== 'Pod' || req.subResource || !pod?.spec) {
      return { allowed: true };
    }
    // A pod made from a template has no namespace of its own at admission.
    const namespace = pod.metadata?.namespace || req.namespace || '';
    // A thrown error would be answered allowed=false; this webhook fails open instead.
    try {
      const reason = exemption(pod, namespace, deps);
      if (reason) {
        webhookDecisions.inc({ outcome: 'exempt' });
        return { allowed: true };
      }
      const policy = choosePolicy(
        deps.policies(),
        pod,
        namespace,
        deps.namespaceLabels(namespace),
        deps.berthNamespace,
      );
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
    } catch (err) {
      webhookDecisions.inc({ outcome: 'error' });
      log.error(
        { namespace, name: pod.metadata?.name || pod.metadata?.generateName, err },
        'pod admitted ungated',
      );
      return { allowed: true };
    }
  };
}

/** What the webhook decides from, as a value the webhook thread holds. */
export interface ArchAdmissionState {
  /** The live policies, highest priority first. */
  policies: Policy[];
  berthNamespace: string;
  namespaceLabels: Map<string, Record<string, string> | undefined>;
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
