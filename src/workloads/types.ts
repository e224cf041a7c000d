// The API of workloads in a cell (federated placement, part 1): a WorkloadDeployment runs its template
// as Instances named by ordinal, each realised as one Pod; a namespace's Quota budgets instances, vCPU
// and memory, and an InstanceType sizes an instance whose containers do not say their resources.
// Part 2's management plane writes WorkloadDeployments into cells; a single-cluster user writes them.
// Their CRDs, from zod schemas, are crd.ts: what reads only these (every command's capability list)
// loads no zod.
import type * as z from '../runtime/platform/zod.ts';
import type { ObservedStatus } from '../policy/crd.ts';
import { berthKind } from '../policy/kinds.ts';
import type {
  claim,
  instanceStatus,
  instanceTemplate,
  quotaStatus,
  workloadDeploymentSpec,
  workloadDeploymentStatus,
} from './crd.ts';

/** Field managers: one per controller, so no controller ever takes another's fields. */
export const DEPLOYMENT_MANAGER = 'berth-workloads';
export const INSTANCE_MANAGER = 'berth-instances';
export const QUOTA_MANAGER = 'berth-quota';

/** The scheduling gate an instance's Pod carries until its quota claim is granted. */
export const QUOTA_GATE = 'workloads.berth.dev/quota';
/** On Instances and their Pods: the WorkloadDeployment they belong to. */
export const DEPLOYMENT_LABEL = 'workloads.berth.dev/deployment';
/** On Instances and their Pods: the ordinal (0, 1, ...), also the name's suffix. */
export const ORDINAL_LABEL = 'workloads.berth.dev/ordinal';
/** On Instances and their Pods: the hash of the template they were made from. */
export const TEMPLATE_HASH_LABEL = 'workloads.berth.dev/template-hash';
/** On Pods: the Instance that owns them (also their controller owner reference). */
export const INSTANCE_LABEL = 'workloads.berth.dev/instance';
/**
 * On an Instance that is a read-only copy of one in another cluster (federation's mirrors on a
 * management plane). The controllers of this part never see one (OWN_INSTANCES), so a mirror is
 * never run, rolled out or counted against a Quota, even with them in the same cluster.
 */
export const MIRROR_LABEL = 'workloads.berth.dev/mirror';
/** On a mirror (written by federation's mirror controller): the cell its Instance runs in. */
export const MIRROR_CELL_LABEL = 'federation.berth.dev/cell';
/** On a mirror: the name of its Instance in the cell (a name may be longer than a label value). */
export const SOURCE_ANNOTATION = 'federation.berth.dev/instance';
/** On a mirror: the uid of its Instance in the cell. */
export const SOURCE_UID_ANNOTATION = 'federation.berth.dev/instance-uid';
/** The Instances this part's controllers act on and count: all but mirrors. One informer, shared. */
export const OWN_INSTANCES = { labelSelector: `!${MIRROR_LABEL}` };

/**
 * The most replicas a WorkloadDeployment has (its ordinals have at most three digits): each is an
 * Instance, a full copy of the template, so replicas multiply what one object writes (issue 59).
 */
export const MAX_REPLICAS = 1000;

/** The most characters of commands, args and env values a template's containers have in all. */
export const MAX_TEMPLATE_STRINGS = 64 * 1024;

export const WORKLOAD_DEPLOYMENT = berthKind('WorkloadDeployment', 'Namespaced');
export const INSTANCE = berthKind('Instance', 'Namespaced');
export const QUOTA = berthKind('Quota', 'Namespaced');
export const INSTANCE_TYPE = berthKind('InstanceType', 'Cluster');

export type InstanceTemplate = z.infer<typeof instanceTemplate>;
export type WorkloadDeploymentSpec = z.infer<typeof workloadDeploymentSpec>;
export type WorkloadDeploymentStatus = ObservedStatus<typeof workloadDeploymentStatus>;
export type InstanceStatus = ObservedStatus<typeof instanceStatus>;
export type QuotaClaim = z.infer<typeof claim>;
export type QuotaStatus = ObservedStatus<typeof quotaStatus>;

/**
 * An Instance's conditions are Ready (serving and nothing blocks it), Available, Programmed and
 * QuotaGranted. Why an instance is not Ready, worst first (Ready's reason is the worst that holds):
 * a cause the user can fix outranks a transient one. The order is the rollup order (Instance →
 * WorkloadDeployment).
 */
export const BLOCKING_REASONS = [
  'ConfigurationError', // a missing InstanceType, a bad env reference, CreateContainerConfigError
  'ImageUnavailable', // ErrImagePull, ImagePullBackOff, InvalidImageName
  'InstanceCrashing', // CrashLoopBackOff, repeated restarts
  'QuotaExceeded', // the namespace's Quota has no room for it
  'Unschedulable', // no node fits the Pod
  'QuotaBackendUnavailable', // the quota controller cannot reach the cluster that holds the Quota
  'PendingEvaluation', // the quota controller has not looked at it yet
  'Provisioning', // Pod being created, scheduled, started
] as const;
export type BlockingReason = (typeof BLOCKING_REASONS)[number];

/** QuotaGranted condition reasons (the seed's; ConfigurationError: the instance has no size to count). */
export type QuotaReason =
  | 'PendingEvaluation'
  | 'QuotaAvailable'
  | 'NoQuota'
  | 'QuotaExceeded'
  | 'QuotaBackendUnavailable'
  | 'ConfigurationError';
