// A controller in controller-runtime's sense: watches map informer events to keys in a work queue,
// workers hand each key to a Reconciler, and the result decides forget / requeue / back off. It is
// Aware of clusters (multicluster-runtime's controller): a watch made with watchClusters runs on
// every engaged cluster, its keys carry their cluster, and it ends when its cluster is disengaged.
import { setImmediate as nextTurn } from 'node:timers/promises';
import { type EventHandler } from '../cache/informer.ts';
import { errorText } from '../observability/log.ts';
import type { Cluster } from '../cluster/cluster.ts';
import { clusterKey, localCluster, splitClusterKey } from '../cluster/key.ts';
import type { Aware } from '../cluster/provider.ts';
import { rootLogger, type Logger } from '../observability/log.ts';
import { reconcileMetrics } from '../observability/metrics.ts';
import { defaultControllerRateLimiter, type RateLimiter } from '../workqueue/ratelimiter.ts';
import { WorkQueue, type Priority } from '../workqueue/queue.ts';
import type { KubeObject } from '../api/meta.ts';
import type { Trigger } from './trigger.ts';

/** How long a worker runs reconciles back to back before it lets the event loop take a turn. */
const WORKER_SLICE_MS = 10;

export interface Result {
  /** Reconcile this key again after the given delay (its backoff is forgotten). */
  requeueAfterMs?: number;
  /** Reconcile again with rate-limited backoff, without counting an error. */
  requeue?: boolean;
}

export interface Reconciler {
  /** `signal` aborts when the controller stops: a long reconcile (a paged sweep) ends early. */
  reconcile(key: string, signal: AbortSignal): Promise<Result | void>;
}

/** Anything that delivers object events and knows when it has seen everything once: informers, rule files. */
export interface Source<T> {
  addEventHandler(h: EventHandler<T>): void;
  waitForSync(signal?: AbortSignal): Promise<void>;
}

/** Maps an event's object to the keys to reconcile (none, one or several). */
export type MapFunc<T> = (obj: T) => string | string[] | undefined;

export interface Predicates<T> {
  add?(obj: T): boolean;
  update?(oldObj: T, newObj: T): boolean;
  delete?(obj: T): boolean;
}

export interface ControllerOptions {
  name: string;
  reconciler: Reconciler;
  workers?: number;
  rateLimiter?: RateLimiter<string>;
  logger?: Logger;
  /** The latch of this controller's first pass over a cache, for those that wait for it. */
  firstPass?: FirstPass;
}

interface ClusterWatch<T> {
  source: (cluster: Cluster) => Source<T>;
  map: MapFunc<T>;
  predicates: Predicates<T>;
}

interface Engaged {
  cluster: Cluster;
  signal: AbortSignal;
  sources: Map<ClusterWatch<never>, Source<never>>;
}

export class Controller implements Aware {
  readonly name: string;
  readonly queue: WorkQueue<string>;
  private readonly opts: ControllerOptions;
  private readonly sources: Source<never>[] = [];
  private readonly clusterWatches: ClusterWatch<never>[] = [];
  /** The engaged clusters, each with the signal that aborts when it leaves and the source every cluster watch made for it (made once). */
  private readonly clusters = new Map<string, Engaged>();
  private readonly log: Logger;
  private workers: Promise<void>[] = [];
  private stopping: AbortController | undefined;

  constructor(opts: ControllerOptions) {
    // No worker would leave every key queued for ever (policies' finalizers included): refused at once.
    const workers = opts.workers ?? 1;
    if (!Number.isInteger(workers) || workers < 1)
      throw new Error(
        `controller ${opts.name}: workers must be a whole number of at least 1, not ${workers}`,
      );
    this.opts = opts;
    this.name = opts.name;
    this.log = (opts.logger ?? rootLogger).child({ controller: opts.name });
    this.queue = new WorkQueue<string>({
      name: opts.name,
      controller: opts.name,
      rateLimiter: opts.rateLimiter ?? defaultControllerRateLimiter(),
    });
    opts.firstPass?.follow(this.queue);
  }

  /** Enqueues the keys that `map` derives from every add, update and delete that passes the predicates. */
  watch<T>(source: Source<T>, map: MapFunc<T>, predicates: Predicates<T> = {}): this {
    this.sources.push(source as Source<never>);
    source.addEventHandler(this.handler(map, predicates));
    return this;
  }

  /** Enqueues every key sent on the trigger (kube-rs's reconcile_on, controller-runtime's source.Channel). */
  reconcileOn(trigger: Trigger): this {
    trigger.connect(this.queue);
    return this;
  }

