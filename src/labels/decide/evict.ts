// Pure decisions of eviction on removal: which pods on a node no longer fit it only because a label
// that an opted-in rule derives went away, and what to do about them. The evictor (controllers/evict.ts) keeps
// the clock and calls the Eviction API; nothing here reads a cluster.
import { requirementHolds, valueAt, type Requirement } from '../../policy/match/requirement.ts';
import type { SlimNode, SlimPod } from '../../policy/slim.ts';
import { isTemplate } from '../match.ts';
import { CONFIG_SOURCE_ANNOTATION, OPT_OUT_ANNOTATION, type EvictOnRemoval, type Rule } from '../types.ts';
import { daemonSetOwner, isMirrorPod } from '../../policy/pods.ts';

/** Defaults of an evictOnRemoval block: long enough that a flapping input does not kill pods. */
export const EVICT_DEFAULTS = { mode: 'Evict', afterSeconds: 60, maxPerMinute: 10 } as const;

/** An evictOnRemoval block with its defaults filled in. */
export interface EvictPolicy {
  mode: 'Evict' | 'DryRun';
  afterSeconds: number;
  maxPerMinute: number;
}

export const evictPolicy = (e: EvictOnRemoval): EvictPolicy => ({
  mode: e.mode ?? EVICT_DEFAULTS.mode,
  afterSeconds: e.afterSeconds ?? EVICT_DEFAULTS.afterSeconds,
  maxPerMinute: e.maxPerMinute ?? EVICT_DEFAULTS.maxPerMinute,
});

/** The opted-in rule that derives a label key: the first by name, as decide() resolves conflicts. */
export interface KeyOwner {
  rule: string;
  policy: EvictPolicy;
}

/**
 * The rules whose removals may evict, each with its policy. Rule files carry no evictOnRemoval of
 * their own: `files` (a flag of `berth run`) applies to all of them.
 */
export function evictingRules(rules: Rule[], files?: EvictOnRemoval): Map<string, EvictPolicy> {
  const out = new Map<string, EvictPolicy>();
  for (const r of rules) {
    const e = r.source.kind === 'File' ? files : r.evictOnRemoval;
    if (e) out.set(r.name, evictPolicy(e));
  }
  return out;
}

/**
 * The label keys an opted-in rule derives, each with the first such rule by name (as decide()
 * resolves conflicts): what a pod may need, for explain. A removal evicts by the rule that derived
 * the value that went (Removal.rule), not by the key.
 */
export function evictingKeys(rules: Rule[], files?: EvictOnRemoval): Map<string, KeyOwner> {
  const out = new Map<string, KeyOwner>();
  const policies = evictingRules(rules, files);
  const sorted = [...rules].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  for (const r of sorted) {
    const policy = policies.get(r.name);
    if (!policy) continue;
    for (const key of Object.keys(r.labels)) if (!out.has(key)) out.set(key, { rule: r.name, policy });
  }
  return out;
}

/** Why the pod is never evicted, whatever its node: undefined when it may be. */
export function evictionExemption(pod: SlimPod, berthNamespace: string): string | undefined {
  const m = pod.metadata ?? {};
  const a = m.annotations ?? {};
  if (!pod.spec.nodeName) return 'not scheduled';
  if (m.deletionTimestamp) return 'terminating';
  if (pod.status.phase === 'Succeeded' || pod.status.phase === 'Failed') return `phase ${pod.status.phase}`;
  if (m.namespace === 'kube-system') return 'in kube-system';
  if (m.namespace === berthNamespace) return "in Berth's namespace";
  // The kubelet owns mirror (static) pods; the DaemonSet controller places its pods by node itself.
  if (isMirrorPod(pod)) return 'a mirror pod';
  if (a[CONFIG_SOURCE_ANNOTATION] !== undefined && a[CONFIG_SOURCE_ANNOTATION] !== 'api')
    return 'a static pod';
  if (daemonSetOwner(pod)) return 'a DaemonSet pod';
  if (a[OPT_OUT_ANNOTATION] === 'false') return `opted out (${OPT_OUT_ANNOTATION}: "false")`;
  return undefined;
}

/** A derived label that went away from a node (or changed its value): the value it had, the rule that derived it, and when. */
export interface Removal {
  value: string;
  rule: string;
  at: number;
}

/**
 * The removals a node update makes, from what `prev` held: a key whose value went away (removed or
 * changed) and that a rule had derived there (`derivedBy`: an admin's own label, or one another rule
 * never set on this node, is no removal of a rule's) is noted once, with its old value, its rule
 * and the time; it is forgotten when that value is back. Labels that appear are no removal.
 */
export function trackRemovals(
  prev: ReadonlyMap<string, Removal> | undefined,
  before: Readonly<Record<string, string>>,
  after: Readonly<Record<string, string>>,
  derivedBy: (key: string, value: string) => string | undefined,
  now: number,
): Map<string, Removal> {
  const out = new Map(prev);
  for (const [key, r] of out) if (valueAt(after, key) === r.value) out.delete(key);
  for (const [key, value] of Object.entries(before)) {
    if (out.has(key) || valueAt(after, key) === value) continue;
    const rule = derivedBy(key, value);
    if (rule !== undefined) out.set(key, { value, rule, at: now });
  }
  return out;
}

type Term = { matchExpressions?: Requirement[]; matchFields?: Requirement[] };

/** The pod's requirements of a node: its nodeSelector as In requirements, and its required terms if any. */
function constraints(pod: SlimPod): { selector: Requirement[]; terms: Term[] | undefined } {
  return {
    selector: Object.entries(pod.spec.nodeSelector ?? {}).map(([key, v]) => ({
      key,
      operator: 'In' as const,
      values: [v],
    })),
    terms: pod.spec.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms,
  };
}

