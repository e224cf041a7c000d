// Workloads' pure decisions: what one pass of the instance reconciler does, from what it gathered.
// Two steps, since the second reads what the first's write answered: the Pod's (wait, make it,
// take the gate off, or leave it), then the status's (its conditions, whether to write them now,
// whether an ended Pod goes, when to look again). No I/O: controllers/instance.ts gathers and acts.
import { findCondition } from '../../runtime/api/conditions.ts';
import type { CachedInstance } from './instances.ts';
import {
  crashWindowEndsIn,
  gated,
  instanceOwnerUid,
  instanceVerdict,
  podEnded,
  type InstanceVerdict,
  type QuotaView,
  type WorkloadPod,
} from './pods.ts';
import { controlledBy } from './instances.ts';
import { INSTANCE_LABEL } from '../types.ts';

/** How long a new instance waits for the quota controller's verdict before it is reported as waiting. */
export const VERDICT_WAIT_MS = 5000;

/**
 * An instance's first status waits this long after its Pod was made while nothing but the Pod's
 * start holds it: a Pod Ready by then makes the first status the Ready one, one write instead of two
 * (bench:instances: at 1 s, half the instances of a loaded run still took two). One still starting
 * then is written as it is (Ready=False, Provisioning); a Pod that cannot start (unschedulable, its
 * image unavailable, crashing) has a cause of its own, written at once. As long as the wait for the
 * quota controller's verdict (VERDICT_WAIT_MS): an instance says nothing for at most that long.
 */
export const FIRST_STATUS_WAIT_MS = 5000;

/** A Pod that ended is replaced once it is this old (ms since its creation). */
export const ENDED_REPLACE_MS = 10_000;

/** A Pod the apiserver refused is tried again after this long (the refusal stands meanwhile). */
export const REJECTED_RETRY_MS = 60_000;

export const notOwned = (name: string) => `a Pod named ${name} exists that this instance does not own`;

/** The apiserver's refusal of an instance's Pod, as the reconciler remembers it. */
export interface Refusal {
  uid: string;
  message: string;
  at: number;
}

/** What the instance reconciler gathered of a live instance (not being deleted). */
export interface InstanceSeen {
  now: number;
  inst: CachedInstance;
  /** The Pod of the instance's name in the cache, whoever owns it. */
  cached: WorkloadPod | undefined;
  /** The grant of this process's quota controller, else the instance's QuotaGranted condition. */
  quota: QuotaView | undefined;
  /** Why the instance cannot be sized (an unknown InstanceType, …). */
  sizeError: string | undefined;
  /** The last refusal of its Pod, if one is remembered. */
  refused: Refusal | undefined;
  /** A Pod made and not in the cache yet. */
  podSent: boolean;
}

/** The Pod step: what to write before the status is decided. */
export type PodActions =
  /** Nothing to do before the event that brings the key back: the verdict's (for at most ms), the Pod's add. */
  | { wait: 'verdict'; ms: number }
  | { wait: 'pod' }
  | {
      wait?: undefined;
      /** A Pod of the name that is not the instance's: an earlier instance's goes first. */
      foreign: boolean;
      /** The remembered refusal is past (another uid, or old enough): forget it. */
      forgetRefusal: boolean;
      /** The instance's own Pod, as cached. */
      pod: WorkloadPod | undefined;
      /** Make the Pod (gated unless granted), or take the quota gate off it. */
      write: 'create' | 'ungate' | undefined;
      granted: boolean;
      /** Why no Pod can be made, and when to try again. */
      configError?: string;
      retryAfterMs?: number;
      /** An ended Pod: how long until it may be replaced (ms, ≤ 0 now). */
      replaceIn?: number;
    };

/**
 * The Pod step of a live instance. A Pod made before the quota controller's first verdict would be
 * gated, then ungated a moment later (two more writes, two more hops): the instance waits for the
 * verdict (whose event brings it back) for VERDICT_WAIT_MS, then is reported PendingEvaluation and
 * its Pod made gated. A Pod created and not cached yet waits for its add event: creating it again
 * would only conflict. A Pod that ended (evicted, its node shut down) never runs again: it is made
 * anew, as a StatefulSet's is, at most every ENDED_REPLACE_MS (a kubelet refusing it at once, as
 * OutOfcpu, would otherwise loop), once the status says so.
 */
