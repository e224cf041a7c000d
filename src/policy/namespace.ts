// The namespace Berth runs in. Policies leave it alone unless they name it, and the install puts
// Berth's service account there. Which pods a policy selects depends on their namespace too.
import { selectorMatches, type LabelSelector } from './match/selector.ts';

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
 * A policy's pod and namespace selectors; an unknown namespace matches only without a
 * namespaceSelector, a protected one only when the namespaceSelector names it.
 */
export function podSelected(
  namespace: string,
  podLabels: Record<string, string> | undefined,
  namespaceLabels: Record<string, string> | undefined,
  spec: { namespaceSelector?: LabelSelector | undefined; podSelector?: LabelSelector | undefined },
  berthNamespace: string,
): boolean {
  if (protectedNamespace(namespace, berthNamespace) && !namesNamespace(spec.namespaceSelector, namespace))
    return false;
  if (
    spec.namespaceSelector &&
    (!namespaceLabels || !selectorMatches(spec.namespaceSelector, namespaceLabels))
  )
    return false;
  return selectorMatches(spec.podSelector, podLabels);
}

/**
 * Every namespace's labels by name, from a cache of namespaces: what a webhook thread is sent to
 * select pods by namespace without the main thread's informers.
 */
export const namespaceLabelsByName = (namespaces: {
  list(): { metadata?: { name?: string; labels?: Record<string, string> } }[];
}): Map<string, Record<string, string> | undefined> =>
  new Map(namespaces.list().map((n) => [n.metadata!.name!, n.metadata?.labels]));
