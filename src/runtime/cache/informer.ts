// An informer in the manner of client-go's reflector + indexer + shared informer: the initial state
// streamed by a watch (WatchList, `sendInitialEvents`) where the apiserver serves it, else listed in
// pages; then watch with bookmarks from the last resourceVersion; relist on 410 Gone and deliver
// the deletes that happened while disconnected; reconnect with backoff after any error; abandon a watch that has
// been silent too long (half-open connections); resync as a safety net; indexes; a transform hook.
import { setTimeout as sleep } from 'node:timers/promises';
import { hasCondition } from '../api/conditions.ts';
import {
  ApiError,
  isGone,
  isNotFound,
  resourcePath,
  ResponseTooLarge,
  type KubeClient,
  type KubeList,
} from '../client/client.ts';
import { informerMetrics } from '../observability/metrics.ts';
import { errorText, rootLogger, type Logger } from '../observability/log.ts';
import { crdName, Resources, type KubeObject, type ResourceRef } from '../api/meta.ts';

export interface EventHandler<T> {
  /**
   * `isInInitialList` (client-go's OnAdd): the object is no news, only known for the first time,
   * being in the informer's first list (or stream) or replayed to a handler added late.
   */
  onAdd?(obj: T, isInInitialList?: boolean): void;
  /** Also called with old === new on resync. */
  onUpdate?(oldObj: T, newObj: T): void;
  onDelete?(obj: T): void;
}

/** What a transform keeps for the objects it made while they are cached (see InformerOptions.lifecycle). */
export interface CacheLifecycle<T> {
  cached(obj: T): void;
  dropped(obj: T): void;
}

export type IndexFunc<T> = (obj: T) => string[];

export interface InformerOptions<T extends KubeObject> {
  client: KubeClient;
  ref: ResourceRef;
  namespace?: string;
  labelSelector?: string;
  fieldSelector?: string;
  /** Shrinks each object before it is cached; by default managedFields are dropped. */
  transform?: (obj: T) => T;
  /**
   * Told when a transformed object enters the cache and when it leaves it (replaced, deleted, the
   * informer stopped): what the transform keeps for cached objects only (interned strings) lives as
   * long as they do.
   */
  lifecycle?: CacheLifecycle<T>;
  /** Period of the safety-net resync (onUpdate(obj, obj) for every object); 0 turns it off. */
  resyncMs?: number;
  /** A watch that delivers nothing (not even a bookmark) for this long is abandoned and reopened. */
  idleTimeoutMs?: number;
  /** Items per page when listing. */
  pageSize?: number;
  /**
   * Whether to ask for the initial state as a watch's events (WatchList) before listing in pages;
   * default true. An apiserver that refuses it is listed in pages from then on.
   */
  watchList?: boolean;
  /** The cluster's name, for metrics and logs. */
  cluster?: string;
  logger?: Logger;
  /** Backoff between failed attempts: initial and maximum, ms. */
  backoff?: { initialMs: number; maxMs: number };
}

interface WatchEvent<T> {
  type: 'ADDED' | 'MODIFIED' | 'DELETED' | 'BOOKMARK' | 'ERROR';
  object: T & { code?: number; message?: string };
}

export const keyOf = (obj: KubeObject): string =>
  obj.metadata?.namespace ? `${obj.metadata.namespace}/${obj.metadata.name}` : (obj.metadata?.name ?? '');

export function stripManagedFields<T extends KubeObject>(obj: T): T {
  if (obj.metadata?.managedFields) delete obj.metadata.managedFields;
  return obj;
}

export class Informer<T extends KubeObject = KubeObject> {
  readonly ref: ResourceRef;
  private readonly opts: InformerOptions<T>;
  private readonly store = new Map<string, T>();
  /** Adds, updates and deletes so far: what derive() recomputes on. */
  private changes = 0;
  private readonly indexers = new Map<string, IndexFunc<T>>();
  private readonly indices = new Map<string, Map<string, Set<string>>>();
  private readonly handlers: EventHandler<T>[] = [];
  private readonly log: Logger;
  private readonly labels: { cluster: string; resource: string };
  private resourceVersion = '';
  /** Whether the next initial state is asked of a watch (WatchList) rather than of paged lists. */
  private streams: boolean;
  private synced = false;
  /** Stopped, and what the lifecycle holds for the cached objects let go (see stop). */
  private stopped = false;
  private absent = false;
  private syncWaiters: (() => void)[] = [];
  private running: AbortController | undefined;
  private loop: Promise<void> | undefined;

