// The loop breaker: every node write Berth makes, by any capability, goes through here. It is
// counted by field manager (berth_node_writes_total), and the keys it changes are remembered per
// node. A key that Berth has already written `limit` times on one node within the window is held
// back: whoever wants to write it next leaves it as it is until the window has moved on, with a
// Warning event on the node and berth_node_write_loops_total. Ownership checks keep capabilities
// from fighting over a key they can see; this bounds the fights nobody foresaw (two policies
// feeding each other's inputs) to `limit` writes per key and window instead of dozens a second.
import type { NodeOutputKind } from './nodeapply.ts';
import { nodeWriteMetrics } from './metrics.ts';
import type { KubeObject } from './types.ts';

/** A key of a node, with its kind: "annotation x.gates.berth.dev/gated-at", "taint k" (taints by key). */
export type NodeKey = `${NodeOutputKind} ${string}`;
export const nodeKey = (kind: NodeOutputKind, key: string): NodeKey => `${kind} ${key}`;

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
  /** Times of the writes in the window, oldest first, and who wrote them. */
  writes: { at: number; by: string }[];
  /** Set while held back: the field managers already counted in berth_node_write_loops_total. */
  refused?: Set<string>;
}

export class WriteLoopBreaker {
  readonly limit: number;
  readonly windowMs: number;
  readonly #clock: () => number;
  readonly #onTrip: ((trip: LoopTrip) => void) | undefined;
  /** By node name, then key. */
  readonly #nodes = new Map<string, Map<NodeKey, KeyWrites>>();
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
    const byKey = this.#nodes.get(node.metadata?.name ?? '');
    const held: NodeKey[] = [];
    let retryAfterMs: number | undefined;
    for (const key of keys) {
      const k = byKey?.get(key);
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

  /** Sends one write of `node` that changes `keys`: counted, and remembered once it succeeded. */
  async write<T>(
    node: KubeObject,
    fieldManager: string,
    keys: NodeKey[],
    send: () => Promise<T>,
  ): Promise<T> {
    nodeWriteMetrics.writes.inc({ field_manager: fieldManager });
    const result = await send();
    const now = this.#clock();
    const name = node.metadata?.name ?? '';
    let byKey = this.#nodes.get(name);
    if (!byKey && keys.length) this.#nodes.set(name, (byKey = new Map()));
    for (const key of keys) {
      let k = byKey!.get(key);
      if (!k) byKey!.set(key, (k = { writes: [] }));
      this.#prune(k, now);
      k.writes.push({ at: now, by: fieldManager });
      // Only the newest `limit` writes decide when the key frees up.
      if (k.writes.length > this.limit) k.writes.shift();
    }
    this.#sweep(now);
    return result;
  }

  /** Keys of nodes currently tracked: bounded by the writes of the last window. */
  get tracked(): number {
    let n = 0;
    for (const m of this.#nodes.values()) n += m.size;
    return n;
  }

  #prune(k: KeyWrites, now: number): void {
    while (k.writes.length && k.writes[0]!.at <= now - this.windowMs) k.writes.shift();
  }

  // Once a window, forget the keys nobody wrote within it, so memory follows the recent writes only.
  #sweep(now: number): void {
    if (now - this.#swept < this.windowMs) return;
    this.#swept = now;
    for (const [name, byKey] of this.#nodes) {
      for (const [key, k] of byKey) {
        this.#prune(k, now);
        if (k.writes.length === 0) byKey.delete(key);
      }
      if (byKey.size === 0) this.#nodes.delete(name);
    }
  }
}
