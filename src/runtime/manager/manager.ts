// The manager in controller-runtime's sense: it owns the clients of one or more clusters, the shared
// informers, the controllers and other runnables, leader election, and the metrics and health
// endpoints. Informers run on every replica (so a new leader starts warm); controllers and other
// leader-only runnables run only while this replica holds the lease.
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import type { Controller } from '../controller/controller.ts';
import { Informer, type InformerOptions } from '../cache/informer.ts';
import { errorText } from '../observability/log.ts';
import { KubeClient } from '../client/client.ts';
import { EventRecorder } from '../events/recorder.ts';
import { LeaderElector } from '../leaderelection/elector.ts';
import { rootLogger, type Logger } from '../observability/log.ts';
import { registry } from '../observability/metrics.ts';
import { serve, type RunningServer } from '../server/http.ts';
import type { KubeObject, ResourceRef } from '../api/meta.ts';

export interface Runnable {
  name: string;
  /** Leader-only runnables start when this replica becomes leader; others (webhook servers) always run. */
  needLeaderElection: boolean;
  /** Runs until the signal aborts; may resolve early once started. */
  start(signal: AbortSignal): Promise<void>;
  stop?(): Promise<void>;
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
  /** One client per cluster; the first is the local cluster that holds the lease. */
  clusters: Record<string, KubeClient>;
  metricsBindAddress?: string;
  healthBindAddress?: string;
  leaderElection?: LeaderElectionOptions;
  /** Default safety-net resync period of informers. */
  resyncMs?: number;
  /** Which capability serves each CRD (by name), so /readyz can say what a missing CRD idles. */
  crdOwners?: Record<string, string>;
  logger?: Logger;
}

export interface InformerRequest<T extends KubeObject> {
  cluster?: string;
  namespace?: string;
  labelSelector?: string;
  fieldSelector?: string;
  /** Controllers that need the same shrunken objects share one informer by naming the transform. */
  transform?: { name: string; fn: (obj: T) => T };
  idleTimeoutMs?: number;
}

export class Manager {
  readonly log: Logger;
  private readonly opts: ManagerOptions;
  private readonly informers = new Map<string, Informer<KubeObject>>();
  private readonly controllers: Controller[] = [];
  private readonly runnables: Runnable[] = [];
  private readonly servers: RunningServer[] = [];
  private readonly recorders = new Map<string, EventRecorder>();
  private readonly stopping = new AbortController();
  private started = false;
  private readonly lateInformers = new Set<Informer<KubeObject>>();
  private leaderWork: AbortController | undefined;
  private elector: LeaderElector | undefined;
  private electorLoop: Promise<void> | undefined;
  private exit!: (code: number) => void;
  /** Resolves with the process exit code once the manager has stopped. */
  readonly done: Promise<number>;
  readonly localCluster: string;

  constructor(opts: ManagerOptions) {
    this.opts = opts;
    this.log = opts.logger ?? rootLogger;
    const names = Object.keys(opts.clusters);
    if (names.length === 0) throw new Error('a manager needs at least one cluster');
    this.localCluster = names[0]!;
    this.done = new Promise((resolve) => (this.exit = resolve));
  }

  client(cluster = this.localCluster): KubeClient {
    const c = this.opts.clusters[cluster];
    if (!c) throw new Error(`unknown cluster ${cluster}`);
    return c;
  }

  get clusterNames(): string[] {
    return Object.keys(this.opts.clusters);
  }

  /** The shared informer for (cluster, resource, namespace, selectors, transform), created on first use. */
  informer<T extends KubeObject>(ref: ResourceRef, req: InformerRequest<T> = {}): Informer<T> {
    const cluster = req.cluster ?? this.localCluster;
    const key = [
      cluster,
      ref.group,
      ref.version,
      ref.resource,
      req.namespace,
      req.labelSelector,
      req.fieldSelector,
      req.transform?.name,
    ].join('|');
    let inf = this.informers.get(key) as Informer<T> | undefined;
    if (!inf) {
      const o: InformerOptions<T> = {
        client: this.client(cluster),
        ref,
        cluster,
        logger: this.log,
        resyncMs: this.opts.resyncMs ?? 10 * 60_000,
        ...(req.namespace ? { namespace: req.namespace } : {}),
        ...(req.labelSelector ? { labelSelector: req.labelSelector } : {}),
        ...(req.fieldSelector ? { fieldSelector: req.fieldSelector } : {}),
        ...(req.transform ? { transform: req.transform.fn } : {}),
        ...(req.idleTimeoutMs ? { idleTimeoutMs: req.idleTimeoutMs } : {}),
      };
      inf = new Informer<T>(o);
      this.informers.set(key, inf as unknown as Informer<KubeObject>);
      if (this.started) {
        inf.start();
        this.lateInformers.add(inf as unknown as Informer<KubeObject>);
      }
    }
    return inf;
  }

  /** The event recorder of a controller (reportingController berth.dev/<name>), on the local cluster. */
  recorder(name: string): EventRecorder {
    let r = this.recorders.get(name);
    if (!r) {
      r = new EventRecorder({
        client: this.client(),
        reportingController: `berth.dev/${name}`,
        reportingInstance: process.env['POD_NAME'] ?? hostname(),
        logger: this.log,
      });
      this.recorders.set(name, r);
    }
    return r;
  }