  constructor(opts: InformerOptions<T>) {
    this.opts = opts;
    this.ref = opts.ref;
    this.streams = opts.watchList ?? true;
    this.labels = { cluster: opts.cluster ?? 'local', resource: opts.ref.resource };
    this.log = (opts.logger ?? rootLogger).child({
      informer: opts.ref.resource,
      cluster: this.labels.cluster,
    });
  }

  /** Adds an index; objects already cached are indexed at once. */
  addIndexer(name: string, fn: IndexFunc<T>): void {
    if (this.indexers.has(name)) return;
    this.indexers.set(name, fn);
    const index = new Map<string, Set<string>>();
    this.indices.set(name, index);
    for (const [key, obj] of this.store) for (const v of fn(obj)) addTo(index, v, key);
  }

  /** Registers a handler; it is told about every object already cached, as adds in the initial list. */
  addEventHandler(h: EventHandler<T>): void {
    this.handlers.push(h);
    if (h.onAdd) for (const [key, obj] of this.store) this.notify(key, () => h.onAdd!(obj, true));
  }

  get(key: string): T | undefined {
    return this.store.get(key);
  }

  list(): T[] {
    return [...this.store.values()];
  }

  keys(): string[] {
    return [...this.store.keys()];
  }

  /**
   * A view computed from every cached object (say, parsed policies), recomputed only after one of
   * them changed, not on every call from a reconcile.
   */
  derive<R>(fn: (objs: T[]) => R): () => R {
    let memo: { changes: number; value: R } | undefined;
    // Keyed by the cache's change count, so a call between changes costs nothing (an admission
    // webhook asks on every request).
    return () => {
      if (memo?.changes !== this.changes) memo = { changes: this.changes, value: fn(this.list()) };
      return memo.value;
    };
  }

  get size(): number {
    return this.store.size;
  }

  byIndex(name: string, value: string): T[] {
    const index = this.indices.get(name);
    if (!index) throw new Error(`informer ${this.ref.resource} has no index ${name}`);
    return [...(index.get(value) ?? [])].map((k) => this.store.get(k)!);
  }

  hasSynced(): boolean {
    return this.synced;
  }

  /** The CRD that serves this resource (for a custom resource), by name. */
  get crdName(): string {
    return crdName(this.ref);
  }

  /**
   * The resource's CRD is not installed: the cache is synced and empty (no such objects can exist)
   * and the informer lists again the moment the CRD is established.
   */
  get crdMissing(): boolean {
    return this.absent;
  }

  waitForSync(signal?: AbortSignal): Promise<void> {
    if (this.synced) return Promise.resolve();
    return new Promise((resolve, reject) => {
      this.syncWaiters.push(resolve);
      signal?.addEventListener('abort', () => reject(signal.reason), { once: true });
    });
  }

  get lastSyncResourceVersion(): string {
    return this.resourceVersion;
  }

  start(): void {
    if (this.running) return;
    // What stop() let go is held again: what replaces or removes each later lets go of it once more.
    if (this.stopped) for (const obj of this.store.values()) this.opts.lifecycle?.cached(obj);
    this.stopped = false;
    this.running = new AbortController();
    const signal = this.running.signal;
    this.loop = this.run(signal);
    if (this.opts.resyncMs) void this.resyncLoop(this.opts.resyncMs, signal);
  }

  async stop(): Promise<void> {
    this.running?.abort();
    await this.loop;
    this.running = undefined;
    // The objects stay readable, but what their transform kept for them goes: a stopped informer
    // (a cell disengaged) may never be listed again. A restart's relist caches fresh objects.
    if (!this.stopped) for (const obj of this.store.values()) this.opts.lifecycle?.dropped(obj);
    this.stopped = true;
  }

