// Workloads in a cell: the pure decisions. The template hash that names a revision; the plan that
// scales and rolls a WorkloadDeployment's instances by ordinal; its status and the rollup of its
// instances' blocking reasons; an instance's conditions read from its Pod's real state; the Pod it
// runs as, and the patch that takes the quota gate off. No I/O: controllers/deployment.ts and controllers/instance.ts act.
import { createHash } from 'node:crypto';
import { findCondition, type Condition } from '../runtime/api/conditions.ts';
import { removeItem, type JsonPatchOp } from '../runtime/api/jsonpatch.ts';
import type { KubeObject, ObjectMeta, OwnerReference } from '../runtime/api/meta.ts';
import { hasSchedulingGate } from '../policy/pods.ts';
import { interning, slimMetadata } from '../policy/slim.ts';
import type { InstanceTypeSize, Size, SizedTemplate } from './resources.ts';
import {
  BLOCKING_REASONS,
  DEPLOYMENT_LABEL,
  INSTANCE_LABEL,
  Instance,
  ORDINAL_LABEL,
  OWN_INSTANCES,
  QUOTA_GATE,
  TEMPLATE_HASH_LABEL,
  type BlockingReason,
  type InstanceStatus,
  type InstanceTemplate,
} from './types.ts';

// ---------------------------------------------------------------------------------------------
// Revisions and names

/** JSON with object keys sorted, so equal templates hash equally whatever order they were written in. */
function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  if (v && typeof v === 'object')
    return `{${Object.keys(v)
      .filter((k) => (v as Record<string, unknown>)[k] !== undefined)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonical((v as Record<string, unknown>)[k])}`)
      .join(',')}}`;
  return JSON.stringify(v);
}

/**
 * The revision of a template: a short stable hash (a label value), as a ReplicaSet's
 * pod-template-hash, and its size in bytes (each instance carries a copy: ReplicasBounded).
 */
export function templateRevision(template: InstanceTemplate): { hash: string; bytes: number } {
  const c = canonical(template);
  return { hash: createHash('sha256').update(c).digest('hex').slice(0, 10), bytes: Buffer.byteLength(c) };
}

/** The revision's hash alone (templateRevision). */
export const templateHash = (template: InstanceTemplate): string => templateRevision(template).hash;

/**
 * The most bytes of templates a WorkloadDeployment's instances carry in all (replicas × its
 * template's size): 1,000 instances of a 16 KiB template. Each Instance holds a full copy of the
 * template, so one deployment would otherwise multiply its template into etcd and every cache of
 * Instances (issue 59); the CRD bounds replicas (MAX_REPLICAS) and the template's strings
 * (MAX_TEMPLATE_STRINGS), not their product.
 */
export const MAX_DEPLOYMENT_BYTES = 16 * 1024 * 1024;

/**
 * The replicas a deployment runs: as many as it asks, within MAX_DEPLOYMENT_BYTES of templates; and
 * why fewer, when fewer (its ReplicaFailure condition, reason ReplicasBounded).
 */
export function boundedReplicas(
  replicas: number,
  templateBytes: number,
): { replicas: number; bounded?: string } {
  const most = Math.floor(MAX_DEPLOYMENT_BYTES / Math.max(templateBytes, 1));
  if (replicas <= most) return { replicas };
  return {
    replicas: most,
    bounded:
      `${replicas} replicas of a ${templateBytes}-byte template exceed the ${MAX_DEPLOYMENT_BYTES} bytes ` +
      `of templates a deployment's instances may carry: ${most} run (a smaller template runs more)`,
  };
}

/** Berth's own RBAC refused a Pod or an Instance: its namespace was not opted in for workloads. */
export const workloadNamespaceHint = (e: { status: number; message: string }): string =>
  e.status === 403 && /cannot create resource "(pods|instances)"/.test(e.message)
    ? ' (let Berth run workloads in this namespace: berth manifests --workload-namespace, Helm workloads.namespaces)'
    : '';

export const instanceName = (deployment: string, ordinal: number): string => `${deployment}-${ordinal}`;

/**
 * The longest WorkloadDeployment name: an instance's name, `<name>-<ordinal>`, is the value of its
 * Pod's instance label, and a label value has at most 63 characters. Room is left for four-digit
 * ordinals, as before replicas were bounded to MAX_REPLICAS (999 at most): the documented bound,
 * which federation's names are made within, stays.
 */
