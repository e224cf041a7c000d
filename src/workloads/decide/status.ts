// Workloads' pure decisions: a WorkloadDeployment's status (counts, Available, Progressing) and the
// rollup of its instances' blocking reasons (which warn, which the user can fix, the worst). No I/O.
import { type Condition } from '../../runtime/api/conditions.ts';
import { BLOCKING_REASONS, type BlockingReason } from '../types.ts';
import { type InstanceState, type StepInput, type Step } from './step.ts';
import { deploymentNameProblem } from './revisions.ts';

/**
 * Reasons worth a Warning event on the instance when they start to hold: every blocking reason but
 * the waits that pass by themselves (the seed's instances warn QuotaNoBudget, ImageUnavailable,
 * InstanceCrashing, ConfigurationError, …).
 */
export const WARNED: ReadonlySet<string> = new Set<BlockingReason>(
  BLOCKING_REASONS.filter((r) => r !== 'Provisioning' && r !== 'PendingEvaluation'),
);

/** Whether Ready's verdict starts a cause worth a Warning (WARNED): not one Ready already showed. */
export const warns = (
  was: Pick<Condition, 'status' | 'reason'> | undefined,
  ready: ConditionVerdict,
): boolean =>
  !ready.status && WARNED.has(ready.reason) && !(was?.status === 'False' && was.reason === ready.reason);

/** Reasons a user must act on: they stop a rollout. */
export const USER_FIXABLE: ReadonlySet<string> = new Set<BlockingReason>([
  'ConfigurationError',
  'ImageUnavailable',
  'InstanceCrashing',
]);

export const rank = (reason: string): number => {
  const i = (BLOCKING_REASONS as readonly string[]).indexOf(reason);
  return i < 0 ? BLOCKING_REASONS.length : i;
};

/** The worst of some blocking causes (BLOCKING_REASONS order; unknown reasons last), first on ties. */
export function worst<T extends { reason: string }>(causes: readonly T[]): T | undefined {
  let w: T | undefined;
  for (const c of causes) if (!w || rank(c.reason) < rank(w.reason)) w = c;
  return w;
}

export interface DeploymentCounts {
  replicas: number;
  currentReplicas: number;
  readyReplicas: number;
  availableReplicas: number;
  updatedReplicas: number;
  desiredReplicas: number;
}

export interface ConditionVerdict {
  status: boolean;
  reason: string;
  message: string;
}

export interface DeploymentVerdict {
  counts: DeploymentCounts;
  available: ConditionVerdict;
  progressing: ConditionVerdict;
  /** When the progress deadline of the step waited on runs out, from now (ms). */
  deadlineInMs?: number;
}

const MAX_NAMED = 3;

/** "web-1: message; web-2: message (and 3 more)". */
function naming(instances: readonly InstanceState[]): string {
  const named = instances.slice(0, MAX_NAMED).map((i) => `${i.name}: ${i.message ?? i.reason}`);
  const more = instances.length - named.length;
  return `${named.join('; ')}${more > 0 ? ` (and ${more} more)` : ''}`;
}

/** Available: enough instances serve, or the worst blocking reason of the first ones that do not. */
function availability(
  live: readonly InstanceState[],
  availableReplicas: number,
  replicas: number,
): ConditionVerdict {
  if (availableReplicas >= replicas)
    return {
      status: true,
      reason: 'MinimumReplicasAvailable',
      message: `${availableReplicas} of ${replicas} instances available`,
    };
  const blocked = live
    .filter((i) => !i.available && i.ordinal < replicas)
    .sort((a, b) => a.ordinal - b.ordinal);
  const w = worst(blocked.filter((i) => i.reason).map((i) => ({ ...i, reason: i.reason! })));
  const same = w ? blocked.filter((i) => i.reason === w.reason) : [];
  return {
    status: false,
    reason: w?.reason ?? 'Provisioning',
    message:
      `${availableReplicas} of ${replicas} instances available` + (w ? `; ${w.reason}: ${naming(same)}` : ''),
  };
}

/**
 * Counts and the Available and Progressing conditions. Available is False with the worst blocking
 * reason of the instances that do not serve (a cause the user can fix outranks a transient one).
 * Progressing is False when the step the step waits on is blocked by a user-fixable cause (the
 * rollout stops; the old instances keep serving) or has not become Ready within the deadline.
 */
export function deploymentVerdict(
  p: StepInput & { step: Step; progressDeadlineSeconds: number; now: number },
): DeploymentVerdict {
  const live = p.instances.filter((i) => !i.deleting);
  const count = (f: (i: InstanceState) => boolean) => live.filter(f).length;
  const counts: DeploymentCounts = {
    replicas: live.length,
    currentReplicas: count((i) => i.programmed),
    readyReplicas: count((i) => i.ready),
    availableReplicas: count((i) => i.available),
    updatedReplicas: count((i) => i.hash === p.hash),
    desiredReplicas: p.replicas,
  };
  const invalid = p.name !== undefined ? deploymentNameProblem(p.name) : undefined;
  if (invalid) {
    const stopped: ConditionVerdict = { status: false, reason: 'ConfigurationError', message: invalid };
    return { counts, available: stopped, progressing: stopped };
  }

  const available = availability(live, counts.availableReplicas, p.replicas);

  const w = p.step.waitingFor;
  const elapsed = w ? p.now - w.notReadySince : 0;
  const deadlineMs = p.progressDeadlineSeconds * 1000;
  let progressing: ConditionVerdict;
  let deadlineInMs: number | undefined;
  // A broken instance being replaced still shows its cause: the step waits for its deletion, not on it.
  if (w?.reason && !w.deleting && USER_FIXABLE.has(w.reason))
    progressing = {
      status: false,
      reason: w.reason,
      message: `${p.step.drifted ? 'rollout' : 'scaling'} stopped at ${naming([w])}`,
    };
  else if (w && elapsed >= deadlineMs)
    progressing = {
      status: false,
      reason: 'ProgressDeadlineExceeded',
      message: w.deleting
        ? `${w.name} not gone after ${p.progressDeadlineSeconds}s: ${w.message ?? 'being deleted'}`
        : `${w.name} not Ready after ${p.progressDeadlineSeconds}s: ${w.message ?? w.reason ?? 'not Ready'}`,
    };
  else {
    if (w) deadlineInMs = deadlineMs - elapsed;
    const settled =
      !p.step.actions.length &&
      !w &&
      !p.step.drifted &&
      live.length === p.replicas &&
      !p.instances.some((i) => i.deleting);
    progressing = settled
      ? { status: true, reason: 'NewTemplateAvailable', message: `template ${p.hash} is rolled out` }
      : p.step.drifted
        ? {
            status: true,
            reason: 'NewTemplateRolling',
            message: `${counts.updatedReplicas} of ${p.replicas} instances on template ${p.hash}`,
          }
        : {
            status: true,
            reason: 'ScalingReplicas',
            message: `${live.length} instances, ${p.replicas} desired`,
          };
  }
  return { counts, available, progressing, ...(deadlineInMs !== undefined ? { deadlineInMs } : {}) };
}
