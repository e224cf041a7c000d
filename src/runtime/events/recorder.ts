// Kubernetes Events (events.k8s.io/v1) for controllers, after client-go's tools/events, with the
// per-object spam filter of tools/record. Recording never throws and never waits for the API: it
// updates in-memory state and a single sender writes in the background. Repeats of one event are a
// series: one Event object whose series.count is patched at most once per interval, so a hot
// reconcile loop costs a few writes, not one per occurrence. The decisions (series, spam filter,
// bounds) are pure classes below, separate from the I/O in EventRecorder.
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  ApiError,
  isConflict,
  isNotFound,
  NotLeaderError,
  PATCH,
  resourcePath,
  type KubeClient,
} from '../client/client.ts';
import { microTime } from '../api/meta.ts';
import { rootLogger, ThrottledLog, type Logger } from '../observability/log.ts';
import { eventMetrics } from '../observability/metrics.ts';
import { Resources, type KubeObject } from '../api/meta.ts';
import { SeriesCache, SpamFilter, type Series } from './correlator.ts';
import {
  eventNamePrefix,
  objectKey,
  seriesKey,
  toReference,
  truncateNote,
  type Event,
  type EventFields,
  type EventSeries,
  type EventType,
  type ObjectReference,
} from './event.ts';

export interface EventRecorderOptions {
  client: KubeClient;
  /** `berth.dev/<controller>`. */
  reportingController: string;
  /** This replica, e.g. its pod name. */
  reportingInstance: string;
  /** Epoch milliseconds; Date.now by default. */
  clock?: () => number;
  logger?: Logger;
  /** Least time between two writes of one series; 30 s by default. */
  seriesUpdateIntervalMs?: number;
  /** A series not seen for longer ends; 6 minutes by default. */
  seriesIdleMs?: number;
  /** Series remembered at most; 4096 by default. */
  maxSeries?: number;
  /** Spam filter: new Events per object at once, and milliseconds per further one. */
  spamBurst?: number;
  spamRefillMs?: number;
  /** Events waiting to be created; beyond it the oldest is dropped. */
  maxQueue?: number;
}

interface Draft {
  namespace: string;
  prefix: string;
  body: Omit<EventFields, 'series'>;
  /** The Event's name once created. */
  name?: string;
}

const maxAttempts = 3;
const retryBaseMs = 200;

// Network errors, overload and server errors may pass; a refusal (403, 422, not the leader) will not.
const transient = (err: unknown): boolean =>
  err instanceof ApiError ? err.status === 429 || err.status >= 500 : !(err instanceof NotLeaderError);

export class EventRecorder {
  readonly #client: KubeClient;
  readonly #controller: string;
  readonly #instance: string;
  readonly #clock: () => number;
  readonly #log: Logger;
  readonly #series: SeriesCache<Draft>;
  readonly #spam: SpamFilter;
  readonly #maxQueue: number;
  /** Series whose Event is still to be created, oldest first. */
  readonly #queue: Series<Draft>[] = [];
  readonly #flushes: (() => void)[] = [];
  readonly #stop = new AbortController();
  readonly #stats = { spamDropped: 0, queueDropped: 0, failedWrites: 0 };
  /** A thousand nodes joining at once fill the queue in a second: one line says so, not a thousand. */
  readonly #throttled: ThrottledLog;
  /** Set while the sender is idle: wakes it. */
  #wake: (() => void) | undefined;

