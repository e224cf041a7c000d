// The Instance controller: each Instance runs as one Pod of its name. It creates the Pod once the
// quota controller has given its verdict (gated by the quota gate unless QuotaGranted is True), takes
// exactly that gate off once the instance is granted, recreates a Pod someone else deleted, deletes
// the Pod of an Instance that is gone (instances are deleted in the background), and
// writes Ready, Available and Programmed from the Pod's real state by server-side apply on /status
// under its own manager (the conditions are a list-map keyed by type). A grant of the quota
// controller in this process is acted on and written here, with the rest of the status; a waiting
// verdict stays the quota controller's entry, never touched here.
import { countInstances } from '../metrics.ts';
import { isDeepStrictEqual } from 'node:util';
import { changed, conditionsChanged, deletionChanged, generationChanged } from '../../policy/predicates.ts';
import {
  conditionSetter,
  conditionsOf,
  findCondition,
  sameConditions,
} from '../../runtime/api/conditions.ts';
import { Resources, type OwnerReference } from '../../runtime/api/meta.ts';
import { keyOf, type Informer } from '../../runtime/cache/informer.ts';
import { applyStatus, deleteExact, isObjectGone } from '../../runtime/client/apply.ts';
import { ApiError, isConflict, isNotFound, isRefused } from '../../runtime/client/client.ts';
import { Controller, type Result } from '../../runtime/controller/controller.ts';
import { maxWaitMs, WriteExpectations } from '../../runtime/controller/expectations.ts';
import type { EventRecorder } from '../../runtime/events/recorder.ts';
import type { Manager } from '../../runtime/manager/manager.ts';
import type { Logger } from '../../runtime/observability/log.ts';
import {
  byInstanceType,
  controlledBy,
  INSTANCE_CACHE,
  podManifest,
  type CachedInstance,
  type InstanceObject,
  type InstanceTypeObject,
} from '../decide/instances.ts';
import {
  INSTANCE_PODS,
  instanceOwnerUid,
  ungatePatch,
  workloadPod,
  type QuotaView,
  type WorkloadPod,
} from '../decide/pods.ts';
import { warns, type ConditionVerdict } from '../decide/status.ts';
import { workloadNamespaceHint } from '../decide/revisions.ts';
import type { QuotaReconciler } from './quota.ts';
import {
  conflictingPod,
  notOwned,
  podActions,
  REJECTED_RETRY_MS,
  statusActions,
  type PodOutcome,
} from '../decide/instance-actions.ts';
import { droppedPodResources, instanceSize, type Size } from '../resources.ts';
import {
  INSTANCE_LABEL,
  INSTANCE_MANAGER,
  TEMPLATE_HASH_LABEL,
  type InstanceStatus,
  type InstanceTemplate,
} from '../types.ts';
import { Instance, InstanceType } from '../crd.ts';

/** The conditions this controller owns on an Instance. */
const OWN = ['Ready', 'Available', 'Programmed'] as const;

export interface InstanceReconcilerOptions {
  workers?: number;
  /** The quota controller of this process: its grants are acted on before their condition comes back. */
  quota?: Pick<QuotaReconciler, 'grantOf' | 'onGrant'>;
  /** An instance's whole template from its deployment's cache, when it holds that revision (DeploymentState.templateOf). */
  templateOf?: (inst: CachedInstance) => InstanceTemplate | undefined;
}

/**
 * The instance controller: an instance's Pod follows its Instance and its QuotaGranted condition (or
 * the grant of this process's quota controller, acted on before its condition comes back).
 */
export function setupInstanceReconciler(manager: Manager, opts: InstanceReconcilerOptions = {}): Controller {
  const r = new InstanceReconciler(manager, opts);
  const controller = new Controller({
    name: 'workloads-instance',
    workers: opts.workers ?? 16,
    logger: r.log,
    reconciler: r,
  })
    // QuotaGranted arriving (or changing) is a condition change.
    .watch(r.instances, keyOf, {
      update: changed(conditionsChanged, deletionChanged, generationChanged),
    })
    .watch(
      r.pods,
      (p) => {
        const owner = p.metadata.labels?.[INSTANCE_LABEL];
        return owner ? `${p.metadata.namespace}/${owner}` : undefined;
      },
      {
        update: changed<WorkloadPod>(
          (a, b) =>
            !isDeepStrictEqual(
              [a.spec, a.status, a.metadata.deletionTimestamp, a.metadata.ownerReferences],
              [b.spec, b.status, b.metadata.deletionTimestamp, b.metadata.ownerReferences],
            ),
        ),
      },
    )
    // An InstanceType created, changed or deleted resizes the instances that name it.
    .watch(r.types, (t) => r.instances.byIndex('instanceType', t.metadata!.name!).map(keyOf), {
      update: changed(generationChanged),
    });
  manager.add(controller);
  opts.quota?.onGrant((cluster, key) => {
    if (cluster === r.cluster) controller.queue.add(key);
  });
  return controller;
}

