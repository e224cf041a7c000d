// The NodeStartupGate CRD, from its zod schema (the API's constants and types are in types.ts).
import * as z from '../runtime/platform/zod.ts';
import { k8s } from '../runtime/api/crd.ts';
import { definePolicy, specColumn } from '../policy/crd.ts';
import { labelSelectorSchema } from '../policy/match/schema.ts';
import { validateLabelKey, validateLabelValue } from '../policy/match/selector.ts';
import {
  AUTOSCALER_STARTUP_PREFIX,
  EXEMPT_LABEL,
  NODE_STARTUP_GATE,
  type NodeStartupGateSpec,
} from './types.ts';

const qualified = (what: string) => (s: string, ctx: z.RefinementCtx) => {
  const problem = validateLabelKey(s);
  if (problem) ctx.addIssue({ code: 'custom', message: `${what} "${s}": ${problem}` });
};

export const podRequirement = k8s(
  z.object({
    namespace: z
      .string()
      .min(1)
      .max(63)
      .optional()
      .describe('Namespace of the pods; all namespaces when omitted (required with daemonSet).'),
    selector: labelSelectorSchema.optional().describe('The pods, by label.'),
    daemonSet: z.string().min(1).max(253).optional().describe('The pods of this DaemonSet, by name.'),
    readyAnnotation: z
      .string()
      .min(1)
      .max(317)
      .superRefine(qualified('readyAnnotation'))
      .optional()
      .describe('A pod carrying this annotation with the value "true" says it is done (see readiness).'),
    readiness: z
      .enum(['Ready', 'Annotation', 'Either'])
      .optional()
      .describe(
        'What says a pod is done. Ready: the pod is Ready (or Succeeded). Annotation: only readyAnnotation ' +
          '(for pods that are Ready before their work is). Either: one or the other. Default: Either with ' +
          'readyAnnotation, Ready without.',
      ),
  }),
  {
    'x-kubernetes-validations': [
      {
        rule: 'has(self.selector) != has(self.daemonSet)',
        message: 'set exactly one of selector or daemonSet',
      },
      { rule: '!has(self.daemonSet) || has(self.namespace)', message: 'daemonSet needs a namespace' },
      {
        rule: "!has(self.readiness) || (self.readiness == 'Ready') != has(self.readyAnnotation)",
        message:
          'readiness Annotation and Either need readyAnnotation; readiness Ready takes none (it would be ignored)',
      },
    ],
  },
);

export const taintSchema = k8s(
  z
    .object({
      key: z.string().min(1).max(317).superRefine(qualified('taint key')),
      value: z
        .string()
        .max(63)
        .superRefine((v, ctx) => {
          const problem = validateLabelValue(v);
          if (problem) ctx.addIssue({ code: 'custom', message: `taint value "${v}": ${problem}` });
        })
        .optional(),
      effect: z.enum(['NoSchedule', 'PreferNoSchedule', 'NoExecute']).default('NoSchedule'),
    })
    .describe(
      `The taint that holds a node. With the prefix ${AUTOSCALER_STARTUP_PREFIX} cluster-autoscaler ` +
        'knows it is temporary and keeps scaling up for pods that do not tolerate it. Immutable.',
    ),
  {
    'x-kubernetes-validations': [
      {
        rule: 'self == oldSelf',
        message: 'the taint is immutable: create a new gate (deleting this one releases its nodes)',
      },
    ],
  },
);

const nodeConditionRequirement = z.object({
  type: z.string().min(1).max(316),
  status: z.enum(['True', 'False', 'Unknown']).default('True'),
});

