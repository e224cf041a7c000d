// The loop breaker: every node write Berth makes, by any capability, goes through here. It is
// counted by field manager (berth_node_writes_total), and the keys it changes are remembered per
// node. A key with `limit` counted writes on one node within the window is held back: whoever
// wants to write it next leaves it as it is until the window has moved on, with a Warning event on
// the node and berth_node_write_loops_total. Ownership checks keep capabilities from fighting over
// a key they can see; this bounds the fights nobody foresaw to `limit` writes per key and window
// instead of dozens a second. Two kinds of fight:
// - feedback through the node: a writer whose decision reads the node (derived labels, gates) reacts
//   to another's write, which reacts to its own, each on its own keys. Every write of such a
//   writer counts.
// - one key undone and put back: a writer whose decision does not read the node (agent claims
//   follow pods) can only fight over its own keys. Only its contested writes count, those that
//   change a key someone else changed since its last write; so claims that follow pod churn,
//   however fast, are never held.
import type { NodeOutputKind } from './write.ts';
import { nodeWriteMetrics } from './metrics.ts';
import type { KubeObject } from '../../runtime/api/meta.ts';

/** A key of a node, with its kind: "annotation x.gates.berth.dev/gated-at", "taint k" (taints by key). */
export type NodeKey = `${NodeOutputKind} ${string}`;
export const nodeKey = (kind: NodeOutputKind, key: string): NodeKey => `${kind} ${key}`;

const ABSENT = '\u0000absent';

/** What a node says for a key: a label's or annotation's value, or every taint with the key. */
export function valueOf(node: KubeObject, key: NodeKey): string {
  const i = key.indexOf(' ');
  const kind = key.slice(0, i) as NodeOutputKind;
  const k = key.slice(i + 1);
  if (kind === 'label') return node.metadata?.labels?.[k] ?? ABSENT;
  if (kind === 'annotation') return node.metadata?.annotations?.[k] ?? ABSENT;
  const taints = (
    (node as { spec?: { taints?: { key: string; value?: string; effect: string }[] } }).spec?.taints ?? []
  )
    .filter((t) => t.key === k)
    .map((t) => `${t.value ?? ''}:${t.effect}`)
    .sort();
  return taints.length ? taints.join(',') : ABSENT;
}

/** Whether a cached node is older than a write whose answer carried `written` (etcd revisions). */
function olderThan(node: KubeObject, written: string | undefined): boolean {
  const a = Number(node.metadata?.resourceVersion);
  const b = Number(written);
  return Number.isSafeInteger(a) && Number.isSafeInteger(b) && a < b;
}

export interface LoopTrip {
  node: KubeObject;
  key: NodeKey;
  /** The field managers whose writes of the key are in the window. */
  writers: string[];
  writes: number;
  windowMs: number;
  /** When the key may be written again (epoch ms). */
  until: number;
}

export interface WriteLoopBreakerOptions {
  /**
   * Writes of one key of one node within the window; the next waits. 10 a minute: a key changes
   * when its inputs do (a gate's gated-at twice per hold, a label when the labels it derives from
   * change, an agent label when the first or last pod comes or goes), so even a busy node writes
   * one key a few times a minute, while a fight writes it dozens of times a second.
   */
  limit?: number;
  windowMs?: number;
  /** Epoch milliseconds. */
  clock?: () => number;
  /** Told once per trip (a key held back after being free): the Warning event and the log line. */
  onTrip?: (trip: LoopTrip) => void;
}

interface KeyWrites {
  /** Times of the counted writes in the window, oldest first, and who wrote them. */
  writes: { at: number; by: string }[];
  /**
   * Of the writers that decide without reading the node, by field manager: the key's value right
   * after its last write, and the node's resourceVersion then (what tells a contested write). The
   * others count every write and need none.
   */
  after?: Map<string, { value: string; resourceVersion: string | undefined; at: number }>;
  /** Set while held back: the field managers already counted in berth_node_write_loops_total. */
  refused?: Set<string>;
}

/** One map for every node's keys: a node with a key written holds one entry, not a map of its own. */
const entryKey = (node: string, key: NodeKey) => `${node}\u0000${key}`;

export class WriteLoopBreaker {
  readonly limit: number;
  readonly windowMs: number;
  readonly #clock: () => number;
  readonly #onTrip: ((trip: LoopTrip) => void) | undefined;
  /** By node name and key (entryKey). */
  readonly #keys = new Map<string, KeyWrites>();
  #swept = 0;

