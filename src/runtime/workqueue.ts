// A work queue with client-go's semantics (k8s.io/client-go/util/workqueue: Type, DelayingQueue,
// RateLimitingQueue and the default controller rate limiter). A key is queued at most once while
// it waits, and a key being processed is held back until done(), so no two workers ever see the
// same key at once and a burst of adds costs at most one extra reconcile.
import { workqueueMetrics } from './metrics.ts';

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

export type GetResult<K> = { key: K; shutdown: false } | { shutdown: true };

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

/** FIFO ring buffer: O(1) push and shift, shrinking again after a burst. */
class Ring<T> {
  #items: (T | undefined)[] = new Array<T | undefined>(16);
  #head = 0;
  #size = 0;

  get size(): number {
    return this.#size;
  }

  push(item: T): void {
    if (this.#size === this.#items.length) this.#resize(this.#items.length * 2);
    this.#items[(this.#head + this.#size) & (this.#items.length - 1)] = item;
    this.#size++;
  }

  /** Callers check size first: T itself may include undefined. */
  shift(): T {
    const item = this.#items[this.#head] as T;
    this.#items[this.#head] = undefined;
    this.#head = (this.#head + 1) & (this.#items.length - 1);
    this.#size--;
    if (this.#items.length > 1024 && this.#size < this.#items.length >> 2) {
      this.#resize(this.#items.length >> 1);
    }
    return item;
  }

  // Capacity stays a power of two so that wrapping is a mask.
  #resize(capacity: number): void {
    const items = new Array<T | undefined>(capacity);
    for (let i = 0; i < this.#size; i++) items[i] = this.#items[(this.#head + i) & (this.#items.length - 1)];
    this.#items = items;
    this.#head = 0;
  }
}

interface Waiting<K> {
  key: K;
  readyAt: number;
  // Breaks ties between equal deadlines in the order they were added.
  seq: number;
  index: number;
}

/** Min-heap of delayed keys by ready time, one entry per key (client-go's waitForPriorityQueue). */
class WaitingHeap<K> {
  readonly #heap: Waiting<K>[] = [];
  readonly #byKey = new Map<K, Waiting<K>>();
  #seq = 0;

  get size(): number {
    return this.#heap.length;
  }

  peek(): Waiting<K> | undefined {
    return this.#heap[0];
  }

  /** An earlier deadline moves a waiting key forward; a later one is ignored. */
  insert(key: K, readyAt: number): void {
    const existing = this.#byKey.get(key);
    if (existing) {
      if (readyAt < existing.readyAt) {
        existing.readyAt = readyAt;
        this.#up(existing.index);
      }
      return;
    }
    const entry = { key, readyAt, seq: this.#seq++, index: this.#heap.length };
    this.#heap.push(entry);
    this.#byKey.set(key, entry);
    this.#up(entry.index);
  }

  pop(): K {
    const top = this.#heap[0] as Waiting<K>;
    const last = this.#heap.pop() as Waiting<K>;
    if (last !== top) {
      last.index = 0;
      this.#heap[0] = last;
      this.#down(0);
    }
    this.#byKey.delete(top.key);
    return top.key;
  }

  clear(): void {
    this.#heap.length = 0;
    this.#byKey.clear();
  }

  #less(a: Waiting<K>, b: Waiting<K>): boolean {
    return a.readyAt < b.readyAt || (a.readyAt === b.readyAt && a.seq < b.seq);
  }

  #swap(i: number, j: number): void {
    const a = this.#heap[i] as Waiting<K>;
    const b = this.#heap[j] as Waiting<K>;
    this.#heap[i] = b;
    this.#heap[j] = a;
    b.index = i;
    a.index = j;
  }

  #up(i: number): void {
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!this.#less(this.#heap[i] as Waiting<K>, this.#heap[parent] as Waiting<K>)) return;
      this.#swap(i, parent);
      i = parent;
    }
  }

  #down(i: number): void {
    const n = this.#heap.length;
    while (true) {
      const left = 2 * i + 1;
      if (left >= n) return;
      const right = left + 1;
      let min = left;
      if (right < n && this.#less(this.#heap[right] as Waiting<K>, this.#heap[left] as Waiting<K>))
        min = right;
      if (!this.#less(this.#heap[min] as Waiting<K>, this.#heap[i] as Waiting<K>)) return;
      this.#swap(i, min);
      i = min;
    }
  }
}

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
  readonly #queue = new Ring<K>();
  // Keys that need processing, with the time they were added (for the queue duration metric).
  readonly #dirty = new Map<K, number>();
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

  /** Queues the key unless it is already waiting; a key being processed is queued again at done(). */
  add(key: K): void {
    if (this.#shuttingDown || this.#dirty.has(key)) return;
    this.#dirty.set(key, this.#metrics ? this.#clock.now() : 0);
    if (this.#metrics) {
      this.#metrics.adds.inc();
      this.#metrics.depth.inc();
    }
    if (!this.#processing.has(key)) this.#push(key);
  }

  /** The next key in FIFO order, or shutdown once the queue is shut down and empty. */
  get(): Promise<GetResult<K>> {
    if (this.#queue.size > 0) return Promise.resolve(this.#take(this.#queue.shift()));
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
    if (this.#dirty.has(key)) this.#push(key);
    if (this.#processing.size === 0 && this.#drainers.length > 0) this.#releaseDrainers();
  }

  /** Keys queued and not yet handed out (not counting processing or delayed keys). */
  len(): number {
    return this.#queue.size;
  }

  /** Keys waiting for a delay to pass. */
  waitingLen(): number {
    return this.#waiting.size;
  }

  /** Adds the key once ms have passed; of several delays for one waiting key, the earliest wins. */
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

  // Hands the key straight to a waiting getter if there is one (the queue is then empty, so this
  // keeps FIFO order), else queues it.
  #push(key: K): void {
    if (this.#getters.size > 0) this.#getters.shift()(this.#take(key));
    else this.#queue.push(key);
  }

  #take(key: K): GetResult<K> {
    const now = this.#metrics ? this.#clock.now() : 0;
    if (this.#metrics) {
      this.#metrics.depth.dec();
      this.#metrics.latency.observe((now - (this.#dirty.get(key) as number)) / 1000);
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
