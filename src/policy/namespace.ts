// The namespace Berth runs in. Policies leave it alone unless they name it, and the install puts
// Berth's service account there. Which pods a policy selects depends on their namespace too.
import { selectorMatches, type LabelSelector } from './match/selector.ts';
import { whenStateHolds } from '../runtime/webhook/threaded.ts';

export const NAMESPACE = 'berth-system';
/** The namespace Berth runs in: its pod's (POD_NAMESPACE, from the downward API), else the default. */
export const berthNamespace = (): string => process.env['POD_NAMESPACE'] ?? NAMESPACE;
export const SERVICE_ACCOUNT = 'berth';
/** The Secret in Berth's namespace where its replicas keep the webhook CA and serving certificate. */
export const WEBHOOK_CERT_SECRET = 'berth-webhook-cert';
/** The Lease of leader election in Berth's namespace (`--leader-election-id`). */
export const LEADER_ELECTION_ID = 'berth';
/** The Mutating- and ValidatingWebhookConfiguration `berth run` registers its webhooks in. */
export const WEBHOOK_CONFIGURATION = 'berth';

/** The label the apiserver puts on every namespace: how a namespaceSelector names a namespace. */
export const NAMESPACE_NAME_LABEL = 'kubernetes.io/metadata.name';

/** The selector names the namespace: matchLabels or an In expression on kubernetes.io/metadata.name. */
const namesNamespace = (sel: LabelSelector | undefined, ns: string): boolean =>
  sel?.matchLabels?.[NAMESPACE_NAME_LABEL] === ns ||
  (sel?.matchExpressions ?? []).some(
    (e) => e.key === NAMESPACE_NAME_LABEL && e.operator === 'In' && (e.values ?? []).includes(ns),
  );

/**
 * Cluster add-ons (kube-*) and Berth itself: a policy that does not name them explicitly in its
 * namespaceSelector never selects their pods, whatever else its selectors say.
 */
export const protectedNamespace = (ns: string, berthNamespace: string): boolean =>
  ns.startsWith('kube-') || ns === berthNamespace;

/**
 * Whether a policy's pod and namespace selectors select a pod, or undefined when that turns on the
 * labels of a namespace not known (`namespaceLabels` undefined): a protected namespace only when the
 * namespaceSelector names it.
 */
export function podSelection(
  namespace: string,
  podLabels: Record<string, string> | undefined,
  namespaceLabels: Record<string, string> | undefined,
  spec: { namespaceSelector?: LabelSelector | undefined; podSelector?: LabelSelector | undefined },
  berthNamespace: string,
): boolean | undefined {
  if (protectedNamespace(namespace, berthNamespace) && !namesNamespace(spec.namespaceSelector, namespace))
    return false;
  if (!selectorMatches(spec.podSelector, podLabels)) return false;
  if (!spec.namespaceSelector) return true;
  return namespaceLabels && selectorMatches(spec.namespaceSelector, namespaceLabels);
}

/** podSelection, an unknown namespace's pods selected only by a policy without a namespaceSelector. */
export const podSelected = (...args: Parameters<typeof podSelection>): boolean =>
  podSelection(...args) === true;

/**
 * Every namespace's labels by name, from a cache of namespaces: what a webhook thread is sent to
 * select pods by namespace without the main thread's informers. A namespace without labels maps to
 * {}, so that undefined means only "not in the cache".
 */
export const namespaceLabelsByName = (namespaces: {
  list(): { metadata?: { name?: string; labels?: Record<string, string> } }[];
}): Map<string, Record<string, string>> =>
  new Map(namespaces.list().map((n) => [n.metadata!.name!, n.metadata?.labels ?? {}]));

/**
 * How long admission waits for its cache to learn a pod's namespace: within the 2 s the apiserver
 * gives Berth's pod webhooks, with room for the rest of the review.
 */
export const NAMESPACE_WAIT_MS = 1000;

/**
 * A namespace's labels from a cache that may lag the apiserver (a webhook thread's state), waiting
 * up to `waitMs` for it to learn the namespace; undefined if it has not by then. At admission a
 * pod's namespace exists (the apiserver's NamespaceLifecycle plugin checks, with a read of its own
 * when its cache lacks it), so one missing here was created a moment ago and is on its way: waiting
 * for it answers truly, where treating it as unselected let its first pods through. The wait is
 * rare (a namespace younger than the cache's lag).
 */
export const namespaceLabelsWhenKnown = (
  labelsOf: (namespace: string) => Record<string, string> | undefined,
  namespace: string,
  waitMs = NAMESPACE_WAIT_MS,
): Promise<Record<string, string> | undefined> => whenStateHolds(() => labelsOf(namespace), waitMs);

/**
 * A webhook's answer from the pod's namespace labels: at once when its cache knows the namespace,
 * or when its labels cannot change the answer (`decides` false); otherwise once the cache learns
 * it (namespaceLabelsWhenKnown), or, after `waitMs`, without them, `missing` told so.
 */
export function withNamespaceLabels<T>(
  labelsOf: (namespace: string) => Record<string, string> | undefined,
  namespace: string,
  decides: () => boolean,
  answer: (labels: Record<string, string> | undefined) => T,
  missing: (waitedMs: number) => void,
  waitMs = NAMESPACE_WAIT_MS,
): T | Promise<T> {
  const labels = labelsOf(namespace);
  if (labels || !decides()) return answer(labels);
  return namespaceLabelsWhenKnown(labelsOf, namespace, waitMs).then((known) => {
    if (!known) missing(waitMs);
    return answer(known);
  });
}
