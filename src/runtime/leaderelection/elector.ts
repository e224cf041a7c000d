// Leader election on a coordination.k8s.io/v1 Lease, after client-go's tools/leaderelection.
// Candidates judge expiry by when THEY saw the Lease last change, never by the timestamps in it,
// so clock skew between replicas cannot shorten a lease. The Lease is replaced (PUT) with its
// resourceVersion, so of two candidates racing for it the apiserver lets exactly one win.
import { setTimeout as sleep } from 'node:timers/promises';
import { isConflict, isNotFound, resourcePath, type KubeClient } from '../client/client.ts';
import { rootLogger, ThrottledLog, type Logger } from '../observability/log.ts';
import { leaderMetrics } from '../observability/metrics.ts';
import { microTime, Resources, type KubeObject } from '../api/meta.ts';

export interface LeaseSpec {
  holderIdentity?: string;
  leaseDurationSeconds?: number;
  acquireTime?: string;
  renewTime?: string;
  leaseTransitions?: number;
}

export interface Lease extends KubeObject {
  spec?: LeaseSpec;
}

export interface LeaderElectorOptions {
  client: KubeClient;
  namespace: string;
  /** Name of the Lease, and the `name` label of leader_election_master_status. */
  name: string;
  /** Unique per replica, e.g. the pod name plus a random suffix. */
  identity: string;
  /** How long other candidates wait, from when they last saw the Lease change, before taking it. */
  leaseDurationMs?: number;
  /** How long the leader keeps acting without a successful renew; below leaseDurationMs. */
  renewDeadlineMs?: number;
  /** Pause between attempts to acquire or renew. */
  retryPeriodMs?: number;
  /** Called on each acquisition; `signal` aborts the moment leadership ends. */
  onStartedLeading(signal: AbortSignal): void | Promise<void>;
  /** Called after each term of leadership, once `signal` has aborted. */
  onStoppedLeading(): void;
  /** Called when a different holder of the Lease is observed, ourselves included. */
  onNewLeader?(identity: string): void;
  /** Give the Lease up when run()'s signal aborts, so another replica takes over at once. */
  releaseOnCancel?: boolean;
  /** Monotonic milliseconds for all timing decisions; performance.now() by default. */
  clock?: () => number;
  logger?: Logger;
}

// client-go's JitterFactor for acquire retries, so candidates do not stampede in lockstep.
const jitterFactor = 1.2;

export class LeaderElector {
  readonly #client: KubeClient;
  readonly #namespace: string;
  readonly #name: string;
  readonly #identity: string;
  readonly #leaseDurationMs: number;
  readonly #renewDeadlineMs: number;
  readonly #retryPeriodMs: number;
  readonly #releaseOnCancel: boolean;
  readonly #clock: () => number;
  readonly #log: Logger;
  readonly #refusals: ThrottledLog;
  readonly #callbacks: Pick<LeaderElectorOptions, 'onStartedLeading' | 'onStoppedLeading' | 'onNewLeader'>;

  /** The Lease as last read or written, with the resourceVersion the next PUT must match. */
  #lease: Lease | undefined;
  /** When we last saw the Lease's spec change (clock): the start of its holder's lease. */
  #observedAt = 0;
  /** When we last saw another replica renew or release the Lease (clock). */
  #othersSeenAt: number | undefined;
  #reportedLeader = '';
  #leading = false;
  /** When the last successful acquire or renew was sent (clock). */
  #renewedAt = 0;

