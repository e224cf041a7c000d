// The WorkloadDeployment controller: runs a deployment's template as Instances named by ordinal,
// scales them (OrderedReady or Parallel), rolls a new template one instance at a time by recreating
// (highest ordinal first, the next once the replacement is Ready) and adopts orphaned instances. Its
// status controller (deployment-status.ts) writes what it sees, from the same caches and step
// (DeploymentState). The step and the verdicts are pure (decide/); this file reads the caches and writes.
import {
  changed,
  conditionsChanged,
  deletionChanged,
  generationChanged,
  labelsChanged,
  ownersChanged,
} from '../../policy/predicates.ts';
import type { CustomObject } from '../../runtime/api/crd.ts';
import { Resources, type KubeObject, type OwnerReference } from '../../runtime/api/meta.ts';
import { keyOf, type Informer } from '../../runtime/cache/informer.ts';
import { deleteExact } from '../../runtime/client/apply.ts';
import { ApiError, isConflict, isNotFound, isRefused } from '../../runtime/client/client.ts';
import { Controller, type Result } from '../../runtime/controller/controller.ts';
import type { Trigger } from '../../runtime/controller/trigger.ts';
import { maxWaitMs, WriteExpectations } from '../../runtime/controller/expectations.ts';
import type { EventRecorder } from '../../runtime/events/recorder.ts';
import type { Manager } from '../../runtime/manager/manager.ts';
import type { Logger } from '../../runtime/observability/log.ts';
import {
  boundedReplicas,
  instanceName,
  templateRevision,
  workloadNamespaceHint,
} from '../decide/revisions.ts';
import { controlledBy, INSTANCE_CACHE, instanceManifest, type CachedInstance } from '../decide/instances.ts';
import { formerInstanceState, INSTANCE_PODS, isFormerPod, type WorkloadPod } from '../decide/pods.ts';
import { instanceState, nextStep, type Action } from '../decide/step.ts';
import {
  DEPLOYMENT_LABEL,
  DEPLOYMENT_MANAGER,
  type WorkloadDeploymentSpec,
  type WorkloadDeploymentStatus,
} from '../types.ts';
import { Instance, WorkloadDeployment } from '../crd.ts';

export type DeploymentObject = CustomObject<WorkloadDeploymentSpec, WorkloadDeploymentStatus>;

/** The deployment an instance or its Pod belongs to, by its label. */
const deploymentOf = (o: KubeObject): string | undefined => {
  const d = o.metadata?.labels?.[DEPLOYMENT_LABEL];
  return d ? `${o.metadata!.namespace}/${d}` : undefined;
};
const byDeployment = (o: KubeObject) => {
  const d = deploymentOf(o);
  return d ? [d] : [];
};

/** An Instance's create that failed for a cause the user fixes is tried again after this long. */
const FAILED_CREATE_RETRY_MS = 30_000;

/**
 * What the deployment controller and its status controller share: the caches both read (an
 * instance's Pods are the instance controller's cache), the step both compute, why the last pass
 * could not create an instance, and the logger and event recorder both write with.
 */
export class DeploymentState {
  readonly deployments: Informer<DeploymentObject>;
  readonly instances: Informer<CachedInstance>;
  /** Instances' Pods (the instance controller's cache): one whose Instance is gone is a deletion in flight. */
  readonly pods: Informer<WorkloadPod>;
  /** Why a deployment's last pass could not create an instance, shown in its status until one can. */
  readonly failedCreates = new Map<string, string>();
  readonly events: EventRecorder;
  readonly log: Logger;

  constructor(manager: Manager) {
    this.log = manager.log.child({ capability: 'workloads', controller: 'deployment' });
    this.events = manager.recorder('workloads');
    this.deployments = manager.informer<DeploymentObject>(WorkloadDeployment.ref);
    // The same informer as the instance controller's (same resource, same selector): one cache.
    this.instances = manager.informer<CachedInstance>(Instance.ref, INSTANCE_CACHE);
    this.instances.addIndexer('deployment', byDeployment);
    this.pods = manager.informer<WorkloadPod>(Resources.pods, INSTANCE_PODS);
    this.pods.addIndexer('deployment', byDeployment);
    this.deployments.addEventHandler({ onDelete: (d) => this.failedCreates.delete(keyOf(d)) });
  }

  /** What both controllers act on: a deployment's spec (replicas by the scale subresource too) or
   * deletion, its own status writes passing by, its instances' conditions, deletion and labels, and
   * the Pods of gone instances coming and going. */
  watch(c: Controller): Controller {
    const former = (p: WorkloadPod) => this.isFormer(p);
    return c
      .watch(this.deployments, keyOf, { update: changed(generationChanged, deletionChanged) })
      .watch(this.instances, deploymentOf, {
        update: changed(conditionsChanged, deletionChanged, labelsChanged, ownersChanged),
      })
      .watch(this.pods, deploymentOf, { add: former, update: () => false, delete: former });
  }

