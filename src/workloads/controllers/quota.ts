// The quota controller, keyed by namespace. The Quotas live in one cluster, a parameter (the local
// one in a single cluster; the management plane for every cell in part 2); the Instances they count
// live in every engaged cluster. The ledger is Quota.status.claims, written by PUT with the
// resourceVersion read: a writer working from a stale view gets a 409 and decides again, so nothing
// is granted twice, whatever the caches say and however many writers race. Only then does each
// Instance learn its verdict, in its QuotaGranted condition (server-side apply under berth-quota; the
// conditions are a list-map keyed by type, so the instance controller's own conditions stay its own),
// except that a grant is handed to the instance controller of the same process, which writes it with
// the rest of the instance's status (grantOf, onGrant).
// Events first (Instance created or deleted, Quota changed); while an instance waits, a requeue
// backing off with its age heals a missed one.
import { workloadMetrics } from '../metrics.ts';
import { keyOf, type Informer } from '../../runtime/cache/informer.ts';
import type { InformerRequest } from '../../runtime/cluster/cluster.ts';
import { applyTarget, isObjectGone } from '../../runtime/client/apply.ts';
import { isConflict, isNotFound, resourcePath } from '../../runtime/client/client.ts';
import type { Cluster } from '../../runtime/cluster/cluster.ts';
import { clusterKey, localCluster, splitClusterKey } from '../../runtime/cluster/key.ts';
import { Controller, type Result } from '../../runtime/controller/controller.ts';
import { Trigger } from '../../runtime/controller/trigger.ts';
import { WriteExpectations } from '../../runtime/controller/expectations.ts';
import { defaultControllerRateLimiter } from '../../runtime/workqueue/ratelimiter.ts';
import type { EventRecorder } from '../../runtime/events/recorder.ts';
import type { Manager } from '../../runtime/manager/manager.ts';
import { errorText, type Logger } from '../../runtime/observability/log.ts';
import { findCondition, newlyHolds, setCondition, type Condition } from '../../runtime/api/conditions.ts';
import { apiTime, type KubeObject } from '../../runtime/api/meta.ts';
import { changed, deletionChanged, generationChanged, valueChanged } from '../../policy/predicates.ts';
import { decideUnder, requeueAfterMs, type Decision } from '../decide/grant.ts';
import { QUOTA_MANAGER, type QuotaClaim, type QuotaStatus } from '../types.ts';
import { Instance, InstanceType, Quota } from '../crd.ts';
import { byInstanceType, INSTANCE_CACHE, type InstanceTypeObject } from '../decide/instances.ts';
import {
  type QuotaObject,
  QUOTA_CONDITION,
  type QuotaVerdict,
  oldestFirst,
  candidateOf,
  countedInstances,
  MANAGEMENT_GRANT,
  verdictCondition,
  quotaStatus,
  sameQuotaStatus,
} from '../decide/quota.ts';
import type { CachedInstance } from '../decide/instances.ts';

type VerdictText = Pick<Condition, 'status' | 'reason' | 'message'>;
const sameVerdict = (a: VerdictText, b: VerdictText) =>
  a.status === b.status && a.reason === b.reason && a.message === b.message;

const byNamespace = (o: KubeObject) => (o.metadata?.namespace ? [o.metadata.namespace] : []);

export const UNREAD_GRACE_MS = 10_000;
/** How often a namespace decided without a cluster is decided again, to take it in once it answers. */
const UNREAD_REQUEUE_MS = 5_000;
/** How often a namespace with instances in a cell that does not serve it is looked at again. */
const UNSERVED_REQUEUE_MS = 30_000;

/** An instance a Quota counts, with the cluster it is in. */
interface CountedInstance {
  s: ClusterState;
  inst: CachedInstance;
}

interface ClusterState {
  cluster: Cluster;
  /** When this controller first watched it (its engagement): the grace for its first list runs from here. */
  since: number;
  instances: Informer<CachedInstance>;
  instanceTypes?: Informer<InstanceTypeObject>;
  /** The QuotaGranted condition last written to an instance, until its informer has it. */
  written: WriteExpectations<QuotaVerdict>;
  /** Grants on their way, by instance key. */
  sending: Map<string, QuotaVerdict>;
  /** The grants of this process's passes, by instance uid, until the instance is deleted. */
  granted: Map<string, QuotaVerdict>;
  /** Said once that passes go on without it. */
  unreadLogged?: boolean;
}