export class InstanceReconciler {
  readonly instances: Informer<CachedInstance>;
  readonly pods: Informer<WorkloadPod>;
  readonly types: Informer<InstanceTypeObject>;
  readonly log: Logger;
  private readonly manager: Manager;
  private readonly events: EventRecorder;
  /** Pods the apiserver refused (422), by instance key: a ConfigurationError until retried. */
  private readonly rejected = new Map<string, { uid: string; message: string; at: number }>();
  private readonly quota: InstanceReconcilerOptions['quota'];
  private readonly templateOf: InstanceReconcilerOptions['templateOf'];
  /** The cluster its instances live in (the manager's own), as the quota controller names it. */
  readonly cluster: string;
  /** Pods created and not yet in the cache, by instance key. */
  private readonly podsSent: WriteExpectations;
  /** The status last written to an instance, until the instance cache shows it. */
  private readonly statusSent: WriteExpectations<InstanceStatus>;
  /** When this process made the Pod of an instance that has no status yet, by instance key. */
  private readonly podMadeAt = new Map<string, number>();

  constructor(manager: Manager, opts: InstanceReconcilerOptions = {}) {
    this.manager = manager;
    this.log = manager.log.child({ capability: 'workloads', controller: 'instance' });
    this.events = manager.recorder('instances');
    this.instances = manager.informer<CachedInstance>(Instance.ref, INSTANCE_CACHE);
    this.instances.addIndexer('instanceType', byInstanceType);
    countInstances(this.instances);
    // Only instances' Pods: the label selector keeps every other pod out of this cache.
    this.pods = manager.informer<WorkloadPod>(Resources.pods, INSTANCE_PODS);
    this.podsSent = new WriteExpectations(this.pods, keyOf);
    this.statusSent = new WriteExpectations(this.instances, keyOf);
    this.types = manager.informer<InstanceTypeObject>(InstanceType.ref);
    this.quota = opts.quota;
    this.templateOf = opts.templateOf;
    this.cluster = manager.cluster().name;
  }

  /** Gathers what the cache and the quota controller say, decides (decide/instance-actions.ts), acts. */
  async reconcile(key: string): Promise<Result | void> {
    const inst = this.instances.get(key);
    const cached = this.pods.get(key);
    if (!inst || inst.metadata.deletionTimestamp) {
      this.rejected.delete(key);
      this.podMadeAt.delete(key);
      if (inst) return this.deletePod(inst, cached);
      if (cached) await this.deleteFormerPod(cached);
      return;
    }
    // The in-process quota controller's grant, which this controller writes; else whatever verdict
    // the instance carries (a waiting one, or a grant written by a quota controller elsewhere).
    const quota =
      this.quota?.grantOf(this.cluster, inst.metadata.uid!) ??
      findCondition(inst.status?.conditions, 'QuotaGranted');
    const size = instanceSize(inst.spec.template, (name) => this.types.get(name)?.spec);
    const a = podActions({
      now: Date.now(),
      inst,
      cached,
      quota,
      sizeError: 'error' in size ? size.error : undefined,
      refused: this.rejected.get(key),
      podSent: !cached && !!this.podsSent.pendingKey(key),
    });
    if (a.wait === 'verdict') return { requeueAfterMs: a.ms };
    // Its add event brings this key back; the look again once the wait is over is for a Pod deleted
    // before the cache saw it (a relist between the two), of which no event comes at all.
    if (a.wait === 'pod') return { requeueAfterMs: maxWaitMs };
    // An earlier instance's Pod holds the name this one's needs: it goes now, and its deletion's
    // event brings this key back to make the new one.
    if (a.foreign) await this.deleteFormerPod(cached!);
    if (a.forgetRefusal) this.rejected.delete(key);
    const outcome =
      a.write === 'create' && !('error' in size)
        ? await this.createPod(key, inst, size, a)
        : a.write === 'ungate'
          ? await this.ungate(a)
          : a;
    if ('stop' in outcome) return outcome.stop;
    const s = statusActions(inst, {
      ...outcome,
      foreign: a.foreign,
      quota,
      madeAt: this.podMadeAt.get(key),
      now: Date.now(),
    });
    if (s.write) {
      this.podMadeAt.delete(key);
      await this.writeStatus(inst, outcome.pod, s.verdict, a.granted ? quota : undefined);
    }
    if (s.replace) return this.replaceEnded(inst, outcome.pod!);
    return s.requeueAfterMs === undefined ? undefined : { requeueAfterMs: s.requeueAfterMs };
  }