  /**
   * Watches on every engaged cluster, the local one included: `source` makes the source of one
   * cluster (say, its informer of a resource), and the keys `map` derives carry that cluster
   * (clusterKey). A cluster's events flow once every source this controller watches there has
   * synced (they replay what they hold as adds), so a reconcile never sees part of a cluster (its
   * instances listed, their types not yet), and a cluster out of reach holds back only its own keys.
   */
  watchClusters<T>(
    source: (cluster: Cluster) => Source<T>,
    map: MapFunc<T>,
    predicates: Predicates<T> = {},
  ): this {
    const w: ClusterWatch<T> = { source, map, predicates };
    this.clusterWatches.push(w as ClusterWatch<never>);
    for (const engaged of this.clusters.values()) this.watchOn(engaged, [w as ClusterWatch<never>]);
    return this;
  }

  /** Aware: the cluster's watches start; when it leaves they stop and its keys leave the queue. */
  engage(cluster: Cluster, signal: AbortSignal): void {
    const name = cluster.name;
    const engaged: Engaged = { cluster, signal, sources: new Map() };
    this.clusters.set(name, engaged);
    signal.addEventListener(
      'abort',
      () => {
        this.clusters.delete(name);
        this.queue.removeWhere((k) => splitClusterKey(k).cluster === name);
      },
      { once: true },
    );
    this.watchOn(engaged, this.clusterWatches);
  }

  /** Makes the sources of `watches` on a cluster, and adds their handlers once every source of that cluster has synced. */
  private watchOn(engaged: Engaged, watches: ClusterWatch<never>[]): void {
    const { cluster, signal, sources } = engaged;
    for (const w of watches) sources.set(w, w.source(cluster));
    Promise.all([...sources.values()].map((s) => s.waitForSync(signal))).then(
      () => {
        for (const w of watches)
          sources.get(w)!.addEventHandler(this.handler(w.map, w.predicates, cluster.name, signal));
      },
      () => {}, // disengaged before it synced
    );
  }

  private handler<T>(
    map: MapFunc<T>,
    predicates: Predicates<T>,
    cluster = localCluster,
    signal?: AbortSignal,
  ): EventHandler<T> {
    // Every key map derives goes in the event's lane: a policy of the initial list mapped to every
    // node queues them all low, the same policy created later queues them normally.
    const enqueue = (obj: T, priority: Priority) => {
      // A disengaged cluster's informers stop a moment after its signal aborts.
      if (signal?.aborted) return;
      const keys = map(obj);
      if (keys === undefined) return;
      for (const k of Array.isArray(keys) ? keys : [keys])
        this.queue.add(clusterKey(cluster, k), { priority });
    };
    return {
      // The initial list (a start, a hand-over, a cluster engaged) is low: no news in it.
      onAdd: (o, initial) => (predicates.add?.(o) ?? true) && enqueue(o, initial ? 'low' : 'normal'),
      onUpdate: (a, b) => {
        if (!(predicates.update?.(a, b) ?? true)) return;
        const priority = unchanged(a, b) ? 'low' : 'normal';
        // An object that moved (say, a pod to another node) must reconcile both its old and new keys.
        enqueue(a, priority);
        if (a !== b) enqueue(b, priority);
      },
      onDelete: (o) => (predicates.delete?.(o) ?? true) && enqueue(o, 'normal'),
    };
  }

  /** Waits for every watched source to sync (nothing is pruned from a partial view), then runs the workers until stop(). */
  async start(signal?: AbortSignal): Promise<void> {
    this.stopping = new AbortController();
    const stop = this.stopping.signal;
    signal?.addEventListener('abort', () => this.stopping?.abort(), { once: true });
    await Promise.all(this.sources.map((s) => s.waitForSync(stop)));
    const n = this.opts.workers ?? 1;
    reconcileMetrics.maxConcurrent.set({ controller: this.name }, n);
    reconcileMetrics.activeWorkers.set({ controller: this.name }, 0);
    this.log.info({ workers: n }, 'starting workers');
    this.workers = Array.from({ length: n }, () => this.worker(stop));
  }

  /** Stops taking new keys and waits for reconciles in flight to finish. */
  async stop(): Promise<void> {
    this.stopping?.abort();
    await this.queue.shutDownWithDrain();
    await Promise.all(this.workers);
  }