export interface QuotaReconcilerOptions {
  /** The cluster that holds the Quotas and their ledgers; the manager's local cluster by default. */
  quotaCluster?: Cluster;
  workers?: number;
  /**
   * Whether a cluster other than the local one still exists (on a management plane: a Cell brings
   * it): false once it never will again, undefined while that is not known (its Cells not listed).
   * The claims of instances in a cluster that no longer exists are released; without this, a claim
   * waits for its own cluster to answer, which a deleted Cell's never does.
   */
  clusterExists?: (cluster: string) => boolean | undefined;
  /**
   * The informer request for each cluster's instances: the slim cache the workloads controllers
   * share (INSTANCE_CACHE) by default; a management plane's is the one its federation mirrors
   * share (OWN_INSTANCES, whole: a mirror copies the instance's spec), one cache per cell.
   */
  instances?: InformerRequest<CachedInstance>;
  /**
   * On a management plane: whether a cell serves a namespace (its Cell lists it). Only the instances
   * of a namespace in the cells that serve it are counted against its Quota, and only the grants
   * this controller wrote (MANAGEMENT_GRANT) are adopted: a namespace of the same name in a cell
   * is its users', who may not spend the budget of the management plane's namespace, nor may a cell
   * that grants by itself.
   */
  serves?: (cluster: string, namespace: string) => boolean;
}

/**
 * The quota controller: a namespace's instances, in every engaged cluster, granted against its Quota
 * (in the quota cluster) oldest first, the Quota's ledger written before its grants.
 */
export function setupQuotaReconciler(
  manager: Manager,
  r: QuotaReconciler,
  opts: Pick<QuotaReconcilerOptions, 'workers'> = {},
): Controller {
  const quotaGranted = (o: CachedInstance) => {
    const c = findCondition(o.status?.conditions, QUOTA_CONDITION);
    return c ? `${c.status}/${c.reason}/${c.message}` : '';
  };
  const controller = new Controller({
    name: 'workloads-quota',
    workers: opts.workers ?? 4,
    logger: r.log,
    reconciler: r,
  })
    .reconcileOn(r.trigger)
    .watch(r.quotas, (q) => q.metadata?.namespace, { update: changed(generationChanged) })
    .watchClusters(
      (cluster) => r.state(cluster).instances,
      (i) => i.metadata?.namespace,
      { update: changed(generationChanged, deletionChanged, valueChanged(quotaGranted)) },
    )
    .watchClusters(
      (cluster) => {
        const s = r.state(cluster);
        s.instanceTypes = cluster.informer<InstanceTypeObject>(InstanceType.ref);
        return s.instanceTypes;
      },
      // A type that appears, changes or goes resizes the instances that name it, wherever they are.
      (t) => [
        ...new Set(
          [...r.clusters.values()].flatMap((s) =>
            s.instances.byIndex('instanceType', t.metadata?.name ?? '').flatMap(byNamespace),
          ),
        ),
      ],
      { update: changed(generationChanged) },
    );
  manager.add(controller);
  return controller;
}

export class QuotaReconciler {
  /** Its own keys: a cluster's namespace key brought to the local one, a namespace whose grant failed, again. */
  readonly trigger = new Trigger();
  readonly log: Logger;
  readonly quotas: Informer<QuotaObject>;
  readonly quotaCluster: Cluster;
  private readonly manager: Manager;
  private readonly clusterExists: ((cluster: string) => boolean | undefined) | undefined;
  private readonly instanceCache: InformerRequest<CachedInstance>;
  private readonly serves: QuotaReconcilerOptions['serves'];
  /** The instances granted by others last reported, by namespace: said again only when it changes. */
  private readonly foreignSaid = new Map<string, string>();
  readonly clusters = new Map<string, ClusterState>();
  /**
   * The backoff of each grant that could not be written, by instance (clusterKey): the namespace's
   * own is the pass's, forgotten by every pass that succeeds, and a grant is sent after its pass.
   */
  private readonly grantRetries = defaultControllerRateLimiter<string>();
  /** The ledger last written to a Quota, until the Quota informer has it. */
  private readonly ledgers: WriteExpectations<QuotaObject>;
  private readonly events: EventRecorder;