export const nodeStartupGateSpec = k8s(
  z.object({
    taint: taintSchema,
    nodeSelector: labelSelectorSchema
      .optional()
      .describe('The nodes the gate holds; all nodes when omitted.'),
    excludeNodeSelectors: z
      .array(labelSelectorSchema)
      .max(16)
      .optional()
      .describe(
        `Nodes matching any of these are never gated (a system pool, say); so are nodes labelled ${EXEMPT_LABEL}=true.`,
      ),
    requirements: k8s(
      z.object({
        pods: z
          .array(podRequirement)
          .max(16)
          .optional()
          .describe(
            'On the node, at least one such pod exists and every one is Ready (or Succeeded, or carries the ready annotation).',
          ),
        nodeConditions: z
          .array(nodeConditionRequirement)
          .max(16)
          .optional()
          .describe('Node conditions that must all have the given status.'),
      }),
      {
        'x-kubernetes-validations': [
          {
            rule: '(has(self.pods) && size(self.pods) > 0) || (has(self.nodeConditions) && size(self.nodeConditions) > 0)',
            message: 'a gate needs at least one pod or node condition requirement',
          },
        ],
      },
    ).describe('What must hold, all of it, before the taint comes off.'),
    after: z
      .array(z.string().min(1).max(253))
      .max(16)
      .optional()
      .describe(
        'Gates that must release a node before this gate looks at its requirements: the taints can all go on ' +
          'at admission and come off in this order. A cycle makes the gates in it Invalid; a name no gate has ' +
          'holds nothing (condition AfterGatesFound False).',
      ),
    nodeNamePods: z
      .enum(['Reject', 'Warn'])
      .default('Reject')
      .describe(
        'A pod created with spec.nodeName on a node the gate holds skips the scheduler and its taint. Reject: ' +
          'admission refuses it unless it tolerates the taint or is a required pod (DaemonSet, mirror and ' +
          'kube-system pods always pass). Warn: admitted with a warning and a Warning event on the node.',
      ),
    minHoldSeconds: z
      .number()
      .int()
      .min(0)
      .max(86_400)
      .default(0)
      .describe('The taint stays at least this long after it was put on, even when everything holds.'),
    timeout: z
      .object({
        seconds: z.number().int().min(1).max(604_800),
        outcome: z
          .enum(['Release', 'KeepTainted'])
          .describe('Release: take the taint off anyway (Warning). KeepTainted: keep holding (Warning).'),
      })
      .optional()
      .describe('How long a node may be held; no limit when omitted.'),
    mode: z
      .enum(['BootstrapOnly', 'Continuous'])
      .default('BootstrapOnly')
      .describe(
        'BootstrapOnly: a released node is never gated again. Continuous: a released node is tainted again when a requirement fails.',
      ),
    completionAnnotation: z
      .string()
      .min(1)
      .max(317)
      .superRefine(qualified('completionAnnotation'))
      .optional()
      .describe(
        'Stamped with the time a node was first released; default <gate name>.gates.berth.dev/completed-at.',
      ),
    backfill: z
      .boolean()
      .default(false)
      .describe(
        'Also gate nodes that existed before the gate, while they run nothing but DaemonSet pods. Off by default.',
      ),
    dryRun: z
      .boolean()
      .default(false)
      .describe('Evaluate and report only: no node is tainted (taints the gate holds are released).'),
  }),
  {
    'x-kubernetes-validations': [
      {
        rule: 'has(self.completionAnnotation) == has(oldSelf.completionAnnotation) && (!has(self.completionAnnotation) || self.completionAnnotation == oldSelf.completionAnnotation)',
        message: 'completionAnnotation is immutable',
      },
      {
        rule: '!has(self.timeout) || self.timeout.seconds > self.minHoldSeconds',
        message: 'timeout.seconds must be longer than minHoldSeconds',
      },
    ],
  },
);

export const NodeStartupGate = definePolicy({
  ref: NODE_STARTUP_GATE,
  shortNames: ['nsg'],
  spec: nodeStartupGateSpec,
  counts: {
    nodes: 'Nodes the gate selects.',
    gated: 'Selected nodes the gate holds now.',
    released: 'Selected nodes the gate does not hold.',
    timedOut: 'Nodes held past the timeout, or released by it, until their requirements hold.',
    wouldGate: 'Dry run: nodes the gate would hold.',
    startedEarly:
      'Pods no gate requires that run on nodes this gate holds (started before the node was released).',
  },
  printerColumns: [
    specColumn('Taint', 'taint.key'),
    specColumn('Mode', 'mode'),
    'nodes',
    'gated',
    'released',
    'timedOut',
  ],
});

/** The taint a record holds (key=value:Effect, as formatTaint writes it), if it is one. */
export function taintOfRecord(record: string): NodeStartupGateSpec['taint'] | undefined {
  const colon = record.lastIndexOf(':');
  const [key, value] = record.slice(0, colon).split(/=(.*)/s);
  const parsed = taintSchema.safeParse({ key, ...(value ? { value } : {}), effect: record.slice(colon + 1) });
  return colon > 0 && parsed.success ? parsed.data : undefined;
}
