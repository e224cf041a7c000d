// Workloads' pure decisions: an instance's Pod as its cache keeps it, its blocking causes, the
// conditions an instance reads from it, and the patch that takes the quota gate off. No I/O.
import { findCondition, type Condition } from '../../runtime/api/conditions.ts';
import { removeItem, type JsonPatchOp } from '../../runtime/api/jsonpatch.ts';
import type { KubeObject, ObjectMeta } from '../../runtime/api/meta.ts';
import { hasSchedulingGate } from '../../policy/pods.ts';
import { interning } from '../../policy/intern.ts';
import { slimMetadata } from '../../policy/slim.ts';
import {
  BLOCKING_REASONS,
  INSTANCE_LABEL,
  ORDINAL_LABEL,
  QUOTA_GATE,
  TEMPLATE_HASH_LABEL,
  type BlockingReason,
} from '../types.ts';
import { Instance } from '../crd.ts';
import { type InstanceState } from './step.ts';
import { type ConditionVerdict, rank, worst } from './status.ts';

interface ContainerStatus {
  name: string;
  ready?: boolean;
  restartCount?: number;
  /** Only when the last run ended: what the crash window reads. */
  lastState?: { terminated?: { finishedAt?: string } };
  state?: {
    waiting?: { reason?: string; message?: string };
    running?: unknown;
    terminated?: { reason?: string; message?: string; exitCode?: number };
  };
}

interface PodCondition {
  type: string;
  status: string;
  reason?: string;
  message?: string;
}

/** What the instance controller keeps of a Pod (its cache holds only instances' Pods). */
export interface WorkloadPod extends KubeObject {
  metadata: ObjectMeta;
  spec: { schedulingGates?: { name: string }[]; nodeName?: string };
  status?: {
    phase?: string;
    conditions?: PodCondition[];
    containerStatuses?: ContainerStatus[];
    initContainerStatuses?: ContainerStatus[];
  };
}

/** The Pod as the instance controller caches it: what blocking reasons and the gate patch read. */
export function workloadPod(obj: KubeObject): WorkloadPod {
  const spec = (obj['spec'] ?? {}) as WorkloadPod['spec'];
  const status = (obj['status'] ?? {}) as NonNullable<WorkloadPod['status']>;
  const keep = (c: ContainerStatus): ContainerStatus => ({
    name: c.name,
    ...(c.ready !== undefined ? { ready: c.ready } : {}),
    ...(c.restartCount !== undefined ? { restartCount: c.restartCount } : {}),
    ...(c.state ? { state: c.state } : {}),
    ...(c.lastState?.terminated?.finishedAt
      ? { lastState: { terminated: { finishedAt: c.lastState.terminated.finishedAt } } }
      : {}),
  });
  const metadata = slimMetadata(obj.metadata);
  if (obj.metadata?.creationTimestamp) metadata.creationTimestamp = obj.metadata.creationTimestamp;
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata,
    spec: {
      ...(spec.schedulingGates ? { schedulingGates: spec.schedulingGates } : {}),
      ...(spec.nodeName ? { nodeName: spec.nodeName } : {}),
    },
    status: {
      ...(status.phase ? { phase: status.phase } : {}),
      ...(status.conditions ? { conditions: status.conditions } : {}),
      ...(status.containerStatuses ? { containerStatuses: status.containerStatuses.map(keep) } : {}),
      ...(status.initContainerStatuses
        ? { initContainerStatuses: status.initContainerStatuses.map(keep) }
        : {}),
    },
  };
}

/** The informer request for instances' Pods, one cache for both controllers. */
export const INSTANCE_PODS = {
  labelSelector: INSTANCE_LABEL,
  transform: interning('workload-pod', workloadPod),
};

/** The uid of the Instance a Pod was made for (its controller owner), if it was made for one. */
export function instanceOwnerUid(pod: KubeObject): string | undefined {
  return pod.metadata?.ownerReferences?.find(
    (o) => o.controller && o.kind === Instance.kind && o.apiVersion === Instance.apiVersion,
  )?.uid;
}

/**
 * Whether a Pod was made for an Instance that no longer stands under its name (`standing` gives the
 * uid of the Instance of a name, if any): the Pod of a gone instance, still going.
 */
export function isFormerPod(pod: KubeObject, standing: (name: string) => string | undefined): boolean {
  const owner = instanceOwnerUid(pod);
  return !!owner && standing(pod.metadata?.labels?.[INSTANCE_LABEL] ?? '') !== owner;
}

/**
 * The plan's view of a Pod whose Instance is gone (deleted in the background, the Pod still
 * terminating): a deletion in flight at its ordinal. Undefined for a Pod without an ordinal.
 */