  private readonly grantListeners: ((cluster: string, key: string) => void)[] = [];

  /**
   * The grant this controller has made to the instance (its ledger written, or no Quota), if any. An
   * instance controller in the same process that listens (onGrant) acts on it at once and writes the
   * QuotaGranted condition itself, with the rest of the instance's status: one write and one watch
   * hop fewer per instance. A restart forgets; the next pass grants again from the ledger.
   */
  grantOf(cluster: string, uid: string): QuotaVerdict | undefined {
    return this.clusters.get(cluster)?.granted.get(uid);
  }

  /**
   * Called with the cluster and the key of each instance granted, or whose grant reads otherwise. With
   * a listener, grants are the listener's to write; this controller writes only the others.
   */
  onGrant(listener: (cluster: string, key: string) => void): void {
    this.grantListeners.push(listener);
  }

  constructor(manager: Manager, opts: QuotaReconcilerOptions = {}) {
    this.manager = manager;
    this.quotaCluster = opts.quotaCluster ?? manager.cluster();
    this.clusterExists = opts.clusterExists;
    this.instanceCache = opts.instances ?? INSTANCE_CACHE;
    this.serves = opts.serves;
    this.log = manager.log.child({ capability: 'workloads', controller: 'quota' });
    this.events = this.quotaCluster.recorder('quota');
    this.quotas = this.quotaCluster.informer<QuotaObject>(Quota.ref);
    this.quotas.addIndexer('namespace', byNamespace);
    this.ledgers = new WriteExpectations<QuotaObject>(this.quotas, keyOf);
  }

  /** The instances of an engaged cluster, made on its first watch (and again if it is engaged anew). */
  state(cluster: Cluster): ClusterState {
    const known = this.clusters.get(cluster.name);
    if (known?.cluster === cluster) return known;
    const instances = cluster.informer<CachedInstance>(Instance.ref, this.instanceCache);
    instances.addIndexer('namespace', byNamespace);
    instances.addIndexer('instanceType', byInstanceType);
    const s: ClusterState = {
      cluster,
      since: Date.now(),
      instances,
      written: new WriteExpectations(instances, keyOf),
      sending: new Map(),
      granted: new Map(),
    };
    instances.addEventHandler({
      onDelete: (i) => {
        s.granted.delete(i.metadata?.uid ?? '');
        this.grantRetries.forget(clusterKey(cluster.name, keyOf(i)));
      },
    });
    this.clusters.set(cluster.name, s);
    return s;
  }

  /** Clusters whose instances can be read now: engaged, and listed once. */
  private readable(): ClusterState[] {
    const engaged = new Set(this.manager.clusterNames);
    return [...this.clusters.values()].filter((s) => engaged.has(s.cluster.name) && listed(s));
  }

  async reconcile(queueKey: string): Promise<Result | void> {
    const { cluster, key: namespace } = splitClusterKey(queueKey);
    // One key per namespace, whichever cluster's instance moved, so that its passes never overlap.
    if (cluster !== localCluster) {
      this.trigger.send(namespace);
      return;
    }
    const now = new Date();
    const { unread, graceLeft } = this.unreadClusters(now);
    if (graceLeft > 0) return { requeueAfterMs: Math.min(1000, graceLeft) };
    this.sayUnread(unread);
    const quota = await this.quotaInForce(namespace, now);
    const ledger = quota?.status?.claims ?? [];
    const { instances, unserved } = this.countedInstances(namespace, quota, ledger);
    const candidates = instances.map(({ s, inst }) =>
      candidateOf(s.cluster.name, inst, (name) => s.instanceTypes?.get(name)?.spec),
    );
    const gone = await this.goneClaims(namespace, ledger);
    const decision = decideUnder(quota, ledger, candidates, gone, apiTime(now.getTime()));

    // Another writer (or our own earlier write, not cached yet) moved the ledger: decide again.
    if (quota && !(await this.writeLedger(quota, decision, now, unread))) return { requeue: true };
    if (!(await this.sendVerdicts(namespace, quota, instances, decision))) return { requeue: true };
    const waiting = candidates.filter((c) => decision.verdicts.get(c.uid)?.granted === false);
    // A namespace decided without a cluster is decided again until that cluster is read.
    const after = [
      ...waiting.map((c) => requeueAfterMs(Date.parse(c.creationTimestamp) || now.getTime(), now.getTime())),
      ...(unread.length ? [UNREAD_REQUEUE_MS] : []),
      // No watch here sees a Cell begin to serve the namespace: look again now and then.
      ...(unserved ? [UNSERVED_REQUEUE_MS] : []),
    ];
    return after.length ? { requeueAfterMs: Math.min(...after) } : undefined;
  }

