// A work queue with client-go's semantics (k8s.io/client-go/util/workqueue: Type, DelayingQueue,
// RateLimitingQueue and the default controller rate limiter). A key is queued at most once while
// it waits, and a key being processed is held back until done(), so no two workers ever see the
// same key at once and a burst of adds costs at most one extra reconcile.
//
// Keys wait in two lanes, as in controller-runtime's priority queue (pkg/controller/priorityqueue):
// a key added at low priority (a cache's replay on start, a resync) is handed out only when no
// normal key waits, so a change that arrives during a first pass of thousands of keys is next, not
// last. FIFO within a lane; a low key added again normally is promoted. Nothing ages low keys into
// the normal lane: normal keys come from real changes, which workers reconciling from caches serve
// far faster than they arrive; a normal lane that never empties would be an overload with or
// without lanes (docs/decisions/0048-first-pass-at-low-priority.md).
import { workqueueMetrics } from '../observability/metrics.ts';
import { WaitingHeap } from './heap.ts';
import { defaultControllerRateLimiter, type Clock, type RateLimiter } from './ratelimiter.ts';
import { Ring } from './ring.ts';

export type GetResult<K> = { key: K; shutdown: false } | { shutdown: true };

/** A key's lane: 'low' waits until no normal key does (controller-runtime's handler.LowPriority). */
export type Priority = 'normal' | 'low';

export interface AddOptions {
  /** 'normal' by default. */
  priority?: Priority;
}

// A key that needs processing: when it was added (for the queue duration metric) and its lane. The
// entry itself is what a lane holds, so the entry a promotion leaves behind in the low lane is told
// stale by identity and skipped when reached: O(1) per operation.
interface Pending<K> {
  key: K;
  addedAt: number;
  priority: Priority;
  /** When it was last added at normal priority (clock time; -Infinity if never): a change's time. */
  changedAt: number;
}

export interface WorkQueueOptions<K> {
  /** Reports workqueue_* metrics under this name when set. */
  name?: string;
  /** The metrics' controller label; defaults to name. */
  controller?: string;
  rateLimiter?: RateLimiter<K>;
  clock?: Clock;
}

const SHUTDOWN: GetResult<never> = { shutdown: true };
// client-go refreshes the unfinished-work gauges every 500ms.
const UNFINISHED_WORK_PERIOD_MS = 500;

// Children bound to this queue's labels, built once per queue.
function queueMetrics(name: string, controller: string) {
  return {
    depth: workqueueMetrics.depth.labels(name, controller),
    adds: workqueueMetrics.adds.labels(name, controller),
    latency: workqueueMetrics.latency.labels(name, controller),
    workDuration: workqueueMetrics.workDuration.labels(name, controller),
    unfinished: workqueueMetrics.unfinished.labels(name, controller),
    longestRunning: workqueueMetrics.longestRunning.labels(name, controller),
    retries: workqueueMetrics.retries.labels(name, controller),
  };
}

export class WorkQueue<K = string> {
  readonly #normal = new Ring<Pending<K>>();
  readonly #low = new Ring<Pending<K>>();
  // Keys queued in each lane and not handed out: the lanes' sizes less their stale entries.
  #queued = 0;
  // Keys that need processing (queued, or being processed and added again meanwhile).
  readonly #dirty = new Map<K, Pending<K>>();
  // Keys handed out and not yet done, with the time they were handed out.
  readonly #processing = new Map<K, number>();
  // Pending get() calls; only non-empty while the queue is empty.
  readonly #getters = new Ring<(result: GetResult<K>) => void>();
  #drainers: (() => void)[] = [];
  #shuttingDown = false;

  readonly #waiting = new WaitingHeap<K>();
  // One timer, for the earliest deadline in #waiting.
  #timer: NodeJS.Timeout | undefined;
  #timerAt = Infinity;

  readonly #clock: Clock;
  readonly #rateLimiter: RateLimiter<K>;
  readonly #metrics: ReturnType<typeof queueMetrics> | undefined;
  readonly #metricsTimer: NodeJS.Timeout | undefined;

  constructor(options: WorkQueueOptions<K> = {}) {
    this.#clock = options.clock ?? performance;
    this.#rateLimiter = options.rateLimiter ?? defaultControllerRateLimiter<K>(this.#clock);
    if (options.name !== undefined) {
      this.#metrics = queueMetrics(options.name, options.controller ?? options.name);
      this.#metricsTimer = setInterval(() => this.updateUnfinishedWork(), UNFINISHED_WORK_PERIOD_MS).unref();
    }
  }