export function formerInstanceState(pod: WorkloadPod, now: number): InstanceState | undefined {
  const labels = pod.metadata.labels ?? {};
  const ordinal = Number(labels[ORDINAL_LABEL]);
  if (!Number.isInteger(ordinal) || ordinal < 0) return undefined;
  return {
    name: labels[INSTANCE_LABEL] ?? pod.metadata.name!,
    ordinal,
    hash: labels[TEMPLATE_HASH_LABEL] ?? '',
    ready: false,
    available: false,
    programmed: false,
    deleting: true,
    gone: true,
    notReadySince: Date.parse(pod.metadata.deletionTimestamp ?? '') || now,
    message: `its Pod ${pod.metadata.name} is still going`,
  };
}

/** The kubelet alternates these while it retries a pull. */
const PULL_RETRIES = new Set(['ErrImagePull', 'ImagePullBackOff']);
const BACK_OFF = 'Back-off pulling image "';
/** The errors a kubelet names a failed pull by (images.ErrImagePull and its kin). */
const PULL_ERRORS = ['ErrImagePull', 'RegistryUnavailable', 'SignatureValidationFailed', 'ErrImageInspect'];
/** A pull error in an instance's message is cut here: the kubelet's text carries the registry's answer. */
export const MAX_PULL_ERROR = 512;

/**
 * The pull error itself (`: <error>`), the same through ErrImagePull and ImagePullBackOff: the
 * kubelet's back-off message is `Back-off pulling image "<image>": <ErrName>: <error of the last
 * pull>` (kubelet 1.35, images/image_manager.go), the error alone; '' when it names none.
 */
function pullError(message: string | undefined): string {
  let m = message ?? '';
  if (m.startsWith(BACK_OFF)) {
    const end = m.indexOf('": ', BACK_OFF.length);
    m = end < 0 ? '' : m.slice(end + 3);
  }
  const named = PULL_ERRORS.find((e) => m.startsWith(`${e}: `));
  if (named) m = m.slice(named.length + 2);
  m = m.replace(/\s+/g, ' ').trim();
  if (m.length > MAX_PULL_ERROR) m = `${m.slice(0, MAX_PULL_ERROR)}…`;
  return m ? `: ${m}` : '';
}
const IMAGE_REASONS = new Set(['InvalidImageName', 'ErrImageNeverPull']);
const CONFIG_REASONS = new Set(['CreateContainerConfigError', 'CreateContainerError', 'RunContainerError']);
/** Restarts from which an instance counts as crashing even between back-offs... */
export const CRASH_RESTARTS = 3;
/**
 * ...while its last run ended less than this long ago: the kubelet forgets a container's back-off
 * after ten minutes of running well, and so does Berth (a container that crashed three times last
 * week and is not Ready now for another cause is not crashing).
 */
export const CRASH_WINDOW_MS = 10 * 60_000;

/**
 * How long the container's last crash still counts (ms); 0 when it does not. No record of the last
 * run counts. An instance already reported crashing stays so from its first restart on, so that
 * the kubelet's first back-offs (a restart, running a moment, CrashLoopBackOff again) do not flip it
 * between InstanceCrashing and Provisioning, a Warning and a status write each time.
 */
function crashWindowLeft(c: ContainerStatus, now: number, crashing: boolean): number {
  if ((c.restartCount ?? 0) < (crashing ? 1 : CRASH_RESTARTS)) return 0;
  const ended = Date.parse(c.lastState?.terminated?.finishedAt ?? '');
  return Number.isNaN(ended) ? CRASH_WINDOW_MS : Math.max(0, CRASH_WINDOW_MS - (now - ended));
}

/** When a crash the Pod shows stops counting (ms from now): the instance is looked at again then. */
export function crashWindowEndsIn(pod: WorkloadPod, now: number, crashing = false): number | undefined {
  const left = [...(pod.status?.initContainerStatuses ?? []), ...(pod.status?.containerStatuses ?? [])]
    .map((c) => crashWindowLeft(c, now, crashing))
    .filter((ms) => ms > 0);
  return left.length ? Math.min(...left) : undefined;
}

export interface Cause {
  reason: BlockingReason;
  message: string;
}

/**
 * Every cause the Pod's status shows for not running, from what a kubelet reports. Messages stay
 * the same while the cause does (no restart count, no ErrImagePull/ImagePullBackOff flip-flop), so
 * a crash loop or a pull back-off is one status write and one event, not one per kubelet retry.
 */
export function podCauses(pod: WorkloadPod, now = Date.now(), crashing = false): Cause[] {
  const causes: Cause[] = [];
  const containers = [...(pod.status?.initContainerStatuses ?? []), ...(pod.status?.containerStatuses ?? [])];
  for (const c of containers) {
    const waiting = c.state?.waiting;
    const why = waiting?.reason ?? '';
    if (PULL_RETRIES.has(why))
      causes.push({
        reason: 'ImageUnavailable',
        message: `container ${c.name}: its image cannot be pulled${pullError(waiting?.message)}`,
      });
    else if (IMAGE_REASONS.has(why) || CONFIG_REASONS.has(why))
      causes.push({
        reason: IMAGE_REASONS.has(why) ? 'ImageUnavailable' : 'ConfigurationError',
        message: `container ${c.name}: ${why}${waiting?.message ? `: ${waiting.message}` : ''}`,
      });
    else if (why === 'CrashLoopBackOff' || crashWindowLeft(c, now, crashing) > 0)
      causes.push({
        reason: 'InstanceCrashing',
        message: `container ${c.name} keeps crashing and restarting`,
      });
  }
  const scheduled = findCondition(pod.status?.conditions, 'PodScheduled');
  if (scheduled?.status === 'False' && scheduled.reason === 'Unschedulable')
    causes.push({ reason: 'Unschedulable', message: scheduled.message ?? 'no node fits the pod' });
  return causes;
}