  /**
   * Engaged clusters that have not listed their instances yet (they would make the line partial),
   * and how long to wait for them still. Past the grace, a pass decides without them: the ledger
   * still counts their claims (goneClaims keeps a claim it cannot check), so the budget holds; only
   * their waiting instances wait on.
   */
  private unreadClusters(now: Date): { unread: ClusterState[]; graceLeft: number } {
    const engaged = new Set(this.manager.clusterNames);
    const unread = [...this.clusters.values()].filter((s) => engaged.has(s.cluster.name) && !listed(s));
    const graceLeft = Math.max(0, ...unread.map((s) => s.since + UNREAD_GRACE_MS - now.getTime()));
    return { unread, graceLeft };
  }

  /** Says once per cluster that passes go on without it (again if it falls behind anew). */
  private sayUnread(unread: readonly ClusterState[]): void {
    for (const s of this.clusters.values()) if (listed(s)) s.unreadLogged = false;
    for (const s of unread)
      if (!s.unreadLogged) {
        s.unreadLogged = true;
        this.log.warn(
          { cluster: s.cluster.name, graceMs: UNREAD_GRACE_MS },
          'instances of a cluster not listed in time: deciding without them (its claims stay counted)',
        );
      }
  }

  /** The namespace's Quota in force (its oldest, as last written); the others are superseded. */
  private async quotaInForce(namespace: string, now: Date): Promise<QuotaObject | undefined> {
    const quotas = this.quotas
      .byIndex('namespace', namespace)
      .map((q) => this.ledgers.pending(q) ?? q)
      .sort(oldestFirst);
    const quota = quotas[0];
    for (const superseded of quotas.slice(1)) await this.supersede(superseded, quota!, now);
    return quota;
  }

  /** The instances the namespace's Quota counts, in the clusters read; says the foreign ones. */
  private countedInstances(
    namespace: string,
    quota: QuotaObject | undefined,
    ledger: readonly QuotaClaim[],
  ): { instances: CountedInstance[]; unserved: boolean } {
    const readable = this.readable();
    const scope = countedInstances(
      namespace,
      ledger,
      readable.map((s) => ({
        cluster: s.cluster.name,
        instances: s.instances.byIndex('namespace', namespace),
      })),
      this.serves,
    );
    const instances = readable.flatMap((s, i) => scope.counted[i]!.map((inst) => ({ s, inst })));
    this.sayForeign(namespace, quota, scope.foreign);
    return { instances, unserved: scope.unserved };
  }

  /** Writes the Quota's status if the decision changes it; false if another write got there first. */
  private async writeLedger(
    quota: QuotaObject,
    decision: Decision,
    now: Date,
    unread: ClusterState[],
  ): Promise<boolean> {
    const status = quotaStatus(
      quota,
      decision,
      now,
      unread.map((s) => s.cluster.name),
    );
    if (sameQuotaStatus(quota.status, status)) return true;
    const written = await this.writeQuotaStatus(quota, status);
    if (!written) return false;
    const warn = newlyHolds(quota.status?.conditions, status.conditions, 'Ready', 'False', 'OverBudget');
    if (warn) {
      this.events.event(quota, 'Warning', 'OverBudget', 'Reconcile', warn.message);
      this.log.warn({ quota: keyOf(quota), message: warn.message }, 'quota over budget');
    }
    return true;
  }