  /**
   * No Pod (never made, or deleted by someone else): made, gated unless already granted. A pass
   * that ends here (`stop`) waits for an event or looks again; else what the status step reads.
   */
  private async createPod(
    key: string,
    inst: CachedInstance,
    size: Size,
    a: { granted: boolean; replaceIn?: number },
  ): Promise<{ stop: Result | void } | Omit<PodOutcome, 'foreign'>> {
    // Gone or made anew since the cache saw it: its own event brings this key back.
    const whole = await this.whole(inst);
    if (!whole) return { stop: undefined };
    const uid = inst.metadata.uid!;
    const owner: OwnerReference = {
      apiVersion: Instance.apiVersion,
      kind: Instance.kind,
      name: inst.metadata.name!,
      uid,
    };
    try {
      const made = await this.manager
        .client()
        .create(Resources.pods, podManifest(whole, owner, size, !a.granted), {
          fieldManager: INSTANCE_MANAGER,
        });
      this.podsSent.expect(key, made.metadata?.resourceVersion, true);
      const dropped = droppedPodResources(size, made as { spec?: { resources?: unknown } });
      if (dropped) {
        // Unsized, the Pod would run outside what quota counted: it goes, and the instance says why.
        await deleteExact(this.manager.client(), Resources.pods, made);
        this.rejected.set(key, { uid, message: dropped, at: Date.now() });
        return { pod: undefined, configError: dropped, retryAfterMs: REJECTED_RETRY_MS };
      }
      if (!inst.status?.conditions?.length) this.podMadeAt.set(key, Date.now());
      return { pod: workloadPod(made) };
    } catch (e) {
      if (isConflict(e)) {
        // Ours, not cached yet: its add event brings this key back. Anyone else's (a Pod of this
        // name without the instance label, which the cache never sees): say so, look again later.
        const there = await this.manager
          .client()
          .get(Resources.pods, inst.metadata.name!, inst.metadata.namespace)
          .catch(() => undefined);
        switch (conflictingPod(there && workloadPod(there), uid)) {
          // Gone again between the two (deleted by someone else): its events may have come and gone
          // while this pass ran, so look again rather than wait for one.
          case undefined:
            return { stop: { requeue: true } };
          case 'own':
            return { stop: undefined };
          // It goes as it would from the cache, not a ConfigurationError held for a minute.
          case 'former':
            await this.deleteFormerPod(workloadPod(there!));
            return { stop: { requeueAfterMs: maxWaitMs } };
          case 'foreign':
            return {
              pod: undefined,
              configError: notOwned(inst.metadata.name!),
              retryAfterMs: REJECTED_RETRY_MS,
            };
        }
      }
      if (!isRefused(e)) throw e;
      // An admission policy (Pod Security, a webhook, a ResourceQuota's rules), the apiserver's
      // validation or Berth's own RBAC: the user's to fix, so shown, not only retried in the log.
      const configError = `the apiserver refused the Pod: ${e.message}${workloadNamespaceHint(e)}`;
      this.rejected.set(key, { uid, message: configError, at: Date.now() });
      return { pod: undefined, configError, retryAfterMs: REJECTED_RETRY_MS };
    }
  }

  /** Takes the quota gate off the instance's granted Pod. */
  private async ungate(
    a: Omit<PodOutcome, 'foreign'> & { pod?: WorkloadPod },
  ): Promise<{ stop: Result | void } | Omit<PodOutcome, 'foreign'>> {
    const pod = a.pod!;
    try {
      const patched = await this.manager
        .client()
        .patch(Resources.pods, pod.metadata.name!, ungatePatch(pod), {
          namespace: pod.metadata.namespace!,
          type: 'json',
          fieldManager: INSTANCE_MANAGER,
        });
      return { ...a, pod: workloadPod(patched) };
    } catch (e) {
      if (isNotFound(e)) return { stop: undefined };
      // The test failed: the gates changed since the cache saw them; the next event brings it back.
      if (e instanceof ApiError && (e.status === 409 || e.status === 422)) return { stop: { requeue: true } };
      throw e;
    }
  }

  /**
   * The instance with its whole template (its cache keeps only what sizes it): its deployment's,
   * when that cache holds the instance's revision, else the Instance as stored.
   */
  private async whole(inst: CachedInstance): Promise<InstanceObject | undefined> {
    const template = this.templateOf?.(inst);
    if (template) return { ...inst, spec: { ...inst.spec, template } };
    const stored = await this.manager
      .client()
      .get<InstanceObject>(Instance.ref, inst.metadata.name!, inst.metadata.namespace)
      .catch((e: unknown) => {
        if (isNotFound(e)) return undefined;
        throw e;
      });
    return stored?.metadata.uid === inst.metadata.uid ? stored : undefined;
  }

