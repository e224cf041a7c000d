// The burst hold of the node writers: during a burst of changes, annotation-only node writes wait
// and go out as one.
import type { Clock } from '../../runtime/workqueue/ratelimiter.ts';

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