  /**
   * Tells each counted instance its verdict; false if a denial met a conflict (decide again). Grants
   * are sent without holding the pass: the ledger already backs them and they are applied
   * unconditionally, so the next pass (and the grants it makes) need not wait for their round trips.
   * Other verdicts are applied only to the instance as read, and a conflict means deciding again.
   */
  private async sendVerdicts(
    namespace: string,
    quota: QuotaObject | undefined,
    instances: readonly CountedInstance[],
    decision: Decision,
  ): Promise<boolean> {
    const denials: Promise<boolean>[] = [];
    for (const { s, inst } of instances) {
      if (inst.metadata?.deletionTimestamp) continue;
      const v = verdictCondition(
        decision,
        inst.metadata!.uid!,
        quota?.metadata?.name,
        namespace,
        this.serves ? MANAGEMENT_GRANT : '',
      );
      if (!v) continue;
      if (v.status === 'True') {
        const uid = inst.metadata!.uid!;
        const known = s.granted.get(uid);
        if (!known || !sameVerdict(known, v)) {
          workloadMetrics.verdicts.inc({ result: 'granted' });
          s.granted.set(uid, v);
          for (const listener of this.grantListeners) listener(s.cluster.name, keyOf(inst));
        }
        if (!this.grantListeners.length) this.sendGrant(s, inst, v, namespace);
      } else denials.push(this.writeVerdict(s, inst, v));
    }
    return (await Promise.all(denials)).every(Boolean);
  }

  /** Instances granted by someone else: a Warning on the Quota and a log line, when they change. */
  private sayForeign(namespace: string, quota: QuotaObject | undefined, foreign: readonly string[]): void {
    const said = foreign.join(',');
    if ((this.foreignSaid.get(namespace) ?? '') === said) return;
    if (said) this.foreignSaid.set(namespace, said);
    else this.foreignSaid.delete(namespace);
    if (!foreign.length) return;
    const shown =
      foreign.slice(0, 5).join(', ') + (foreign.length > 5 ? ` and ${foreign.length - 5} more` : '');
    const message =
      `${foreign.length} instance(s) granted by someone other than the management plane (${shown}): ` +
      'not counted against this Quota and left as they are (a cell granting by itself runs with --quota-source=local)';
    this.log.warn(
      { namespace, instances: foreign.length, shown },
      'instances granted elsewhere: not counted',
    );
    if (quota) this.events.event(quota, 'Warning', 'GrantedElsewhere', 'Reconcile', message);
  }

  /**
   * The claims whose instance is gone. A cache that lacks an instance may only lag a grant another
   * writer made: the apiserver of its cluster decides, and a cluster that does not answer (or has
   * not listed its instances yet) keeps its claims, unless it no longer exists (clusterExists): a
   * partition is not a deletion, but a deleted Cell is.
   */
  private async goneClaims(
    namespace: string,
    claims: readonly { cluster: string; name: string; uid: string }[],
  ) {
    const readable = new Map(this.readable().map((s) => [s.cluster.name, s]));
    const engaged = new Set(this.manager.clusterNames);
    const gone = new Set<string>();
    // Only the claims the caches cannot vouch for are asked about (every pass reads the whole ledger).
    const ask: { c: (typeof claims)[number]; s: ClusterState }[] = [];
    for (const c of claims) {
      // The local cluster is always engaged.
      if (!engaged.has(c.cluster) && this.clusterExists?.(c.cluster) === false) {
        this.log.info(
          { cluster: c.cluster, instance: `${namespace}/${c.name}` },
          'claim released: its cluster no longer exists',
        );
        gone.add(c.uid);
        continue;
      }
      const s = readable.get(c.cluster);
      if (s && s.instances.get(`${namespace}/${c.name}`)?.metadata?.uid !== c.uid) ask.push({ c, s });
    }
    await Promise.all(
      ask.map(async ({ c, s }) => {
        try {
          const live = await s.cluster.client.get(Instance.ref, c.name, namespace);
          if (live.metadata?.uid !== c.uid) gone.add(c.uid);
        } catch (e) {
          if (isNotFound(e)) gone.add(c.uid);
          else
            this.log.info(
              { cluster: c.cluster, instance: `${namespace}/${c.name}`, err: errorText(e) },
              'claim kept: its instance cannot be read',
            );
        }
      }),
    );
    return gone;
  }

  /** PUT with the resourceVersion read; false on a conflict (or a Quota deleted meanwhile). */
  private async writeQuotaStatus(quota: QuotaObject, status: QuotaStatus): Promise<boolean> {
    const { namespace, name } = quota.metadata!;
    try {
      const written = await this.quotaCluster.client.request<QuotaObject>(
        'PUT',
        resourcePath(Quota.ref, namespace, name, 'status'),
        { body: { ...quota, status }, query: { fieldManager: QUOTA_MANAGER } },
      );
      this.ledgers.expect(keyOf(quota), written.metadata?.resourceVersion, written);
      return true;
    } catch (e) {
      if (isConflict(e) || isNotFound(e)) {
        this.log.debug({ quota: `${namespace}/${name}`, err: errorText(e) }, 'ledger moved; deciding again');
        return false;
      }
      throw e;
    }
  }

