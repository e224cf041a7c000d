// Interning: values that repeat across cached objects (namespaces, node names, label values, and
// the owner references and container lists a ReplicaSet's pods have alike) are kept once.
// Tenants write most of them, so the table holds a value only while a cached object holds it, and
// never more than INTERN_BUDGET characters: the informer says when an object enters and leaves its
// cache (lifecycle), and each value counts the cached objects holding it; the last one gone takes
// it out. Which values an object holds is asked of its transform again, run on the object itself (a
// slim transform gives back what it is given, so it interns the same values): nothing is kept per
// object for it. Objects made outside an informer (webhooks, explain) only read the table. A value
// over MAX_INTERNED characters is never interned: long values are seldom shared, and a tenant's
// large ones stay their own object's.
import type { KubeObject } from '../runtime/api/meta.ts';
import type { CacheLifecycle } from '../runtime/cache/informer.ts';
import { gauge } from '../runtime/observability/metrics.ts';

const MAX_INTERNED = 512;
const INTERN_BUDGET = 8 * 1024 * 1024;
let internedChars = 0;

/** Values by their key, each with the number of cached objects holding it. */
class Table<V> {
  readonly entries = new Map<string, { value: V; refs: number }>();

  get(key: string): V | undefined {
    return this.entries.get(key)?.value;
  }

  hold(key: string, value: V): void {
    const e = this.entries.get(key);
    if (e) e.refs++;
    else if (internedChars + key.length <= INTERN_BUDGET) {
      this.entries.set(key, { value, refs: 1 });
      internedChars += key.length;
    }
  }

  // A value the budget kept out when an object was cached but let in for a later one is counted one
  // short: it leaves the table early (only its sharing is lost), never late.
  release(key: string): void {
    const e = this.entries.get(key);
    if (e && --e.refs <= 0) {
      this.entries.delete(key);
      internedChars -= key.length;
    }
  }
}

// Two tables: a tenant's string never finds a structure, whatever it spells.
const strings = new Table<string>();
const structures = new Table<object>();

type Interned = string | { key: string; value: object };
/** The values the transform running now interns, when a lifecycle asks (transforms are synchronous). */
let recording: Interned[] | undefined;

export function intern(s: string): string;
export function intern(s: string | undefined): string | undefined;
export function intern(s: string | undefined): string | undefined {
  if (s === undefined || s.length > MAX_INTERNED) return s;
  const value = strings.get(s) ?? s;
  recording?.push(value);
  return value;
}

/** `v` and everything in it frozen: a structure shared by cached objects is read by each of them. */
export function deepFreeze<T>(v: T): T {
  if (v && typeof v === 'object' && !Object.isFrozen(v)) {
    Object.freeze(v); // first, so that a cycle ends here
    for (const x of Object.values(v)) deepFreeze(x);
  }
  return v;
}

/**
 * A structure many cached objects have alike, by a key that spells its content: the table's, else
 * `own` where it is one already (a slim object's, its lifecycle asking), else the one `make` gives.
 * Frozen, as it may be shared: a cached object is only read.
 */
export function share<T extends object>(key: string, own: unknown, make: () => T): T {
  if (key.length > MAX_INTERNED) return make();
  const value = (structures.get(key) ?? (Object.isFrozen(own) ? own : Object.freeze(make()))) as T;
  recording?.push({ key, value });
  return value;
}

/** What the tables hold now. */
export const internedSize = (): { strings: number; structures: number; chars: number } => ({
  strings: strings.entries.size,
  structures: structures.entries.size,
  chars: internedChars,
});
gauge('berth_interned_strings', 'Strings the slim caches share, each held by a cached object', [], (g) =>
  g.set(strings.entries.size),
);
gauge(
  'berth_interned_structures',
  'Owner references and container lists the slim caches share, each held by a cached object',
  [],
  (g) => g.set(structures.entries.size),
);
gauge(
  'berth_interned_characters',
  `Characters of the strings and structure keys the slim caches share (at most ${INTERN_BUDGET})`,
  [],
  (g) => g.set(internedChars),
);

/** What `fn` interns for a slim object it made: what it interns when run on it again. */
function internedBy<T>(fn: (obj: KubeObject) => T, obj: T): Interned[] {
  recording = [];
  try {
    fn(obj as KubeObject);
    return recording;
  } finally {
    recording = undefined;
  }
}

function hold(v: Interned): void {
  if (typeof v === 'string') strings.hold(v, v);
  else structures.hold(v.key, v.value);
}

function release(v: Interned): void {
  if (typeof v === 'string') strings.release(v);
  else structures.release(v.key);
}

/**
 * An informer transform that interns: its informer counts the values it interned in the table
 * while the object is cached. Every slim informer is made with it. `fn` must be deterministic (the
 * lifecycle asks it twice, on entry and on leaving) and give back what it is given (fn(fn(x)) is
 * fn(x)), so that what it interns for an object is what the object holds.
 */
export function interning<T extends KubeObject>(
  name: string,
  fn: (obj: KubeObject) => T,
): { name: string; fn: (obj: KubeObject) => T; lifecycle: CacheLifecycle<T> } {
  return {
    name,
    fn,
    lifecycle: {
      cached: (obj) => internedBy(fn, obj).forEach(hold),
      dropped: (obj) => internedBy(fn, obj).forEach(release),
    },
  };
}
