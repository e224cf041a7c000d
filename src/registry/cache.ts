// The client's memory: bounded caches with an expiry, what it learned of images, and single-flight.
// Bounded because their keys come from pods (images, pull secrets), which any user can create.
import { Lru } from '../runtime/lru.ts';
import {
  mayRead,
  withReader,
  type KnownDigest,
  type KnownImages,
  type KnownLookups,
  type KnownTag,
  type Readers,
} from './known.ts';
import { registryMetrics } from './metrics.ts';

/** An LRU whose entries expire: `get` answers fresh entries only, `stale` any entry still held. */
export class TtlCache<V> {
  readonly #lru: Lru<{ value: V; expiresAt: number }>;
  readonly #now: () => number;

  constructor(max: number, now: () => number = Date.now) {
    this.#lru = new Lru(max);
    this.#now = now;
  }

  get size(): number {
    return this.#lru.size;
  }

  get(key: string): V | undefined {
    const e = this.#lru.get(key);
    return e && e.expiresAt > this.#now() ? e.value : undefined;
  }

  /** The entry even when expired: a tag's old digest, to revalidate against. */
  stale(key: string): V | undefined {
    return this.#lru.get(key)?.value;
  }

  /** Every fresh entry and when it expires (ms), leaving the order alone. */
  *fresh(): Generator<[key: string, value: V, expiresAt: number]> {
    const now = this.#now();
    for (const [key, e] of this.#lru.entries()) if (e.expiresAt > now) yield [key, e.value, e.expiresAt];
  }

  set(key: string, value: V, ttlMs: number): void {
    this.#lru.set(key, { value, expiresAt: this.#now() + ttlMs });
  }

  delete(key: string): void {
    this.#lru.delete(key);
  }
}

/**
 * What the client has learned of images: each tag's digest (trusted for `tagTtlMs`, then
 * revalidated) and each digest's platforms, with the readers each may answer (known.ts); whoever
 * listens is told of every lesson.
 */
export class ImageMemory {
  readonly #digests: Lru<KnownDigest & Readers>;
  readonly #tags: TtlCache<KnownTag & Readers>;
  readonly #tagTtlMs: number;
  readonly #listeners: (() => void)[] = [];
  readonly lookups: KnownLookups = {
    tag: (canonical) => this.#tags.get(canonical),
    platforms: (digest) => this.#digests.get(digest),
  };

  constructor(size: number, tagTtlMs: number) {
    this.#digests = new Lru(size);
    this.#tags = new TtlCache(size);
    this.#tagTtlMs = tagTtlMs;
  }

  onLearn(listener: () => void): void {
    this.#listeners.push(listener);
  }

  /** A tag's last answer, expired or not: its old digest, to revalidate against. */
  staleTag(canonical: string): (KnownTag & Readers) | undefined {
    return this.#tags.stale(canonical);
  }

  /** A tag's digest as `reader`'s registry answered it; the readers stay while the digest does. */
  learnTag(reader: string, canonical: string, tag: Omit<KnownTag, 'readAt'>): void {
    const before = this.#tags.stale(canonical);
    const readers = withReader(before?.digest === tag.digest ? before.readers : [], reader);
    this.#tags.set(canonical, { ...tag, readAt: Date.now(), readers }, this.#tagTtlMs);
    this.#learned();
  }

  /**
   * A digest's cached platforms, only if `reader` may read them (it read them itself, or someone
   * read them anonymously). A manifest naming a digest (a tag's answer, an index's entry, a HEAD's
   * Docker-Content-Digest) proves nothing: any registry may name another tenant's private digest
   * (issue 59); a reader the entry does not answer reads the digest from its own registry.
   */
  digest(reader: string, digest: string): KnownDigest | undefined {
    const seen = this.#digests.get(digest);
    const known = seen && mayRead(seen, [reader]) ? seen : undefined;
    registryMetrics.cache.inc({ cache: 'digest', result: known ? 'hit' : 'miss' });
    return known;
  }

  /** A digest's platforms as `reader` read them. */
  learnDigest(reader: string, digest: string, found: KnownDigest): void {
    const readers = withReader(this.#digests.peek(digest)?.readers ?? [], reader);
    this.#digests.set(digest, { ...found, readers });
    this.#learned();
  }

  known(): KnownImages {
    const tags = [...this.#tags.fresh()].map(
      ([canonical, tag, expiresAt]) => [canonical, { ...tag, expiresAt }] as const,
    );
    return { tags: new Map(tags), digests: new Map(this.#digests.entries()) };
  }

  #learned(): void {
    for (const listener of this.#listeners) listener();
  }
}

/**
 * One promise per key while it runs: the callers of one image (or one digest, or one token) share
 * one request. Each caller waits under its own signal, so one giving up does not fail the others;
 * once every caller has given up, the work's own signal aborts it (its requests end, and free
 * their places in the client's limits), and the next caller starts it anew. A caller without a
 * signal never gives up.
 */
export class Flights<T> {
  readonly #running = new Map<string, { promise: Promise<T>; stop: AbortController; callers: number }>();

  /** The number of keys in flight. */
  get size(): number {
    return this.#running.size;
  }

  run(key: string, signal: AbortSignal | undefined, work: (signal: AbortSignal) => Promise<T>): Promise<T> {
    let f = this.#running.get(key);
    if (!f) {
      const stop = new AbortController();
      const flight = { promise: work(stop.signal), stop, callers: 0 };
      const done = () => {
        if (this.#running.get(key) === flight) this.#running.delete(key);
      };
      flight.promise.then(done, done);
      this.#running.set(key, flight);
      f = flight;
    }
    const flight = f;
    if (!signal) {
      flight.callers = Infinity;
      return flight.promise;
    }
    flight.callers++;
    const answer = abortable(flight.promise, signal);
    const left = () => {
      if (--flight.callers > 0 || !signal.aborted) return;
      if (this.#running.get(key) === flight) this.#running.delete(key);
      flight.stop.abort(signal.reason);
    };
    answer.then(left, left);
    return answer;
  }
}

/** p, or the signal's reason when it aborts first. */
export function abortable<T>(p: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    p.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}