/** A Pod whose containers all ended for good (evicted, its node shut down): it never runs again. */
export const podEnded = (pod: WorkloadPod): boolean =>
  pod.status?.phase === 'Failed' || pod.status?.phase === 'Succeeded';

/** Serving: an ended Pod never is, whatever Ready condition it was left with (a node shut down). */
export const podReady = (pod: WorkloadPod | undefined): boolean =>
  !!pod &&
  !pod.metadata.deletionTimestamp &&
  !podEnded(pod) &&
  findCondition(pod.status?.conditions, 'Ready')?.status === 'True';

export interface InstanceObservation {
  /** The instance's own Pod (controller owner reference with its uid), if it has one. */
  pod?: WorkloadPod;
  /** A Pod of that name that is not this instance's (an earlier instance's, going away). */
  foreignPod?: boolean;
  /** The quota verdict: the QuotaGranted condition, or the grant of the quota controller in this process. */
  quota?: QuotaView;
  /** Why no Pod can be made: a sizing error, or the apiserver's answer to the Pod. */
  configError?: string;
  /** The instance is reported InstanceCrashing now (crashWindowLeft). */
  crashing?: boolean;
}

export interface InstanceVerdict {
  ready: ConditionVerdict;
  available: ConditionVerdict;
  programmed: ConditionVerdict;
}

/** What a quota verdict says, as a condition or as the quota controller hands it over. */
export type QuotaView = Pick<Condition, 'status' | 'reason' | 'message'>;

/** The quota controller's verdict as a blocking cause (undefined when granted). */
export function quotaCause(quota: QuotaView | undefined): Cause | undefined {
  if (quota?.status === 'True') return undefined;
  const reason = quota && rank(quota.reason) < BLOCKING_REASONS.length ? quota.reason : 'PendingEvaluation';
  return {
    reason: reason as BlockingReason,
    message: quota?.message || 'waiting for the quota controller to evaluate the instance',
  };
}

/**
 * Ready (serving and nothing blocks it: its reason is the worst cause), Available (the Pod serves)
 * and Programmed (the Pod exists), from the Pod's real state and the quota verdict.
 */
export function instanceVerdict(o: InstanceObservation): InstanceVerdict {
  const pod = o.pod && !o.pod.metadata.deletionTimestamp ? o.pod : undefined;
  const serving = podReady(pod);
  const podCause: Cause | undefined = o.configError
    ? { reason: 'ConfigurationError', message: o.configError }
    : pod
      ? podEnded(pod)
        ? { reason: 'Provisioning', message: `the Pod ended (${pod.status!.phase}); a new one follows` }
        : (worst(podCauses(pod, Date.now(), o.crashing)) ?? {
            reason: 'Provisioning',
            // One message from creation to Ready (scheduling, then starting): one status write, not two.
            message: gated(pod) ? 'the Pod waits for its quota gate' : 'the Pod is starting',
          })
      : {
          reason: 'Provisioning',
          message: o.pod
            ? 'the Pod is being deleted; a new one follows'
            : o.foreignPod
              ? 'waiting for the Pod of an earlier instance of this name to go'
              : 'creating the Pod',
        };
  const available: ConditionVerdict = serving
    ? { status: true, reason: 'PodReady', message: `Pod ${pod!.metadata.name} is Ready` }
    : { status: false, ...podCause };
  const programmed: ConditionVerdict = pod
    ? { status: true, reason: 'PodCreated', message: `Pod ${pod.metadata.name}` }
    : { status: false, ...podCause };
  const q = quotaCause(o.quota);
  const blocking = worst([...(serving ? [] : [podCause]), ...(q ? [q] : [])]);
  const ready: ConditionVerdict = blocking
    ? { status: false, ...blocking }
    : { status: true, reason: 'Ready', message: 'serving' };
  return { ready, available, programmed };
}

/** The Pod carries Berth's quota gate. */
export const gated = (pod: WorkloadPod): boolean => hasSchedulingGate(pod, QUOTA_GATE);

/**
 * The JSON patch that removes exactly the quota gate: guarded by a test of its index's name, so a
 * concurrent change to the gates fails the patch instead of removing another's gate.
 */
export function ungatePatch(pod: WorkloadPod): JsonPatchOp[] | undefined {
  const i = (pod.spec.schedulingGates ?? []).findIndex((g) => g.name === QUOTA_GATE);
  return i < 0 ? undefined : removeItem('/spec/schedulingGates', i, QUOTA_GATE, 'name');
}
