// Workloads' pure decisions: a WorkloadDeployment's next step, the actions that scale and roll its
// instances by ordinal. No I/O: controllers/deployment.ts acts, `berth plan` previews.
import { findCondition } from '../../runtime/api/conditions.ts';
import { type CachedInstance } from './instances.ts';
import { deploymentNameProblem } from './revisions.ts';

/** What the deployment controller knows of one of its instances. */
export interface InstanceState {
  name: string;
  ordinal: number;
  hash: string;
  ready: boolean;
  available: boolean;
  programmed: boolean;
  deleting: boolean;
  /**
   * The Instance is gone and only its Pod is still going (instances are deleted in the background):
   * it holds the Pod's name, not the instance's, so its ordinal may be made again at once.
   */
  gone?: boolean;
  /**
   * While not Ready: since when (its Ready condition's last transition, else its creation), ms;
   * while deleting, since its deletion began.
   */
  notReadySince: number;
  /** The Ready condition's reason and message while not Ready. */
  reason?: string;
  message?: string;
}

/** An Instance as the deployment step sees it (the controller, and `berth plan` from its mirrors). */
export function instanceState(i: CachedInstance): InstanceState {
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

export type Action = { type: 'create'; ordinal: number } | { type: 'delete'; name: string; rollout: boolean };

export interface StepInput {
  /** The deployment's name: one too long for its instances' names steps nothing (deploymentNameProblem). */
  name?: string;
  replicas: number;
  policy: 'OrderedReady' | 'Parallel';
  hash: string;
  instances: readonly InstanceState[];
}

export interface Step {
  actions: Action[];
  /** The instance the next step waits to be Ready (a replacement, or a predecessor when scaling up). */
  waitingFor?: InstanceState;
  /** Instances still on another template (among those that stay). */
  drifted: number;
}

/**
 * The next step. OrderedReady scales one instance at a time: ordinal i is created once 0..i-1 are
 * Ready, the highest ordinal is deleted first, and nothing moves while a deletion is in flight (until
 * its Pod is gone), save that a deleted ordinal may be made again at once. Parallel creates and
 * deletes all at once. Rollouts are one at a time either way: a Ready drifted instance is deleted
 * (recreated by the scale step, never updated in place), highest ordinal first, the next only once
 * the replacement is Ready; a drifted instance that is not Ready is replaced at once, since nothing
 * serves from it.
 */
export function nextStep(p: StepInput): Step {
  const ordered = p.policy === 'OrderedReady';
  const live = p.instances.filter((i) => !i.deleting);
  const deleting = p.instances.filter((i) => i.deleting);
  const byOrdinal = new Map(live.map((i) => [i.ordinal, i]));
  const excess = live.filter((i) => i.ordinal >= p.replicas).sort((a, b) => b.ordinal - a.ordinal);
  const staying = live.filter((i) => i.ordinal < p.replicas).sort((a, b) => b.ordinal - a.ordinal);
  const drifted = staying.filter((i) => i.hash !== p.hash);
  const missing: number[] = [];
  for (let i = 0; i < p.replicas; i++) if (!byOrdinal.has(i)) missing.push(i);
  const del = (i: InstanceState, rollout: boolean): Action => ({ type: 'delete', name: i.name, rollout });
  const result = (actions: Action[], waitingFor?: InstanceState): Step => ({
    actions,
    ...(waitingFor ? { waitingFor } : {}),
    drifted: drifted.length,
  });
  // Its instances' Pods would be refused, each after its instance had claimed quota.
  if (p.name !== undefined && deploymentNameProblem(p.name)) return result([]);

  if (ordered) {
    const first = missing[0];
    if (deleting.length) {
      // A deletion in flight holds every step but one: an Instance already gone whose Pod is still
      // going holds only the Pod's name, so its ordinal, when it is next, is made again at once (the
      // new instance's Pod waits for the name: the instance controller).
      const remake =
        first !== undefined &&
        deleting.every((i) => i.gone && i.ordinal === first) &&
        !staying.some((i) => i.ordinal < first && !i.ready);
      // Else the step waits for the deletion: its deadline runs from when it began (a Pod stuck
      // Terminating on a lost node, or held by someone's finalizer, stops the rollout in time).
      return remake ? result([{ type: 'create', ordinal: first }]) : result([], deleting[0]);
    }
    if (excess.length) return result([del(excess[0]!, false)]);
    if (first !== undefined) {
      const notReady = staying.filter((i) => i.ordinal < first && !i.ready).at(-1);
      if (!notReady) return result([{ type: 'create', ordinal: first }]);
      // A predecessor is not Ready: replace it now if it is drifted, else wait for it.
      const broken = drifted.find((i) => !i.ready);
      return broken ? result([del(broken, true)]) : result([], notReady);
    }
  } else {
    // An Instance still deleting holds its name; one already gone holds only its Pod's.
    const freed = new Set(deleting.filter((i) => !i.gone).map((i) => i.ordinal));
    const actions: Action[] = [
      ...excess.map((i) => del(i, false)),
      ...missing.filter((i) => !freed.has(i)).map((ordinal): Action => ({ type: 'create', ordinal })),
    ];
    if (actions.length) return result(actions);
    if (deleting.length || missing.length) return result([], deleting[0]);
  }

  // Every ordinal exists: roll, one instance at a time.
  const broken = drifted.find((i) => !i.ready);
  if (broken) return result([del(broken, true)]);
  const pending = staying.filter((i) => !i.ready).at(-1);
  if (pending) return result([], pending);
  return result(drifted.length ? [del(drifted[0]!, true)] : []);
}
