// The WorkloadDeployment, Instance, Quota and InstanceType CRDs, from their zod schemas (the API's
// constants and types are in types.ts).
import * as z from '../runtime/platform/zod.ts';
import { AGE_COLUMN, column, conditionColumn, k8s, type PrinterColumn } from '../runtime/api/crd.ts';
import { defineBerthResource, observedStatus } from '../policy/crd.ts';
import { DNS1123_LABEL } from '../runtime/api/meta.ts';
import {
  INSTANCE,
  INSTANCE_TYPE,
  MAX_REPLICAS,
  MAX_TEMPLATE_STRINGS,
  QUOTA,
  WORKLOAD_DEPLOYMENT,
} from './types.ts';

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

export const workloadDeploymentSpec = z.object({
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

export const workloadDeploymentStatus = observedStatus({
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
  ref: WORKLOAD_DEPLOYMENT,
  shortNames: ['wd'],
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

export const instanceStatus = observedStatus({
  observedTemplateHash: z.string().optional().describe('The template hash of the Pod that runs now.'),
  podName: z.string().optional(),
});

export const Instance = defineBerthResource({
  ref: INSTANCE,
  shortNames: ['inst'],
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

const quotaSpec = z.object({
  instances: z.number().int().min(0).optional().describe('Instances granted at once; no limit when omitted.'),
  cpu: quantity.optional().describe('vCPU granted at once (sum over instances); no limit when omitted.'),
  memory: quantity.optional().describe('Memory granted at once; no limit when omitted.'),
});

/** One granted claim: the ledger entry that counts against the budget until its instance is gone. */
export const claim = z.object({
  /** The cluster the instance lives in ("local" in a single cluster; a cell's name in part 2). */
  cluster: z.string().max(63),
  name: z.string().max(253),
  uid: z.string().max(64),
  /** Millicores and bytes, as counted against the budget. */
  milliCPU: z.number().int().min(0),
  memoryBytes: z.number().int().min(0),
  grantedAt: z.string(),
});

export const quotaStatus = observedStatus({
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

export const Quota = defineBerthResource({
  ref: QUOTA,
  shortNames: ['bquota'],
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
  ref: INSTANCE_TYPE,
  shortNames: ['itype'],
  spec: z.object({ cpu: quantity, memory: quantity }),
  printerColumns: [column('CPU', '.spec.cpu'), column('Memory', '.spec.memory'), AGE_COLUMN],
});
