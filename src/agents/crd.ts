// The AgentPlacement CRD, from its zod schema (the API's constants and types are in types.ts).
import * as z from '../runtime/platform/zod.ts';
import { column, k8s } from '../runtime/api/crd.ts';
import { definePolicy, specColumn } from '../policy/crd.ts';
import { labelSelectorSchema } from '../policy/match/schema.ts';
import { AGENT_PLACEMENT } from './types.ts';

/** CEL: the selector at `s` requires some label to be present (matchLabels, or an In or Exists expression). */
const celRequiresLabel = (s: string) =>
  `((has(${s}.matchLabels) && size(${s}.matchLabels) > 0) || ` +
  `(has(${s}.matchExpressions) && ${s}.matchExpressions.exists(e, e.operator == 'In' || e.operator == 'Exists')))`;

export const agentPlacementSpec = k8s(
  z.object({
    namespaceSelector: labelSelectorSchema
      .optional()
      .describe('Namespaces whose pods count; all namespaces when omitted.'),
    podSelector: labelSelectorSchema.describe('The workload pods that need the agent on their node.'),
    owner: k8s(
      z.object({
        uidLabel: z
          .string()
          .min(1)
          .optional()
          .describe('A pod label that holds the owner (pool) UID, as example.com/pool-uid.'),
        controllerRef: z
          .boolean()
          .optional()
          .describe(
            "Follow the pods' controller owner references to the top owner (a Deployment, a CronJob, ...).",
          ),
        apiVersion: z
          .string()
          .optional()
          .describe('With uidLabel: the apiVersion of the owner kind, for the finalizer.'),
        kind: z.string().optional().describe('With uidLabel: the kind of the owner, for the finalizer.'),
      }),
      {
        'x-kubernetes-validations': [
          {
            rule: 'has(self.uidLabel) != (has(self.controllerRef) && self.controllerRef)',
            message: 'set exactly one of owner.uidLabel or owner.controllerRef: true',
          },
        ],
      },
    ),
    nodeLabel: z
      .object({ key: z.string().min(1).max(317), value: z.string().max(63).default('true') })
      .describe('The label a node carries while it hosts at least one counted pod.'),
    claimAnnotationPrefix: z
      .string()
      .min(1)
      .max(253)
      .describe('Each owner with pods on a node claims it with the annotation <prefix><owner UID>.'),
    finalizer: z
      .object({ name: z.string().min(1).max(317) })
      .optional()
      .describe(
        "Opt-in: this finalizer on the owner holds its deletion until no node carries the owner's claim.",
      ),
    waitForAgent: z
      .object({
        port: z.number().int().min(1).max(65535),
        image: z.string().min(1).default('busybox:1.36'),
        timeoutSeconds: z.number().int().min(0).default(0).describe('0 waits forever.'),
      })
      .optional()
      .describe(
        'Opt-in: a webhook adds an init container that waits until the agent answers on hostIP:port.',
      ),
    acknowledgeAllPods: z
      .boolean()
      .optional()
      .describe(
        'Required when podSelector requires no label (no matchLabels, no In or Exists expression) and ' +
          'either no namespaceSelector requires one or waitForAgent is set: such a placement can select every pod ' +
          'of the cluster, or change every new pod of its namespaces.',
      ),
  }),
  {
    'x-kubernetes-validations': [
      {
        // Mirrored by needsAcknowledgement() for objects stored before this rule, and for dry runs.
        rule:
          '(has(self.acknowledgeAllPods) && self.acknowledgeAllPods) || ' +
          `${celRequiresLabel('self.podSelector')} || ` +
          `(!has(self.waitForAgent) && has(self.namespaceSelector) && ${celRequiresLabel('self.namespaceSelector')})`,
        message:
          'podSelector requires no label, so this placement selects every pod (of the cluster without a namespaceSelector that ' +
          'requires a label; every new pod of its namespaces with waitForAgent): set acknowledgeAllPods: true if that is meant',
      },
      {
        rule: '!has(self.finalizer) || (has(self.owner.apiVersion) && has(self.owner.kind))',
        message: 'a finalizer needs owner.apiVersion and owner.kind: the kind that carries it',
      },
    ],
  },
);
export const AgentPlacement = definePolicy({
  ref: AGENT_PLACEMENT,
  shortNames: ['ap'],
  spec: agentPlacementSpec,
  // Placements have few columns of their own: why one is not Ready fits beside them.
  showReason: true,
  counts: {
    labelledNodes: 'Nodes carrying the label.',
    claims: 'Claim annotations across all nodes.',
    owners: 'Distinct owners with pods on some node.',
  },
  printerColumns: [
    specColumn('Label', 'nodeLabel.key'),
    column('Nodes', '.status.labelledNodes', 'integer'),
    'claims',
  ],
});
