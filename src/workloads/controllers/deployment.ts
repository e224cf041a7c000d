// The WorkloadDeployment controller: runs a deployment's template as Instances named by ordinal,
// scales them (OrderedReady or Parallel), rolls a new template one instance at a time by recreating
// (highest ordinal first, the next once the replacement is Ready), stops a rollout that a user must
// fix, and writes the deployment's counts and its Available and Progressing conditions when they
// change. The plan and the verdicts are pure (decide.ts); this file reads the caches and writes.
import {
  changed,
  conditionsChanged,
  deletionChanged,
  generationChanged,
  labelsChanged,
  ownersChanged,
} from '../../policy/predicates.ts';
import { conditionSetter, conditionsOf, findCondition, sameConditions } from '../../runtime/api/conditions.ts';
import type { CustomObject } from '../../runtime/api/crd.ts';
import { Resources, type KubeObject, type OwnerReference } from '../../runtime/api/meta.ts';
import { keyOf, type Informer } from '../../runtime/cache/informer.ts';
import { applyStatus, deleteExact, isObjectGone } from '../../runtime/client/apply.ts';
import { ApiError, isConflict, isNotFound, isRefused } from '../../runtime/client/client.ts';
import { Controller, type Result } from '../../runtime/controller/controller.ts';
import { maxWaitMs, WriteExpectations } from '../../runtime/controller/expectations.ts';
import { WriteSpacing } from '../../runtime/controller/spacing.ts';
import type { EventRecorder } from '../../runtime/events/recorder.ts';
import type { Manager } from '../../runtime/manager/manager.ts';
import type { Logger } from '../../runtime/observability/log.ts';
import {
  controlledBy,
  deploymentSelector,
  deploymentVerdict,
  formerInstanceState,
  INSTANCE_PODS,
  instanceManifest,
  instanceName,
  isFormerPod,
  plan,
  templateHash,
  USER_FIXABLE,
  type Action,
  type InstanceObject,
  type InstanceState,
  type WorkloadPod,
} from '../decide.ts';
import {
  DEPLOYMENT_LABEL,
  DEPLOYMENT_MANAGER,
  Instance,
  OWN_INSTANCES,
  WorkloadDeployment,
  type WorkloadDeploymentSpec,
  type WorkloadDeploymentStatus,
} from '../types.ts';

type DeploymentObject = CustomObject<WorkloadDeploymentSpec, WorkloadDeploymentStatus>;

/**
 * Workers of the status controller: status writes only, one per deployment at a time. Fewer than the
 * actions' on purpose: measured with 1,000 instances starting at once (bench:instances), 4 wrote 5.4
 * times per instance with the status up to ~2 s behind at the peak; 16 kept it within ~0.1 s but
 * wrote 7.1 times and slowed the start by a quarter.
 */
const STATUS_WORKERS = 4;

/** The deployment an instance or its Pod belongs to, by its label. */
const deploymentOf = (o: KubeObject): string | undefined => {
  const d = o.metadata?.labels?.[DEPLOYMENT_LABEL];
  return d ? `${o.metadata!.namespace}/${d}` : undefined;
};
const byDeployment = (o: KubeObject) => {
  const d = deploymentOf(o);
  return d ? [d] : [];
};

/** Count-only status changes within this long of the last write are batched into one write. */
const STATUS_BATCH_MS = 500;
/** The conditions this controller owns on a WorkloadDeployment, and the one it sets only while a create fails. */
const OWN = ['Available', 'Progressing'] as const;
const FAILURE = 'ReplicaFailure';
/** An Instance's create that failed for a cause the user fixes is tried again after this long. */
const FAILED_CREATE_RETRY_MS = 30_000;

export interface DeploymentControllerOptions {
  workers?: number;
}

