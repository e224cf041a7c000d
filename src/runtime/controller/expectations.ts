// Expectations, after client-go's controller expectations: after a controller writes an object it
// expects to see that write come back through its informer. Until it has, the cache is older than
// the write, and a reconcile working from it would redo (or trip over) the write it just made.
// It stays in the runtime, beside the controller: it knows an object's name, its resourceVersion and
// an informer, nothing of nodes or of Berth, as client-go keeps its expectations in its controller
// package. The node writers (src/policy/nodes) use it today; any controller that writes what it
// watches can.
import type { EventHandler } from '../cache/informer.ts';
import type { KubeObject } from '../api/meta.ts';

// Past this a write's echo counts as seen anyway (a relist can skip it); writes stay guarded by their preconditions.
export const maxWaitMs = 5000;

export class WriteExpectations<T = true> {
  /**
   * The writes whose echo has not come, oldest first. An entry goes when its echo (or a deletion)
   * comes, or past maxWaitMs, so the map holds only the last few seconds' writes however many
   * objects come and go.
   */
  private readonly expected = new Map<string, { resourceVersion: string; at: number; data: T }>();
  private readonly keyOf: (o: KubeObject) => string;
  /**
   * The last version each key's events brought in the past maxWaitMs, oldest first. A write's echo
   * (and whatever came after it: a Pod deleted by someone else at once) can reach the informer
   * before the write's answer reaches the writer; expected only then, it would wait for an event
   * that has already come.
   */
  private readonly recent = new Map<string, { resourceVersion: string | undefined; at: number }>();

  /** Objects are told apart by `key`: their name by default; namespaced objects need their namespace too. */
  constructor(
    informer: { addEventHandler(h: EventHandler<KubeObject>): void },
    key: (o: KubeObject) => string = (o) => o.metadata?.name ?? '',
  ) {
    this.keyOf = key;
    const observe = (o: KubeObject) => {
      const name = this.keyOf(o);
      this.remember(name, o.metadata?.resourceVersion);
      const e = this.expected.get(name);
      if (e && newerOrSame(o.metadata?.resourceVersion, e.resourceVersion)) this.expected.delete(name);
    };
    // A deletion settles whatever was expected of the object: there is nothing left to catch up on.
    const gone = (o: KubeObject) => {
      const name = this.keyOf(o);
      this.remember(name, o.metadata?.resourceVersion);
      this.expected.delete(name);
    };
    informer.addEventHandler({ onAdd: observe, onUpdate: (_old, o) => observe(o), onDelete: gone });
  }

  /** Records a write of the object of key `name` that the apiserver answered with `resourceVersion`, and what was written. */
  expect(name: string, resourceVersion: string | undefined, data: T): void {
    if (!resourceVersion) return;
    const now = Date.now();
    this.expected.delete(name);
    for (const [key, e] of this.expected) {
      if (now - e.at <= maxWaitMs) break;
      this.expected.delete(key);
    }
    // Its echo already came: nothing to wait for.
    if (newerOrSame(this.recent.get(name)?.resourceVersion, resourceVersion)) return;
    this.expected.set(name, { resourceVersion, at: now, data });
  }

  /** While `obj`, as cached, is older than the last write to it: what that write was. */
  pending(obj: KubeObject): T | undefined {
    const name = this.keyOf(obj);
    const e = this.expected.get(name);
    if (!e) return undefined;
    if (newerOrSame(obj.metadata?.resourceVersion, e.resourceVersion) || Date.now() - e.at > maxWaitMs) {
      this.expected.delete(name);
      return undefined;
    }
    return e.data;
  }

  /**
   * What was last written to the object of key `name` while the cache has not shown it yet, for an
   * object the cache may not hold at all (a create not yet seen, a delete already seen).
   */
  pendingKey(name: string): T | undefined {
    const e = this.expected.get(name);
    if (!e) return undefined;
    if (Date.now() - e.at > maxWaitMs) {
      this.expected.delete(name);
      return undefined;
    }
    return e.data;
  }

  forget(name: string): void {
    this.expected.delete(name);
  }

  /** How many writes wait for their echo (for tests: it stays bounded). */
  get size(): number {
    return this.expected.size;
  }

  private remember(name: string, resourceVersion: string | undefined): void {
    const now = Date.now();
    this.recent.delete(name);
    this.recent.set(name, { resourceVersion, at: now });
    for (const [key, r] of this.recent) {
      if (now - r.at <= maxWaitMs) break;
      this.recent.delete(key);
    }
  }
}

// resourceVersions are opaque, but the apiserver's are etcd revisions: integers that only grow.
function newerOrSame(a: string | undefined, b: string): boolean {
  if (a === undefined) return false;
  if (a === b) return true;
  return /^\d+$/.test(a) && /^\d+$/.test(b) && BigInt(a) >= BigInt(b);
}