  /** A Pod made for an Instance that is no longer the one of its name in the cache. */
  isFormer(pod: WorkloadPod): boolean {
    return isFormerPod(pod, (name) => this.instances.get(`${pod.metadata.namespace}/${name}`)?.metadata.uid);
  }

  /**
   * Each deployment's template revision, by its template object in the cache: informer objects are
   * replaced on update, never changed in place, so a pass hashes only a template that changed.
   */
  private readonly revisions = new WeakMap<
    DeploymentObject['spec']['template'],
    ReturnType<typeof templateRevision>
  >();

  private revision(wd: DeploymentObject): ReturnType<typeof templateRevision> {
    let revision = this.revisions.get(wd.spec.template);
    if (revision === undefined) {
      revision = templateRevision(wd.spec.template);
      this.revisions.set(wd.spec.template, revision);
    }
    return revision;
  }

  /**
   * The whole template of a cached (slim) instance, from its deployment's cache when that holds
   * the instance's revision: the instance controller then makes its Pod without reading the
   * Instance back (the common case: instances are made from the deployment's template).
   */
  templateOf(inst: CachedInstance): DeploymentObject['spec']['template'] | undefined {
    const ref = inst.metadata.ownerReferences?.find(
      (o) => o.controller && o.kind === WorkloadDeployment.kind,
    );
    const wd = ref && this.deployments.get(`${inst.metadata.namespace}/${ref.name}`);
    if (!wd || wd.metadata.uid !== ref.uid) return undefined;
    return this.revision(wd).hash === inst.spec.templateHash ? wd.spec.template : undefined;
  }

  /**
   * The deployment's instances as the step sees them, the step (`wd` as its informer holds it), and
   * why it runs fewer replicas than it asks for, when it does (boundedReplicas).
   */
  stepFor(key: string, wd: DeploymentObject) {
    const revision = this.revision(wd);
    const { hash } = revision;
    const { replicas, bounded } = boundedReplicas(wd.spec.replicas, revision.bytes);
    const owned = this.instances.byIndex('deployment', key).filter((i) => controlledBy(i, wd.metadata.uid));
    const now = Date.now();
    const former = this.pods
      .byIndex('deployment', key)
      .filter((p) => this.isFormer(p))
      .flatMap((p) => formerInstanceState(p, now) ?? []);
    const input = {
      name: wd.metadata.name!,
      replicas,
      policy: wd.spec.instanceManagementPolicy,
      hash,
      instances: [...owned.map(instanceState), ...former],
    };
    return { hash, owned, input, step: nextStep(input), ...(bounded ? { bounded } : {}) };
  }
}

export interface DeploymentReconcilerOptions {
  workers?: number;
  /** The status controller's trigger: a deployment whose create failure changed has its status written again. */
  status: Trigger;
}

/** The deployment controller: a deployment's instances created, adopted and deleted as its step says. */
export function setupDeploymentReconciler(
  manager: Manager,
  state: DeploymentState,
  opts: DeploymentReconcilerOptions,
): Controller {
  const controller = state.watch(
    new Controller({
      name: 'workloads-deployment',
      workers: opts.workers ?? 8,
      logger: state.log,
      reconciler: new DeploymentReconciler(manager, state, opts.status),
    }),
  );
  manager.add(controller);
  return controller;
}

export class DeploymentReconciler {
  private readonly manager: Manager;
  private readonly state: DeploymentState;
  /** The status controller's trigger. */
  private readonly status: Trigger;
  /** Creates and deletes sent but not yet in the cache, by instance key: a second reconcile must not repeat them. */
  private readonly sent: WriteExpectations<Action['type']>;

  constructor(manager: Manager, state: DeploymentState, status: Trigger) {
    this.manager = manager;
    this.state = state;
    this.status = status;
    this.sent = new WriteExpectations(state.instances, keyOf);
  }

  async reconcile(key: string): Promise<Result | void> {
    const wd = this.state.deployments.get(key);
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
    const orphans = this.state.instances
      .byIndex('deployment', key)
      .filter((i) => !i.metadata.ownerReferences?.some((o) => o.controller));
    if (orphans.length) {
      let refused: string | undefined;
      for (const i of orphans) refused ??= await this.adopt(i, owner);
      return this.reportFailure(wd, refused, true);
    }
    const { hash, owned, input, step: p } = this.state.stepFor(key, wd);

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
      const sent = await this.send(key, wd, owner, hash, owned, a, target);
      if (sent.failure !== undefined) failure = sent.failure;
      // The next creates would be refused alike (Berth's RBAC, an admission policy): tried again later.
      if (sent.stop) break;
    }