export class DeploymentController {
  readonly deployments: Informer<DeploymentObject>;
  readonly instances: Informer<InstanceObject>;
  /** Instances' Pods (the instance controller's cache): one whose Instance is gone is a deletion in flight. */
  readonly pods: Informer<WorkloadPod>;
  readonly controller: Controller;
  readonly statusController: Controller;
  private readonly manager: Manager;
  private readonly events: EventRecorder;
  private readonly log: Logger;
  /** Creates and deletes sent but not yet in the cache, by instance key: a second reconcile must not repeat them. */
  private readonly sent: WriteExpectations<Action['type']>;
  /** The status last written, until the deployment cache shows it. */
  private readonly statusSent: WriteExpectations<WorkloadDeploymentStatus>;
  /** When each deployment's status was last written (forgotten with the deployment). */
  private readonly statusSpacing = new WriteSpacing(STATUS_BATCH_MS);
  /** Why a deployment's last pass could not create an instance, shown in its status until one can. */
  private readonly failedCreates = new Map<string, string>();

  constructor(manager: Manager, opts: DeploymentControllerOptions = {}) {
    this.manager = manager;
    this.log = manager.log.child({ capability: 'workloads', controller: 'deployment' });
    this.events = manager.recorder('workloads');
    this.deployments = manager.informer<DeploymentObject>(WorkloadDeployment.ref);
    // The same informer as the instance controller's (same resource, same selector): one cache.
    this.instances = manager.informer<InstanceObject>(Instance.ref, OWN_INSTANCES);
    this.instances.addIndexer('deployment', byDeployment);
    this.pods = manager.informer<WorkloadPod>(Resources.pods, INSTANCE_PODS);
    this.pods.addIndexer('deployment', byDeployment);
    this.sent = new WriteExpectations(this.instances, keyOf);
    this.statusSent = new WriteExpectations(this.deployments, keyOf);
    this.deployments.addEventHandler({
      onDelete: (d) => {
        this.statusSpacing.forget(keyOf(d));
        this.failedCreates.delete(keyOf(d));
      },
    });
    this.controller = new Controller({
      name: 'workloads-deployment',
      workers: opts.workers ?? 8,
      logger: this.log,
      reconciler: { reconcile: (key) => this.reconcile(key) },
    });
    this.watchDeployments(this.controller);
    // The status is written by a controller of its own, so that a slow status write never holds a
    // worker that the next create waits for (as the policy kit's PolicyStatusWriter does).
    this.statusController = new Controller({
      name: 'workloads-deployment-status',
      workers: STATUS_WORKERS,
      logger: this.log,
      reconciler: { reconcile: (key) => this.reconcileStatus(key) },
    });
    this.watchDeployments(this.statusController);
    manager.add(this.controller);
    manager.add(this.statusController);
  }

