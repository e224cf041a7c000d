// The NodeLabelRule CRD, from its zod schema (the API's constants and types are in types.ts).
import * as z from '../runtime/platform/zod.ts';
import { k8s } from '../runtime/api/crd.ts';
import { definePolicy } from '../policy/crd.ts';
import { OPERATORS } from '../policy/match/requirement.ts';
import { NODE_FIELDS, NODE_LABEL_RULE, type NodeField } from './types.ts';

export const matchTerm = k8s(
  z.object({
    label: z.string().min(1).max(317).optional().describe('Match the value of this node label.'),
    annotation: z.string().min(1).max(317).optional().describe('Match the value of this node annotation.'),
    field: z
      .enum(Object.keys(NODE_FIELDS) as [NodeField, ...NodeField[]])
      .optional()
      .describe('Match this well-known node field (architecture is status.nodeInfo.architecture).'),
    operator: z
      .enum(OPERATORS)
      .describe(
        'In / NotIn: the value is (not) one of values. Exists / DoesNotExist: the key is (not) present. ' +
          'Gt / Lt: the value, an integer, is greater / less than the single value. InRegexp: the value matches one of the regular expressions (RE2 syntax) in values. ' +
          'Gt, Lt and InRegexp never hold for a value longer than 1024 characters.',
      ),
    values: z.array(z.string().max(1024)).max(64).optional(),
  }),
  {
    'x-kubernetes-validations': [
      {
        rule: '[has(self.label), has(self.annotation), has(self.field)].filter(x, x).size() == 1',
        message: 'a term names exactly one of label, annotation or field',
      },
      {
        rule: "self.operator in ['Exists', 'DoesNotExist'] ? !has(self.values) || size(self.values) == 0 : has(self.values) && size(self.values) > 0",
        message: 'Exists and DoesNotExist take no values; the other operators need at least one',
      },
      {
        rule: "!(self.operator in ['Gt', 'Lt']) || (size(self.values) == 1 && self.values[0].matches('^-?[0-9]+$'))",
        message: 'Gt and Lt take exactly one integer value',
      },
    ],
  },
);
export const taint = z.object({
  key: z.string().min(1).max(317),
  value: z.string().max(63).optional(),
  effect: z.enum(['NoSchedule', 'PreferNoSchedule', 'NoExecute']),
});
export const evictOnRemoval = z
  .object({
    mode: z
      .enum(['Evict', 'DryRun'])
      .optional()
      .describe(
        'Evict (the default) evicts through the Eviction API; DryRun only reports what it would evict.',
      ),
    afterSeconds: z
      .number()
      .int()
      .min(0)
      .max(86400)
      .optional()
      .describe(
        'How long the label must stay gone before its pods are evicted (default 60): a flapping input kills no pod.',
      ),
    maxPerMinute: z
      .number()
      .int()
      .min(1)
      .max(10000)
      .optional()
      .describe(
        'Evictions this rule asks for per minute at most (default 10); berth run caps the cluster too.',
      ),
  })
  .describe(
    'Opt-in: evict the pods whose nodeSelector or required node affinity no longer fits a node because a label this rule derived went away from it. ' +
      'Never DaemonSet, mirror or static pods, pods in kube-system or Berth\'s namespace, or pods annotated berth.dev/evict-on-removal: "false". PodDisruptionBudgets hold.',
  );
export const nodeLabelRuleSpec = k8s(
  z.object({
    match: z
      .object({
        allOf: z.array(matchTerm).max(32).optional().describe('Every term must match.'),
        anyOf: z
          .array(matchTerm)
          .max(64)
          .optional()
          .describe('At least one term must match (when any are given).'),
      })
      .describe('Which nodes the rule applies to: all of allOf and, if given, any of anyOf.'),
    labels: z
      .record(z.string(), z.string().max(1024))
      .optional()
      .describe(
        'Labels to set on matching nodes. Values may use templates: {{ .match.key }} and {{ .match.value }} of the first matching anyOf term (allOf without anyOf), ' +
          '{{ label "key" }}, {{ annotation "key" }}, {{ field "architecture" }}.',
      ),
    annotations: z
      .record(z.string(), z.string().max(4096))
      .optional()
      .describe('Annotations to set on matching nodes (templates as for labels).'),
    taints: z
      .array(taint)
      .max(16)
      .optional()
      .describe('Taints to set on matching nodes. Opt-in: a rule without taints never taints.'),
    acknowledgeNoExecute: z
      .boolean()
      .optional()
      .describe(
        'Must be true for a rule with a NoExecute taint, which evicts every pod that does not tolerate it from each matching node (berth rules test counts them).',
      ),
    evictOnRemoval: evictOnRemoval.optional(),
    acknowledgeKubeletInputs: z
      .boolean()
      .optional()
      .describe(
        'Must be true for a rule that sets a node-restriction.kubernetes.io/ label from an input a kubelet may set on its own Node (most labels, every annotation, status fields): the node could then give itself the label.',
      ),
  }),
  {
    'x-kubernetes-validations': [
      {
        rule: '(has(self.match.allOf) && size(self.match.allOf) > 0) || (has(self.match.anyOf) && size(self.match.anyOf) > 0)',
        message: 'match needs at least one term in allOf or anyOf',
      },
      {
        rule: '(has(self.labels) && size(self.labels) > 0) || (has(self.annotations) && size(self.annotations) > 0) || (has(self.taints) && size(self.taints) > 0)',
        message: 'a rule sets at least one label, annotation or taint',
      },
      {
        rule: "!has(self.taints) || !self.taints.exists(t, t.effect == 'NoExecute') || (has(self.acknowledgeNoExecute) && self.acknowledgeNoExecute)",
        message:
          'a NoExecute taint evicts every pod that does not tolerate it from each matching node: set acknowledgeNoExecute: true to mean it',
      },
    ],
  },
);

export const NodeLabelRule = definePolicy({
  ref: NODE_LABEL_RULE,
  shortNames: ['nlr'],
  spec: nodeLabelRuleSpec,
  counts: {
    matchedNodes: 'Nodes the rule matches.',
    appliedNodes: 'Matched nodes that carry every output of the rule.',
  },
  printerColumns: [
    {
      name: 'Matched',
      type: 'integer',
      jsonPath: '.status.matchedNodes',
      description: 'Nodes the rule matches',
    },
    {
      name: 'Applied',
      type: 'integer',
      jsonPath: '.status.appliedNodes',
      description: 'Matched nodes carrying its outputs',
    },
  ],
});
