// The compare-and-swap node writer: a JSON patch that first tests what it replaces against the node
// as the cache saw it, so a concurrent change by anyone fails the write (422) instead of being lost.
// It writes what server-side apply cannot own per key: spec.taints, an atomic list whose
// managedFields say who last wrote the list, not whose each taint is (the apply writer's taints),
// and a gate's taint, put on at admission under the node creator's name (docs/decisions/0006).
import { isObjectGone } from '../../runtime/client/apply.ts';
import type { EventHandler } from '../../runtime/cache/informer.ts';
import { ApiError, type KubeClient } from '../../runtime/client/client.ts';
import { WriteExpectations } from '../../runtime/controller/expectations.ts';
import type { NodeKey, WriteLoopBreaker } from './loopbreaker.ts';
import { ownedTaints, taintId, taintRecordKey, taintRecordValue, taintsOf, type NodeTaint } from './write.ts';
import { Resources, type KubeObject } from '../../runtime/api/meta.ts';
import { escapeKey, type JsonPatchOp } from '../../runtime/api/jsonpatch.ts';

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
 * anyone else's stay (a wanted taint someone else has on the node is left to them), and its record
 * follows. The node's uid is tested first (a node deleted and recreated under the same name is not
 * this one).
 */
export function taintPatch(node: KubeObject, manager: string, want: NodeTaint[]): JsonPatchOp[] {
  const current = taintsOf(node);
  const owned = new Set(ownedTaints(node, manager));
  const present = new Set(current.map(taintId));
  const wanted = new Map(
    want.filter((t) => owned.has(taintId(t)) || !present.has(taintId(t))).map((t) => [taintId(t), t]),
  );
  const next = [
    ...current
      .filter((t) => !owned.has(taintId(t)) || wanted.has(taintId(t)))
      .map((t) => (owned.has(taintId(t)) ? wanted.get(taintId(t))! : t)),
    ...[...wanted.values()].filter((t) => !present.has(taintId(t))),
  ];
  const same =
    next.length === current.length && next.every((t, i) => JSON.stringify(t) === JSON.stringify(current[i]));
  const ops = casPatch(node, same ? undefined : next, [
    [taintRecordKey(manager), taintRecordValue([...wanted.values()])],
  ]);
  return ops.length ? [{ op: 'test', path: '/metadata/uid', value: node.metadata?.uid }, ...ops] : [];
}

/**
 * How a write ended. Both node writers share one conflict policy: a write is never sent again from
 * the copy that failed it. On `conflict` (a test failed: the node changed after the cache saw it)
 * the caller decides again from the fresh node its watch brings; `gone` (the node was deleted, or
 * deleted and recreated under its name) ends the writer's interest in the node.
 */
export type CasResult =
  { status: 'written'; node: KubeObject } | { status: 'conflict'; message: string } | { status: 'gone' };

export interface NodeWriterOptions {
  /** The manager's loop breaker (PolicyKit.nodeWrites): every node write passes it. */
  breaker: WriteLoopBreaker;
  /** False when the writer decides without reading the node (see WriteLoopBreaker.write). */
  decidesFromNode?: boolean;
}

/** What the writers watch to see their writes come back. */
export type NodeEvents = { addEventHandler(h: EventHandler<KubeObject>): void };

/**
 * Writes nodes by compare-and-swap JSON patch under one field manager, each write through the loop
 * breaker. After a write it expects to see it come back through the node informer: until it has,
 * the cache is older than the write and `pending` says what the write was (`T`), so a reconcile
 * working from that cache neither redoes nor trips over it.
 */
export class CasNodeWriter<T = true> {
  readonly fieldManager: string;
  readonly #client: () => KubeClient;
  readonly #breaker: WriteLoopBreaker;
  readonly #decidesFromNode: boolean;
  readonly #expectations: WriteExpectations<T>;

  constructor(client: () => KubeClient, fieldManager: string, nodes: NodeEvents, opts: NodeWriterOptions) {
    this.#client = client;
    this.fieldManager = fieldManager;
    this.#breaker = opts.breaker;
    this.#decidesFromNode = opts.decidesFromNode ?? true;
    this.#expectations = new WriteExpectations(nodes);
  }

  /** While the cached `node` is older than this writer's last write to it: what that write was. */
  pending(node: KubeObject): T | undefined {
    return this.#expectations.pending(node);
  }

  /** Of the keys this writer is about to change on `node`, those the loop breaker holds back. */
  hold(node: KubeObject, keys: NodeKey[]): { held: NodeKey[]; retryAfterMs?: number } {
    return this.#breaker.hold(node, this.fieldManager, keys);
  }

  /** Sends one write of `node` (as the cache has it) that changes `keys`, through the loop breaker. */
  send<R>(node: KubeObject, keys: NodeKey[], write: () => Promise<R>): Promise<R> {
    return this.#breaker.write(node, this.fieldManager, keys, write, {
      decidesFromNode: this.#decidesFromNode,
    });
  }

  /** Sends the patch `ops` of `node` that changes `keys`; expects nothing (see `write`). */
  async patch(node: KubeObject, keys: NodeKey[], ops: JsonPatchOp[]): Promise<CasResult> {
    const name = node.metadata!.name!;
    try {
      const written = await this.send(node, keys, () =>
        this.#client().patch(Resources.nodes, name, ops, { type: 'json', fieldManager: this.fieldManager }),
      );
      return { status: 'written', node: written };
    } catch (e) {
      if (isObjectGone(e)) {
        this.forget(name);
        return { status: 'gone' };
      }
      if (e instanceof ApiError && e.status === 422) return { status: 'conflict', message: e.message };
      throw e;
    }
  }

  /** `patch`, then expects its echo: until the cache has it, `pending` answers `data`. */
  async write(node: KubeObject, keys: NodeKey[], ops: JsonPatchOp[], data: T): Promise<CasResult> {
    const r = await this.patch(node, keys, ops);
    if (r.status === 'written') this.expect(node.metadata!.name!, r.node, data);
    return r;
  }

  /** Records a write of node `name` that the apiserver answered with `written`. */
  expect(name: string, written: KubeObject, data: T): void {
    this.#expectations.expect(name, written.metadata?.resourceVersion, data);
  }

  forget(name: string): void {
    this.#expectations.forget(name);
  }
}
