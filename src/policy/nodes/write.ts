// The write of a controller's share of a Node — labels, annotations, taints — for both node writers:
// which of the node's keys a field manager owns (labels and annotations from managedFields, taints
// from the record it keeps on the node), what it should write so the node carries its share, and
// which keys that write changes (for the loop breaker); a taint's identity, its form on a node and
// as kubectl writes it. Pure: no I/O.
import { othersKeys, ownedKeys } from '../../runtime/api/fields.ts';
import { nodeKey, type NodeKey } from './loopbreaker.ts';
import type { KubeObject } from '../../runtime/api/meta.ts';
import type { TaintLike } from './taints.ts';

export interface NodeTaint {
  key: string;
  value?: string;
  effect: string;
}

/** What a controller wants on a node. */
export interface NodeOutputs {
  labels: Record<string, string>;
  annotations: Record<string, string>;
  taints: NodeTaint[];
}

/** A node's labels, annotations and taints, and which of them one field manager owns. */
export interface NodeState extends NodeOutputs {
  owned: { labels: string[]; annotations: string[]; taints: string[] };
  /**
   * Labels and annotations another manager owns too (both set the same value): changing one is an
   * apply conflict, so it is foreign to a change.
   */
  shared: { labels: string[]; annotations: string[] };
  /** The manager's taint record as the node carries it (taintRecord). */
  taintRecord: Map<string, string | undefined>;
}

export type NodeOutputKind = 'label' | 'annotation' | 'taint';

export const taintId = (t: { key: string; effect: string }): string => `${t.key}:${t.effect}`;

/** Whether `taints` hold `t` (a taint's identity is its key and effect). */
export const holds = (taints: TaintLike[] | undefined, t: TaintLike) =>
  (taints ?? []).some((x) => taintId(x) === taintId(t));

/** A taint as kubectl writes it: key=value:Effect. */
export const formatTaint = (t: TaintLike): string => `${t.key}${t.value ? `=${t.value}` : ''}:${t.effect}`;

/** A taint as written to a node (no value field when it has none). */
export const nodeTaint = (t: TaintLike): NodeTaint => ({
  key: t.key,
  ...(t.value !== undefined ? { value: t.value } : {}),
  effect: t.effect,
});

/** Where Berth's node writers keep their own bookkeeping: `<field manager>.nodes.berth.dev/`. */
export const NODE_WRITERS_DOMAIN = 'nodes.berth.dev';
/**
 * The annotation in which a field manager records the taints it put on a node: each one's id with
 * the value it wrote, JSON. spec.taints is an atomic list: managedFields says who last wrote the
 * list, not whose each taint is.
 */
export const taintRecordKey = (manager: string): string => `${manager}.${NODE_WRITERS_DOMAIN}/taints`;

export const taintsOf = (node: KubeObject): NodeTaint[] =>
  (node['spec'] as { taints?: NodeTaint[] } | undefined)?.taints ?? [];

/**
 * What `manager`'s record on the node says: the value it wrote, by taint id. An earlier version
 * recorded ids only: their values are unknown (undefined) until the record is written again.
 */
export function taintRecord(node: KubeObject, manager: string): Map<string, string | undefined> {
  let recorded: unknown;
  try {
    recorded = JSON.parse(node.metadata?.annotations?.[taintRecordKey(manager)] ?? '{}');
  } catch {
    recorded = {};
  }
  if (Array.isArray(recorded))
    return new Map(
      recorded.filter((id): id is string => typeof id === 'string').map((id) => [id, undefined]),
    );
  if (typeof recorded !== 'object' || recorded === null) return new Map();
  return new Map(Object.entries(recorded).filter((e): e is [string, string] => typeof e[1] === 'string'));
}

/** The record of the taints a manager has on a node; null when there are none (the record goes). */
export function taintRecordValue(taints: NodeTaint[]): string | null {
  if (taints.length === 0) return null;
  const sorted = [...taints].sort((a, b) => (taintId(a) < taintId(b) ? -1 : 1));
  return JSON.stringify(Object.fromEntries(sorted.map((t) => [taintId(t), t.value ?? ''])));
}

/**
 * The ids of the node's taints that `manager` put on and that are still as it wrote them: one
 * someone removed, or set to another value, is theirs now (an entry of an earlier record, without
 * its value, is taken as written).
 */
export function ownedTaints(node: KubeObject, manager: string): string[] {
  const values = new Map(taintsOf(node).map((t) => [taintId(t), t.value ?? '']));
  return [...taintRecord(node, manager)]
    .filter(([id, value]) => values.has(id) && (value === undefined || values.get(id) === value))
    .map(([id]) => id);
}

export function nodeState(node: KubeObject, manager: string): NodeState {
  const shared = (path: string[], owned: string[]) => {
    const others = othersKeys(node, manager, path);
    return owned.filter((k) => others.has(k));
  };
  const labels = ownedKeys(node, manager, ['metadata', 'labels']);
  const annotations = ownedKeys(node, manager, ['metadata', 'annotations']);
  return {
    labels: node.metadata?.labels ?? {},
    annotations: node.metadata?.annotations ?? {},
    taints: taintsOf(node).map((t) => ({ ...t })),
    owned: { labels, annotations, taints: ownedTaints(node, manager) },
    shared: {
      labels: shared(['metadata', 'labels'], labels),
      annotations: shared(['metadata', 'annotations'], annotations),
    },
    taintRecord: taintRecord(node, manager),
  };
}

