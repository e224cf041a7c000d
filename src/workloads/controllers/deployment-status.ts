// The WorkloadDeployment status controller: writes a deployment's counts and its Available and
// Progressing conditions (and ReplicaFailure while a create fails) when they change. A controller of
// its own, so that a slow status write never holds a worker that the next create waits for (as the
// policy kit's PolicyStatusWriter does); it reads the same caches and step as the deployment
// controller (DeploymentState, deployment.ts).
import {
  conditionSetter,
  conditionsOf,
  findCondition,
  sameConditions,
} from '../../runtime/api/conditions.ts';
import { keyOf } from '../../runtime/cache/informer.ts';
import { applyStatus, isObjectGone } from '../../runtime/client/apply.ts';
import { Controller, type Result } from '../../runtime/controller/controller.ts';
import type { Trigger } from '../../runtime/controller/trigger.ts';
import { WriteExpectations } from '../../runtime/controller/expectations.ts';
import { WriteSpacing } from '../../runtime/controller/spacing.ts';
import type { Manager } from '../../runtime/manager/manager.ts';
import { deploymentSelector } from '../decide/revisions.ts';
import { deploymentVerdict, USER_FIXABLE } from '../decide/status.ts';
import { DEPLOYMENT_MANAGER, type WorkloadDeploymentStatus } from '../types.ts';
import { WorkloadDeployment } from '../crd.ts';
import type { DeploymentObject, DeploymentState } from './deployment.ts';

/**
 * Workers of the status controller: status writes only, one per deployment at a time. Fewer than the
 * actions' on purpose: measured with 1,000 instances starting at once (bench:instances), 4 wrote 5.4
 * times per instance with the status up to ~2 s behind at the peak; 16 kept it within ~0.1 s but
 * wrote 7.1 times and slowed the start by a quarter.
 */
export const STATUS_WORKERS = 4;

/** Count-only status changes within this long of the last write are batched into one write. */
const STATUS_BATCH_MS = 500;
/**
 * The same while its instances come up (the status last written has fewer Ready than desired): an
 * OrderedReady ramp changes the counts twice per instance (created, Ready), and nobody needs each
 * step; one second is the staleness any status here is held to (bench:instances).
 */
export const RAMP_BATCH_MS = 1000;
/** The conditions this controller owns on a WorkloadDeployment, and the one it sets only while a create fails. */
const OWN = ['Available', 'Progressing'] as const;
const FAILURE = 'ReplicaFailure';
/** ReplicaFailure's reason while the deployment runs fewer replicas than it asks for (boundedReplicas). */
const BOUNDED = 'ReplicasBounded';
/**
 * The status controller of WorkloadDeployments: what the deployment controller watches, and `trigger`,
 * on which the deployment controller sends a deployment whose create failure changed.
 */
export function setupDeploymentStatusReconciler(
  manager: Manager,
  state: DeploymentState,
  trigger: Trigger,
): Controller {
  const controller = state
    .watch(
      new Controller({
        name: 'workloads-deployment-status',
        workers: STATUS_WORKERS,
        logger: state.log,
        reconciler: new DeploymentStatusReconciler(manager, state),
      }),
    )
    .reconcileOn(trigger);
  manager.add(controller);
  return controller;
}

export class DeploymentStatusReconciler {
  private readonly manager: Manager;
  private readonly state: DeploymentState;
  /** The status last written, until the deployment cache shows it. */
  private readonly statusSent: WriteExpectations<WorkloadDeploymentStatus>;
  /** When each deployment's status was last written (forgotten with the deployment). */
  private readonly statusSpacing = new WriteSpacing(STATUS_BATCH_MS);

  constructor(manager: Manager, state: DeploymentState) {
    this.manager = manager;
    this.state = state;
    this.statusSent = new WriteExpectations(state.deployments, keyOf);
    state.deployments.addEventHandler({ onDelete: (d) => this.statusSpacing.forget(keyOf(d)) });
  }

  /** The deployment's counts and conditions, from the same caches and step as the actions. */
  async reconcile(key: string): Promise<Result | void> {
    const wd = this.state.deployments.get(key);
    if (!wd || wd.metadata.deletionTimestamp) return;
    const { hash, input, step: p, bounded } = this.state.stepFor(key, wd);
    const name = wd.metadata.name!;
    const verdict = deploymentVerdict({
      ...input,
      step: p,
      progressDeadlineSeconds: wd.spec.progressDeadlineSeconds,
      now: Date.now(),
    });
    // The status as last written: the cache may not show our own last write yet.
    const current = this.statusSent.pending(wd) ?? wd.status ?? {};
    const created = this.state.failedCreates.get(key);
    // A create refused outranks the bound: it is why fewer instances exist than even the bound allows.
    const failure = created
      ? { reason: 'FailedCreate', message: created }
      : bounded && { reason: BOUNDED, message: bounded };
    const setter = conditionSetter(current.conditions ?? [], wd.metadata.generation);
    if (failure) setter.set(FAILURE, true, failure.reason, failure.message);
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
    const ramping = (old.readyReplicas ?? 0) < (old.desiredReplicas ?? 0);
    const wait = this.statusSpacing.wait(key, Date.now(), ramping ? RAMP_BATCH_MS : STATUS_BATCH_MS);
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
    const bound = findCondition(status.conditions, FAILURE);
    if (bound?.reason === BOUNDED && findCondition(last, FAILURE)?.reason !== BOUNDED) {
      this.state.events.event(wd, 'Warning', BOUNDED, 'Scale', bound.message);
      this.state.log.warn({ deployment: key, reason: BOUNDED }, bound.message);
    }
    for (const type of ['Available', 'Progressing']) {
      const now = findCondition(status.conditions, type)!;
      const was = findCondition(last, type);
      if (
        now.status === 'False' &&
        (USER_FIXABLE.has(now.reason) || now.reason === 'ProgressDeadlineExceeded') &&
        !(was?.status === 'False' && was.reason === now.reason)
      ) {
        this.state.events.event(
          wd,
          'Warning',
          now.reason,
          type === 'Available' ? 'Serve' : 'Rollout',
          now.message,
        );
        this.state.log.warn({ deployment: key, condition: type, reason: now.reason }, now.message);
      }
    }
    return undefined;
  }
}