  /**
   * Queues the key unless it is already waiting; a key being processed is queued again at done(),
   * in the lane it was last added in. A key waiting low that is added normally moves to the normal
   * lane (normal wins, as the highest priority wins in controller-runtime).
   */
  add(key: K, options?: AddOptions): void {
    if (this.#shuttingDown) return;
    const priority = options?.priority ?? 'normal';
    const changedAt = priority === 'normal' ? this.#clock.now() : -Infinity;
    const waiting = this.#dirty.get(key);
    if (waiting) {
      if (priority === 'low') return;
      waiting.changedAt = changedAt;
      if (waiting.priority === 'low') this.#promote(waiting);
      return;
    }
    const pending: Pending<K> = { key, addedAt: this.#metrics ? this.#clock.now() : 0, priority, changedAt };
    this.#dirty.set(key, pending);
    if (this.#metrics) {
      this.#metrics.adds.inc();
      this.#metrics.depth.inc();
    }
    if (!this.#processing.has(key)) this.#push(pending);
  }

  /** The next key: the normal lane's first, else the low lane's; shutdown once shut down and empty. */
  get(): Promise<GetResult<K>> {
    const next = this.#next();
    if (next) return Promise.resolve(this.#take(next));
    if (this.#shuttingDown) return Promise.resolve(SHUTDOWN);
    return new Promise((resolve) => this.#getters.push(resolve));
  }

  /** Ends processing of a key handed out by get(); if it was added meanwhile, it is queued again. */
  done(key: K): void {
    const started = this.#processing.get(key);
    // client-go would queue a dirty key twice on a stray done(); ignoring it keeps the queue sound.
    if (started === undefined) return;
    this.#processing.delete(key);
    this.#metrics?.workDuration.observe((this.#clock.now() - started) / 1000);
    const pending = this.#dirty.get(key);
    if (pending) this.#push(pending);
    if (this.#processing.size === 0 && this.#drainers.length > 0) this.#releaseDrainers();
  }

  /** Keys queued and not yet handed out, both lanes (not counting processing or delayed keys). */
  len(): number {
    return this.#queued;
  }

  /** Keys waiting for a delay to pass. */
  waitingLen(): number {
    return this.#waiting.size;
  }

  /**
   * Adds the key once ms have passed, at normal priority; of several delays for one waiting key, the
   * earliest wins. Normal, unlike controller-runtime (which keeps the item's priority): a delay is a
   * retry after an error or a time the reconciler asked for (a gate's deadline), work that is due,
   * not a replay, and it should not wait behind a first pass.
   */
  addAfter(key: K, ms: number): void {
    if (this.#shuttingDown) return;
    // client-go counts every delayed add as a retry.
    this.#metrics?.retries.inc();
    if (!(ms > 0)) {
      this.add(key);
      return;
    }
    const readyAt = this.#clock.now() + ms;
    this.#waiting.insert(key, readyAt);
    if (readyAt < this.#timerAt) this.#arm(readyAt);
  }

  addRateLimited(key: K): void {
    this.addAfter(key, this.#rateLimiter.when(key));
  }

  /** Clears the key's backoff; call it when the key was processed successfully. */
  forget(key: K): void {
    this.#rateLimiter.forget(key);
  }

  /**
   * Moves every key waiting in the normal lane that was last added normally before `changedBefore`
   * (clock time) to the end of the low lane, in order; returns how many. A replica that queued
   * changes while another one led hands those the leader had time to act on to its first pass, and
   * keeps the later ones, which no one may have acted on, ahead of it.
   */
  lower(changedBefore: number): number {
    let moved = 0;
    this.#normal.retain((p) => {
      if (p.changedAt >= changedBefore) return true;
      // A new entry: one a promotion left in the low lane stays stale (told by identity).
      const lowered: Pending<K> = { ...p, priority: 'low' };
      this.#dirty.set(p.key, lowered);
      this.#low.push(lowered);
      moved++;
      return false;
    });
    return moved;
  }

  /**
   * Drops every key `drop` selects, waiting or delayed, with its backoff: say, the keys of a cluster
   * that left. A selected key being processed now is not queued again at done().
   */
  removeWhere(drop: (key: K) => boolean): void {
    for (const key of this.#dirty.keys()) {
      if (!drop(key)) continue;
      this.#dirty.delete(key);
      this.#rateLimiter.forget(key);
      this.#metrics?.depth.dec();
    }
    // The low lane's stale entries go too: what is left is exactly the queued keys.
    this.#normal.retain((p) => this.#dirty.get(p.key) === p);
    this.#low.retain((p) => this.#dirty.get(p.key) === p && p.priority === 'low');
    this.#queued = this.#normal.size + this.#low.size;
    for (const key of this.#waiting.removeWhere(drop)) this.#rateLimiter.forget(key);
    for (const key of this.#processing.keys()) if (drop(key)) this.#rateLimiter.forget(key);
  }

  numRequeues(key: K): number {
    return this.#rateLimiter.numRequeues(key);
  }

  /** Stops accepting adds and drops delayed keys; get() reports shutdown once the queue is empty. */
  shutDown(): void {
    this.#stop();
    this.#releaseDrainers();
  }

  /** Like shutDown(), then resolves once every key being processed is done (or shutDown() is called). */
  shutDownWithDrain(): Promise<void> {
    this.#stop();
    if (this.#processing.size === 0) return Promise.resolve();
    return new Promise((resolve) => this.#drainers.push(resolve));
  }

  isShuttingDown(): boolean {
    return this.#shuttingDown;
  }

  /** Sets the unfinished-work gauges; cost is linear in the keys being processed (about the worker count). */
  updateUnfinishedWork(): void {
    if (!this.#metrics) return;
    const now = this.#clock.now();
    let total = 0;
    let oldest = 0;
    for (const started of this.#processing.values()) {
      const age = (now - started) / 1000;
      total += age;
      if (age > oldest) oldest = age;
    }
    this.#metrics.unfinished.set(total);
    this.#metrics.longestRunning.set(oldest);
  }

  // Hands the key straight to a waiting getter if there is one (both lanes are then empty, so this
  // keeps the order), else queues it in its lane.
  #push(pending: Pending<K>): void {
    if (this.#getters.size > 0) {
      this.#getters.shift()(this.#take(pending));
      return;
    }
    (pending.priority === 'low' ? this.#low : this.#normal).push(pending);
    this.#queued++;
  }

  // A low key moves to the normal lane: queued, it is pushed there too and its low entry left stale
  // (skipped by #next); being processed, done() queues it in the normal lane.
  #promote(pending: Pending<K>): void {
    pending.priority = 'normal';
    if (this.#processing.has(pending.key)) return;
    this.#normal.push(pending);
  }

  // The next queued entry: the normal lane's first, else the low lane's first live one. A low entry
  // is stale once its key was promoted (and maybe handed out and added again since): live while it
  // is its key's Pending and still low.
  #next(): Pending<K> | undefined {
    if (this.#normal.size > 0) {
      this.#queued--;
      return this.#normal.shift();
    }
    while (this.#low.size > 0) {
      const p = this.#low.shift();
      if (this.#dirty.get(p.key) !== p || p.priority !== 'low') continue;
      this.#queued--;
      return p;
    }
    return undefined;
  }

  #take({ key, addedAt }: Pending<K>): GetResult<K> {
    const now = this.#metrics ? this.#clock.now() : 0;
    if (this.#metrics) {
      this.#metrics.depth.dec();
      this.#metrics.latency.observe((now - addedAt) / 1000);
    }
    this.#dirty.delete(key);
    this.#processing.set(key, now);
    return { key, shutdown: false };
  }

  #arm(at: number): void {
    clearTimeout(this.#timer);
    this.#timerAt = at;
    this.#timer = setTimeout(() => this.#onTimer(), Math.ceil(Math.max(0, at - this.#clock.now()))).unref();
  }

  #onTimer(): void {
    this.#timer = undefined;
    this.#timerAt = Infinity;
    const now = this.#clock.now();
    // Timers may fire a little early, so due-ness is judged by the clock, not by the timer firing.
    for (let next = this.#waiting.peek(); next && next.readyAt <= now; next = this.#waiting.peek()) {
      this.add(this.#waiting.pop());
    }
    const next = this.#waiting.peek();
    if (next) this.#arm(next.readyAt);
  }

  #stop(): void {
    this.#shuttingDown = true;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#timerAt = Infinity;
    this.#waiting.clear();
    clearInterval(this.#metricsTimer);
    while (this.#getters.size > 0) this.#getters.shift()(SHUTDOWN);
  }

  #releaseDrainers(): void {
    const drainers = this.#drainers;
    this.#drainers = [];
    for (const resolve of drainers) resolve();
  }
}