  private async run(signal: AbortSignal): Promise<void> {
    // A short first retry: a watch that fails right after a list (a CRD still initialising, an
    // apiserver restarting) is usually back at once, and every event waits for it.
    const { initialMs, maxMs } = this.opts.backoff ?? DEFAULT_BACKOFF;
    let delay = initialMs;
    while (!signal.aborted) {
      const began = performance.now();
      try {
        const initial = !this.resourceVersion;
        if (initial) informerMetrics.relists.inc(this.labels);
        if (initial && !this.streams) {
          await this.relist(signal);
          delay = initialMs;
        }
        const opened = performance.now();
        const events = await this.watch(signal, initial && this.streams);
        // The server closed the watch (its timeout): resume from the last resourceVersion at once.
        // One closed at once with nothing in it (a proxy answering an empty 200) is a failure, as
        // client-go counts it, or the loop would open watches back to back.
        if (events === 0 && performance.now() - opened < 1000 && !signal.aborted)
          throw new Error('the watch closed at once with no event');
        delay = initialMs;
      } catch (e) {
        if (signal.aborted) break;
        // The backoff grows while watches keep failing (an apiserver down, throttling) and starts
        // afresh only after one that ran a while: a failure right after a watch opened is no sign of health.
        if (performance.now() - began > HEALTHY_WATCH_MS) delay = initialMs;
        if (isGone(e)) {
          this.log.info('resourceVersion too old; relisting');
          this.resourceVersion = '';
          continue;
        }
        if (isNotFound(e) && (await this.crdAbsent(signal))) {
          await this.whileCrdMissing(signal);
          delay = initialMs;
          continue;
        }
        this.log.warn({ err: errorText(e), retryInMs: delay }, 'list/watch failed; retrying');
        await sleep(jitter(delay), undefined, { signal }).catch(() => {});
        delay = Math.min(delay * 2, maxMs);
      }
      if (!signal.aborted) informerMetrics.restarts.inc(this.labels);
    }
  }

  /**
   * Whether a 404 means the resource's CRD does not exist. Only the CRD object's own 404 says so: a
   * custom resource can 404 for a moment while its CRD is being served (an apiserver restarting),
   * and treating that as "no objects" would prune what they back.
   */
  private async crdAbsent(signal: AbortSignal): Promise<boolean> {
    if (!this.ref.group.includes('.')) return false;
    try {
      await this.opts.client.get(Resources.crds, this.crdName);
      return false;
    } catch (e) {
      if (!isNotFound(e) && !signal.aborted)
        this.log.warn({ err: errorText(e) }, `cannot tell whether the CRD ${this.crdName} is installed`);
      return isNotFound(e);
    }
  }

  /**
   * The CRD is not installed: no such object exists, so the cache is empty and synced (controllers
   * that also read other sources keep working); then wait, watching the CRD, until it is established.
   */
  private async whileCrdMissing(signal: AbortSignal): Promise<void> {
    for (const [key, old] of this.store) this.remove(key, old);
    this.resourceVersion = '';
    this.absent = true;
    informerMetrics.crdMissing.set(this.crdLabels, 1);
    informerMetrics.objects.set(this.labels, 0);
    this.log.error(
      { crd: this.crdName },
      `the CRD ${this.crdName} is not installed: ${this.ref.kind} objects are ignored until it is ` +
        '(run berth install, or berth run --install-crds)',
    );
    this.markSynced();
    try {
      await this.waitForCrd(signal);
    } finally {
      this.absent = false;
      informerMetrics.crdMissing.set(this.crdLabels, 0);
    }
    if (!signal.aborted)
      this.log.info({ crd: this.crdName }, `the CRD ${this.crdName} is installed; listing`);
  }

  private get crdLabels() {
    return { ...this.labels, crd: this.crdName, kind: this.ref.kind };
  }

  /** Watches the one CRD by name until it is established (or the informer stops). */
  private async waitForCrd(signal: AbortSignal): Promise<void> {
    const path = resourcePath(Resources.crds);
    const query = { fieldSelector: `metadata.name=${this.crdName}` };
    const { initialMs, maxMs } = this.opts.backoff ?? DEFAULT_BACKOFF;
    let delay = initialMs;
    while (!signal.aborted) {
      try {
        const list = await this.opts.client.request<KubeList<KubeObject>>('GET', path, { query, signal });
        if (list.items.some((c) => hasCondition(c, 'Established'))) return;
        const events = this.opts.client.stream<WatchEvent<KubeObject>>(path, {
          query: { ...query, watch: 1, resourceVersion: list.metadata.resourceVersion, timeoutSeconds: 300 },
          signal,
          idleTimeoutMs: this.opts.idleTimeoutMs ?? 120_000,
        });
        for await (const ev of events) {
          if ((ev.type === 'ADDED' || ev.type === 'MODIFIED') && hasCondition(ev.object, 'Established'))
            return;
        }
        delay = initialMs;
      } catch (e) {
        if (signal.aborted) return;
        this.log.warn(
          { err: errorText(e), retryInMs: delay },
          `watching the CRD ${this.crdName} failed; retrying`,
        );
        await sleep(jitter(delay), undefined, { signal }).catch(() => {});
        delay = Math.min(delay * 2, maxMs);
      }
    }
  }

  private markSynced(): void {
    if (this.synced) return;
    this.synced = true;
    for (const w of this.syncWaiters.splice(0)) w();
    this.log.debug({ objects: this.store.size }, 'cache synced');
  }