  constructor(opts: EventRecorderOptions) {
    this.#client = opts.client;
    this.#controller = opts.reportingController;
    this.#instance = opts.reportingInstance;
    this.#clock = opts.clock ?? Date.now;
    this.#log = (opts.logger ?? rootLogger).child({
      component: 'events',
      reportingController: opts.reportingController,
    });
    this.#series = new SeriesCache({
      updateIntervalMs: opts.seriesUpdateIntervalMs,
      idleMs: opts.seriesIdleMs,
      maxSeries: opts.maxSeries,
    });
    this.#throttled = new ThrottledLog(this.#log);
    this.#spam = new SpamFilter({ burst: opts.spamBurst, refillMs: opts.spamRefillMs });
    this.#maxQueue = opts.maxQueue ?? 1000;
    void this.#send();
  }

  /** Events dropped by the spam filter or a full queue, and writes given up on. */
  get stats(): { spamDropped: number; queueDropped: number; failedWrites: number } {
    return { ...this.#stats };
  }

  /**
   * Records an event about `regarding`; returns at once and never throws. `regarding` should carry
   * apiVersion and kind, which the items of a list response lack.
   */
  event(
    regarding: KubeObject | ObjectReference,
    type: EventType,
    reason: string,
    action: string,
    note: string,
    related?: KubeObject | ObjectReference,
  ): void {
    try {
      if (this.#stop.signal.aborted) return;
      const now = this.#clock();
      const ref = toReference(regarding);
      const rel = related ? toReference(related) : undefined;
      const body: Draft['body'] = {
        eventTime: microTime(now),
        reportingController: this.#controller,
        reportingInstance: this.#instance,
        action,
        reason,
        note: truncateNote(note),
        type,
        regarding: ref,
        ...(rel ? { related: rel } : {}),
      };
      const key = seriesKey({ ...body, related: rel });
      // The spam filter limits new Events; repeats of a series cost no more than its patches.
      if (!this.#series.continues(key, now) && !this.#spam.allow(objectKey(ref), now)) {
        this.#stats.spamDropped++;
        eventMetrics.dropped.inc({ controller: this.#controller, reason: 'spam' });
        this.#log.debug({ regarding: ref, reason }, 'event dropped by the spam filter');
        return;
      }
      const { series, fresh } = this.#series.observe(key, now, () => ({
        namespace: ref.namespace || 'default',
        prefix: eventNamePrefix(ref.name),
        body,
      }));
      if (fresh) {
        if (this.#queue.length >= this.#maxQueue) {
          const dropped = this.#queue.shift()!;
          this.#series.forget(dropped);
          this.#stats.queueDropped++;
          eventMetrics.dropped.inc({ controller: this.#controller, reason: 'queue_full' });
          this.#throttled.warn(
            'queue_full',
            { reason: dropped.data.body.reason },
            'event queue full: dropped the oldest event (berth_events_dropped_total counts them all)',
          );
        }
        this.#queue.push(series);
      }
      this.#wake?.();
    } catch (err) {
      this.#log.error({ err }, 'cannot record event');
    }
  }

  /** Resolves once everything recorded so far is written (or given up on), due or not. */
  flush(): Promise<void> {
    if (this.#stop.signal.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      this.#flushes.push(resolve);
      this.#wake?.();
    });
  }

  /** Stops writing; events not yet written are discarded. */
  stop(): void {
    this.#stop.abort();
    this.#queue.length = 0;
    this.#wake?.();
  }

  /** The sender: creates queued Events first, then patches the series counts as they fall due. */
  async #send(): Promise<void> {
    while (!this.#stop.signal.aborted) {
      try {
        const fresh = this.#queue.shift();
        if (fresh) {
          await this.#create(fresh);
        } else if (this.#flushes.length > 0) {
          const waiters = this.#flushes.splice(0);
          for (const s of this.#series.pending()) await this.#patch(s);
          for (const resolve of waiters) resolve();
        } else {
          const due = this.#series.due(this.#clock());
          if (due) await this.#patch(due);
          else await this.#idle();
        }
      } catch (err) {
        this.#log.error({ err }, 'event sender failed');
      }
    }
    for (const resolve of this.#flushes.splice(0)) resolve();
  }

  #idle(): Promise<void> {
    return new Promise((resolve) => {
      const dueAt = this.#series.nextDueAt();
      // unref: a recorder waiting to patch a count never keeps the process alive.
      const timer =
        dueAt === undefined
          ? undefined
          : setTimeout(() => this.#wake?.(), Math.max(0, dueAt - this.#clock()));
      timer?.unref();
      this.#wake = () => {
        clearTimeout(timer);
        this.#wake = undefined;
        resolve();
      };
    });
  }

  /** Creates the series' Event under a new name, carrying the count so far. */
  async #create(s: Series<Draft>): Promise<void> {
    const count = s.count;
    const { namespace, prefix, body } = s.data;
    const event: Event = {
      apiVersion: 'events.k8s.io/v1',
      kind: 'Event',
      ...body,
      metadata: { name: `${prefix}.${randomBytes(8).toString('hex')}`, namespace },
      ...(count > 1 ? { series: { count, lastObservedTime: microTime(s.lastObserved) } } : {}),
    };
    const err = await this.#write((signal) =>
      this.#client
        .request('POST', resourcePath(Resources.events, namespace), { body: event, signal })
        // The name is ours alone: AlreadyExists means an earlier attempt landed.
        .catch((e: unknown) => {
          if (!isConflict(e)) throw e;
        }),
    );
    if (err) {
      this.#series.forget(s);
      this.#failed(err, s, 'cannot create event');
      return;
    }
    s.data.name = event.metadata!.name;
    this.#series.sent(s, count, this.#clock());
  }

  async #patch(s: Series<Draft>): Promise<void> {
    const count = s.count;
    const series: EventSeries = { count, lastObservedTime: microTime(s.lastObserved) };
    const { namespace, name } = s.data;
    const err = await this.#write((signal) =>
      this.#client.request('PATCH', resourcePath(Resources.events, namespace, name), {
        body: { series },
        contentType: PATCH.merge,
        signal,
      }),
    );
    // The Event expired (events live an hour by default) or was deleted: start it again.
    if (isNotFound(err)) return this.#create(s);
    if (err) {
      this.#series.sent(s, s.sentCount, this.#clock());
      this.#failed(err, s, 'cannot update event series');
      return;
    }
    this.#series.sent(s, count, this.#clock());
  }

  /** One write, retried a few times with backoff on transient errors; the error it gave up on. */
  async #write(request: (signal: AbortSignal) => Promise<unknown>): Promise<unknown> {
    const signal = this.#stop.signal;
    for (let attempt = 1; ; attempt++) {
      try {
        await request(signal);
        return undefined;
      } catch (err) {
        if (signal.aborted || attempt >= maxAttempts || !transient(err))
          return err ?? new Error('request failed');
        await sleep(retryBaseMs * 2 ** (attempt - 1), undefined, { signal }).catch(() => undefined);
      }
    }
  }

  #failed(err: unknown, s: Series<Draft>, msg: string): void {
    this.#stats.failedWrites++;
    eventMetrics.dropped.inc({ controller: this.#controller, reason: 'failed' });
    if (this.#stop.signal.aborted) return; // stop() cut it short: not worth a warning
    const { regarding, reason } = s.data.body;
    this.#log.warn({ err, regarding, reason, count: s.count }, msg);
  }
}
