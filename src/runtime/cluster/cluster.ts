// A cluster as a value (controller-runtime's cluster.Cluster): its client, its shared informers,
// its event recorders and its REST mapper. The manager engages clusters and disengages them while
// it runs; stopping a cluster stops everything in it that reads from or writes to the apiserver.
import { hostname } from 'node:os';
import { Informer, type CacheLifecycle, type InformerOptions } from '../cache/informer.ts';
import type { KubeClient } from '../client/client.ts';
import { RestMapper } from '../client/restmapper.ts';
import { EventRecorder } from '../events/recorder.ts';
import { rootLogger, type Logger } from '../observability/log.ts';
import type { KubeObject, ResourceRef } from '../api/meta.ts';
import { checkClusterName } from './key.ts';

export interface ClusterOptions {
  /** A DNS label, unique among the clusters of a manager; it also labels the informer metrics. */
  name: string;
  /** The cluster owns it from now on: stop() closes it. */
  client: KubeClient;
  /** Default safety-net resync period of informers. */
  resyncMs?: number;
  logger?: Logger;
}

export interface InformerRequest<T extends KubeObject> {
  namespace?: string;
  labelSelector?: string;
  fieldSelector?: string;
  /** Controllers that need the same shrunken objects share one informer by naming the transform. */
  transform?: { name: string; fn: (obj: T) => T; lifecycle?: CacheLifecycle<T> };
  idleTimeoutMs?: number;
}

/** How long a stopping cluster waits for its recorded events to go out. */
const eventFlushBoundMs = 2000;

export class Cluster {
  readonly name: string;
  readonly client: KubeClient;
  readonly mapper: RestMapper;
  readonly log: Logger;
  private readonly resyncMs: number;
  /** Informers name their cluster in their own log lines. */
  private readonly parentLog: Logger;
  private readonly informers = new Map<string, Informer<KubeObject>>();
  private readonly lateInformers = new Set<Informer<KubeObject>>();
  private readonly recorders = new Map<string, EventRecorder>();
  private state: 'new' | 'started' | 'stopped' = 'new';

  constructor(opts: ClusterOptions) {
    checkClusterName(opts.name);
    this.name = opts.name;
    this.client = opts.client;
    this.mapper = new RestMapper(opts.client);
    this.resyncMs = opts.resyncMs ?? 10 * 60_000;
    this.parentLog = opts.logger ?? rootLogger;
    this.log = this.parentLog.child({ cluster: opts.name });
  }

  /** The shared informer for (resource, namespace, selectors, transform), created on first use. */
  informer<T extends KubeObject>(ref: ResourceRef, req: InformerRequest<T> = {}): Informer<T> {
    // A stopped cluster starts nothing new: an informer made now would watch on with nobody to stop it.
    if (this.state === 'stopped') throw new Error(`cluster ${this.name} has been stopped`);
    const key = [
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
        client: this.client,
        ref,
        cluster: this.name,
        logger: this.parentLog,
        resyncMs: this.resyncMs,
        ...(req.namespace ? { namespace: req.namespace } : {}),
        ...(req.labelSelector ? { labelSelector: req.labelSelector } : {}),
        ...(req.fieldSelector ? { fieldSelector: req.fieldSelector } : {}),
        ...(req.transform ? { transform: req.transform.fn } : {}),
        ...(req.transform?.lifecycle ? { lifecycle: req.transform.lifecycle } : {}),
        ...(req.idleTimeoutMs ? { idleTimeoutMs: req.idleTimeoutMs } : {}),
      };
      inf = new Informer<T>(o);
      this.informers.set(key, inf as unknown as Informer<KubeObject>);
      if (this.state === 'started') {
        inf.start();
        this.lateInformers.add(inf as unknown as Informer<KubeObject>);
      }
    }
    return inf;
  }

  /** Every informer of this cluster, for what the manager reports about them. */
  allInformers(): Informer<KubeObject>[] {
    return [...this.informers.values()];
  }

  /** The event recorder of a controller (reportingController berth.dev/<name>) in this cluster. */
  recorder(name: string): EventRecorder {
    if (this.state === 'stopped') throw new Error(`cluster ${this.name} has been stopped`);
    let r = this.recorders.get(name);
    if (!r) {
      r = new EventRecorder({
        client: this.client,
        reportingController: `berth.dev/${name}`,
        reportingInstance: process.env['POD_NAME'] ?? hostname(),
        logger: this.log,
      });
      this.recorders.set(name, r);
    }
    return r;
  }

  /**
   * Every informer created before start has listed once. One created later, for a kind learned at
   * run time, is awaited by the controller that asked for it: a policy naming a new kind must not
   * make a ready Berth unready.
   */
  hasSynced(): boolean {
    return this.allInformers().every((i) => this.lateInformers.has(i) || i.hasSynced());
  }

  waitForCacheSync(signal?: AbortSignal): Promise<void> {
    return Promise.all(this.allInformers().map((i) => i.waitForSync(signal))).then(() => {});
  }

  start(): void {
    if (this.state !== 'new') return;
    this.state = 'started';
    for (const inf of this.informers.values()) inf.start();
  }

  /** Sends the events recorded until now (up to a bound), and records no more. */
  async flushEvents(): Promise<void> {
    const bound = () => new Promise<void>((r) => setTimeout(r, eventFlushBoundMs).unref());
    await Promise.all(
      [...this.recorders.values()].map((r) => Promise.race([r.flush(), bound()]).finally(() => r.stop())),
    );
  }

  /** Events recorded until now still go out (up to a bound); then the informers stop and the client closes. */
  async stop(): Promise<void> {
    if (this.state === 'stopped') return;
    this.state = 'stopped';
    await this.flushEvents();
    await Promise.all(this.allInformers().map((i) => i.stop()));
    this.client.close();
  }
}