/**
 * Kubernetes' rules: every nodeSelector entry holds and, when required node affinity is given, some
 * term holds; a term with no requirements holds for no node.
 */
const termHolds = (t: Term, labels: Record<string, string>, fields: Record<string, string>) =>
  (t.matchExpressions?.length ?? 0) + (t.matchFields?.length ?? 0) > 0 &&
  (t.matchExpressions ?? []).every((r) => requirementHolds(r, labels)) &&
  (t.matchFields ?? []).every((r) => requirementHolds(r, fields));

/**
 * The removed labels without which the pod no longer fits the node, or none: the pod does not fit
 * the node's labels now, and would if the values in `gone` were back, so their removal is the whole
 * reason (a pod that also misses another label is left alone). The keys named are those of the
 * requirements that fail now and hold once the values are back.
 */
export function removedKeys(pod: SlimPod, node: SlimNode, gone: ReadonlyMap<string, Removal>): string[] {
  if (gone.size === 0) return [];
  const now = node.metadata?.labels ?? {};
  const restored = { ...now };
  for (const [k, r] of gone) restored[k] = r.value;
  const fields = { 'metadata.name': node.metadata?.name ?? '' };
  const { selector, terms } = constraints(pod);
  const fits = (labels: Record<string, string>) =>
    selector.every((r) => requirementHolds(r, labels)) &&
    (terms === undefined || terms.some((t) => termHolds(t, labels, fields)));
  if (fits(now) || !fits(restored)) return [];
  const failing = [
    ...selector,
    ...(terms ?? []).filter((t) => termHolds(t, restored, fields)).flatMap((t) => t.matchExpressions ?? []),
  ].filter((r) => gone.has(r.key) && !requirementHolds(r, now));
  return [...new Set(failing.map((r) => r.key))].sort();
}

/** Why a pod is to be evicted: the rule, the label it derived and when that went away, with the rule's policy. */
export interface Verdict extends KeyOwner {
  label: string;
  /** When the label went away (epoch ms). */
  since: number;
}

/**
 * The verdict for one pod on its node, given the derived labels that went away from it: undefined
 * when it fits, is exempt, or misses only labels whose rules did not opt in (`policies`,
 * evictingRules).
 */
export function verdict(
  pod: SlimPod,
  node: SlimNode | undefined,
  policies: ReadonlyMap<string, EvictPolicy>,
  gone: ReadonlyMap<string, Removal> | undefined,
  berthNamespace: string,
): Verdict | undefined {
  if (!node || !gone?.size || evictionExemption(pod, berthNamespace)) return undefined;
  const opted = new Map([...gone].filter(([, r]) => policies.has(r.rule)));
  const label = removedKeys(pod, node, opted)[0];
  if (label === undefined) return undefined;
  const r = opted.get(label)!;
  return { label, since: r.at, rule: r.rule, policy: policies.get(r.rule)! };
}

/** An event Berth recorded about a pod's eviction, for explain. */
export interface EvictionEvent {
  time: string;
  reason: string;
  note: string;
}

/**
 * Lines for `berth explain pod`: whether the pod can be evicted on a removal, which derived labels
 * it depends on, whether it still fits its node, and what Berth already did. The time a label went
 * away is in the evictor's memory, not the cluster: a pod that no longer fits is said to go the
 * rule's delay after Berth saw the removal, and the events say when it did.
 */
export function explainPodEviction(
  pod: SlimPod,
  node: SlimNode | undefined,
  rules: Rule[],
  berthNamespace: string,
  files: EvictOnRemoval | undefined,
  events: EvictionEvent[],
): string[] {
  const out = ['Eviction on removal of derived labels:'];
  const why = evictionExemption(pod, berthNamespace);
  const keys = evictingKeys(rules, files);
  const { selector, terms } = constraints(pod);
  const needed = [
    ...new Set([...selector, ...(terms ?? []).flatMap((t) => t.matchExpressions ?? [])].map((r) => r.key)),
  ].filter((k) => keys.has(k));
  if (why) out.push(`  never evicted: ${why}`);
  else if (needed.length === 0) out.push('  needs no label that a rule with evictOnRemoval derives');
  for (const k of needed) {
    const o = keys.get(k)!;
    out.push(
      `  needs label ${k}, derived by ${o.rule} (evictOnRemoval: ${o.policy.mode} after ${o.policy.afterSeconds}s, at most ${o.policy.maxPerMinute} a minute)`,
    );
  }
  if (!why && node && needed.length) {
    // The value each rule sets (literal ones: a template's depends on the node).
    const gone = new Map<string, Removal>();
    for (const k of needed) {
      const v = rules.find((r) => r.name === keys.get(k)!.rule)?.labels[k];
      if (v !== undefined && !isTemplate(v) && valueAt(node.metadata?.labels ?? {}, k) !== v)
        gone.set(k, { value: v, rule: keys.get(k)!.rule, at: 0 });
    }
    const removed = removedKeys(pod, node, gone);
    const nodeName = node.metadata!.name!;
    if (removed.length) {
      const o = keys.get(removed[0]!)!;
      out.push(
        `  no longer fits node ${nodeName}: label ${removed.join(', ')} is gone; ` +
          (o.policy.mode === 'DryRun'
            ? `reported (DryRun) ${o.policy.afterSeconds}s after Berth saw it go`
            : `evicted ${o.policy.afterSeconds}s after Berth saw it go, unless it comes back`),
      );
    } else out.push(`  fits node ${nodeName} as far as these labels go`);
  }
  for (const e of events) out.push(`  ${e.time} ${e.reason}: ${e.note}`);
  return out;
}
