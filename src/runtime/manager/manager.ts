// The manager in controller-runtime's sense: it owns the runnables (controllers among them), leader
// election, the metrics and health endpoints, and a set of clusters: the local one it is built with
// and others that providers engage and disengage while it runs. Informers run on every replica (so
// a new leader starts warm); controllers and other leader-only runnables run only while this
// replica holds the lease.
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Controller } from '../controller/controller.ts';
import type { Informer } from '../cache/informer.ts';
import { errorText } from '../observability/log.ts';
import { KubeClient } from '../client/client.ts';
import { Cluster, type InformerRequest } from '../cluster/cluster.ts';
import { localCluster } from '../cluster/key.ts';
import type { Aware, ClusterSet, Provider } from '../cluster/provider.ts';
import type { EventRecorder } from '../events/recorder.ts';
import { LeaderElector } from '../leaderelection/elector.ts';
import { rootLogger, type Logger } from '../observability/log.ts';
import { metricsText, registry } from '../observability/metrics.ts';
import { serve, type RunningServer } from '../server/http.ts';
import type { KubeObject, ResourceRef } from '../api/meta.ts';

/**
 * How long before its last renewal the previous leader is taken to have acted on a change: its
 * controllers act within a second (bench:scale); the rest is room for a slow turn.
 */
const HANDOVER_MARGIN_MS = 5_000;

export interface Runnable extends Partial<Aware> {
  name: string;
  /** Leader-only runnables start when this replica becomes leader; others (webhook servers) always run. */
  needLeaderElection: boolean;
  /** Runs until the signal aborts; may resolve early once started. */
  start(signal: AbortSignal): Promise<void>;
  stop?(): Promise<void>;
  /** Why this replica must not be sent traffic now, which /readyz then says; undefined when it may. */
  unready?(): string | undefined;
  /** Stop begins: an always-on runnable that serves moves its clients elsewhere, yet serves until stop(). */
  drain?(): void;
}

export interface LeaderElectionOptions {
  namespace: string;
  name: string;
  identity?: string;
  leaseDurationMs?: number;
  renewDeadlineMs?: number;
  retryPeriodMs?: number;
}

export interface ManagerOptions {
  /** The client of the local cluster: the one that holds the lease (the manager closes it at stop). */
  client: KubeClient;
  /** Engage and disengage further clusters while the manager runs. */
  providers?: Provider[];
  metricsBindAddress: string;
  healthBindAddress: string;
  leaderElection?: LeaderElectionOptions;
  /** Default safety-net resync period of the local cluster's informers. */
  resyncMs?: number;
  /** Which capability serves each CRD (by name), so /readyz can say what a missing CRD idles. */
  crdOwners?: Record<string, string>;
  /**
   * How long stop() keeps the always-on runnables that drain (the webhook server) serving while
   * /readyz fails, so that the replica leaves its Services' endpoints before it stops answering;
   * default 0, and none without such a runnable.
   */
  shutdownDelayMs?: number;
  logger?: Logger;
}

interface Engaged {
  cluster: Cluster;
  /** Aborted when the cluster is disengaged: what is Aware stops its work there. */
  engagement: AbortController;
}

export class Manager implements ClusterSet {
  readonly log: Logger;
  readonly localCluster = localCluster;
  private readonly opts: ManagerOptions;
  private readonly clusters = new Map<string, Engaged>();
  private readonly aware: Aware[] = [];
  private readonly controllers: Controller[] = [];
  private readonly runnables: Runnable[] = [];
  private readonly providers: Provider[] = [];
  private readonly servers: RunningServer[] = [];
  /** Aborted when stop() begins: providers stop and no cluster is engaged any more. */
  private readonly closing = new AbortController();
  /** Aborted once leader work has stopped: the elector releases the lease, always-on runnables end their background work. */
  private readonly stopping = new AbortController();
  private started = false;
  private providersStarted = false;
  private healthServer: RunningServer | undefined;
  /** Always-on runnables not started yet (a webhook server not listening): not ready until none. */
  private readonly starting = new Set<string>();
  /** The leader elector's fencing check, once there is one: every engaged cluster's writes pass it. */
  private fence: (() => boolean) | undefined;
  private leaderWork: AbortController | undefined;
  private elector: LeaderElector | undefined;
  private readonly leaderListeners: (() => void)[] = [];
  private electorLoop: Promise<void> | undefined;
  private exit!: (code: number) => void;
  /** Resolves with the process exit code once the manager has stopped. */
  readonly done: Promise<number>;

  constructor(opts: ManagerOptions) {
    this.opts = opts;
    this.log = opts.logger ?? rootLogger;
    this.done = new Promise((resolve) => (this.exit = resolve));
    this.providers.push(...(opts.providers ?? []));
    this.engage(
      new Cluster({
        name: localCluster,
        client: opts.client,
        logger: this.log,
        ...(opts.resyncMs !== undefined ? { resyncMs: opts.resyncMs } : {}),
      }),
    );
  }