  private async reconcile(key: string): Promise<Result | void> {
    const wd = this.deployments.get(key);
    if (!wd || wd.metadata.deletionTimestamp) return;
    const ns = wd.metadata.namespace!;
    const name = wd.metadata.name!;
    const owner: OwnerReference = {
      apiVersion: WorkloadDeployment.apiVersion,
      kind: WorkloadDeployment.kind,
      name,
      uid: wd.metadata.uid!,
    };
    // Instances of this deployment's name that no controller owns (the deployment was deleted with
    // --cascade=orphan and made again): adopted, as a ReplicaSet adopts its orphans, rather than
    // left holding the names its creates need. Their owners' change brings this key back.
    const orphans = this.instances
      .byIndex('deployment', key)
      .filter((i) => !i.metadata.ownerReferences?.some((o) => o.controller));
    if (orphans.length) {
      let refused: string | undefined;
      for (const i of orphans) refused ??= await this.adopt(i, owner);
      return this.reportFailure(wd, refused, true);
    }
    const { hash, owned, plan: p } = this.planFor(key, wd);

    // An action held back for a write the cache has not shown yet is looked at again when the hold
    // ends: the write's own event may never come (an instance deleted by someone else meanwhile).
    let held = false;
    let failure: string | undefined;
    let created = false;
    for (const a of p.actions) {
      const target = `${ns}/${a.type === 'create' ? instanceName(name, a.ordinal) : a.name}`;
      if (this.sent.pendingKey(target)) {
        held = true;
        continue;
      }
      if (a.type === 'create') created = true;
      try {
        let written: KubeObject | undefined;
        if (a.type === 'create') {
          written = await this.manager
            .client()
            .create(Instance.ref, instanceManifest(wd, owner, wd.spec.template, hash, a.ordinal), {
              fieldManager: DEPLOYMENT_MANAGER,
            });
          this.log.info({ deployment: key, instance: target, hash }, 'instance created');
        } else {
          const inst = owned.find((i) => i.metadata.name === a.name)!;
          // In the background: the Instance goes at once and the instance controller deletes its Pod
          // (the garbage collector would too); the plan counts the deletion in flight until the Pod
          // is gone. Foreground deletion would wait on the garbage collector, which for up to 30 s
          // after the CRD's install does not watch Instances yet (decision 0013). No finalizer of
          // Berth's: an Instance deleted while Berth is down or removed never waits.
          written = await deleteExact(this.manager.client(), Instance.ref, inst, {
            propagationPolicy: 'Background',
          });
          // Already gone, or replaced: the cache catches up and brings this key back.
          if (!written) continue;
          this.log.info(
            { deployment: key, instance: target, reason: a.rollout ? 'rollout' : 'scale down' },
            'instance deleted',
          );
        }
        // A delete answered with a Status (the object went at once) leaves nothing to wait for.
        this.sent.expect(target, written?.metadata?.resourceVersion, a.type);
      } catch (e) {
        const taken = isConflict(e) && a.type === 'create' ? this.instances.get(target) : undefined;
        // An earlier deployment of this name's (deleted and made again at once) goes with the garbage
        // collector, and its deletion brings this key back: only anyone else's is a failure.
        const earlier = taken?.metadata.ownerReferences?.some(
          (o) => o.controller && o.kind === WorkloadDeployment.kind && o.name === name,
        );
        if (taken && !controlledBy(taken, wd.metadata.uid) && !earlier)
          failure = `an Instance named ${taken.metadata.name} exists that this deployment does not own`;
        else if (a.type === 'create' && isRefused(e))
          failure = `the apiserver refused the Instance ${target}: ${e.message}`;
        // Already there, or already gone: the cache catches up and brings this key back.
        else if (!isConflict(e) && !isNotFound(e)) throw e;
      }
    }

    // A pass that tried no create says nothing of the last failure (its plan waits on something
    // else), unless every ordinal now exists.
    const ordinals = new Set(
      owned
        .filter((i) => !i.metadata.deletionTimestamp && i.spec.ordinal < wd.spec.replicas)
        .map((i) => i.spec.ordinal),
    );
    const result = this.reportFailure(wd, failure, created || ordinals.size === wd.spec.replicas);
    return result ?? (held ? { requeueAfterMs: maxWaitMs } : undefined);
  }

  /**
   * Why the deployment cannot make (or adopt) its instances, when `tried` says this pass knows:
   * shown in status (a ReplicaSet's ReplicaFailure) and as a Warning when it starts, and tried
   * again later. The user's to fix: an admission policy, a quota on Instances, a name taken by hand.
   */
  private reportFailure(wd: DeploymentObject, failure: string | undefined, tried: boolean): Result | void {
    const key = keyOf(wd);
    if (tried && failure !== this.failedCreates.get(key)) {
      if (failure) this.failedCreates.set(key, failure);
      else this.failedCreates.delete(key);
      this.statusController.queue.add(key);
      if (failure) {
        this.events.event(wd, 'Warning', 'FailedCreate', 'Create', failure);
        this.log.warn({ deployment: key }, failure);
      }
    }
    if (failure) return { requeueAfterMs: FAILED_CREATE_RETRY_MS };
  }