  private async replaceEnded(inst: CachedInstance, pod: WorkloadPod): Promise<void> {
    if (!(await deleteExact(this.manager.client(), Resources.pods, pod))) return;
    const why = `Pod ${pod.metadata.name} ${pod.status!.phase}: made anew`;
    this.events.event(inst, 'Normal', 'PodReplaced', 'Delete', why);
    this.log.info(
      { instance: keyOf(inst), phase: pod.status!.phase },
      'deleted an ended Pod to make it anew',
    );
  }

  /**
   * An instance being deleted (someone's foreground deletion, or a finalizer of theirs): its Pod
   * goes now. The garbage collector would take it too, but a hop later.
   */
  private async deletePod(inst: CachedInstance, pod: WorkloadPod | undefined): Promise<void> {
    if (!pod || pod.metadata.deletionTimestamp || !controlledBy(pod, inst.metadata.uid)) return;
    await deleteExact(this.manager.client(), Resources.pods, pod);
  }

  /**
   * The Pod of an Instance that is gone: Berth's own (its label and its controller Instance), deleted
   * now rather than when the garbage collector gets to it, since a rollout waits for its name. The
   * apiserver is asked for the Instance first: a cache may lag, and the Pod of the Instance that
   * stands there is never deleted.
   */
  private async deleteFormerPod(pod: WorkloadPod): Promise<void> {
    const owner = instanceOwnerUid(pod);
    if (!owner || pod.metadata.deletionTimestamp) return;
    const { name, namespace } = pod.metadata;
    const standing = await this.manager
      .client()
      .get(Instance.ref, pod.metadata.labels![INSTANCE_LABEL]!, namespace)
      .catch((e: unknown) => {
        if (isNotFound(e)) return undefined;
        throw e;
      });
    if (standing?.metadata?.uid === owner) return;
    if (await deleteExact(this.manager.client(), Resources.pods, pod))
      this.log.info(
        { pod: `${namespace}/${name}`, instanceUid: owner },
        'deleted the Pod of a gone instance',
      );
  }

  /** Writes the instance's own status fields when they changed; a Warning when a blocking cause starts to hold (warns). */
  private async writeStatus(
    inst: CachedInstance,
    pod: WorkloadPod | undefined,
    v: { ready: ConditionVerdict; available: ConditionVerdict; programmed: ConditionVerdict },
    grant: QuotaView | undefined,
  ): Promise<void> {
    // Our last write, while the cache does not show it yet (a second pass must not send it again).
    const old = this.statusSent.pending(inst) ?? inst.status ?? {};
    const before = old.conditions ?? [];
    const generation = inst.metadata.generation;
    const setter = conditionSetter(before, generation);
    setter.set('Ready', v.ready.status, v.ready.reason, v.ready.message);
    setter.set('Available', v.available.status, v.available.reason, v.available.message);
    setter.set('Programmed', v.programmed.status, v.programmed.reason, v.programmed.message);
    // A grant is written with the rest (never revoked, so it is in every later write too: a server-side
    // apply without it would take it away); a waiting verdict is the quota controller's own.
    if (grant) setter.set('QuotaGranted', true, grant.reason, grant.message);
    const own: readonly string[] = grant ? [...OWN, 'QuotaGranted'] : OWN;
    const hash = pod?.metadata.labels?.[TEMPLATE_HASH_LABEL];
    const status: InstanceStatus = {
      ...(generation !== undefined ? { observedGeneration: generation } : {}),
      ...(hash ? { observedTemplateHash: hash } : {}),
      ...(pod ? { podName: pod.metadata.name! } : {}),
      conditions: conditionsOf(setter.conditions, own),
    };
    if (
      old.observedGeneration === status.observedGeneration &&
      old.observedTemplateHash === status.observedTemplateHash &&
      old.podName === status.podName &&
      sameConditions(conditionsOf(before, own), status.conditions)
    )
      return;
    try {
      const written = await applyStatus(this.manager.client(), Instance.ref, inst, status, INSTANCE_MANAGER);
      this.statusSent.expect(keyOf(inst), written.metadata?.resourceVersion, status);
    } catch (e) {
      if (isObjectGone(e)) return;
      throw e;
    }
    if (warns(findCondition(before, 'Ready'), v.ready)) {
      this.events.event(inst, 'Warning', v.ready.reason, 'Run', v.ready.message);
      this.log.warn({ instance: keyOf(inst), reason: v.ready.reason }, v.ready.message);
    }
  }
}
