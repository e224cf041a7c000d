// Writing a controller's share of a Node — labels, annotations, taints — shared by every
// capability that decorates nodes. Each controller owns its keys through its own field manager:
// labels and annotations by server-side apply, read back from managedFields; taints, an atomic
// list that managedFields cannot split by owner, by a compare-and-swap JSON patch that also keeps
// a record of the taints it put on. So a controller writes only when its share differs, never
// touches keys another manager set to other values, and never recreates a node.
import { applyTarget, isObjectGone, ownedKeys } from '../../runtime/client/apply.ts';
import type { EventHandler } from '../../runtime/cache/informer.ts';
import { ApiError, type KubeClient } from '../../runtime/client/client.ts';
import { WriteExpectations } from '../../runtime/controller/expectations.ts';
import { nodeKey, type NodeKey, type WriteLoopBreaker } from './loopbreaker.ts';
import { Resources, type KubeObject } from '../../runtime/api/meta.ts';
import { escapeKey, type JsonPatchOp } from '../../runtime/api/jsonpatch.ts';
import type { Clock } from '../../runtime/workqueue/ratelimiter.ts';

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
}

export type NodeOutputKind = 'label' | 'annotation' | 'taint';

export const taintId = (t: { key: string; effect: string }): string => `${t.key}:${t.effect}`;

/** Where Berth's node writers keep their own bookkeeping: `<field manager>.nodes.berth.dev/`. */
export const NODE_WRITERS_DOMAIN = 'nodes.berth.dev';
/**
 * The annotation in which a field manager records the taints it put on a node (their ids, JSON).
 * spec.taints is an atomic list: managedFields says who last wrote the list, not whose each taint is.
 */
export const taintRecordKey = (manager: string): string => `${manager}.${NODE_WRITERS_DOMAIN}/taints`;

const taintsOf = (node: KubeObject): NodeTaint[] =>
  (node['spec'] as { taints?: NodeTaint[] } | undefined)?.taints ?? [];

/** The ids of the node's taints that `manager` put on (and that are still there). */
function ownedTaints(node: KubeObject, manager: string): string[] {
  let recorded: unknown;
  try {
    recorded = JSON.parse(node.metadata?.annotations?.[taintRecordKey(manager)] ?? '[]');
  } catch {
    recorded = [];
  }
  const present = new Set(taintsOf(node).map(taintId));
  return Array.isArray(recorded) ? recorded.filter((id): id is string => present.has(id)) : [];
}

export function nodeState(node: KubeObject, manager: string): NodeState {
  return {
    labels: node.metadata?.labels ?? {},
    annotations: node.metadata?.annotations ?? {},
    taints: taintsOf(node).map((t) => ({ ...t })),
    owned: {
      labels: ownedKeys(node, manager, ['metadata', 'labels']),
      annotations: ownedKeys(node, manager, ['metadata', 'annotations']),
      taints: ownedTaints(node, manager),
    },
  };
}

/**
 * A compare-and-swap JSON patch of a node: `taints` (if given) replaces spec.taints, tested first
 * against what the cache saw; each annotation is set, or removed (null) after a test of its value.
 * A concurrent change by anyone fails the patch (422) instead of being lost. Entries apply in order.
 */
export function casPatch(
  node: KubeObject,
  taints: NodeTaint[] | undefined,
  annotations: Iterable<[string, string | null]>,
): JsonPatchOp[] {
  const ops: JsonPatchOp[] = [];
  const current = (node['spec'] as { taints?: NodeTaint[] } | undefined)?.taints;
  const rv = {
    op: 'test' as const,
    path: '/metadata/resourceVersion',
    value: node.metadata?.resourceVersion,
  };
  if (taints) {
    if (current) {
      ops.push(
        { op: 'test', path: '/spec/taints', value: current },
        { op: 'replace', path: '/spec/taints', value: taints },
      );
    } else ops.push(rv, { op: 'add', path: '/spec/taints', value: taints });
  }
  const have = node.metadata?.annotations;
  const set: Record<string, string> = {};
  for (const [k, v] of annotations) {
    const path = `/metadata/annotations/${escapeKey(k)}`;
    if (v === null) {
      if (have && k in have) ops.push({ op: 'test', path, value: have[k] }, { op: 'remove', path });
    } else if (have?.[k] !== v) {
      set[k] = v;
    }
  }
  if (Object.keys(set).length) {
    if (have) {
      for (const [k, v] of Object.entries(set))
        ops.push({ op: 'add', path: `/metadata/annotations/${escapeKey(k)}`, value: v });
    } else {
      // No annotations at all: the map is created whole, so only on the version the cache saw.
      if (!ops.some((o) => o.path === '/metadata/resourceVersion')) ops.unshift(rv);
      ops.push({ op: 'add', path: '/metadata/annotations', value: set });
    }
  }
  return ops;
}