  /** An engaged cluster by name; the local one by default. */
  cluster(name: string = localCluster): Cluster {
    const e = this.clusters.get(name);
    if (!e) throw new Error(`cluster ${name} is not engaged`);
    return e.cluster;
  }

  get clusterNames(): string[] {
    return [...this.clusters.keys()];
  }

  /**
   * Whether a cluster exists for Berth: true when engaged (the local one always is) or when a
   * provider has it; false only when every provider is sure it has not (a deleted Cell's: what was
   * kept for it may go); undefined while any cannot tell, or with no provider to ask.
   */
  clusterKnown(name: string): boolean | undefined {
    if (this.clusters.has(name)) return true;
    const answers = this.providers.map((p) => p.knows?.(name));
    if (answers.includes(true)) return true;
    return answers.length > 0 && answers.every((a) => a === false) ? false : undefined;
  }

  /**
   * Whether a cluster serves a namespace: the local one serves every namespace; another only when
   * a provider says so (none answering: not served, so that nothing is counted by default).
   */
  clusterServes(name: string, namespace: string): boolean {
    return name === localCluster || this.providers.some((p) => p.serves?.(name, namespace) === true);
  }

  client(cluster: string = localCluster): KubeClient {
    return this.cluster(cluster).client;
  }

  /** The local cluster's shared informer for (resource, namespace, selectors, transform). */
  informer<T extends KubeObject>(ref: ResourceRef, req: InformerRequest<T> = {}): Informer<T> {
    return this.cluster().informer(ref, req);
  }

  /** The event recorder of a controller in the local cluster; events about another cluster's objects go to cluster(name).recorder(). */
  recorder(name: string): EventRecorder {
    return this.cluster().recorder(name);
  }

  /** The health server's port once started (the bind address may ask for any free port). */
  get healthPort(): number | undefined {
    return this.healthServer?.port;
  }

  add(controller: Controller): void {
    this.controllers.push(controller);
    this.addAware(controller);
  }

  addRunnable(r: Runnable): void {
    this.runnables.push(r);
    if (r.engage) this.addAware(r as Aware);
  }

  /** A runnable whose only work is done as each cluster is engaged: on every replica (warm failover). */
  addEngager(name: string, a: Aware): void {
    this.addRunnable({
      name,
      needLeaderElection: false,
      start: () => Promise.resolve(),
      engage: (cluster, signal) => a.engage(cluster, signal),
    });
  }

  private addAware(a: Aware): void {
    this.aware.push(a);
    for (const { cluster, engagement } of this.clusters.values()) a.engage(cluster, engagement.signal);
  }

  /**
   * Adds a cluster: its writes are fenced by the lease like the local cluster's, everything Aware
   * engages it (asking for its informers), and then, if the manager runs, it starts.
   */
  engage(cluster: Cluster): void {
    if (this.closing.signal.aborted)
      throw new Error(`the manager is stopping: cluster ${cluster.name} not engaged`);
    if (this.clusters.has(cluster.name)) throw new Error(`cluster ${cluster.name} is engaged already`);
    const engagement = new AbortController();
    this.clusters.set(cluster.name, { cluster, engagement });
    if (this.fence) cluster.client.writeGuard = this.fence;
    try {
      for (const a of this.aware) a.engage(cluster, engagement.signal);
    } catch (e) {
      // Half an engagement would leave watches nobody stops: undo it, and the caller keeps the cluster.
      this.clusters.delete(cluster.name);
      engagement.abort();
      throw e;
    }
    if (this.started) cluster.start();
    if (cluster.name !== localCluster) this.log.info({ cluster: cluster.name }, 'cluster engaged');
  }

  /** Removes a cluster: watches on it stop, its keys leave the queues, its informers stop and its client closes. */
  async disengage(name: string): Promise<void> {
    if (name === localCluster) throw new Error('the local cluster cannot be disengaged');
    const e = this.clusters.get(name);
    if (!e) return;
    this.clusters.delete(name);
    e.engagement.abort();
    await e.cluster.stop();
    this.log.info({ cluster: name }, 'cluster disengaged');
  }

  /** Every engaged cluster's informers created before it started have listed once. */
  hasSynced(): boolean {
    return this.unsynced().length === 0;
  }

  private unsynced(): string[] {
    return [...this.clusters.values()].filter((e) => !e.cluster.hasSynced()).map((e) => e.cluster.name);
  }