  add(controller: Controller): void {
    this.controllers.push(controller);
  }

  addRunnable(r: Runnable): void {
    this.runnables.push(r);
  }

  /**
   * Every informer created before start has listed once: what /readyz reports. One created later,
   * for a kind learned at run time, is awaited by the controller that asked for it: a policy
   * naming a new kind must not make a ready Berth unready.
   */
  hasSynced(): boolean {
    return [...this.informers.values()].every((i) => this.lateInformers.has(i) || i.hasSynced());
  }

  /** The CRDs of watched resources that are not installed, each with what it idles. */
  missingCrds(): string[] {
    const missing = new Set<string>();
    for (const inf of this.informers.values()) {
      if (!inf.crdMissing) continue;
      const owner = this.opts.crdOwners?.[inf.crdName];
      missing.add(
        `CRD ${inf.crdName} is not installed: ${owner ? `the ${owner} capability ignores ` : ''}` +
          `${inf.ref.kind} objects until it is (berth install, or berth run --install-crds)`,
      );
    }
    return [...missing].sort();
  }

  waitForCacheSync(signal?: AbortSignal): Promise<void> {
    return Promise.all([...this.informers.values()].map((i) => i.waitForSync(signal))).then(() => {});
  }

  isLeader(): boolean {
    return this.elector ? this.elector.isLeader() : true;
  }

  async start(): Promise<void> {
    this.started = true;
    const metrics = await serve(this.opts.metricsBindAddress ?? '127.0.0.1:8080', 'metrics', {
      '/metrics': async () => ({
        status: 200,
        body: await registry.metrics(),
        contentType: registry.contentType,
      }),
    });
    const health = await serve(this.opts.healthBindAddress ?? '127.0.0.1:8081', 'health', {
      '/healthz': async () => ({ status: 200, body: 'ok\n' }),
      // A missing CRD idles only what reads it; what can work does, so readiness stays but says so.
      '/readyz': async () => {
        const notes = this.missingCrds()
          .map((m) => `warning: ${m}\n`)
          .join('');
        return this.hasSynced()
          ? { status: 200, body: `ok\n${notes}` }
          : { status: 503, body: `informer caches have not synced\n${notes}` };
      },
    });
    for (const s of [metrics, health]) if (s) this.servers.push(s);
    this.log.info({ metricsPort: metrics?.port, healthPort: health?.port }, 'manager starting');

    for (const inf of this.informers.values()) inf.start();
    for (const r of this.runnables.filter((r) => !r.needLeaderElection)) await r.start(this.stopping.signal);

    const le = this.opts.leaderElection;
    if (!le) {
      await this.startLeaderWork();
      return;
    }
    const identity = le.identity ?? `${hostname()}_${randomBytes(4).toString('hex')}`;
    // The elector writes the Lease through its own client: the others are fenced by isLeader().
    const local = this.client();
    const electorClient = new KubeClient(local.config, { userAgent: 'berth-leader-election' });
    for (const c of Object.values(this.opts.clusters)) c.writeGuard = () => this.elector?.isLeader() ?? false;
    this.elector = new LeaderElector({
      client: electorClient,
      namespace: le.namespace,
      name: le.name,
      identity,
      ...(le.leaseDurationMs ? { leaseDurationMs: le.leaseDurationMs } : {}),
      ...(le.renewDeadlineMs ? { renewDeadlineMs: le.renewDeadlineMs } : {}),
      ...(le.retryPeriodMs ? { retryPeriodMs: le.retryPeriodMs } : {}),
      logger: this.log,
      onStartedLeading: () => this.startLeaderWork(),
      onStoppedLeading: () => {
        if (this.stopping.signal.aborted) return;
        // Like controller-runtime, a replica that lost the lease exits; its pod restarts and campaigns again.
        this.log.error({ identity }, 'leader election lost; stopping');
        void this.stop(1);
      },
    });
    this.electorLoop = this.elector.run(this.stopping.signal).finally(() => electorClient.close());
  }

  private async startLeaderWork(): Promise<void> {
    this.leaderWork = new AbortController();
    const signal = this.leaderWork.signal;
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

  /** Graceful stop: controllers drain, the lease is released, informers and servers close. */
  async stop(code = 0): Promise<void> {
    if (this.stopping.signal.aborted) return;
    this.log.info('manager stopping');
    this.leaderWork?.abort();
    await Promise.all(this.controllers.map((c) => c.stop()));
    for (const r of this.runnables) await r.stop?.();
    // Events recorded while stopping still go out (up to a bound), then the lease is released.
    const bound = () => new Promise<void>((r) => setTimeout(r, 2000).unref());
    await Promise.all(
      [...this.recorders.values()].map((r) => Promise.race([r.flush(), bound()]).finally(() => r.stop())),
    );
    this.stopping.abort();
    await this.electorLoop;
    await Promise.all([...this.informers.values()].map((i) => i.stop()));
    await Promise.all(this.servers.map((s) => s.close()));
    for (const c of Object.values(this.opts.clusters)) c.close();
    this.exit(code);
  }
}