  private query(extra: Record<string, string | number | boolean | undefined>) {
    return { labelSelector: this.opts.labelSelector, fieldSelector: this.opts.fieldSelector, ...extra };
  }

  /**
   * Lists everything in pages, each cached as it arrives (so that the cache fills at the apiserver's
   * pace), then drops what no page held: adds, updates and deletes for the difference.
   */
  private async relist(signal: AbortSignal): Promise<void> {
    const { client, ref, namespace } = this.opts;
    const path = resourcePath(ref, namespace);
    const seen = new Set<string>();
    let cont: string | undefined;
    let rv: string;
    for (let limit = this.opts.pageSize ?? 500; ;) {
      let page: KubeList<T>;
      try {
        page = await client.request<KubeList<T>>('GET', path, {
          query: this.query({ limit, continue: cont }),
          signal,
        });
      } catch (e) {
        // A page past the client's bound (large objects, or a hostile apiserver): fewer objects a
        // page, down to one, which the bound always admits unless the apiserver is hostile.
        if (!(e instanceof ResponseTooLarge) || limit === 1) throw e;
        limit = Math.max(1, Math.floor(limit / 10));
        this.log.info(
          { limit, err: errorText(e) },
          'a list page past the bound; asking for fewer objects a page',
        );
        continue;
      }
      const kind = page.kind.replace(/List$/, '');
      for (const item of page.items) {
        // List items carry no apiVersion/kind; watch events do. Keep them uniform.
        item.apiVersion ??= page.apiVersion;
        item.kind ??= kind;
        this.cacheInitial(item, seen);
      }
      cont = page.metadata.continue || undefined;
      rv = page.metadata.resourceVersion ?? '';
      if (!cont) break;
    }
    this.initialDone(seen, rv);
  }

  /** An object of the initial state, listed or streamed: cached at once, and remembered as seen. */
  private cacheInitial(item: T, seen: Set<string>): void {
    const obj = this.transform(item);
    const key = keyOf(obj);
    seen.add(key);
    this.upsert(key, obj);
  }

  /** The initial state is in: what it did not hold is deleted, and the cache is synced at `rv`. */
  private initialDone(seen: Set<string>, rv: string): void {
    for (const [key, old] of this.store) if (!seen.has(key)) this.remove(key, old);
    this.resourceVersion = rv;
    informerMetrics.objects.set(this.labels, this.store.size);
    this.markSynced();
  }

  /**
   * Watches from the last resourceVersion until the server closes the watch; the events it brought.
   * With `initial`, the watch first streams the current state (WatchList: every object as an ADDED
   * event, then a bookmark marking their end), which replaces the cache as a relist does.
   */
  private async watch(signal: AbortSignal, initial: boolean): Promise<number> {
    const { client, ref, namespace } = this.opts;
    // Like client-go, a random server-side timeout spreads reconnects of many watches over time.
    const timeoutSeconds = 300 + Math.floor(Math.random() * 300);
    const events = client.stream<WatchEvent<T>>(resourcePath(ref, namespace), {
      query: this.query({
        watch: 1,
        allowWatchBookmarks: true,
        timeoutSeconds,
        ...(initial
          ? { sendInitialEvents: true, resourceVersionMatch: 'NotOlderThan' }
          : { resourceVersion: this.resourceVersion }),
      }),
      signal,
      idleTimeoutMs: this.opts.idleTimeoutMs ?? 120_000,
    });
    // The keys of the initial state so far, until its end's bookmark.
    let seen = initial ? new Set<string>() : undefined;
    let count = 0;
    try {
      for await (const ev of events) {
        count++;
        if (seen) {
          if (ev.type === 'ADDED') this.cacheInitial(ev.object, seen);
          else if (ev.type === 'BOOKMARK' && isInitialEnd(ev.object)) {
            this.initialDone(seen, ev.object.metadata?.resourceVersion ?? '');
            seen = undefined;
          } else if (ev.type === 'ERROR' && this.watchError(ev.object)) return count;
          // Before the bookmark, the objects' versions are no point to resume from.
          continue;
        }
        if (ev.type === 'ERROR') {
          // The run loop counts the restart.
          if (this.watchError(ev.object)) return count;
          continue;
        }
        this.apply(ev);
        const rv = ev.object.metadata?.resourceVersion;
        if (rv) this.resourceVersion = rv;
        informerMetrics.objects.set(this.labels, this.store.size);
      }
    } catch (e) {
      // An apiserver without WatchList refuses the parameter before any event: paged lists from now on.
      if (!initial || count > 0 || !refusesWatchList(e)) throw e;
      this.streams = false;
      this.log.info({ err: errorText(e) }, 'the apiserver streams no initial state; listing in pages');
      await this.relist(signal);
      return this.watch(signal, false);
    }
    return count;
  }