  /**
   * Makes this deployment an orphaned instance's controller (a uid and version test guards the
   * patch); why not, when the apiserver refuses it.
   */
  private async adopt(inst: InstanceObject, owner: OwnerReference): Promise<string | undefined> {
    const refs = [
      ...(inst.metadata.ownerReferences ?? []),
      { ...owner, controller: true, blockOwnerDeletion: true },
    ];
    try {
      await this.manager.client().patch(
        Instance.ref,
        inst.metadata.name!,
        [
          { op: 'test', path: '/metadata/uid', value: inst.metadata.uid },
          { op: 'test', path: '/metadata/resourceVersion', value: inst.metadata.resourceVersion },
          { op: 'add', path: '/metadata/ownerReferences', value: refs },
        ],
        { namespace: inst.metadata.namespace!, type: 'json', fieldManager: DEPLOYMENT_MANAGER },
      );
      this.log.info({ instance: keyOf(inst), deployment: owner.name }, 'orphaned instance adopted');
    } catch (e) {
      // Changed or gone since the cache saw it (a failed test is a 422): its event brings the
      // deployment back.
      if (e instanceof ApiError && (e.status === 404 || e.status === 409 || e.status === 422))
        return undefined;
      if (isRefused(e)) return `the apiserver refused to adopt the Instance ${keyOf(inst)}: ${e.message}`;
      throw e;
    }
    return undefined;
  }

  /** The deployment's counts and conditions, from the same caches and plan as the actions. */
  private async reconcileStatus(key: string): Promise<Result | void> {
    const wd = this.deployments.get(key);
    if (!wd || wd.metadata.deletionTimestamp) return;
    const { hash, input, plan: p } = this.planFor(key, wd);
    const name = wd.metadata.name!;
    const verdict = deploymentVerdict({
      ...input,
      plan: p,
      progressDeadlineSeconds: wd.spec.progressDeadlineSeconds,
      now: Date.now(),
    });
    // The status as last written: the cache may not show our own last write yet.
    const current = this.statusSent.pending(wd) ?? wd.status ?? {};
    const failure = this.failedCreates.get(key);
    const setter = conditionSetter(current.conditions ?? [], wd.metadata.generation);
    if (failure) setter.set(FAILURE, true, 'FailedCreate', failure);
    setter.set('Available', verdict.available.status, verdict.available.reason, verdict.available.message);
    setter.set(
      'Progressing',
      verdict.progressing.status,
      verdict.progressing.reason,
      verdict.progressing.message,
    );
    const status: WorkloadDeploymentStatus = {
      ...(wd.metadata.generation !== undefined ? { observedGeneration: wd.metadata.generation } : {}),
      ...verdict.counts,
      templateHash: hash,
      selector: deploymentSelector(name),
      // Only this controller's conditions, and a ReplicaFailure only while it holds.
      conditions: conditionsOf(setter.conditions, failure ? [...OWN, FAILURE] : OWN),
    };
    const batched = await this.writeStatus(wd, current, status);
    const after = [
      batched,
      verdict.deadlineInMs === undefined ? undefined : verdict.deadlineInMs + 100,
    ].filter((x): x is number => x !== undefined);
    if (after.length) return { requeueAfterMs: Math.min(...after) };
  }

  /** What both controllers act on: a deployment's spec (replicas by the scale subresource too) or
   * deletion, its own status writes passing by, its instances' conditions, deletion and labels, and
   * the Pods of gone instances coming and going. */
  private watchDeployments(c: Controller): void {
    const former = (p: WorkloadPod) => this.isFormer(p);
    c.watch(this.deployments, keyOf, { update: changed(generationChanged, deletionChanged) })
      .watch(this.instances, deploymentOf, {
        update: changed(conditionsChanged, deletionChanged, labelsChanged, ownersChanged),
      })
      .watch(this.pods, deploymentOf, { add: former, update: () => false, delete: former });
  }

  /** A Pod made for an Instance that is no longer the one of its name in the cache. */
  private isFormer(pod: WorkloadPod): boolean {
    return isFormerPod(pod, (name) => this.instances.get(`${pod.metadata.namespace}/${name}`)?.metadata.uid);
  }

