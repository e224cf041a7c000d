// How the client spares a registry, and Berth itself: a concurrency cap per host, caps on requests
// and body bytes in flight across every host, a pause of the whole host when it says 429 or 503
// with Retry-After, and bounded retries with jitter for what may pass.
import { setTimeout as sleep } from 'node:timers/promises';

/**
 * A counting semaphore whose waiters queue in order; a waiter can give up through its signal. A
 * weight takes that many units at once (bytes of a body); one above the limit waits for all of it.
 */
export class Semaphore {
  readonly #limit: number;
  #held = 0;
  readonly #waiters: Array<{ weight: number; grant: () => void }> = [];

  constructor(limit: number) {
    if (!(limit >= 1)) throw new Error(`a semaphore needs a limit of at least 1, not ${limit}`);
    this.#limit = limit;
  }

  get held(): number {
    return this.#held;
  }

  get waiting(): number {
    return this.#waiters.length;
  }

  async acquire(signal?: AbortSignal, weight = 1): Promise<() => void> {
    signal?.throwIfAborted();
    const w = Math.min(weight, this.#limit);
    // A newcomer goes behind the queue, so that it cannot overtake a heavier waiter at its head.
    if (this.#waiters.length === 0 && this.#held + w <= this.#limit) {
      this.#held += w;
    } else {
      await new Promise<void>((resolve, reject) => {
        const waiter = {
          weight: w,
          grant: () => {
            signal?.removeEventListener('abort', onAbort);
            resolve();
          },
        };
        const onAbort = () => {
          const i = this.#waiters.indexOf(waiter);
          if (i >= 0) this.#waiters.splice(i, 1);
          this.#grant();
          reject(signal!.reason);
        };
        signal?.addEventListener('abort', onAbort, { once: true });
        this.#waiters.push(waiter);
      });
    }
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.#held -= w;
      this.#grant();
    };
  }

  /** Grants the waiters at the head of the queue while they fit. */
  #grant(): void {
    while (this.#waiters.length > 0 && this.#held + this.#waiters[0]!.weight <= this.#limit) {
      const next = this.#waiters.shift()!;
      this.#held += next.weight;
      next.grant();
    }
  }
}

/**
 * Retry-After as RFC 9110 gives it: delay-seconds or an HTTP-date. Milliseconds from `now`, never
 * negative, at most `capMs` (a registry asking for hours should not stall placement for hours: the
 * caller fails fast and tries again later); undefined when absent or unreadable.
 */
export function parseRetryAfter(
  value: string | undefined,
  capMs: number,
  now = Date.now(),
): number | undefined {
  if (value === undefined) return undefined;
  const v = value.trim();
  let ms: number;
  if (/^\d+$/.test(v)) ms = Number(v) * 1000;
  else {
    // HTTP-date only (IMF-fixdate and the obsolete forms Date.parse reads): never a bare number.
    if (!/[a-z]/i.test(v)) return undefined;
    const at = Date.parse(v);
    if (Number.isNaN(at)) return undefined;
    ms = at - now;
  }
  return Math.min(Math.max(ms, 0), capMs);
}

/** Exponential backoff with full jitter: attempt 0 waits up to baseMs, each next one twice as long, capped. */
export const backoffMs = (attempt: number, baseMs: number, capMs: number, random = Math.random): number =>
  Math.floor(random() * Math.min(capMs, baseMs * 2 ** attempt));

/** When each host may be asked again after a 429 or 503 said to wait. */
export class HostPauses {
  readonly #until = new Map<string, number>();
  readonly #now: () => number;

  constructor(now: () => number = Date.now) {
    this.#now = now;
  }

  pause(host: string, ms: number): void {
    const until = this.#now() + ms;
    if (until > (this.#until.get(host) ?? 0)) this.#until.set(host, until);
  }

  /** Milliseconds until the host may be asked again; 0 when it may now. */
  remaining(host: string): number {
    const until = this.#until.get(host);
    if (until === undefined) return 0;
    const left = until - this.#now();
    if (left > 0) return left;
    this.#until.delete(host);
    return 0;
  }

  /** Waits out the host's pause, if any. */
  async wait(host: string, signal?: AbortSignal): Promise<void> {
    let left: number;
    while ((left = this.remaining(host)) > 0) await sleep(left, undefined, { signal });
  }
}
