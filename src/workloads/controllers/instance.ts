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
  crashWindowEndsIn,
  gated,
  INSTANCE_CACHE,
  INSTANCE_PODS,
  instanceOwnerUid,
  instanceVerdict,
  podEnded,
  podManifest,
  ungatePatch,
  warns,
  workloadNamespaceHint,
  workloadPod,
  type ConditionVerdict,
  type CachedInstance,
  type InstanceObject,
  type InstanceTypeObject,
  type QuotaView,
  type WorkloadPod,
} from '../decide.ts';
import type { QuotaController } from './quota.ts';
import { droppedPodResources, instanceSize } from '../resources.ts';
import {
  INSTANCE_LABEL,
  INSTANCE_MANAGER,
  Instance,
  InstanceType,
  TEMPLATE_HASH_LABEL,
  type InstanceStatus,
  type InstanceTemplate,
} from '../types.ts';

/** The conditions this controller owns on an Instance. */
const OWN = ['Ready', 'Available', 'Programmed'] as const;

/** How long a new instance waits for the quota controller's verdict before it is reported as waiting. */
const VERDICT_WAIT_MS = 5000;

/**
 * An instance's first status waits this long after its Pod was made while nothing but the Pod's
 * start holds it: a Pod Ready by then makes the first status the Ready one, one write instead of two
 * (bench:instances: at 1 s, half the instances of a loaded run still took two). One still starting
 * then is written as it is (Ready=False, Provisioning); a Pod that cannot start (unschedulable, its
 * image unavailable, crashing) has a cause of its own, written at once. As long as the wait for the
 * quota controller's verdict (VERDICT_WAIT_MS): an instance says nothing for at most that long.
 */
const FIRST_STATUS_WAIT_MS = 5000;

/** A Pod that ended is replaced once it is this old (ms since its creation). */
export const ENDED_REPLACE_MS = 10_000;

const notOwned = (name: string) => `a Pod named ${name} exists that this instance does not own`;

/** A Pod the apiserver refused is tried again after this long (the refusal stands meanwhile). */
const REJECTED_RETRY_MS = 60_000;

export interface InstanceControllerOptions {
  workers?: number;
  /** The quota controller of this process: its grants are acted on before their condition comes back. */
  quota?: Pick<QuotaController, 'grantOf' | 'onGrant'>;
  /** An instance's whole template from its deployment's cache, when it holds that revision (DeploymentState.templateOf). */
  templateOf?: (inst: CachedInstance) => InstanceTemplate | undefined;
}

/**
 * The instance controller: an instance's Pod follows its Instance and its QuotaGranted condition (or
 * the grant of this process's quota controller, acted on before its condition comes back).
 */