  /** The deployment's instances as the plan sees them, and the plan. */
  private planFor(key: string, wd: DeploymentObject) {
    const hash = templateHash(wd.spec.template);
    const owned = this.instances.byIndex('deployment', key).filter((i) => controlledBy(i, wd.metadata.uid));
    const now = Date.now();
    const former = this.pods
      .byIndex('deployment', key)
      .filter((p) => this.isFormer(p))
      .flatMap((p) => formerInstanceState(p, now) ?? []);
    const input = {
      name: wd.metadata.name!,
      replicas: wd.spec.replicas,
      policy: wd.spec.instanceManagementPolicy,
      hash,
      instances: [...owned.map(instanceState), ...former],
    };
    return { hash, owned, input, plan: plan(input) };
  }

  /**
   * Writes the status when a count, the hash or a condition changed; Warnings for user-fixable
   * causes. A change of counts or messages alone within STATUS_BATCH_MS of the last write waits for
   * the rest of that window (the milliseconds returned), so one instance's steps (created, its Pod
   * made, Ready) are one write rather than three, as the Job controller batches its syncs; a new
   * generation or a condition that changes status or reason is written at once.
   */
  private async writeStatus(
    wd: DeploymentObject,
    old: WorkloadDeploymentStatus,
    status: WorkloadDeploymentStatus,
  ): Promise<number | undefined> {
    const key = keyOf(wd);
    const last = old.conditions ?? [];
    const same =
      (Object.keys(status) as (keyof WorkloadDeploymentStatus)[]).every(
        (k) => k === 'conditions' || old[k] === status[k],
      ) && sameConditions(conditionsOf(last, [...OWN, FAILURE]), status.conditions);
    if (same) return;
    const urgent =
      old.observedGeneration !== status.observedGeneration ||
      status.conditions!.some((c) => {
        const was = findCondition(last, c.type);
        return was?.status !== c.status || was.reason !== c.reason;
      });
    const wait = this.statusSpacing.wait(key);
    if (!urgent && wait > 0) return wait;
    try {
      const written = await applyStatus(
        this.manager.client(),
        WorkloadDeployment.ref,
        wd,
        status,
        DEPLOYMENT_MANAGER,
      );
      this.statusSent.expect(key, written.metadata?.resourceVersion, status);
      this.statusSpacing.wrote(key);
    } catch (e) {
      if (isObjectGone(e)) return;
      throw e;
    }
    for (const type of ['Available', 'Progressing']) {
      const now = findCondition(status.conditions, type)!;
      const was = findCondition(last, type);
      if (
        now.status === 'False' &&
        (USER_FIXABLE.has(now.reason) || now.reason === 'ProgressDeadlineExceeded') &&
        !(was?.status === 'False' && was.reason === now.reason)
      ) {
        this.events.event(wd, 'Warning', now.reason, type === 'Available' ? 'Serve' : 'Rollout', now.message);
        this.log.warn({ deployment: key, condition: type, reason: now.reason }, now.message);
      }
    }
    return undefined;
  }
}

function instanceState(i: InstanceObject): InstanceState {
  const ready = findCondition(i.status?.conditions, 'Ready');
  const is = (type: string) => findCondition(i.status?.conditions, type)?.status === 'True';
  return {
    name: i.metadata.name!,
    ordinal: i.spec.ordinal,
    hash: i.spec.templateHash,
    ready: ready?.status === 'True',
    available: is('Available'),
    programmed: is('Programmed'),
    deleting: !!i.metadata.deletionTimestamp,
    // The progress deadline runs from when the awaited instance stopped being Ready, not from its
    // creation: an instance that served for a day and then crashed has not been waited on for a day.
    notReadySince:
      Date.parse(
        i.metadata.deletionTimestamp ||
          (ready?.status !== 'True' && ready?.lastTransitionTime) ||
          i.metadata.creationTimestamp ||
          '',
      ) || Date.now(),
    ...(ready && ready.status !== 'True' ? { reason: ready.reason, message: ready.message } : {}),
  };
}