export interface NodeWrite extends NodeOutputs {
  /** True when the node already carries exactly this manager's share: nothing to write. */
  inSync: boolean;
  /** Which kinds of output a write would change (empty when in sync). */
  changed: NodeOutputKind[];
  /** Keys held back because another field manager set them to a different value. */
  foreign: { kind: NodeOutputKind; key: string }[];
}

/**
 * What to write: the desired outputs minus the keys another manager already set to a different
 * value, or owns too and this write would change (a controller never fights for them, and never
 * forces), and whether the node is already there.
 */
export function nodeWriteFor(state: NodeState, desired: NodeOutputs): NodeWrite {
  const foreign: NodeWrite['foreign'] = [];
  const keep = (
    kind: NodeOutputKind,
    want: Record<string, string>,
    have: Record<string, string>,
    owned: Set<string>,
    shared: string[],
  ) => {
    const out: Record<string, string> = {};
    for (const [k, v] of Object.entries(want)) {
      if (k in have && have[k] !== v && (!owned.has(k) || shared.includes(k))) foreign.push({ kind, key: k });
      else out[k] = v;
    }
    return out;
  };
  const ownedLabels = new Set(state.owned.labels);
  const ownedAnnotations = new Set(state.owned.annotations);
  const ownedTaints = new Set(state.owned.taints);
  const labels = keep('label', desired.labels, state.labels, ownedLabels, state.shared.labels);
  const annotations = keep(
    'annotation',
    desired.annotations,
    state.annotations,
    ownedAnnotations,
    state.shared.annotations,
  );
  const current = new Map(state.taints.map((t) => [taintId(t), t]));
  // A taint on the node that is not this manager's is someone else's, whatever its value: one set
  // before this manager's first write of it, or changed since. Never taken, never recorded.
  const taints = desired.taints.filter((t) => {
    if (current.has(taintId(t)) && !ownedTaints.has(taintId(t))) {
      foreign.push({ kind: 'taint', key: taintId(t) });
      return false;
    }
    return true;
  });
  const sameKeys = (owned: Set<string>, want: string[]) =>
    owned.size === want.length && want.every((k) => owned.has(k));
  const sameRecord = (owned: Set<string>, want: Record<string, string>, have: Record<string, string>) =>
    sameKeys(owned, Object.keys(want)) && Object.entries(want).every(([k, v]) => have[k] === v);
  const changed: NodeOutputKind[] = [];
  if (!sameRecord(ownedLabels, labels, state.labels)) changed.push('label');
  if (!sameRecord(ownedAnnotations, annotations, state.annotations)) changed.push('annotation');
  // The node carries each taint as wanted, and the record says exactly that (values included, so
  // an earlier version's record of ids, or one naming a taint someone took over, is written again).
  const written = (t: NodeTaint) => {
    const cur = current.get(taintId(t));
    return cur !== undefined && (cur.value ?? '') === (t.value ?? '');
  };
  const record = state.taintRecord;
  if (
    record.size !== taints.length ||
    !taints.every((t) => written(t) && record.get(taintId(t)) === (t.value ?? ''))
  )
    changed.push('taint');
  return { inSync: changed.length === 0, changed, labels, annotations, taints, foreign };
}

/** The keys a write of `write` changes on the node: set to another value, added, or dropped by this manager. */
export function changedKeys(state: NodeState, write: NodeOutputs): NodeKey[] {
  const keys = new Set<NodeKey>();
  const record = (
    kind: NodeOutputKind,
    want: Record<string, string>,
    have: Record<string, string>,
    owned: string[],
  ) => {
    for (const [k, v] of Object.entries(want)) if (have[k] !== v) keys.add(nodeKey(kind, k));
    for (const k of owned) if (!(k in want) && k in have) keys.add(nodeKey(kind, k));
  };
  record('label', write.labels, state.labels, state.owned.labels);
  record('annotation', write.annotations, state.annotations, state.owned.annotations);
  const have = new Map(state.taints.map((t) => [taintId(t), t]));
  const want = new Set(write.taints.map(taintId));
  for (const t of write.taints) {
    const cur = have.get(taintId(t));
    if (!cur || (cur.value ?? '') !== (t.value ?? '')) keys.add(nodeKey('taint', t.key));
  }
  for (const id of state.owned.taints) {
    const t = have.get(id);
    if (t && !want.has(id)) keys.add(nodeKey('taint', t.key));
  }
  return [...keys];
}

/** `desired` with the `held` keys left as this manager's share of the node has them now. */
export function leaveAsIs(state: NodeState, desired: NodeOutputs, held: NodeKey[]): NodeOutputs {
  const out: NodeOutputs = {
    labels: { ...desired.labels },
    annotations: { ...desired.annotations },
    taints: desired.taints,
  };
  const keep = (want: Record<string, string>, have: Record<string, string>, owned: string[], k: string) => {
    if (owned.includes(k) && k in have) want[k] = have[k]!;
    else delete want[k];
  };
  for (const h of held) {
    const [kind, key] = [h.slice(0, h.indexOf(' ')), h.slice(h.indexOf(' ') + 1)];
    if (kind === 'label') keep(out.labels, state.labels, state.owned.labels, key);
    else if (kind === 'annotation') keep(out.annotations, state.annotations, state.owned.annotations, key);
    else {
      const owned = new Set(state.owned.taints);
      out.taints = [
        ...out.taints.filter((t) => t.key !== key),
        ...state.taints.filter((t) => t.key === key && owned.has(taintId(t))),
      ];
    }
  }
  return out;
}