export const MAX_DEPLOYMENT_NAME = 63 - instanceName('', 9999).length;

/** Why a WorkloadDeployment of this name can have no instances, if it cannot: its name is too long. */
export function deploymentNameProblem(name: string): string | undefined {
  if (name.length <= MAX_DEPLOYMENT_NAME) return undefined;
  return (
    `the WorkloadDeployment name ${name} is longer than ${MAX_DEPLOYMENT_NAME} characters: its instances ` +
    `(${instanceName(name, 0)} and on) label their Pods ${INSTANCE_LABEL}=<instance>, a value of at most 63`
  );
}

/** The label selector of a deployment's instances (status.selector, for the scale subresource). */
export const deploymentSelector = (deployment: string): string => `${DEPLOYMENT_LABEL}=${deployment}`;

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

const rank = (reason: string): number => {
  const i = (BLOCKING_REASONS as readonly string[]).indexOf(reason);
  return i < 0 ? BLOCKING_REASONS.length : i;
};

/** The worst of some blocking causes (BLOCKING_REASONS order; unknown reasons last), first on ties. */
export function worst<T extends { reason: string }>(causes: readonly T[]): T | undefined {
  let w: T | undefined;
  for (const c of causes) if (!w || rank(c.reason) < rank(w.reason)) w = c;
  return w;
}

// ---------------------------------------------------------------------------------------------
// The deployment plan

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

/** An Instance as the deployment plan sees it (the controller, and `berth plan` from its mirrors). */
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

export interface PlanInput {
  /** The deployment's name: one too long for its instances' names plans nothing (deploymentNameProblem). */
  name?: string;
  replicas: number;
  policy: 'OrderedReady' | 'Parallel';
  hash: string;
  instances: readonly InstanceState[];
}