  /** The CRDs of watched resources that are not installed, each with what it idles. */
  missingCrds(): string[] {
    const missing = new Set<string>();
    for (const { cluster } of this.clusters.values()) {
      const where = cluster.name === localCluster ? '' : `cluster ${cluster.name}: `;
      for (const inf of cluster.allInformers()) {
        if (!inf.crdMissing) continue;
        const owner = this.opts.crdOwners?.[inf.crdName];
        missing.add(
          `${where}CRD ${inf.crdName} is not installed: ${owner ? `the ${owner} capability ignores ` : ''}` +
            `${inf.ref.kind} objects until it is (berth install, or berth run --install-crds)`,
        );
      }
    }
    return [...missing].sort();
  }

  waitForCacheSync(signal?: AbortSignal): Promise<void> {
    return Promise.all([...this.clusters.values()].map((e) => e.cluster.waitForCacheSync(signal))).then(
      () => {},
    );
  }

  isLeader(): boolean {
    return this.elector ? this.elector.isLeader() : true;
  }

  /** Who holds the Lease as this replica's elector last saw it; undefined without leader election. */
  leadership(): { holder: string; identity: string } | undefined {
    return this.elector?.leadership();
  }

  /** Calls `fn` each time the elector sees a new holder of the Lease (never without leader election). */
  onNewLeader(fn: () => void): void {
    this.leaderListeners.push(fn);
  }

  /**
   * Starts the servers, clusters, runnables and providers, then campaigns or leads. A start that
   * fails stops what it started before rethrowing: its servers and informers would otherwise keep
   * the process alive and unready for good.
   */
  async start(): Promise<void> {
    try {
      await this.startAll();
    } catch (e) {
      await this.stop(1);
      throw e;
    }
  }

  private async startAll(): Promise<void> {
    this.started = true;
    const metrics = await serve(this.opts.metricsBindAddress, 'metrics', {
      '/metrics': async () => ({
        status: 200,
        body: await metricsText(),
        contentType: registry.contentType,
      }),
    });
    const health = await serve(this.opts.healthBindAddress, 'health', {
      '/healthz': async () => ({ status: 200, body: 'ok\n' }),
      // A missing CRD idles only what reads it; what can work does, so readiness stays but says so.
      // So does a cluster a provider engaged whose caches have not synced (a cell that does not
      // answer): its controllers wait for it, and one unreachable cell must not take a ready Berth
      // out of its Service or stall its rollout. Only the local cluster's caches decide readiness.
      '/readyz': async () => this.readiness(),
    });
    for (const s of [metrics, health]) if (s) this.servers.push(s);
    this.healthServer = health;
    this.log.info({ metricsPort: metrics?.port, healthPort: health?.port }, 'manager starting');

    for (const { cluster } of this.clusters.values()) cluster.start();
    const alwaysOn = this.runnables.filter((r) => !r.needLeaderElection);
    for (const r of alwaysOn) this.starting.add(r.name);
    for (const r of alwaysOn) {
      await r.start(this.stopping.signal);
      this.starting.delete(r.name);
    }
    this.startProviders();

    const le = this.opts.leaderElection;
    if (!le) {
      await this.startLeaderWork();
      return;
    }
    const identity = le.identity ?? `${hostname()}_${randomBytes(4).toString('hex')}`;
    // The elector writes the Lease through its own client: the others are fenced by isLeader().
    const local = this.client();
    const electorClient = new KubeClient(local.access, { userAgent: 'berth-leader-election' });
    this.fence = () => this.elector?.isLeader() ?? false;
    for (const { cluster } of this.clusters.values()) cluster.client.writeGuard = this.fence;
    this.elector = new LeaderElector({
      client: electorClient,
      namespace: le.namespace,
      name: le.name,
      identity,
      ...(le.leaseDurationMs ? { leaseDurationMs: le.leaseDurationMs } : {}),
      ...(le.renewDeadlineMs ? { renewDeadlineMs: le.renewDeadlineMs } : {}),
      ...(le.retryPeriodMs ? { retryPeriodMs: le.retryPeriodMs } : {}),
      logger: this.log,
      // A replica stopping (its lease lost, or SIGTERM) holds the Lease again only to release it.
      onStartedLeading: () => (this.closing.signal.aborted ? undefined : this.startLeaderWork()),
      onNewLeader: () => this.leaderListeners.forEach((fn) => fn()),
      onStoppedLeading: () => {
        if (this.closing.signal.aborted) return;
        // Like controller-runtime, a replica that lost the lease exits; its pod restarts and campaigns again.
        this.log.error({ identity }, 'leader election lost; stopping');
        void this.stop(1);
      },
    });
    this.electorLoop = this.elector.run(this.stopping.signal).finally(() => electorClient.close());
  }

