// What the page shows, as pure functions of cached objects: one row per node (what Berth's field
// managers own on it and, where a capability says, from which rule; the gates that select it;
// architecture, pool), Warning events, the pods Berth holds and why. What is a capability's own
// comes through its view (Capability.page); the policies' rows are the kit's (policy/view.ts). No
// I/O here: the state (state.ts) feeds these from the informer caches and the tests feed them objects.
import type { PageView } from '../capability.ts';
import type { KubeObject } from '../runtime/api/meta.ts';
import { nodeState, taintId } from '../policy/nodes/write.ts';
import { isBerthManager, type SlimNode, type SlimPod } from '../policy/slim.ts';
import type { Derived, EventRow, GateRow, HeldPod, NodePage, NodeQuery, NodeRow } from './types.ts';

export interface NodeInputs {
  /** The capabilities' views: their gates and the sources of the keys they own. */
  views: PageView[];
  /** Labels that name a node's pool, first present wins. */
  poolLabels: string[];
  now: number;
}

/** The pool labels of the usual node provisioners. */
export const defaultPoolLabels = [
  'karpenter.sh/nodepool',
  'cloud.google.com/gke-nodepool',
  'eks.amazonaws.com/nodegroup',
  'kubernetes.azure.com/agentpool',
  'node.kubernetes.io/pool',
];

/**
 * Every key Berth's field managers own on the node, with its value and where it comes from when the
 * manager's capability says (labels: the rule).
 */
export function derivedOf(node: SlimNode, views: PageView[]): Derived[] {
  const managers = [
    ...new Set((node.metadata?.managedFields ?? []).map((e) => (e as { manager?: string }).manager ?? '')),
  ].filter(isBerthManager);
  const out: Derived[] = [];
  for (const by of managers.sort()) {
    const s = nodeState(node, by);
    const source = views.find((v) => v.keySource?.fieldManager === by)?.keySource;
    // Only a key of a manager with a source needs it asked, and only then is it (labels: the rules evaluated).
    let sourceOf: ((kind: Derived['kind'], key: string) => string | undefined) | undefined;
    const add = (kind: Derived['kind'], key: string, value: string) => {
      const rule = source && (sourceOf ??= source.of(node))(kind, key);
      out.push({ kind, key, value, by, ...(rule ? { rule } : {}) });
    };
    for (const k of s.owned.labels) if (k in s.labels) add('label', k, s.labels[k]!);
    for (const k of s.owned.annotations) if (k in s.annotations) add('annotation', k, s.annotations[k]!);
    for (const id of s.owned.taints) {
      const t = s.taints.find((x) => taintId(x) === id);
      if (t) add('taint', id, t.value ?? '');
    }
  }
  return out;
}

export function nodeRow(node: SlimNode, inputs: NodeInputs): NodeRow {
  const labels = node.metadata?.labels ?? {};
  const pool = inputs.poolLabels.map((k) => labels[k]).find((v) => v !== undefined) ?? '';
  const gates: GateRow[] = inputs.views.flatMap((v) => v.nodeGates?.(node, inputs.now) ?? []);
  return {
    name: node.metadata?.name ?? '',
    pool,
    arch: node.status?.nodeInfo?.['architecture'] ?? labels['kubernetes.io/arch'] ?? '',
    ready: (node.status?.conditions ?? []).some((c) => c.type === 'Ready' && c.status === 'True'),
    unschedulable: node.spec?.unschedulable === true,
    labels,
    derived: derivedOf(node, inputs.views),
    gates,
    held: gates.some((g) => g.state === 'Held' || g.state === 'HeldTimedOut'),
  };
}

/** What a text filter searches in a row, kept with the row (rows live until their node changes). */
const haystacks = new WeakMap<NodeRow, string>();
function haystack(r: NodeRow): string {
  let h = haystacks.get(r);
  if (h === undefined) {
    h = [r.name, r.pool, r.arch, ...Object.entries(r.labels).map(([k, v]) => `${k}=${v}`)]
      .join('\n')
      .toLowerCase();
    haystacks.set(r, h);
  }
  return h;
}

/** One page of the rows that match the query, sorted by name, with the pools and architectures to filter by. */
export function queryNodes(rows: NodeRow[], q: NodeQuery): NodePage {
  const words = (q.text ?? '').toLowerCase().split(/\s+/).filter(Boolean);
  const matched = rows.filter(
    (r) =>
      (!q.pool || r.pool === q.pool) &&
      (!q.arch || r.arch === q.arch) &&
      (!q.held || r.held) &&
      (words.length === 0 || words.every((w) => haystack(r).includes(w))),
  );
  const limit = Math.min(Math.max(q.limit ?? 100, 1), 500);
  const offset = Math.max(0, Math.min(q.offset ?? 0, Math.max(0, matched.length - 1)));
  const values = (f: (r: NodeRow) => string) => [...new Set(rows.map(f).filter(Boolean))].sort();
  return {
    total: rows.length,
    matched: matched.length,
    offset,
    rows: matched.slice(offset, offset + limit),
    pools: values((r) => r.pool),
    archs: values((r) => r.arch),
  };
}

export interface EventLike extends KubeObject {
  eventTime?: string;
  deprecatedLastTimestamp?: string;
  series?: { count?: number; lastObservedTime?: string };
  reason?: string;
  note?: string;
  type?: string;
  reportingController?: string;
  regarding?: { kind?: string; namespace?: string; name?: string };
}

/** The event's last occurrence (a series' last observation, else its time). */
const eventTime = (e: EventLike): string =>
  e.series?.lastObservedTime ??
  e.eventTime ??
  e.deprecatedLastTimestamp ??
  e.metadata?.creationTimestamp ??
  '';

/** Warning events seen within `withinMs` of `now`, newest first, at most `max`. */
export function warningEvents(events: EventLike[], now: number, withinMs: number, max: number): EventRow[] {
  return events
    .filter((e) => e.type === 'Warning' && now - Date.parse(eventTime(e)) <= withinMs)
    .map((e) => ({
      time: eventTime(e),
      kind: e.regarding?.kind ?? '',
      regarding: [e.regarding?.kind, [e.regarding?.namespace, e.regarding?.name].filter(Boolean).join('/')]
        .filter(Boolean)
        .join(' '),
      reason: e.reason ?? '',
      note: e.note ?? '',
      reportingController: e.reportingController ?? '',
      count: e.series?.count ?? 1,
    }))
    .sort((a, b) => (a.time < b.time ? 1 : a.time > b.time ? -1 : 0))
    .slice(0, max);
}

/**
 * The pods a Berth scheduling gate holds, each with why: `reasons` maps a gate name to what it
 * says of a pod (the capabilities' gates; an unknown berth.dev gate is shown by name).
 */
export function heldPods(pods: SlimPod[], reasons: Record<string, (p: SlimPod) => string>): HeldPod[] {
  const out: HeldPod[] = [];
  for (const p of pods)
    for (const g of p.spec.schedulingGates ?? []) {
      if (!(g.name in reasons) && !g.name.includes('berth.dev/')) continue;
      out.push({
        namespace: p.metadata?.namespace ?? '',
        name: p.metadata?.name ?? '',
        gate: g.name,
        reason: reasons[g.name]?.(p) ?? 'held by a Berth scheduling gate',
      });
    }
  return out.sort((a, b) => `${a.namespace}/${a.name}`.localeCompare(`${b.namespace}/${b.name}`));
}
