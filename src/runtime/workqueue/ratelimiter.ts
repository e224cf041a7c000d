// Rate limiters of the work queue (client-go's workqueue default_rate_limiters.go): how long a key
// waits before it is retried.
/** Milliseconds from an arbitrary origin; `performance` by default. */
export interface Clock {
  now(): number;
}

export interface RateLimiter<K> {
  /** Milliseconds to wait before the key is retried; counts as a failure of the key. */
  when(key: K): number;
  /** Stops tracking the key (it succeeded). */
  forget(key: K): void;
  numRequeues(key: K): number;
}

/** Per-key backoff: baseMs * 2^failures, capped at maxMs. */
export class ItemExponentialFailureRateLimiter<K = string> implements RateLimiter<K> {
  readonly #failures = new Map<K, number>();
  readonly #baseMs: number;
  readonly #maxMs: number;

  constructor(baseMs = 5, maxMs = 1_000_000) {
    this.#baseMs = baseMs;
    this.#maxMs = maxMs;
  }

  when(key: K): number {
    const failures = this.#failures.get(key) ?? 0;
    this.#failures.set(key, failures + 1);
    // 2 ** failures overflows to Infinity, which the cap absorbs.
    return Math.min(this.#baseMs * 2 ** failures, this.#maxMs);
  }

  forget(key: K): void {
    this.#failures.delete(key);
  }

  numRequeues(key: K): number {
    return this.#failures.get(key) ?? 0;
  }
}

/**
 * One token bucket for all keys: `burst` tokens, refilled at `qps` per second. when() reserves a
 * token and returns how long until it is available, like golang.org/x/time/rate's
 * Reserve().Delay(), so tokens can go negative and later callers wait longer.
 */
export class BucketRateLimiter<K = string> implements RateLimiter<K> {
  readonly #perMs: number;
  readonly #burst: number;
  readonly #clock: Clock;
  #tokens: number;
  #last: number;

  constructor(qps = 10, burst = 100, clock: Clock = performance) {
    this.#perMs = qps / 1000;
    this.#burst = burst;
    this.#clock = clock;
    this.#tokens = burst;
    this.#last = clock.now();
  }

  when(_key: K): number {
    const now = this.#clock.now();
    const elapsed = Math.max(0, now - this.#last);
    this.#tokens = Math.min(this.#burst, this.#tokens + elapsed * this.#perMs) - 1;
    this.#last = now;
    return this.#tokens < 0 ? -this.#tokens / this.#perMs : 0;
  }

  forget(_key: K): void {}

  numRequeues(_key: K): number {
    return 0;
  }
}

/** The longest delay of all the limiters; every limiter sees every call. */
export class MaxOfRateLimiter<K = string> implements RateLimiter<K> {
  readonly #limiters: RateLimiter<K>[];

  constructor(...limiters: RateLimiter<K>[]) {
    this.#limiters = limiters;
  }

  when(key: K): number {
    let max = 0;
    for (const l of this.#limiters) max = Math.max(max, l.when(key));
    return max;
  }

  forget(key: K): void {
    for (const l of this.#limiters) l.forget(key);
  }

  numRequeues(key: K): number {
    let max = 0;
    for (const l of this.#limiters) max = Math.max(max, l.numRequeues(key));
    return max;
  }
}

/** client-go's DefaultTypedControllerRateLimiter: per-key 5ms..1000s backoff, 10 qps / 100 burst overall. */
export function defaultControllerRateLimiter<K = string>(clock: Clock = performance): RateLimiter<K> {
  return new MaxOfRateLimiter<K>(
    new ItemExponentialFailureRateLimiter<K>(5, 1_000_000),
    new BucketRateLimiter<K>(10, 100, clock),
  );
}