export interface Plan {
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
export function plan(p: PlanInput): Plan {
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
  const result = (actions: Action[], waitingFor?: InstanceState): Plan => ({
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

// ---------------------------------------------------------------------------------------------
// Deployment status

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
 * Progressing is False when the step the plan waits on is blocked by a user-fixable cause (the
 * rollout stops; the old instances keep serving) or has not become Ready within the deadline.
 */
export function deploymentVerdict(
  p: PlanInput & { plan: Plan; progressDeadlineSeconds: number; now: number },
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

  const w = p.plan.waitingFor;
  const elapsed = w ? p.now - w.notReadySince : 0;
  const deadlineMs = p.progressDeadlineSeconds * 1000;
  let progressing: ConditionVerdict;
  let deadlineInMs: number | undefined;
  // A broken instance being replaced still shows its cause: the step waits for its deletion, not on it.
  if (w?.reason && !w.deleting && USER_FIXABLE.has(w.reason))
    progressing = {
      status: false,
      reason: w.reason,
      message: `${p.plan.drifted ? 'rollout' : 'scaling'} stopped at ${naming([w])}`,
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
      !p.plan.actions.length &&
      !w &&
      !p.plan.drifted &&
      live.length === p.replicas &&
      !p.instances.some((i) => i.deleting);
    progressing = settled
      ? { status: true, reason: 'NewTemplateAvailable', message: `template ${p.hash} is rolled out` }
      : p.plan.drifted
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

// ---------------------------------------------------------------------------------------------
// Instances and their Pods

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

/** An InstanceType as the controllers read it. */
export type InstanceTypeObject = KubeObject & { spec?: InstanceTypeSize };

/** The index of instances by the InstanceType they name: its changes resize them. */
export const byInstanceType = (i: { spec?: { template?: { instanceType?: string } } }): string[] =>
  i.spec?.template?.instanceType ? [i.spec.template.instanceType] : [];

/** An Instance as the controllers read it: from the apiserver, or (CachedInstance) from their cache. */
export interface InstanceObject<T extends SizedTemplate = InstanceTemplate> extends KubeObject {
  metadata: ObjectMeta;
  spec: { template: T; templateHash: string; ordinal: number };
  status?: InstanceStatus;
}

/** An Instance as its cache keeps it (slimInstance): its template only as far as it sizes it. */
export type CachedInstance = InstanceObject<SizedTemplate>;

/**
 * What the controllers, the metrics and the page read of an Instance: its identity, labels, owners
 * and deletion, its ordinal and template hash, what sizes it, and its status. The rest of the
 * template (images, commands, env: up to the apiserver's object size) and managedFields are not
 * kept, so a cache of many instances costs what they are, not what their templates hold; the
 * instance controller reads the whole Instance when it makes its Pod.
 */
export function slimInstance(o: KubeObject): CachedInstance {
  const i = o as InstanceObject;
  const m = i.metadata;
  const t = i.spec?.template;
  const meta: ObjectMeta = {
    name: m.name,
    namespace: m.namespace,
    uid: m.uid,
    resourceVersion: m.resourceVersion,
  };
  for (const k of [
    'generation',
    'creationTimestamp',
    'deletionTimestamp',
    'labels',
    'ownerReferences',
  ] as const)
    if (m[k] !== undefined) Object.assign(meta, { [k]: m[k] });
  return {
    apiVersion: i.apiVersion,
    kind: i.kind,
    metadata: meta,
    spec: {
      ordinal: i.spec?.ordinal,
      templateHash: i.spec?.templateHash,
      template: {
        ...(t?.instanceType ? { instanceType: t.instanceType } : {}),
        containers: (t?.containers ?? []).map((c) => ({
          name: c.name,
          ...(c.resources ? { resources: c.resources } : {}),
        })),
      },
    },
    ...(i.status ? { status: i.status } : {}),
  };
}

/** The informer request for the instances this part acts on (OWN_INSTANCES), slim: one cache for its controllers and the page. */
export const INSTANCE_CACHE = { ...OWN_INSTANCES, transform: { name: 'slim-instance', fn: slimInstance } };

/** The Pod an instance runs as: its template, sized, labelled, owned, gated until quota is granted. */
export function podManifest(
  inst: InstanceObject,
  owner: OwnerReference,
  size: Size,
  gate: boolean,
): KubeObject {
  const t = inst.spec.template;
  const labels = inst.metadata.labels ?? {};
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name: inst.metadata.name!,
      namespace: inst.metadata.namespace!,
      labels: {
        ...t.metadata?.labels,
        ...(labels[DEPLOYMENT_LABEL] ? { [DEPLOYMENT_LABEL]: labels[DEPLOYMENT_LABEL] } : {}),
        [ORDINAL_LABEL]: String(inst.spec.ordinal),
        [TEMPLATE_HASH_LABEL]: inst.spec.templateHash,
        [INSTANCE_LABEL]: inst.metadata.name!,
      },
      ...(t.metadata?.annotations ? { annotations: t.metadata.annotations } : {}),
      ownerReferences: [{ ...owner, controller: true, blockOwnerDeletion: true }],
    },
    spec: {
      containers: t.containers.map((c) => ({
        name: c.name,
        image: c.image,
        ...(c.command ? { command: c.command } : {}),
        ...(c.args ? { args: c.args } : {}),
        ...(c.env ? { env: c.env } : {}),
        ...(c.ports ? { ports: c.ports } : {}),
        ...(c.resources ? { resources: c.resources } : {}),
      })),
      ...(size.pod ? { resources: { requests: size.pod, limits: size.pod } } : {}),
      ...(gate ? { schedulingGates: [{ name: QUOTA_GATE }] } : {}),
      // The cell's namespace is not the Workload author's to hand credentials out of: only on request.
      automountServiceAccountToken: t.automountServiceAccountToken === true,
    },
  };
}

/** The Instance a deployment runs at `ordinal`, on its current template. */
export function instanceManifest(
  deployment: KubeObject & { metadata: ObjectMeta },
  owner: OwnerReference,
  template: InstanceTemplate,
  hash: string,
  ordinal: number,
): KubeObject {
  const name = deployment.metadata.name!;
  return {
    apiVersion: Instance.apiVersion,
    kind: Instance.kind,
    metadata: {
      name: instanceName(name, ordinal),
      namespace: deployment.metadata.namespace!,
      labels: { [DEPLOYMENT_LABEL]: name, [ORDINAL_LABEL]: String(ordinal), [TEMPLATE_HASH_LABEL]: hash },
      ownerReferences: [{ ...owner, controller: true, blockOwnerDeletion: true }],
    },
    spec: { template, templateHash: hash, ordinal },
  };
}

/** The controller owner reference of `obj` if it names `uid`. */
export const controlledBy = (obj: KubeObject, uid: string | undefined): boolean =>
  !!uid && (obj.metadata?.ownerReferences ?? []).some((o) => o.controller && o.uid === uid);
