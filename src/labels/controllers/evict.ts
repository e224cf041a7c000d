// Eviction on removal: the reconcile loop, keyed by pod. When a label that an opted-in rule derives
// goes away from a node, the pods that needed it (evict.ts decides which) are evicted once the label
// has stayed gone for the rule's delay: through the Eviction API, so PodDisruptionBudgets hold, and
// within a per-rule and a per-cluster cap. A refused eviction is retried with backoff, never forced.
import {
  annotationsChanged,
  changed,
  deletionChanged,
  generationChanged,
  labelsChanged,
  valueChanged,
} from '../../policy/predicates.ts';
import { podInformer, podsOn, type SlimNode, type SlimPod } from '../../policy/slim.ts';
import { Resources } from '../../runtime/api/meta.ts';
import { keyOf, type Informer } from '../../runtime/cache/informer.ts';
import { ApiError, isConflict, isNotFound, resourcePath } from '../../runtime/client/client.ts';
import { Controller, type Result, type Source } from '../../runtime/controller/controller.ts';
import type { ObjectReference } from '../../runtime/events/event.ts';
import type { EventRecorder } from '../../runtime/events/recorder.ts';
import type { Logger } from '../../runtime/observability/log.ts';
import { errorText } from '../../runtime/observability/log.ts';
import { BucketRateLimiter, ItemExponentialFailureRateLimiter } from '../../runtime/workqueue/ratelimiter.ts';
import type { Manager } from '../../runtime/manager/manager.ts';
import type { Labels } from '../setup.ts';
import { evictionMetrics } from '../metrics.ts';
import {
  evictingRules,
  trackRemovals,
  verdict,
  type EvictPolicy,
  type Removal,
  type Verdict,
} from '../decide/evict.ts';
import { CLUSTER_MAX_PER_MINUTE, type EvictOnRemoval, type Rule } from '../types.ts';
import { NodeLabelRule } from '../crd.ts';

export interface EvictorOptions {
  /** Pods in this namespace are never evicted. */
  berthNamespace: string;
  /** evictOnRemoval for every rule file (they have no spec of their own). */
  files?: EvictOnRemoval;
  /** Evictions asked for per minute in the whole cluster, all rules together. */
  maxPerMinute?: number;
  workers?: number;
  /** First retry of a refused eviction; it doubles up to 5 minutes. */
  retryBaseMs?: number;
}

/** A pod found not to fit: since when (epoch ms), for which rule and label. */
interface Pending {
  uid: string | undefined;
  rule: string;
  label: string;
  since: number;
  reported?: boolean;
}

/** Reconciles at once, so evictions asked for at once (the evictor's default). */
export const EVICT_WORKERS = 16;

/** The reasons of the events about a pod's eviction, which `berth explain pod` lists. */
export const EVICTION_REASONS = {
  evicted: 'EvictedOnRemoval',
  dryrun: 'WouldEvict',
  blocked: 'EvictionBlocked',
} as const;

const perMinute = (n: number) => new BucketRateLimiter<string>(n / 60, n);

/** A pod's eviction once a label it needs has stayed gone for its rule's delay, within the caps. */
export class Evictor {
  readonly pods: Informer<SlimPod>;
  private readonly nodes: Informer<SlimNode>;
  private readonly labels: Labels;
  private readonly manager: Manager;
  private readonly opts: EvictorOptions;
  private readonly events: EventRecorder;
  private readonly log: Logger;
  private readonly pending = new Map<string, Pending>();
  /** When a pod's eviction may be asked for under the caps (performance.now ms): its reserved token. */
  private readonly reserved = new Map<string, number>();
  private readonly cluster: BucketRateLimiter<string>;
  private readonly perRule = new Map<string, { max: number; bucket: BucketRateLimiter<string> }>();
  private policiesMemo: { rules: Rule[]; policies: Map<string, EvictPolicy> } | undefined;
  /** The derived labels that went away from each node since Berth started watching it. */
  private readonly removals = new Map<string, Map<string, Removal>>();

  constructor(labels: Labels, opts: EvictorOptions) {
    const manager = labels.manager;
    this.manager = manager;
    this.labels = labels;
    this.opts = opts;
    this.nodes = labels.nodes;
    // The controller adds its name to the logger it is given (setupEvictController); the evictor's
    // own lines carry it too.
    this.log = manager.log.child({ capability: 'labels' }).child({ controller: 'labels-evict' });
    this.events = manager.recorder('labels');
    this.cluster = perMinute(opts.maxPerMinute ?? CLUSTER_MAX_PER_MINUTE);
    this.pods = podInformer(manager);

    // Noted before the pods of the node are reconciled: a removal Berth did not see (while it was
    // down) evicts nothing.
    this.nodes.addEventHandler({
      onUpdate: (a, b) => {
        // Removals are label changes: a resync or any other update changes nothing here.
        if (!labelsChanged(a, b)) return;
        const name = b.metadata!.name!;
        const next = trackRemovals(
          this.removals.get(name),
          a.metadata?.labels ?? {},
          b.metadata?.labels ?? {},
          (k, v) => labels.derivedBy(name, k, v),
          Date.now(),
        );
        if (next.size) this.removals.set(name, next);
        else this.removals.delete(name);
      },
      onDelete: (n) => this.removals.delete(n.metadata!.name!),
    });
  }