  private apply(ev: WatchEvent<T>): void {
    if (ev.type === 'ADDED' || ev.type === 'MODIFIED') {
      const obj = this.transform(ev.object);
      this.upsert(keyOf(obj), obj);
    } else if (ev.type === 'DELETED') {
      const key = keyOf(ev.object);
      const old = this.store.get(key);
      this.remove(key, old ?? this.transform(ev.object));
    }
  }

  /** A watch's ERROR event: true for 410 Gone (relist), else thrown. */
  private watchError(status: { code?: number; message?: string }): true {
    if (status.code === 410) {
      this.resourceVersion = '';
      return true;
    }
    throw new ApiError(
      status.code ?? 500,
      'WatchError',
      `watch error ${status.code}: ${status.message}`,
      status,
    );
  }

  private transform(obj: T): T {
    return (this.opts.transform ?? stripManagedFields)(obj);
  }

  private upsert(key: string, obj: T): void {
    const old = this.store.get(key);
    if (old && old.metadata?.resourceVersion === obj.metadata?.resourceVersion) return;
    this.store.set(key, obj);
    this.opts.lifecycle?.cached(obj);
    if (old) this.opts.lifecycle?.dropped(old);
    this.changes++;
    this.reindex(key, old, obj);
    // Until the first sync, an add is of the initial list (listed or streamed); a relist's adds
    // after that are objects created while the watch was down: news.
    const initial = !this.synced;
    for (const h of this.handlers)
      this.notify(key, () => (old ? h.onUpdate?.(old, obj) : h.onAdd?.(obj, initial)));
  }

  private remove(key: string, old: T | undefined): void {
    if (!this.store.delete(key)) return;
    if (old) this.opts.lifecycle?.dropped(old);
    this.changes++;
    this.reindex(key, old, undefined);
    if (old) for (const h of this.handlers) this.notify(key, () => h.onDelete?.(old));
  }

  /**
   * Calls a handler for the object of `key`. One that throws (a map function's bug on one object)
   * is logged, and the other handlers, the watch and the resync go on: from a resync or a
   * replay it would otherwise be an unhandled rejection, which ends the process.
   */
  private notify(key: string, call: () => void): void {
    try {
      call();
    } catch (e) {
      this.log.error({ err: errorText(e), key }, 'event handler failed');
    }
  }

  private reindex(key: string, old: T | undefined, obj: T | undefined): void {
    for (const [name, fn] of this.indexers) {
      const index = this.indices.get(name)!;
      const before = old ? fn(old) : [];
      const after = obj ? fn(obj) : [];
      for (const v of before) if (!after.includes(v)) removeFrom(index, v, key);
      for (const v of after) addTo(index, v, key);
    }
  }

  private async resyncLoop(every: number, signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      await sleep(every, undefined, { signal, ref: false }).catch(() => {});
      if (signal.aborted || !this.synced) continue;
      for (const [key, obj] of this.store)
        for (const h of this.handlers) this.notify(key, () => h.onUpdate?.(obj, obj));
    }
  }
}

/** The bookmark that ends a WatchList's initial events. */
const isInitialEnd = (obj: KubeObject): boolean =>
  obj.metadata?.annotations?.['k8s.io/initial-events-end'] === 'true';

/** The answer of an apiserver that does not serve WatchList (its feature gate off, or older). */
const refusesWatchList = (e: unknown): boolean =>
  e instanceof ApiError && (e.status === 400 || e.status === 422 || e.status === 501);

function addTo(index: Map<string, Set<string>>, value: string, key: string): void {
  let set = index.get(value);
  if (!set) index.set(value, (set = new Set()));
  set.add(key);
}

function removeFrom(index: Map<string, Set<string>>, value: string, key: string): void {
  const set = index.get(value);
  if (!set) return;
  set.delete(key);
  if (set.size === 0) index.delete(value);
}

const jitter = (ms: number) => ms * (0.8 + Math.random() * 0.4);
/**
 * Retries of a failed list or watch: 5 s at most, so that an apiserver back from a restart is watched
 * again within seconds, at a fifth of a request a second per informer while it is down.
 */
const DEFAULT_BACKOFF = { initialMs: 200, maxMs: 5_000 };
/** A watch that ran this long before it failed was a healthy one: the retry backoff starts afresh. */
const HEALTHY_WATCH_MS = 10_000;