  private async worker(signal: AbortSignal): Promise<void> {
    let turnStarted = performance.now();
    for (;;) {
      // A backlog of reconciles that read only caches runs as one chain of microtasks: past a
      // slice, a turn of the event loop lets timers (the Lease's renewal) and sockets (watch
      // events, answers) in, or a new leader's first pass starves them for its whole length.
      if (performance.now() - turnStarted > WORKER_SLICE_MS) {
        await nextTurn();
        turnStarted = performance.now();
      }
      const item = await this.queue.get();
      if (item.shutdown) return;
      // Stopping: the backlog is left (a replica that leads next lists everything anew); only the
      // reconciles already running are waited for, so the Lease is released soon after SIGTERM.
      if (signal.aborted) {
        this.queue.done(item.key);
        continue;
      }
      if (this.left(item.key)) {
        this.queue.forget(item.key);
        this.queue.done(item.key);
        continue;
      }
      await this.process(item.key, signal);
    }
  }

  /** A key of a cluster that is not engaged (any more): one that was being reconciled or waiting when its cluster left. */
  private left(key: string): boolean {
    const { cluster } = splitClusterKey(key);
    return cluster !== localCluster && !this.clusters.has(cluster);
  }

  private async process(key: string, signal: AbortSignal): Promise<void> {
    const labels = { controller: this.name };
    const started = performance.now();
    reconcileMetrics.activeWorkers.inc(labels);
    try {
      const result = (await this.opts.reconciler.reconcile(key, signal)) ?? {};
      if (result.requeueAfterMs !== undefined && result.requeueAfterMs > 0) {
        this.queue.forget(key);
        this.queue.addAfter(key, result.requeueAfterMs);
        reconcileMetrics.total.inc({ ...labels, result: 'requeue_after' });
      } else if (result.requeue) {
        this.queue.addRateLimited(key);
        reconcileMetrics.total.inc({ ...labels, result: 'requeue' });
      } else {
        this.queue.forget(key);
        reconcileMetrics.total.inc({ ...labels, result: 'success' });
      }
    } catch (e) {
      reconcileMetrics.total.inc({ ...labels, result: 'error' });
      reconcileMetrics.errors.inc(labels);
      if (!signal.aborted) {
        this.log.warn(
          { key, err: errorText(e), requeues: this.queue.numRequeues(key) },
          'reconcile failed; will retry',
        );
        this.queue.addRateLimited(key);
      }
    } finally {
      reconcileMetrics.time.observe(labels, (performance.now() - started) / 1000);
      reconcileMetrics.activeWorkers.dec(labels);
      this.queue.done(key);
    }
  }
}

/**
 * An update that brings nothing new: the informer's resync (the same object), or the same
 * resourceVersion (controller-runtime's test for its low priority). Sources whose objects carry no
 * resourceVersion (rule files) are unchanged only as the same object. The key ownership registry
 * tells every change as onUpdate(change, change), so what it fans out is low: the policy change
 * behind it queues its own keys normally.
 */
function unchanged(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  const rv = (o: unknown) => (o as KubeObject | undefined)?.metadata?.resourceVersion;
  const before = rv(a);
  return before !== undefined && before !== '' && before === rv(b);
}

/**
 * Whether a controller has reconciled every key of a cache once since it started (a node-keyed
 * controller: every node). Until then, counts over its results are partial: a status written from
 * them would flap on every restart. Made with the results it looks at, before the controller whose
 * pass it is, which is given it (ControllerOptions.firstPass) and lends it its queue.
 */
export class FirstPass {
  private done = false;
  private queue: { len(): number } | undefined;
  private readonly results: ReadonlyMap<string, unknown>;
  private readonly cache: { keys(): string[]; hasSynced(): boolean };

  constructor(results: ReadonlyMap<string, unknown>, cache: { keys(): string[]; hasSynced(): boolean }) {
    this.results = results;
    this.cache = cache;
  }

  /** The controller's side: the queue of the controller whose pass this is. */
  follow(queue: { len(): number }): void {
    if (this.queue) throw new Error('a first pass is the pass of one controller');
    this.queue = queue;
  }

  /**
   * Done once the cache has listed, the queue is empty and every key now cached has a result: by
   * name, not by count, so that results of keys deleted meanwhile cannot stand in for keys not
   * reconciled yet, and not before the list, when an empty cache would make it done at once.
   */
  complete(): boolean {
    if (
      !this.done &&
      this.queue !== undefined &&
      this.cache.hasSynced() &&
      this.queue.len() === 0 &&
      this.cache.keys().every((k) => this.results.has(k))
    )
      this.done = true;
    return this.done;
  }
}