    // A pass that tried no create says nothing of the last failure (its step waits on something
    // else), unless every ordinal now exists.
    const ordinals = new Set(
      owned
        .filter((i) => !i.metadata.deletionTimestamp && i.spec.ordinal < input.replicas)
        .map((i) => i.spec.ordinal),
    );
    const result = this.reportFailure(wd, failure, created || ordinals.size === input.replicas);
    return result ?? (held ? { requeueAfterMs: maxWaitMs } : undefined);
  }

  /**
   * Sends one of the step's actions; a failure the user must fix comes back (`stop`: the creates
   * after it would be refused alike), anything else already there or already gone is left to the
   * cache, which brings this key back.
   */
  private async send(
    key: string,
    wd: DeploymentObject,
    owner: OwnerReference,
    hash: string,
    owned: readonly CachedInstance[],
    a: Action,
    target: string,
  ): Promise<{ failure?: string; stop?: boolean }> {
    const name = wd.metadata.name!;
    try {
      let written: KubeObject | undefined;
      if (a.type === 'create') {
        written = await this.manager
          .client()
          .create(Instance.ref, instanceManifest(wd, owner, wd.spec.template, hash, a.ordinal), {
            fieldManager: DEPLOYMENT_MANAGER,
          });
        this.state.log.info({ deployment: key, instance: target, hash }, 'instance created');
      } else {
        const inst = owned.find((i) => i.metadata.name === a.name)!;
        // In the background: the Instance goes at once and the instance controller deletes its Pod
        // (the garbage collector would too); the step counts the deletion in flight until the Pod
        // is gone. Foreground deletion would wait on the garbage collector, which for up to 30 s
        // after the CRD's install does not watch Instances yet (decision 0013). No finalizer of
        // Berth's: an Instance deleted while Berth is down or removed never waits.
        written = await deleteExact(this.manager.client(), Instance.ref, inst, {
          propagationPolicy: 'Background',
        });
        // Already gone, or replaced: the cache catches up and brings this key back.
        if (!written) return {};
        this.state.log.info(
          { deployment: key, instance: target, reason: a.rollout ? 'rollout' : 'scale down' },
          'instance deleted',
        );
      }
      // A delete answered with a Status (the object went at once) leaves nothing to wait for.
      this.sent.expect(target, written?.metadata?.resourceVersion, a.type);
      return {};
    } catch (e) {
      const taken = isConflict(e) && a.type === 'create' ? this.state.instances.get(target) : undefined;
      // An earlier deployment of this name's (deleted and made again at once) goes with the garbage
      // collector, and its deletion brings this key back: only anyone else's is a failure.
      const earlier = taken?.metadata.ownerReferences?.some(
        (o) => o.controller && o.kind === WorkloadDeployment.kind && o.name === name,
      );
      if (taken && !controlledBy(taken, wd.metadata.uid) && !earlier)
        return {
          failure: `an Instance named ${taken.metadata.name} exists that this deployment does not own`,
        };
      if (a.type === 'create' && isRefused(e))
        return {
          failure: `the apiserver refused the Instance ${target}: ${e.message}${workloadNamespaceHint(e)}`,
          stop: true,
        };
      // Already there, or already gone: the cache catches up and brings this key back.
      if (!isConflict(e) && !isNotFound(e)) throw e;
      return {};
    }
  }

  /**
   * Why the deployment cannot make (or adopt) its instances, when `tried` says this pass knows:
   * shown in status (a ReplicaSet's ReplicaFailure) and as a Warning when it starts, and tried
   * again later. The user's to fix: an admission policy, a quota on Instances, a name taken by hand.
   */
  private reportFailure(wd: DeploymentObject, failure: string | undefined, tried: boolean): Result | void {
    const key = keyOf(wd);
    if (tried && failure !== this.state.failedCreates.get(key)) {
      if (failure) this.state.failedCreates.set(key, failure);
      else this.state.failedCreates.delete(key);
      this.status.send(key);
      if (failure) {
        this.state.events.event(wd, 'Warning', 'FailedCreate', 'Create', failure);
        this.state.log.warn({ deployment: key }, failure);
      }
    }
    if (failure) return { requeueAfterMs: FAILED_CREATE_RETRY_MS };
  }

  /**
   * Makes this deployment an orphaned instance's controller (a uid and version test guards the
   * patch); why not, when the apiserver refuses it.
   */
  private async adopt(inst: CachedInstance, owner: OwnerReference): Promise<string | undefined> {
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
      this.state.log.info({ instance: keyOf(inst), deployment: owner.name }, 'orphaned instance adopted');
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
}
