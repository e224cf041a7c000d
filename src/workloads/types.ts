// The API of workloads in a cell (federated placement, part 1): a WorkloadDeployment runs its template
// as Instances named by ordinal, each realised as one Pod; a namespace's Quota budgets instances, vCPU
// and memory, and an InstanceType sizes an instance whose containers do not say their resources.
// Part 2's management plane writes WorkloadDeployments into cells; a single-cluster user writes them.
import { z } from 'zod';
import { AGE_COLUMN, column, conditionColumn, k8s, type PrinterColumn } from '../runtime/api/crd.ts';
import { defineBerthResource, observedStatus, type ObservedStatus } from '../policy/crd.ts';
import { DNS1123_LABEL } from '../runtime/api/meta.ts';

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
const strings = (list: string, of: string) => `(has(c.${list}) ? c.${list}.map(x, size(${of})).sum() : 0)`;

// Kubernetes quantities as users write them ("500m", "2", "2Gi"); parsed by decide.ts.
const quantity = z
  .string()
  .max(32)
  .regex(/^[0-9]+(\.[0-9]+)?(m|k|M|G|T|Ki|Mi|Gi|Ti)?$/, 'a quantity such as 500m, 2, 512Mi or 2Gi');
const resourceList = z.object({ cpu: quantity.optional(), memory: quantity.optional() });
const dnsLabel = z.string().min(1).max(63).regex(DNS1123_LABEL, 'a DNS label');

const container = z.object({
  name: dnsLabel,
  image: z.string().min(1).max(512),
  command: z.array(z.string().max(4096)).max(64).optional(),
  args: z.array(z.string().max(4096)).max(256).optional(),
  env: z
    .array(z.object({ name: z.string().min(1).max(256), value: z.string().max(32768).optional() }))
    .max(128)
    .optional(),
  ports: z
    .array(
      z.object({
        name: z.string().max(15).optional(),
        containerPort: z.number().int().min(1).max(65535),
        protocol: z.enum(['TCP', 'UDP', 'SCTP']).default('TCP'),
      }),
    )
    .max(64)
    .optional(),
  resources: z
    .object({ requests: resourceList.optional(), limits: resourceList.optional() })
    .optional()
    .describe('Explicit resources take precedence over the instance type, for the pod and for quota.'),
});

/** What every instance of a deployment runs; its hash names the revision. */
export const instanceTemplate = k8s(
  z.object({
    metadata: z
      .object({
        labels: z.record(z.string(), z.string()).optional(),
        annotations: z.record(z.string(), z.string()).optional(),
      })
      .optional()
      .describe(
        "Copied onto each instance's Pod; changing one (a restartedAt annotation) rolls the instances.",
      ),
    instanceType: dnsLabel
      .optional()
      .describe('An InstanceType by name (d1-standard-2): sizes the instance for the Pod and for quota.'),
    containers: z.array(container).min(1).max(16),
    automountServiceAccountToken: z
      .boolean()
      .optional()
      .describe(
        "Mounts the token of the namespace's default ServiceAccount into each instance's Pod. Absent or false: none is mounted, so an instance reaches the cell's API only if it asks.",
      ),
  }),
  {
    'x-kubernetes-validations': [
      {
        rule: 'self.containers.all(c, self.containers.exists_one(d, d.name == c.name))',
        message: 'container names must be unique',
      },
      {
        rule:
          `self.containers.map(c, ${strings('command', 'x')} + ${strings('args', 'x')} + ` +
          `${strings('env', "has(x.value) ? x.value : ''")}).sum() <= ${MAX_TEMPLATE_STRINGS}`,
        message: `the containers' commands, args and env values have more than ${MAX_TEMPLATE_STRINGS} characters in all`,
      },
    ],
  },
);
export type InstanceTemplate = z.infer<typeof instanceTemplate>;

const workloadDeploymentSpec = z.object({
  workloadRef: z
    .object({
      name: z.string().min(1).max(253),
      uid: z.string().max(64).optional(),
      templateHash: z.string().max(64).optional(),
    })
    .optional()
    .describe(
      'The Workload this deployment was fanned out from (part 2 sets it; absent when written by hand).',
    ),
  placement: z.string().max(63).optional().describe("The Workload's placement this deployment serves."),
  template: instanceTemplate,
  replicas: z.number().int().min(0).max(MAX_REPLICAS).default(1),
  instanceManagementPolicy: z
    .enum(['OrderedReady', 'Parallel'])
    .default('OrderedReady')
    .describe(
      'OrderedReady: scale one instance at a time by ordinal, each after the one before is Ready (as a ' +
        "StatefulSet's OrderedReady). Parallel: create and delete all at once. Rollouts are one at a time either way.",
    ),
  progressDeadlineSeconds: z
    .number()
    .int()
    .min(1)
    .max(86400)
    .default(600)
    .describe('A rollout step not Ready within this long sets Progressing=False (ProgressDeadlineExceeded).'),
});
export type WorkloadDeploymentSpec = z.infer<typeof workloadDeploymentSpec>;