/**
 * The patch that brings the taints `manager` put on `node` to `want`: its own come off or change,
 * anyone else's stay, and its record follows. The node's uid is tested first (a node deleted and
 * recreated under the same name is not this one).
 */
export function taintPatch(node: KubeObject, manager: string, want: NodeTaint[]): JsonPatchOp[] {
  const current = taintsOf(node);
  const owned = new Set(ownedTaints(node, manager));
  const wanted = new Map(want.map((t) => [taintId(t), t]));
  const next = [
    ...current
      .filter((t) => !owned.has(taintId(t)) || wanted.has(taintId(t)))
      .map((t) => wanted.get(taintId(t)) ?? t),
    ...want.filter((t) => !current.some((c) => taintId(c) === taintId(t))),
  ];
  const same =
    next.length === current.length && next.every((t, i) => JSON.stringify(t) === JSON.stringify(current[i]));
  const record = [...wanted.keys()].sort();
  const ops = casPatch(node, same ? undefined : next, [
    [taintRecordKey(manager), record.length ? JSON.stringify(record) : null],
  ]);
  return ops.length ? [{ op: 'test', path: '/metadata/uid', value: node.metadata?.uid }, ...ops] : [];
}

export interface NodePlan extends NodeOutputs {
  /** True when the node already carries exactly this manager's share: nothing to write. */
  inSync: boolean;
  /** Which kinds of output a write would change (empty when in sync). */
  changed: NodeOutputKind[];
  /** Keys held back because another field manager set them to a different value. */
  foreign: { kind: NodeOutputKind; key: string }[];
}

/**
 * What to write: the desired outputs minus the keys another manager already set to a different
 * value (a controller never fights for them, and never forces), and whether the node is already there.
 */