  /** The rules whose removals evict, with their policies, recomputed only when the rules changed. */
  private policies(): Map<string, EvictPolicy> {
    const rules = this.labels.rules();
    if (this.policiesMemo?.rules !== rules)
      this.policiesMemo = { rules, policies: evictingRules(rules, this.opts.files) };
    return this.policiesMemo.policies;
  }

  private forget(key: string): void {
    this.pending.delete(key);
    this.reserved.delete(key);
  }

  async reconcile(key: string): Promise<Result | void> {
    const pod = this.pods.get(key);
    if (!pod) return this.forget(key);
    const node = pod.spec.nodeName ? this.nodes.get(pod.spec.nodeName) : undefined;
    const gone = node && this.removals.get(node.metadata!.name!);
    const v = verdict(pod, node, this.policies(), gone, this.opts.berthNamespace);
    let p = this.pending.get(key);
    if (!v) {
      if (p)
        this.log.info({ pod: key, rule: p.rule, label: p.label }, 'label back within the delay: no eviction');
      return this.forget(key);
    }
    const uid = pod.metadata?.uid;
    if (!p || p.uid !== uid || p.rule !== v.rule || p.label !== v.label || p.since !== v.since) {
      p = { uid, rule: v.rule, label: v.label, since: v.since };
      this.pending.set(key, p);
      this.reserved.delete(key);
      this.log.info(
        {
          pod: key,
          node: node?.metadata?.name,
          rule: v.rule,
          label: v.label,
          afterSeconds: v.policy.afterSeconds,
        },
        `pod no longer fits its node without label ${v.label}: ${v.policy.mode === 'DryRun' ? 'reporting' : 'evicting'} it if the label stays gone`,
      );
    }
    const wait = p.since + v.policy.afterSeconds * 1000 - Date.now();
    if (wait > 0) return { requeueAfterMs: wait };
    if (v.policy.mode === 'DryRun') {
      if (!p.reported) {
        p.reported = true;
        this.report(pod, node!, v, 'dryrun');
      }
      return;
    }
    const capped = this.reserve(key, v);
    if (capped > 0) return { requeueAfterMs: capped };
    this.reserved.delete(key);
    return this.evict(pod, node!, v);
  }

  /** Reserves the pod's tokens in its rule's bucket and the cluster's once; how long until they are its. */
  private reserve(key: string, v: Verdict): number {
    let at = this.reserved.get(key);
    if (at === undefined) {
      let r = this.perRule.get(v.rule);
      if (r?.max !== v.policy.maxPerMinute) {
        r = { max: v.policy.maxPerMinute, bucket: perMinute(v.policy.maxPerMinute) };
        this.perRule.set(v.rule, r);
      }
      at = performance.now() + Math.max(r.bucket.when(key), this.cluster.when(key));
      this.reserved.set(key, at);
    }
    return Math.ceil(at - performance.now());
  }

  private async evict(pod: SlimPod, node: SlimNode, v: Verdict): Promise<Result | void> {
    const { name, namespace, uid } = pod.metadata!;
    const key = keyOf(pod);
    try {
      await this.manager.client().request('POST', resourcePath(Resources.pods, namespace, name, 'eviction'), {
        body: {
          apiVersion: 'policy/v1',
          kind: 'Eviction',
          metadata: { name, namespace },
          // The pod decided about, not one that took its name since.
          deleteOptions: { preconditions: { uid } },
        },
      });
    } catch (e) {
      if (isNotFound(e) || isConflict(e)) return this.forget(key);
      if (e instanceof ApiError && e.status === 429) {
        // A PodDisruptionBudget refuses it now: ask again later, with backoff.
        evictionMetrics.total.inc({ rule: v.rule, result: 'blocked' });
        const note = `eviction of pod ${key} refused, will retry: ${e.message.replace(/^[^:]*: /, '')}`;
        this.events.event(
          pod,
          'Warning',
          EVICTION_REASONS.blocked,
          'Evict',
          `${note} (rule ${v.rule}, label ${v.label})`,
        );
        this.eventOnRule(v.rule, EVICTION_REASONS.blocked, note);
        this.log.warn({ pod: key, rule: v.rule, label: v.label }, note);
        return { requeue: true };
      }
      evictionMetrics.total.inc({ rule: v.rule, result: 'failed' });
      this.log.warn({ pod: key, rule: v.rule, err: errorText(e) }, 'eviction failed; will retry');
      return { requeue: true };
    }
    this.report(pod, node, v, 'evicted');
    this.forget(key);
  }