  constructor(opts: LeaderElectorOptions) {
    this.#client = opts.client;
    this.#namespace = opts.namespace;
    this.#name = opts.name;
    this.#identity = opts.identity;
    this.#leaseDurationMs = opts.leaseDurationMs ?? 15_000;
    this.#renewDeadlineMs = opts.renewDeadlineMs ?? 10_000;
    this.#retryPeriodMs = opts.retryPeriodMs ?? 2_000;
    this.#releaseOnCancel = opts.releaseOnCancel ?? true;
    this.#clock = opts.clock ?? (() => performance.now());
    this.#callbacks = opts;
    this.#log = (opts.logger ?? rootLogger).child({
      component: 'leaderelection',
      lease: `${opts.namespace}/${opts.name}`,
      identity: opts.identity,
    });
    this.#refusals = new ThrottledLog(this.#log);
    // The same constraints client-go enforces: without them two replicas could lead at once.
    if (!opts.identity) throw new Error('leader election needs an identity');
    if (this.#leaseDurationMs <= this.#renewDeadlineMs)
      throw new Error('leaseDurationMs must be greater than renewDeadlineMs');
    if (this.#renewDeadlineMs <= jitterFactor * this.#retryPeriodMs)
      throw new Error(`renewDeadlineMs must be greater than ${jitterFactor} * retryPeriodMs`);
    if (this.#retryPeriodMs <= 0) throw new Error('retryPeriodMs must be positive');
  }

  /**
   * When this replica last saw another one renew or release the Lease (the elector's clock,
   * `performance.now()` by default), if ever: that leader was acting until then.
   */
  othersLastSeenAt(): number | undefined {
    return this.#othersSeenAt;
  }

  /**
   * Whether this replica may act as leader now: it holds the Lease, as far as it last saw, and its
   * last successful renew is younger than the renew deadline. Checked before every write, so a
   * replica that stalled (GC pause, SIGSTOP, starved event loop) stops writing even before its
   * renew loop notices.
   */
  isLeader(): boolean {
    return (
      this.#leading &&
      this.#holder() === this.#identity &&
      this.#clock() - this.#renewedAt < this.#renewDeadlineMs
    );
  }

  /** Who holds the Lease as this replica last saw it ('' before the first read), and who this replica is. */
  leadership(): { holder: string; identity: string } {
    return { holder: this.#holder(), identity: this.#identity };
  }

  /** Campaigns, leads and campaigns again after losing the Lease, until `signal` aborts. */
  async run(signal: AbortSignal): Promise<void> {
    leaderMetrics.status.set({ name: this.#name }, 0);
    while (!signal.aborted) {
      if (!(await this.#acquire(signal))) return;
      await this.#lead(signal);
    }
  }

  async #acquire(signal: AbortSignal): Promise<boolean> {
    this.#log.info('attempting to acquire leader lease');
    while (!signal.aborted) {
      const start = this.#clock();
      if (await this.#tryAcquireOrRenew(within(signal, this.#renewDeadlineMs))) {
        this.#renewedAt = start;
        return true;
      }
      await pause(this.#retryPeriodMs * (1 + Math.random() * jitterFactor), signal);
    }
    return false;
  }

  async #lead(signal: AbortSignal): Promise<void> {
    this.#leading = true;
    leaderMetrics.status.set({ name: this.#name }, 1);
    this.#log.info('acquired leader lease');
    const term = new AbortController();
    this.#start(term.signal);
    for (;;) {
      // Wake no later than the deadline, so leadership ends when isLeader() turns false.
      await pause(
        Math.min(this.#retryPeriodMs, this.#renewedAt + this.#renewDeadlineMs - this.#clock()),
        signal,
      );
      const start = this.#clock();
      const left = this.#renewedAt + this.#renewDeadlineMs - start;
      if (signal.aborted || left <= 0) break;
      if (await this.#tryAcquireOrRenew(within(signal, left))) this.#renewedAt = start;
      else if (this.#holder() !== this.#identity) break;
    }
    this.#leading = false;
    term.abort();
    leaderMetrics.status.set({ name: this.#name }, 0);
    if (signal.aborted) {
      this.#log.info('stopping: giving up leadership');
      if (this.#releaseOnCancel) await this.#release();
    } else {
      // Either another replica took the Lease or no renew succeeded within the deadline.
      this.#log.warn({ holder: this.#holder() }, 'lost leader lease');
    }
    try {
      this.#callbacks.onStoppedLeading();
    } catch (err) {
      this.#log.error({ err }, 'onStoppedLeading failed');
    }
  }

  #start(signal: AbortSignal): void {
    try {
      Promise.resolve(this.#callbacks.onStartedLeading(signal)).catch((err: unknown) =>
        this.#log.error({ err }, 'onStartedLeading failed'),
      );
    } catch (err) {
      this.#log.error({ err }, 'onStartedLeading failed');
    }
  }

  /** client-go's tryAcquireOrRenew: true when we hold the Lease with a fresh renewTime. */
  async #tryAcquireOrRenew(signal: AbortSignal): Promise<boolean> {
    const now = microTime(Date.now());
    const desired: LeaseSpec = {
      holderIdentity: this.#identity,
      leaseDurationSeconds: Math.ceil(this.#leaseDurationMs / 1000),
      acquireTime: now,
      renewTime: now,
    };

    // Fast path for the leader: replace the Lease we last wrote, assuming nobody else has.
    const known = this.#lease;
    if (known && this.#holder() === this.#identity && this.#leaseValid()) {
      try {
        this.#observe(
          await this.#put(
            {
              ...desired,
              acquireTime: known.spec?.acquireTime,
              leaseTransitions: known.spec?.leaseTransitions,
            },
            signal,
          ),
        );
        return true;
      } catch (err) {
        this.#log.debug({ err }, 'optimistic renew failed, reading the lease');
      }
    }

    let current: Lease;
    try {
      current = await this.#client.request<Lease>('GET', this.#path(), { signal });
    } catch (err) {
      if (!isNotFound(err)) {
        this.#log.warn({ err }, 'cannot read leader lease');
        return false;
      }
      return this.#create(desired, signal);
    }

    this.#observe(current);
    const spec = current.spec ?? {};
    const mine = spec.holderIdentity === this.#identity;
    if (spec.holderIdentity && !mine && this.#leaseValid()) return false;
    const transitions = spec.leaseTransitions ?? 0;
    try {
      this.#observe(
        await this.#put(
          mine
            ? { ...desired, acquireTime: spec.acquireTime, leaseTransitions: transitions }
            : { ...desired, leaseTransitions: transitions + 1 },
          signal,
        ),
      );
      return true;
    } catch (err) {
      if (isConflict(err)) this.#log.debug('lost the race for the leader lease');
      else this.#log.warn({ err }, 'cannot update leader lease');
      return false;
    }
  }

  /** No Lease yet: create it, held by us. */
  async #create(desired: LeaseSpec, signal: AbortSignal): Promise<boolean> {
    try {
      const body: Lease = {
        apiVersion: 'coordination.k8s.io/v1',
        kind: 'Lease',
        metadata: { name: this.#name, namespace: this.#namespace },
        spec: { ...desired, leaseTransitions: 0 },
      };
      this.#observe(
        await this.#client.request<Lease>('POST', resourcePath(Resources.leases, this.#namespace), {
          body,
          signal,
        }),
      );
      return true;
    } catch (createErr) {
      // Another candidate's create won the race: nothing to tell. Anything else (the namespace
      // missing, a refusal) keeps every replica from leading, so it is said, once a minute.
      if (isConflict(createErr)) this.#log.debug({ err: createErr }, 'cannot create leader lease');
      else
        this.#refusals.warn(
          'create',
          { err: createErr, namespace: this.#namespace },
          'cannot create the leader lease; no replica leads until it can',
        );
      return false;
    }
  }

  /**
   * Hands the Lease over at once: no holder and the shortest duration the API accepts. It reads the
   * Lease first: a renew cut short by the stop may still have landed, and a PUT with the
   * resourceVersion from before it would be refused, leaving followers to wait a whole lease.
   */
  async #release(): Promise<void> {
    const signal = AbortSignal.timeout(Math.ceil(this.#renewDeadlineMs));
    while (!signal.aborted) {
      try {
        this.#observe(await this.#client.request<Lease>('GET', this.#path(), { signal }));
        if (this.#holder() !== this.#identity) return;
        const now = microTime(Date.now());
        this.#observe(
          await this.#put(
            {
              holderIdentity: '',
              leaseDurationSeconds: 1,
              acquireTime: now,
              renewTime: now,
              leaseTransitions: this.#lease?.spec?.leaseTransitions,
            },
            signal,
          ),
        );
        this.#log.info('released leader lease');
        return;
      } catch (err) {
        // A conflict means the Lease moved between the read and the write: read it again.
        if (isConflict(err)) continue;
        this.#log.warn({ err }, 'cannot release leader lease');
        return;
      }
    }
    this.#log.warn('cannot release leader lease within the renew deadline');
  }

  /** Replaces the last seen Lease; its resourceVersion makes this a compare-and-swap. */
  #put(spec: LeaseSpec, signal: AbortSignal): Promise<Lease> {
    const body: Lease = { ...this.#lease, spec };
    return this.#client.request<Lease>('PUT', this.#path(), { body, signal });
  }

  /** Records the Lease as seen now; the lease duration restarts only when its spec changed. */
  #observe(lease: Lease): void {
    if (JSON.stringify(lease.spec ?? {}) !== JSON.stringify(this.#lease?.spec ?? {})) {
      this.#observedAt = this.#clock();
      if (lease.spec?.holderIdentity !== this.#identity) this.#othersSeenAt = this.#observedAt;
    }
    this.#lease = lease;
    const holder = this.#holder();
    if (holder && holder !== this.#reportedLeader) {
      this.#reportedLeader = holder;
      this.#log.info({ leader: holder }, 'new leader observed');
      try {
        this.#callbacks.onNewLeader?.(holder);
      } catch (err) {
        this.#log.error({ err }, 'onNewLeader failed');
      }
    }
  }

  #holder(): string {
    return this.#lease?.spec?.holderIdentity ?? '';
  }

  #leaseValid(): boolean {
    return this.#observedAt + (this.#lease?.spec?.leaseDurationSeconds ?? 0) * 1000 > this.#clock();
  }

  #path(): string {
    return resourcePath(Resources.leases, this.#namespace, this.#name);
  }
}

/** `signal`, also aborting after `ms`. */
const within = (signal: AbortSignal, ms: number): AbortSignal =>
  AbortSignal.any([signal, AbortSignal.timeout(Math.max(1, Math.ceil(ms)))]);

/** Sleeps, returning early (without throwing) when `signal` aborts. */
async function pause(ms: number, signal: AbortSignal): Promise<void> {
  await sleep(ms, undefined, { signal }).catch(() => undefined);
}