export function setupInstance(manager: Manager, opts: InstanceControllerOptions = {}): InstanceController {
  const r = new InstanceController(manager, opts);
  r.controller = new Controller({
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
  manager.add(r.controller);
  opts.quota?.onGrant((cluster, key) => {
    if (cluster === r.cluster) r.controller.queue.add(key);
  });
  return r;
}

export class InstanceController {
  readonly instances: Informer<CachedInstance>;
  readonly pods: Informer<WorkloadPod>;
  readonly types: Informer<InstanceTypeObject>;
  /** Set by setupInstance. */
  controller!: Controller;
  readonly log: Logger;
  private readonly manager: Manager;
  private readonly events: EventRecorder;
  /** Pods the apiserver refused (422), by instance key: a ConfigurationError until retried. */
  private readonly rejected = new Map<string, { uid: string; message: string; at: number }>();
  private readonly quota: InstanceControllerOptions['quota'];
  private readonly templateOf: InstanceControllerOptions['templateOf'];
  /** The cluster its instances live in (the manager's own), as the quota controller names it. */
  readonly cluster: string;
  /** Pods created and not yet in the cache, by instance key. */
  private readonly podsSent: WriteExpectations;
  /** The status last written to an instance, until the instance cache shows it. */
  private readonly statusSent: WriteExpectations<InstanceStatus>;
  /** When this process made the Pod of an instance that has no status yet, by instance key. */
  private readonly podMadeAt = new Map<string, number>();

  constructor(manager: Manager, opts: InstanceControllerOptions = {}) {
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
    const uid = inst.metadata.uid!;
    let pod = cached && controlledBy(cached, uid) ? cached : undefined;
    // An earlier instance's Pod holds the name this one's needs: it goes now, and its deletion's
    // event brings this key back to make the new one.
    if (cached && !pod) await this.deleteFormerPod(cached);
    // A Pod that ended (evicted, its node shut down) never runs again: it is made anew, as a
    // StatefulSet's is, once the status no longer says Ready (below).
    // One that ends as soon as it is made (a kubelet refusing it: OutOfcpu) is replaced at most every
    // ENDED_REPLACE_MS rather than in a tight loop, as the kubelet's own back-off would: replaceIn
    // is how long until it may be (ms), undefined for a Pod that has not ended or is being deleted.
    const replaceIn =
      pod && podEnded(pod) && !pod.metadata.deletionTimestamp
        ? ENDED_REPLACE_MS - (Date.now() - (Date.parse(pod.metadata.creationTimestamp ?? '') || 0))
        : undefined;
    const owner: OwnerReference = {
      apiVersion: Instance.apiVersion,
      kind: Instance.kind,
      name: inst.metadata.name!,
      uid,
    };
    // The in-process quota controller's grant, which this controller writes; else whatever verdict
    // the instance carries (a waiting one, or a grant written by a quota controller elsewhere).
    const grant = this.quota?.grantOf(this.cluster, uid);
    const quota: QuotaView | undefined = grant ?? findCondition(inst.status?.conditions, 'QuotaGranted');
    const granted = quota?.status === 'True';
    // A Pod made before the quota controller's first verdict would be gated, then ungated a moment
    // later (two more writes, two more hops): wait for the verdict, whose own event brings this key
    // back. One that does not come soon is reported (PendingEvaluation) and the Pod made gated.
    const waitedMs = Date.now() - (Date.parse(inst.metadata.creationTimestamp ?? '') || 0);
    if (!quota && !cached && waitedMs < VERDICT_WAIT_MS)
      return { requeueAfterMs: VERDICT_WAIT_MS - waitedMs };
    // A Pod created and not cached yet: its add event brings this key back; creating it again would
    // only conflict, and a status written now would say it does not exist. The look again once the
    // wait is over is for a Pod deleted before the cache saw it (a relist between the two): then no
    // event comes at all, and the instance would wait on a Pod that is gone until the resync.
    if (!cached && this.podsSent.pendingKey(key)) return { requeueAfterMs: maxWaitMs };
    const size = instanceSize(inst.spec.template, (name) => this.types.get(name)?.spec);
    let refused = this.rejected.get(key);
    if (refused && (refused.uid !== uid || Date.now() - refused.at >= REJECTED_RETRY_MS)) {
      this.rejected.delete(key);
      refused = undefined;
    }
    // A Pod of this name with the instance label that no instance owns (its Instance deleted with
    // --cascade=orphan): not Berth's to delete, and never going by itself.
    const orphan = cached && !pod && !instanceOwnerUid(cached) ? notOwned(inst.metadata.name!) : undefined;
    let configError = 'error' in size ? size.error : (refused?.message ?? orphan);
    let result: Result | void = refused
      ? { requeueAfterMs: REJECTED_RETRY_MS - (Date.now() - refused.at) }
      : orphan
        ? { requeueAfterMs: REJECTED_RETRY_MS }
        : undefined;

    if (!configError && !cached && !('error' in size)) {
      // No Pod (never made, or deleted by someone else): make it, gated unless already granted.
      // Gone or made anew since the cache saw it: its own event brings this key back.
      const whole = await this.whole(inst);
      if (!whole) return;
      try {
        const made = await this.manager
          .client()
          .create(Resources.pods, podManifest(whole, owner, size, !granted), {
            fieldManager: INSTANCE_MANAGER,
          });
        this.podsSent.expect(key, made.metadata?.resourceVersion, true);
        const dropped = droppedPodResources(size, made as { spec?: { resources?: unknown } });
        if (dropped) {
          // Unsized, the Pod would run outside what quota counted: it goes, and the instance says why.
          await deleteExact(this.manager.client(), Resources.pods, made);
          configError = dropped;
          this.rejected.set(key, { uid, message: dropped, at: Date.now() });
          result = { requeueAfterMs: REJECTED_RETRY_MS };
        } else {
          if (!inst.status?.conditions?.length) this.podMadeAt.set(key, Date.now());
          pod = workloadPod(made);
        }
      } catch (e) {
        if (isConflict(e)) {
          // Ours, not cached yet: its add event brings this key back. Anyone else's (a Pod of this
          // name without the instance label, which the cache never sees): say so, look again later.
          const there = await this.manager
            .client()
            .get(Resources.pods, inst.metadata.name!, inst.metadata.namespace)
            .catch(() => undefined);
          // Gone again between the two (deleted by someone else): its events may have come and gone
          // while this pass ran, so look again rather than wait for one.
          if (!there) return { requeue: true };
          if (controlledBy(there, uid)) return;
          // An earlier instance's Pod that the cache does not show yet (a rollout's recreate under
          // load): it goes as it would from the cache, not a ConfigurationError held for a minute.
          if (instanceOwnerUid(there) && there.metadata?.labels?.[INSTANCE_LABEL]) {
            await this.deleteFormerPod(workloadPod(there));
            return { requeueAfterMs: maxWaitMs };
          }
          configError = notOwned(inst.metadata.name!);
          result = { requeueAfterMs: REJECTED_RETRY_MS };
        } else if (isRefused(e)) {
          // An admission policy (Pod Security, a webhook, a ResourceQuota's rules), the apiserver's
          // validation or Berth's own RBAC: the user's to fix, so shown, not only retried in the log.
          configError = `the apiserver refused the Pod: ${e.message}${workloadNamespaceHint(e)}`;
          this.rejected.set(key, { uid, message: configError, at: Date.now() });
          result = { requeueAfterMs: REJECTED_RETRY_MS };
        } else throw e;
      }
    } else if (pod && granted && gated(pod) && !pod.metadata.deletionTimestamp) {
      try {
        const patched = await this.manager
          .client()
          .patch(Resources.pods, pod.metadata.name!, ungatePatch(pod), {
            namespace: pod.metadata.namespace!,
            type: 'json',
            fieldManager: INSTANCE_MANAGER,
          });
        pod = workloadPod(patched);
      } catch (e) {
        if (isNotFound(e)) return;
        // The test failed: the gates changed since the cache saw them; the next event brings it back.
        if (e instanceof ApiError && (e.status === 409 || e.status === 422)) return { requeue: true };
        throw e;
      }
    }

    const crashing = findCondition(inst.status?.conditions, 'Ready')?.reason === 'InstanceCrashing';
    const verdict = instanceVerdict({
      ...(pod ? { pod } : {}),
      crashing,
      foreignPod: !!cached && !pod,
      ...(quota ? { quota } : {}),
      ...(configError ? { configError } : {}),
    });
    // A first status that would only say the Pod is starting waits for it to be Ready (its events
    // bring this key back), for FIRST_STATUS_WAIT_MS at most: until then the instance has no status,
    // which claims nothing.
    const madeAt = this.podMadeAt.get(key);
    const settleIn =
      madeAt !== undefined &&
      pod &&
      !podEnded(pod) &&
      !verdict.ready.status &&
      verdict.ready.reason === 'Provisioning'
        ? FIRST_STATUS_WAIT_MS - (Date.now() - madeAt)
        : 0;
    if (settleIn <= 0) {
      this.podMadeAt.delete(key);
      await this.writeStatus(inst, pod, verdict, granted ? quota : undefined);
    }
    // The ended Pod goes only after the status says it ended: deleted first, the instance would read
    // Ready with no Pod at all until the new one's events came back. Its deletion's event brings
    // this key back to make the new one.
    if (pod && replaceIn !== undefined && replaceIn <= 0) return this.replaceEnded(inst, pod);
    // Looked at again, with no event to say so, when the soonest of these comes: a crash stops
    // counting when its window closes; an ended Pod too young to replace is old enough (one being
    // deleted brings this key back with its deletion's event).
    const crashEnds = pod && crashWindowEndsIn(pod, Date.now(), verdict.ready.reason === 'InstanceCrashing');
    const later = [
      result?.requeueAfterMs,
      settleIn > 0 ? settleIn : undefined,
      crashEnds ? crashEnds + 100 : undefined,
      replaceIn === undefined ? undefined : Math.max(100, replaceIn),
    ].filter((ms): ms is number => ms !== undefined);
    return later.length ? { requeueAfterMs: Math.min(...later) } : result;
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
