// The decisions of the recorder, apart from its I/O (client-go's EventCorrelator): which events are
// dropped by the per-object spam filter and how repeats become a series, in bounded memory.
import { Lru } from '../lru.ts';

/**
 * client-go's EventSourceObjectSpamFilter: a token bucket per object, `burst` tokens refilled one
 * per `refillMs`. Bounded like client-go's, so a stream of new objects cannot grow it.
 */
export class SpamFilter {
  readonly #buckets: Lru<{ tokens: number; at: number }>;
  readonly #burst: number;
  readonly #refillMs: number;

  constructor(opts: { burst?: number; refillMs?: number; maxKeys?: number } = {}) {
    this.#burst = opts.burst ?? 25;
    this.#refillMs = opts.refillMs ?? 5 * 60_000;
    this.#buckets = new Lru(opts.maxKeys ?? 4096);
  }

  /** Takes a token for `key` if there is one. */
  allow(key: string, now: number): boolean {
    const b = this.#buckets.get(key) ?? { tokens: this.#burst, at: now };
    b.tokens = Math.min(this.#burst, b.tokens + Math.max(0, now - b.at) / this.#refillMs);
    b.at = now;
    this.#buckets.set(key, b);
    if (b.tokens < 1) return false;
    b.tokens--;
    return true;
  }
}

export interface Series<T> {
  readonly key: string;
  readonly data: T;
  /** Occurrences so far. */
  count: number;
  lastObserved: number;
  /** The count the API holds; 0 until the Event is created. */
  sentCount: number;
  /** When the Event was last written, or its write last failed. */
  sentAt: number;
}

export interface SeriesOptions {
  /** Least time between two writes of one series. */
  updateIntervalMs?: number;
  /** A series not seen for longer ends; the next occurrence starts a new Event. */
  idleMs?: number;
  maxSeries?: number;
}

/**
 * The aggregation decisions: which occurrence creates an Event, and when a series' count is due
 * to be patched. Pure: the caller passes the time and does the writes.
 */
export class SeriesCache<T> {
  readonly #series: Lru<Series<T>>;
  /** Created series whose count the API lags behind. */
  readonly #dirty = new Set<Series<T>>();
  readonly #intervalMs: number;
  readonly #idleMs: number;

  constructor(opts: SeriesOptions = {}) {
    this.#intervalMs = opts.updateIntervalMs ?? 30_000;
    this.#idleMs = opts.idleMs ?? 6 * 60_000;
    this.#series = new Lru(opts.maxSeries ?? 4096, (s) => this.#dirty.delete(s));
  }

  get size(): number {
    return this.#series.size;
  }

  /** Whether an occurrence of `key` at `now` would join a live series rather than start one. */
  continues(key: string, now: number): boolean {
    const s = this.#series.peek(key);
    return s !== undefined && now - s.lastObserved <= this.#idleMs;
  }

  /** Counts an occurrence; `fresh` when it starts a series, whose Event the caller must create. */
  observe(key: string, now: number, data: () => T): { series: Series<T>; fresh: boolean } {
    if (this.continues(key, now)) {
      const series = this.#series.get(key)!;
      series.count++;
      series.lastObserved = now;
      // Until the Event exists its create carries the count; afterwards a patch does.
      if (series.sentCount > 0) this.#dirty.add(series);
      return { series, fresh: false };
    }
    const old = this.#series.peek(key);
    if (old) this.forget(old);
    const series: Series<T> = { key, data: data(), count: 1, lastObserved: now, sentCount: 0, sentAt: now };
    this.#series.set(key, series);
    return { series, fresh: true };
  }

  /** Records a write of the series: the API now holds `count` (unchanged when the write failed). */
  sent(series: Series<T>, count: number, now: number): void {
    series.sentCount = count;
    series.sentAt = now;
    if (count >= series.count) this.#dirty.delete(series);
    else if (this.#series.peek(series.key) === series) this.#dirty.add(series);
  }

  /** A series whose count is due to be patched at `now`, if any. */
  due(now: number): Series<T> | undefined {
    for (const s of this.#dirty) if (now - s.sentAt >= this.#intervalMs) return s;
    return undefined;
  }

  /** When the next patch falls due; undefined when no count is pending. */
  nextDueAt(): number | undefined {
    let next: number | undefined;
    for (const s of this.#dirty) next = Math.min(next ?? Infinity, s.sentAt + this.#intervalMs);
    return next;
  }

  /** Every series with a count not yet written. */
  pending(): Series<T>[] {
    return [...this.#dirty];
  }

  /** Drops the series (its Event could not be created): the next occurrence starts anew. */
  forget(series: Series<T>): void {
    if (this.#series.peek(series.key) === series) this.#series.delete(series.key);
    this.#dirty.delete(series);
  }
}