const workloadDeploymentStatus = observedStatus({
  replicas: z.number().int().optional().describe('Instances that exist.'),
  currentReplicas: z.number().int().optional().describe('Instances whose Pod is programmed (created).'),
  readyReplicas: z.number().int().optional(),
  availableReplicas: z.number().int().optional(),
  updatedReplicas: z
    .number()
    .int()
    .optional()
    .describe('Instances on the current template hash, ready or not (dips during a rollout).'),
  desiredReplicas: z.number().int().optional(),
  templateHash: z.string().optional().describe('The hash of the current template.'),
  selector: z.string().optional().describe('Label selector of its instances (for the scale subresource).'),
});
export type WorkloadDeploymentStatus = ObservedStatus<typeof workloadDeploymentStatus>;

/** As `kubectl get deployment`: ready, desired, up to date, available, age; `desired` is where it is read. */
export const replicaColumns = (desired: string): PrinterColumn[] => [
  column('Ready', '.status.readyReplicas', 'integer'),
  column('Desired', desired, 'integer'),
  column('Up-to-date', '.status.updatedReplicas', 'integer'),
  conditionColumn('Available', 'Available'),
  conditionColumn('Reason', 'Available', 'reason'),
  AGE_COLUMN,
];

export const WorkloadDeployment = defineBerthResource({
  kind: 'WorkloadDeployment',
  shortNames: ['wd'],
  scope: 'Namespaced',
  spec: workloadDeploymentSpec,
  status: workloadDeploymentStatus,
  // `kubectl scale wd/x --replicas=5`, and autoscalers.
  scale: {
    specReplicasPath: '.spec.replicas',
    statusReplicasPath: '.status.replicas',
    labelSelectorPath: '.status.selector',
  },
  printerColumns: replicaColumns('.spec.replicas'),
});

const instanceSpec = z.object({
  template: instanceTemplate,
  templateHash: z.string().min(1).max(64),
  ordinal: z.number().int().min(0),
});

const instanceStatus = observedStatus({
  observedTemplateHash: z.string().optional().describe('The template hash of the Pod that runs now.'),
  podName: z.string().optional(),
});
export type InstanceStatus = ObservedStatus<typeof instanceStatus>;

export const Instance = defineBerthResource({
  kind: 'Instance',
  shortNames: ['inst'],
  scope: 'Namespaced',
  spec: instanceSpec,
  status: instanceStatus,
  printerColumns: [
    conditionColumn('Ready', 'Ready'),
    conditionColumn('Reason', 'Ready', 'reason'),
    conditionColumn('Quota', 'QuotaGranted', 'reason'),
    { name: 'Hash', type: 'string', jsonPath: '.spec.templateHash', priority: 1 },
    AGE_COLUMN,
  ],
});

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

const quotaSpec = z.object({
  instances: z.number().int().min(0).optional().describe('Instances granted at once; no limit when omitted.'),
  cpu: quantity.optional().describe('vCPU granted at once (sum over instances); no limit when omitted.'),
  memory: quantity.optional().describe('Memory granted at once; no limit when omitted.'),
});

/** One granted claim: the ledger entry that counts against the budget until its instance is gone. */
const claim = z.object({
  /** The cluster the instance lives in ("local" in a single cluster; a cell's name in part 2). */
  cluster: z.string().max(63),
  name: z.string().max(253),
  uid: z.string().max(64),
  /** Millicores and bytes, as counted against the budget. */
  milliCPU: z.number().int().min(0),
  memoryBytes: z.number().int().min(0),
  grantedAt: z.string(),
});
export type QuotaClaim = z.infer<typeof claim>;

const quotaStatus = observedStatus({
  used: z
    .object({ instances: z.number().int(), cpu: z.string(), memory: z.string() })
    .optional()
    .describe('What the granted claims add up to.'),
  waiting: z.number().int().optional().describe('Instances waiting for room.'),
  // Atomic: only the quota controller writes it, whole, by PUT with the resourceVersion read; as a
  // list-map the apiserver would track every claim in managedFields, doubling each ledger write and
  // every watch event of it in a namespace of a thousand instances.
  claims: k8s(z.array(claim).optional(), { 'x-kubernetes-list-type': 'atomic' }).describe(
    'The granted claims: the ledger, written with optimistic concurrency so nothing is granted twice.',
  ),
});
export type QuotaStatus = ObservedStatus<typeof quotaStatus>;

export const Quota = defineBerthResource({
  kind: 'Quota',
  shortNames: ['bquota'],
  scope: 'Namespaced',
  spec: quotaSpec,
  status: quotaStatus,
  printerColumns: [
    column('Instances', '.status.used.instances', 'integer'),
    column('Budget', '.spec.instances', 'integer'),
    column('CPU', '.status.used.cpu'),
    column('Memory', '.status.used.memory'),
    column('Waiting', '.status.waiting', 'integer'),
    AGE_COLUMN,
  ],
});

export const InstanceType = defineBerthResource({
  kind: 'InstanceType',
  shortNames: ['itype'],
  scope: 'Cluster',
  spec: z.object({ cpu: quantity, memory: quantity }),
  printerColumns: [column('CPU', '.spec.cpu'), column('Memory', '.spec.memory'), AGE_COLUMN],
});