  /** /readyz: ready once started, synced and not stopping; what idles meanwhile is said as warnings. */
  private readiness(): { status: number; body: string } {
    // Out of the Services while stopping, so that nothing new is sent here.
    if (this.closing.signal.aborted) return { status: 503, body: 'stopping\n' };
    // The apiserver calls a webhook as soon as the replica is a Service endpoint.
    if (this.starting.size) return { status: 503, body: `starting: ${[...this.starting].join(', ')}\n` };
    const unready = this.runnables.flatMap((r) => r.unready?.() ?? []);
    if (unready.length) return { status: 503, body: unready.map((m) => `${m}\n`).join('') };
    const unsynced = this.unsynced();
    const notes = [
      ...this.missingCrds(),
      ...unsynced
        .filter((c) => c !== localCluster)
        .map((c) => `cluster ${c}: informer caches have not synced; its controllers wait for it`),
    ]
      .map((m) => `warning: ${m}\n`)
      .join('');
    return unsynced.includes(localCluster)
      ? { status: 503, body: `informer caches have not synced (cluster ${localCluster})\n${notes}` }
      : { status: 200, body: `ok\n${notes}` };
  }

  /** Adds a provider (a capability's, made after the manager): it runs from start, or at once if started. */
  addProvider(p: Provider): void {
    this.providers.push(p);
    if (this.providersStarted) this.runProvider(p);
  }

  /** Providers run on every replica, like informers, so a new leader finds its clusters engaged. */
  private startProviders(): void {
    this.providersStarted = true;
    for (const p of this.providers) this.runProvider(p);
  }

  private runProvider(p: Provider): void {
    p.run(this, this.closing.signal).catch((e: unknown) => {
      if (!this.closing.signal.aborted)
        this.log.error({ provider: p.name, err: errorText(e) }, 'cluster provider failed');
    });
  }

  private async startLeaderWork(): Promise<void> {
    this.leaderWork = new AbortController();
    const signal = this.leaderWork.signal;
    this.lowerHandedOverChanges();
    try {
      for (const r of this.runnables.filter((r) => r.needLeaderElection)) await r.start(signal);
      await Promise.all(this.controllers.map((c) => c.start(signal)));
    } catch (e) {
      if (!signal.aborted) {
        this.log.error({ err: errorText(e) }, 'could not start controllers');
        void this.stop(1);
      }
    }
  }

  /**
   * A standby's controllers queued every change while another replica led, which that leader acted
   * on: those go to the first pass (the low lane), and only the changes of the last moments of its
   * term, which it may not have acted on, stay ahead of it. Otherwise, after hours as a standby,
   * most keys would be queued as changes and a new change would wait behind them all.
   */
  private lowerHandedOverChanges(): void {
    const seen = this.elector?.othersLastSeenAt();
    if (seen === undefined) return;
    const before = seen - HANDOVER_MARGIN_MS;
    const lowered = this.controllers.reduce((n, c) => n + c.queue.lower(before), 0);
    if (lowered > 0)
      this.log.info(
        { lowered },
        "changes queued under the previous leader moved to this leader's first pass",
      );
  }

  /**
   * Graceful stop: /readyz fails, controllers drain, the lease is released, the always-on
   * runnables stop once the shutdown delay has passed, clusters stop (their recorded events go out
   * first), servers close.
   */
  async stop(code = 0): Promise<void> {
    if (this.closing.signal.aborted) return;
    this.closing.abort();
    const shutdownDelayMs = this.opts.shutdownDelayMs ?? 0;
    // A deleted pod's endpoint takes seconds to leave its Services (the EndpointSlice, then every
    // kube-proxy), and meanwhile the apiserver still sends admission reviews here: the webhook
    // server serves on until then. Leader work does not wait, so a follower takes over at once.
    const [leaderOnly, alwaysOn] = [
      this.runnables.filter((r) => r.needLeaderElection),
      this.runnables.filter((r) => !r.needLeaderElection),
    ];
    // Nothing to wait for when nothing serves what a Service sends here (no webhooks).
    const delayed = alwaysOn.some((r) => r.drain) ? sleep(shutdownDelayMs) : undefined;
    for (const r of alwaysOn) r.drain?.();
    this.log.info({ shutdownDelayMs }, 'manager stopping');
    this.leaderWork?.abort();
    await Promise.all(this.controllers.map((c) => c.stop()));
    for (const r of leaderOnly) await r.stop?.();
    // Events recorded while stopping go out while the lease is held, so they still pass the fence;
    // then the lease is released at once, so that a follower takes over without waiting for the
    // informers to close.
    const clusters = [...this.clusters.values()].map((e) => e.cluster);
    await Promise.all(clusters.map((c) => c.flushEvents()));
    this.stopping.abort();
    await this.electorLoop;
    await delayed;
    for (const r of alwaysOn) await r.stop?.();
    await Promise.all(clusters.map((c) => c.stop()));
    await Promise.all(this.servers.map((s) => s.close()));
    this.exit(code);
  }
}