export function planNodeApply(state: NodeState, desired: NodeOutputs): NodePlan {
  const foreign: NodePlan['foreign'] = [];
  const keep = (
    kind: NodeOutputKind,
    want: Record<string, string>,
    have: Record<string, string>,
    owned: Set<string>,
  ) => {
    const out: Record<string, string> = {};
    for (const [k, v] of Object.entries(want)) {
      if (k in have && have[k] !== v && !owned.has(k)) foreign.push({ kind, key: k });
      else out[k] = v;
    }
    return out;
  };
  const ownedLabels = new Set(state.owned.labels);
  const ownedAnnotations = new Set(state.owned.annotations);
  const ownedTaints = new Set(state.owned.taints);
  const labels = keep('label', desired.labels, state.labels, ownedLabels);
  const annotations = keep('annotation', desired.annotations, state.annotations, ownedAnnotations);
  const current = new Map(state.taints.map((t) => [taintId(t), t]));
  const taints = desired.taints.filter((t) => {
    const cur = current.get(taintId(t));
    if (cur && (cur.value ?? '') !== (t.value ?? '') && !ownedTaints.has(taintId(t))) {
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
  if (
    !sameKeys(ownedTaints, taints.map(taintId)) ||
    !taints.every((t) => (current.get(taintId(t))?.value ?? '') === (t.value ?? ''))
  )
    changed.push('taint');
  return { inSync: changed.length === 0, changed, labels, annotations, taints, foreign };
}

/** The keys a write of `plan` changes on the node: set to another value, added, or dropped by this manager. */
export function changedKeys(state: NodeState, plan: NodeOutputs): NodeKey[] {
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
  record('label', plan.labels, state.labels, state.owned.labels);
  record('annotation', plan.annotations, state.annotations, state.owned.annotations);
  const have = new Map(state.taints.map((t) => [taintId(t), t]));
  const want = new Set(plan.taints.map(taintId));
  for (const t of plan.taints) {
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

export interface BurstHoldOptions {
  /** Change events per second above which a burst starts; it ends below half of that. */
  burstPerSecond: number;
  /** The longest a node's write is held while a burst lasts. */
  maxHoldMs: number;
  /** Called with the held nodes that may now be written: the caller queues them again. */
  release: (names: string[]) => void;
  clock?: Clock;
}

// The change rate is averaged over about this long: a burst is seen, and its end too, within a second.
const RATE_TAU_MS = 300;
const RELEASE_PERIOD_MS = 100;

/**
 * Coalesces writes during a burst of changes (a mass scale-up or drain). While changes arrive
 * faster than the writers could write them one by one, a node's write that changes only annotations
 * waits, so the many changes the node gets meanwhile go out as one write once the burst has passed
 * (or after maxHoldMs). Labels and taints, which steer scheduling, never wait; outside a burst
 * nothing does.
 */
export class BurstHold {
  readonly #opts: BurstHoldOptions;
  readonly #clock: Clock;
  // Exponentially weighted change rate, per ms, as of #at.
  #rate = 0;
  #at: number;
  #burst = false;
  /** Held nodes, with the time they were first held. */
  readonly #held = new Map<string, number>();
  #timer: NodeJS.Timeout | undefined;

  constructor(opts: BurstHoldOptions) {
    this.#opts = opts;
    this.#clock = opts.clock ?? performance;
    this.#at = this.#clock.now();
  }

  /** Counts change events (say, pods bound to or gone from nodes). */
  observe(n = 1): void {
    this.#decay();
    this.#rate += n / RATE_TAU_MS;
    this.inBurst();
  }

  inBurst(): boolean {
    this.#decay();
    const perSecond = this.#rate * 1000;
    if (perSecond > this.#opts.burstPerSecond) this.#burst = true;
    else if (perSecond < this.#opts.burstPerSecond / 2) this.#burst = false;
    return this.#burst;
  }

  /** Whether the node's write may wait now; if so it is held until released. */
  hold(name: string): boolean {
    const now = this.#clock.now();
    const since = this.#held.get(name) ?? now;
    if (!this.inBurst() || now - since >= this.#opts.maxHoldMs) return false;
    this.#held.set(name, since);
    this.#timer ??= setInterval(() => this.#tick(), RELEASE_PERIOD_MS).unref();
    return true;
  }

  /** The node was written, is in sync or is gone: it is held no longer. */
  done(name: string): void {
    this.#held.delete(name);
    if (this.#held.size === 0) this.#stopTimer();
  }

  get held(): number {
    return this.#held.size;
  }

  #decay(): void {
    const now = this.#clock.now();
    this.#rate *= Math.exp(-(now - this.#at) / RATE_TAU_MS);
    this.#at = now;
  }

  // Held nodes stay held (and keep their start time) until a reconcile writes them: released again
  // on every tick until then, which the work queue absorbs.
  #tick(): void {
    const burst = this.inBurst();
    const now = this.#clock.now();
    const due: string[] = [];
    for (const [name, since] of this.#held) if (!burst || now - since >= this.#opts.maxHoldMs) due.push(name);
    if (due.length) this.#opts.release(due);
  }

  #stopTimer(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
  }
}

/**
 * Applies one field manager's share of nodes. After each write it expects to see that write come
 * back through the node informer: until it has, a reconcile (on a cache older than the write) that
 * arrives at the same plan sends nothing, while a different plan is written at once. With a
 * BurstHold, annotation-only writes wait while a burst of changes lasts. Every write goes through
 * the manager's WriteLoopBreaker, which may hold keys back.
 */
export class NodeWriter {
  private readonly client: () => KubeClient;
  readonly fieldManager: string;
  private readonly expectations: WriteExpectations<{ plan: string; scheduling: string }>;
  private readonly burst: BurstHold | undefined;
  private readonly breaker: WriteLoopBreaker;
  private readonly decidesFromNode: boolean;

  constructor(
    client: () => KubeClient,
    fieldManager: string,
    nodes: { addEventHandler(h: EventHandler<KubeObject>): void },
    opts: {
      breaker: WriteLoopBreaker;
      burst?: BurstHold;
      /** False when the writer decides without reading the node (see WriteLoopBreaker.write). */
      decidesFromNode?: boolean;
    },
  ) {
    this.client = client;
    this.fieldManager = fieldManager;
    this.burst = opts.burst;
    this.breaker = opts.breaker;
    this.decidesFromNode = opts.decidesFromNode ?? true;
    this.expectations = new WriteExpectations(nodes);
  }

  /**
   * Brings the node to `desired` if it is not there; returns the plan (foreign keys included).
   * `held`: the write waits for a burst to pass; the BurstHold queues the node again.
   * `retryAfterMs`: the loop breaker held keys back; sync again after that long.
   */
  async sync(
    node: KubeObject,
    desired: NodeOutputs,
  ): Promise<NodePlan & { wrote: boolean; held?: boolean; retryAfterMs?: number }> {
    const name = node.metadata!.name!;
    const state = nodeState(node, this.fieldManager);
    let plan = planNodeApply(state, desired);
    if (plan.inSync) {
      this.expectations.forget(name);
      this.burst?.done(name);
      return { ...plan, wrote: false };
    }
    const pending = this.expectations.pending(node);
    if (pending?.plan === planKey(plan).key) return { ...plan, wrote: false };
    const { held, retryAfterMs } = this.breaker.hold(node, this.fieldManager, changedKeys(state, plan));
    const loop = retryAfterMs === undefined ? {} : { retryAfterMs };
    if (held.length) {
      plan = planNodeApply(state, leaveAsIs(state, desired, held));
      if (plan.inSync || pending?.plan === planKey(plan).key) return { ...plan, wrote: false, ...loop };
    }
    const { scheduling, key } = planKey(plan);
    // Only annotations change (judged against a write still on its way, if any): this may wait.
    const annotationsOnly = pending
      ? pending.scheduling === scheduling
      : plan.changed.every((k) => k === 'annotation');
    if (this.burst && annotationsOnly && this.burst.hold(name))
      return { ...plan, wrote: false, held: true, ...loop };

    const keys = changedKeys(state, plan);
    const taintKeys = keys.filter((k) => k.startsWith('taint '));
    let written: KubeObject | undefined;
    let patching = false;
    try {
      if (plan.changed.some((k) => k !== 'taint')) {
        const body = applyTarget(Resources.nodes, node);
        body.metadata.labels = plan.labels;
        body.metadata.annotations = plan.annotations;
        written = await this.breaker.write(
          node,
          this.fieldManager,
          keys.filter((k) => !taintKeys.includes(k)),
          () => this.client().apply(Resources.nodes, body, { fieldManager: this.fieldManager }),
          { decidesFromNode: this.decidesFromNode },
        );
      }
      if (plan.changed.includes('taint')) {
        // Judged on the node as the apply left it, if there was one: the patch tests what it replaces.
        const ops = taintPatch(written ?? node, this.fieldManager, plan.taints);
        if (ops.length) {
          patching = true;
          written = await this.breaker.write(
            node,
            this.fieldManager,
            taintKeys,
            () =>
              this.client().patch(Resources.nodes, name, ops, {
                type: 'json',
                fieldManager: this.fieldManager,
              }),
            { decidesFromNode: this.decidesFromNode },
          );
        }
      }
    } catch (e) {
      // The node was deleted meanwhile: the uid precondition refused to recreate it.
      if (isObjectGone(e)) {
        this.forget(name);
        return { ...plan, wrote: false };
      }
      // Any other conflict: another manager wrote one of these keys after our cache saw the node.
      // The retry (with backoff) sees that write and holds the key back. A failed test of the taint
      // patch says the same, and the node's watch event brings it back here anyway.
      if (!(patching && e instanceof ApiError && e.status === 422)) throw e;
    }
    if (!written) return { ...plan, wrote: false, ...loop };
    this.expectations.expect(name, written.metadata?.resourceVersion, { plan: key, scheduling });
    this.burst?.done(name);
    return { ...plan, wrote: true, ...loop };
  }

  forget(name: string): void {
    this.expectations.forget(name);
    this.burst?.done(name);
  }
}

/** What identifies a plan for the write expectations, and its part that steers scheduling. */
function planKey(plan: NodePlan): { scheduling: string; key: string } {
  const scheduling = JSON.stringify([plan.labels, plan.taints]);
  return { scheduling, key: JSON.stringify([scheduling, plan.annotations]) };
}