export function podActions(s: InstanceSeen): PodActions {
  const { inst, cached, quota, now } = s;
  const uid = inst.metadata.uid!;
  const pod = cached && controlledBy(cached, uid) ? cached : undefined;
  const waited = now - (Date.parse(inst.metadata.creationTimestamp ?? '') || 0);
  if (!quota && !cached && waited < VERDICT_WAIT_MS) return { wait: 'verdict', ms: VERDICT_WAIT_MS - waited };
  if (!cached && s.podSent) return { wait: 'pod' };
  const stale = s.refused && (s.refused.uid !== uid || now - s.refused.at >= REJECTED_RETRY_MS);
  const refused = stale ? undefined : s.refused;
  // A Pod of this name with the instance label that no instance owns (its Instance deleted with
  // --cascade=orphan): not Berth's to delete, and never going by itself.
  const orphan = cached && !pod && !instanceOwnerUid(cached) ? notOwned(inst.metadata.name!) : undefined;
  const configError = s.sizeError ?? refused?.message ?? orphan;
  const granted = quota?.status === 'True';
  const ungate = !!pod && granted && gated(pod) && !pod.metadata.deletionTimestamp;
  return {
    foreign: !!cached && !pod,
    forgetRefusal: !!stale,
    pod,
    write: !configError && !cached ? 'create' : ungate ? 'ungate' : undefined,
    granted,
    ...(configError ? { configError } : {}),
    ...(refused
      ? { retryAfterMs: REJECTED_RETRY_MS - (now - refused.at) }
      : orphan
        ? { retryAfterMs: REJECTED_RETRY_MS }
        : {}),
    ...(pod && podEnded(pod) && !pod.metadata.deletionTimestamp
      ? { replaceIn: ENDED_REPLACE_MS - (now - (Date.parse(pod.metadata.creationTimestamp ?? '') || 0)) }
      : {}),
  };
}

/** What the Pod step left: the instance's own Pod, and why none could be made. */
export interface PodOutcome {
  pod: WorkloadPod | undefined;
  /** A Pod of the name that is not the instance's. */
  foreign: boolean;
  configError?: string;
  retryAfterMs?: number;
  replaceIn?: number;
}

export interface StatusActions {
  verdict: InstanceVerdict;
  /** Write the status now (else the first status waits for the Pod, settleIn ms at most). */
  write: boolean;
  /** The ended Pod goes now (after the status says it ended). */
  replace: boolean;
  /** When to look again with no event to say so. */
  requeueAfterMs?: number;
}

/**
 * The status step. A first status that would only say the Pod is starting waits for it to be Ready
 * (its events bring the key back) for FIRST_STATUS_WAIT_MS at most: until then the instance has no
 * status, which claims nothing. The ended Pod goes only after the status says it ended: deleted
 * first, the instance would read Ready with no Pod until the new one's events came back. Looked at
 * again, with no event to say so, at the soonest of: the refusal's retry, the first status's wait, a
 * crash window closing, an ended Pod old enough to replace.
 */
export function statusActions(
  inst: CachedInstance,
  o: PodOutcome & { quota: QuotaView | undefined; madeAt: number | undefined; now: number },
): StatusActions {
  const { pod, now } = o;
  const crashing = findCondition(inst.status?.conditions, 'Ready')?.reason === 'InstanceCrashing';
  const verdict = instanceVerdict({
    ...(pod ? { pod } : {}),
    crashing,
    foreignPod: o.foreign,
    ...(o.quota ? { quota: o.quota } : {}),
    ...(o.configError ? { configError: o.configError } : {}),
  });
  const starting =
    o.madeAt !== undefined &&
    !!pod &&
    !podEnded(pod) &&
    !verdict.ready.status &&
    verdict.ready.reason === 'Provisioning';
  const settleIn = starting ? FIRST_STATUS_WAIT_MS - (now - o.madeAt!) : 0;
  const replace = !!pod && o.replaceIn !== undefined && o.replaceIn <= 0;
  const crashEnds = pod && crashWindowEndsIn(pod, now, verdict.ready.reason === 'InstanceCrashing');
  const later = [
    o.retryAfterMs,
    settleIn > 0 ? settleIn : undefined,
    crashEnds ? crashEnds + 100 : undefined,
    o.replaceIn === undefined ? undefined : Math.max(100, o.replaceIn),
  ].filter((ms): ms is number => ms !== undefined);
  return {
    verdict,
    write: settleIn <= 0,
    replace,
    ...(later.length && !replace ? { requeueAfterMs: Math.min(...later) } : {}),
  };
}

/** What a Pod of the name the create conflicted with is (undefined: gone again, look again). */
export function conflictingPod(
  there: WorkloadPod | undefined,
  uid: string,
): 'own' | 'former' | 'foreign' | undefined {
  if (!there) return undefined;
  if (controlledBy(there, uid)) return 'own';
  // An earlier instance's Pod that the cache does not show yet (a rollout's recreate under load).
  if (instanceOwnerUid(there) && there.metadata?.labels?.[INSTANCE_LABEL]) return 'former';
  return 'foreign';
}