  constructor(opts: WriteLoopBreakerOptions = {}) {
    this.limit = opts.limit ?? 10;
    this.windowMs = opts.windowMs ?? 60_000;
    this.#clock = opts.clock ?? Date.now;
    this.#onTrip = opts.onTrip;
  }

  /**
   * Of the keys `fieldManager` is about to change on `node`, those it must leave as they are now,
   * and in how long the first of them may be written again.
   */
  hold(node: KubeObject, fieldManager: string, keys: NodeKey[]): { held: NodeKey[]; retryAfterMs?: number } {
    const now = this.#clock();
    const name = node.metadata?.name ?? '';
    const held: NodeKey[] = [];
    let retryAfterMs: number | undefined;
    for (const key of keys) {
      const k = this.#keys.get(entryKey(name, key));
      if (!k) continue;
      this.#prune(k, now);
      if (k.writes.length < this.limit) {
        delete k.refused;
        continue;
      }
      held.push(key);
      const after = k.writes[0]!.at + this.windowMs - now;
      retryAfterMs = Math.min(retryAfterMs ?? after, after);
      if (!k.refused) {
        k.refused = new Set();
        this.#onTrip?.({
          node,
          key,
          writers: [...new Set(k.writes.map((w) => w.by))].sort(),
          writes: k.writes.length,
          windowMs: this.windowMs,
          until: now + after,
        });
      }
      if (!k.refused.has(fieldManager)) {
        k.refused.add(fieldManager);
        nodeWriteMetrics.loops.inc({ field_manager: fieldManager });
      }
    }
    return retryAfterMs === undefined ? { held } : { held, retryAfterMs };
  }

  /**
   * Sends one write of `node` (as the writer saw it) that changes `keys`: counted, and, once it
   * succeeded, remembered with the node it returned. It counts against the keys when the writer's
   * decision reads the node (`decidesFromNode`, the default), or else when it puts back a key that
   * someone else changed since.
   */
  async write<T>(
    node: KubeObject,
    fieldManager: string,
    keys: NodeKey[],
    send: () => Promise<T>,
    opts: { decidesFromNode?: boolean } = {},
  ): Promise<T> {
    nodeWriteMetrics.writes.inc({ field_manager: fieldManager });
    const result = await send();
    const now = this.#clock();
    const name = node.metadata?.name ?? '';
    const returned = (result as KubeObject | undefined)?.metadata ? (result as KubeObject) : undefined;
    const fromNode = opts.decidesFromNode !== false;
    for (const key of keys) {
      const at = entryKey(name, key);
      let k = this.#keys.get(at);
      if (!k) this.#keys.set(at, (k = { writes: [] }));
      this.#prune(k, now);
      if (fromNode || this.#contested(k, node, key, fieldManager)) {
        k.writes.push({ at: now, by: fieldManager });
        // Only the newest `limit` writes decide when the key frees up.
        if (k.writes.length > this.limit) k.writes.shift();
      }
      if (fromNode) continue;
      if (returned)
        (k.after ??= new Map()).set(fieldManager, {
          value: valueOf(returned, key),
          resourceVersion: returned.metadata?.resourceVersion,
          at: now,
        });
      else k.after?.delete(fieldManager);
    }
    this.#sweep(now);
    return result;
  }

  /** Keys of nodes currently tracked: bounded by the writes of the last window. */
  get tracked(): number {
    return this.#keys.size;
  }

  // Contested: the key is not what this writer left it at, and not because the cache is older than
  // that write (a write followed at once by the next one sees its own old node).
  #contested(k: KeyWrites, node: KubeObject, key: NodeKey, fieldManager: string): boolean {
    const last = k.after?.get(fieldManager);
    return !!last && last.value !== valueOf(node, key) && !olderThan(node, last.resourceVersion);
  }

  #prune(k: KeyWrites, now: number): void {
    while (k.writes.length && k.writes[0]!.at <= now - this.windowMs) k.writes.shift();
  }

  // Once a window, forget the keys nobody wrote or contested within it: memory follows the recent
  // writes only, and a fight that comes back later is counted afresh.
  #sweep(now: number): void {
    if (now - this.#swept < this.windowMs) return;
    this.#swept = now;
    for (const [at, k] of this.#keys) {
      this.#prune(k, now);
      for (const [fm, a] of k.after ?? []) if (a.at <= now - this.windowMs) k.after!.delete(fm);
      if (k.writes.length === 0 && !k.after?.size) this.#keys.delete(at);
    }
  }
}