  /**
   * The Warning events (pod, node, rule), log line and metric of an eviction or a DryRun's report.
   * Only the pod's event names the pod: the node's and the rule's are the same for each of their
   * pods, so each is one Event whose series counts them. A mass eviction thus costs the apiserver
   * one Event per pod, not three, and the recorder's queue does not overflow and drop pods' events.
   */
  private report(pod: SlimPod, node: SlimNode, v: Verdict, result: 'evicted' | 'dryrun'): void {
    const nodeName = node.metadata!.name!;
    const key = keyOf(pod);
    const dryRun = result === 'dryrun';
    const verb = dryRun ? 'would evict (DryRun)' : 'evicted';
    const reason = EVICTION_REASONS[result];
    const label = `label ${v.label}, which rule ${v.rule} derived`;
    const gone = `gone for ${v.policy.afterSeconds}s or more`;
    const note = `${dryRun ? `would evict pod ${key} (DryRun)` : `evicted pod ${key}`}: node ${nodeName} no longer has ${label} and the pod's nodeSelector or required node affinity needs (${gone})`;
    evictionMetrics.total.inc({ rule: v.rule, result });
    const podRef: ObjectReference = {
      apiVersion: 'v1',
      kind: 'Pod',
      name: pod.metadata!.name!,
      namespace: pod.metadata!.namespace!,
      ...(pod.metadata?.uid ? { uid: pod.metadata.uid } : {}),
    };
    this.events.event(podRef, 'Warning', reason, 'Evict', note);
    this.events.event(
      node,
      'Warning',
      reason,
      'Evict',
      `${verb} pods that needed ${label}: the node no longer has it (${gone})`,
    );
    this.eventOnRule(
      v.rule,
      reason,
      `${verb} pods that needed ${label}, from nodes that no longer have it (${gone})`,
    );
    this.log.warn({ pod: key, node: nodeName, rule: v.rule, label: v.label }, note);
  }

  /** An event on the NodeLabelRule; a rule file has no object, so it goes on Berth's own pod when it runs in one. */
  private eventOnRule(rule: string, reason: string, note: string): void {
    const cr = rule.startsWith('nodelabelrule/')
      ? this.labels.ruleObjects.get(rule.slice('nodelabelrule/'.length))
      : undefined;
    const pod = process.env['POD_NAME'];
    const ns = process.env['POD_NAMESPACE'];
    const regarding: ObjectReference | undefined = cr
      ? {
          apiVersion: NodeLabelRule.apiVersion,
          kind: 'NodeLabelRule',
          name: cr.metadata!.name!,
          ...(cr.metadata?.uid ? { uid: cr.metadata.uid } : {}),
        }
      : pod && ns
        ? { apiVersion: 'v1', kind: 'Pod', name: pod, namespace: ns }
        : undefined;
    if (regarding) this.events.event(regarding, 'Warning', reason, 'Evict', note);
  }
}

/**
 * The labels-evict controller, keyed by pod: a pod's own changes bring it back, a node's label change
 * its pods, a rule's change every pod.
 */
export function setupEvictController(labels: Labels, opts: EvictorOptions): Controller {
  const evictor = new Evictor(labels, opts);
  const podsOf = (n: SlimNode) => podsOn(evictor.pods, n.metadata!.name!).map(keyOf);
  const allPods = () => evictor.pods.keys();
  const controller = new Controller({
    name: 'labels-evict',
    workers: opts.workers ?? EVICT_WORKERS,
    logger: labels.manager.log.child({ capability: 'labels' }),
    rateLimiter: new ItemExponentialFailureRateLimiter<string>(opts.retryBaseMs ?? 1000, 300_000),
    reconciler: evictor,
  })
    .watch(evictor.pods, keyOf, {
      update: changed<SlimPod>(
        deletionChanged,
        annotationsChanged,
        valueChanged((p) => p.spec.nodeName),
        valueChanged((p) => p.status.phase),
      ),
    })
    .watch(labels.nodes, podsOf, { update: changed(labelsChanged) })
    .watch(labels.ruleObjects, allPods, { update: changed(generationChanged) });
  if (labels.files) controller.watch(labels.files as Source<Rule>, allPods);
  labels.manager.add(controller);
  return controller;
}