  /** Another Quota of the namespace is in force: this one counts nothing and says so. */
  private async supersede(quota: QuotaObject, inForce: QuotaObject, now: Date): Promise<void> {
    const generation = quota.metadata?.generation;
    const status: QuotaStatus = {
      ...(generation !== undefined ? { observedGeneration: generation } : {}),
      conditions: setCondition(
        quota.status?.conditions,
        {
          type: 'Ready',
          status: 'False',
          reason: 'Superseded',
          message: `Quota ${inForce.metadata?.name} is in force in this namespace (the oldest); delete one of them`,
          ...(generation !== undefined ? { observedGeneration: generation } : {}),
        },
        now,
      ),
    };
    const warn = newlyHolds(quota.status?.conditions, status.conditions!, 'Ready', 'False', 'Superseded');
    if (!sameQuotaStatus(quota.status, status) && (await this.writeQuotaStatus(quota, status)) && warn)
      this.events.event(quota, 'Warning', 'Superseded', 'Reconcile', warn.message);
  }

  /**
   * Applies a grant in the background, once at a time per instance; a failure decides the namespace
   * again after the grant's backoff (a cell that refuses or does not answer is no tight loop).
   */
  private sendGrant(s: ClusterState, inst: CachedInstance, v: QuotaVerdict, namespace: string): void {
    const key = keyOf(inst);
    const sending = s.sending.get(key);
    if (sending && sameVerdict(sending, v)) return;
    s.sending.set(key, v);
    const retry = clusterKey(s.cluster.name, key);
    this.writeVerdict(s, inst, v)
      .then(
        () => this.grantRetries.forget(retry),
        (e: unknown) => {
          const afterMs = this.grantRetries.when(retry);
          this.log.warn(
            { instance: key, cluster: s.cluster.name, err: errorText(e), retryInMs: afterMs },
            'quota grant not written; deciding again',
          );
          this.trigger.sendAfter(namespace, afterMs);
        },
      )
      .finally(() => {
        if (s.sending.get(key) === v) s.sending.delete(key);
      });
  }

  /**
   * Applies the instance's QuotaGranted condition unless it says that already. A grant is backed by
   * the ledger and always true; anything else is applied only to the instance as read, so that a
   * stale view never overwrites a grant another writer made (false on that conflict).
   */
  private async writeVerdict(s: ClusterState, inst: CachedInstance, v: QuotaVerdict): Promise<boolean> {
    const current = s.written.pending(inst) ?? findCondition(inst.status?.conditions, QUOTA_CONDITION);
    if (current && sameVerdict(current, v)) return true;
    if (v.status !== 'True') workloadMetrics.verdicts.inc({ result: 'denied' });
    const old = findCondition(inst.status?.conditions, QUOTA_CONDITION);
    const [condition] = setCondition(old ? [old] : [], {
      type: QUOTA_CONDITION,
      ...v,
      ...(inst.metadata?.generation !== undefined ? { observedGeneration: inst.metadata.generation } : {}),
    });
    const target = applyTarget(Instance.ref, inst);
    if (v.status !== 'True') target.metadata.resourceVersion = inst.metadata!.resourceVersion!;
    try {
      const written = await s.cluster.client.apply(
        Instance.ref,
        { ...target, status: { conditions: [condition] } },
        { fieldManager: QUOTA_MANAGER, subresource: 'status', force: true },
      );
      s.written.expect(keyOf(inst), written.metadata?.resourceVersion, v);
      return true;
    } catch (e) {
      if (isObjectGone(e)) return true;
      if (isConflict(e)) return false;
      throw e;
    }
  }
}

export type { InstanceTypeObject } from '../decide/instances.ts';

/**
 * A cluster's instances and their types are both listed: with its types not yet, every typed
 * instance there would be sized as naming a type that does not exist (ConfigurationError).
 */
const listed = (s: ClusterState): boolean => s.instances.hasSynced() && !!s.instanceTypes?.hasSynced();
