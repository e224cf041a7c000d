// Labels under node-restriction.kubernetes.io/ are the ones the NodeRestriction admission plugin
// keeps a kubelet from setting on its own Node, so that a workload may trust them to isolate it
// (https://kubernetes.io/docs/reference/access-authn-authz/admission-controllers/#noderestriction).
// A rule that derives one from what a kubelet does set would hand that choice back to the node.
import { quote } from '../policy/text.ts';
import { subjectOf, templateReads } from './match.ts';
import type { Rule } from './types.ts';

export const NODE_RESTRICTION_PREFIX = 'node-restriction.kubernetes.io/';

// What NodeRestriction lets a kubelet set under kubernetes.io and k8s.io (k8s.io/kubelet's
// IsKubeletLabel): these labels and these domains with their subdomains. Any other domain is free.
const KUBELET_LABELS = new Set([
  'kubernetes.io/hostname',
  'kubernetes.io/arch',
  'kubernetes.io/os',
  'beta.kubernetes.io/arch',
  'beta.kubernetes.io/os',
  'beta.kubernetes.io/instance-type',
  'node.kubernetes.io/instance-type',
  'topology.kubernetes.io/region',
  'topology.kubernetes.io/zone',
  'failure-domain.beta.kubernetes.io/region',
  'failure-domain.beta.kubernetes.io/zone',
]);
const KUBELET_DOMAINS = ['kubelet.kubernetes.io', 'node.kubernetes.io'];
const KUBERNETES_DOMAIN = /(^|\.)(kubernetes\.io|k8s\.io)$/;

/** Whether a kubelet may set this label on its own Node under NodeRestriction. */
export function kubeletMaySet(label: string): boolean {
  const slash = label.indexOf('/');
  const domain = slash < 0 ? '' : label.slice(0, slash);
  if (!KUBERNETES_DOMAIN.test(domain)) return true;
  return KUBELET_LABELS.has(label) || KUBELET_DOMAINS.some((d) => domain === d || domain.endsWith(`.${d}`));
}

/**
 * What a node's kubelet controls of a rule's inputs: labels it may set on itself, every annotation
 * (NodeRestriction leaves them to it) and every field but the name (status.nodeInfo is its own
 * report; the name is its credential's, system:node:<name>). As `label "k"`, `field architecture`.
 */
export function kubeletInputs(rule: Rule): string[] {
  const reads = [
    ...[...rule.allOf, ...rule.anyOf].map(subjectOf),
    ...[...Object.values(rule.labels), ...Object.values(rule.annotations)].flatMap(templateReads),
  ];
  const own = reads.filter(
    (r) => r.kind === 'annotation' || (r.kind === 'field' ? r.key !== 'name' : kubeletMaySet(r.key)),
  );
  return [...new Set(own.map((r) => `${r.kind} ${r.kind === 'field' ? r.key : quote(r.key)}`))];
}

/**
 * Why a rule may not set node-restriction labels: one derived from an input the kubelet controls,
 * unless the rule says it means it (`acknowledged`; a rule file cannot).
 */
export function nodeRestrictionErrors(rule: Rule, acknowledged: boolean, how: string): string[] {
  const outputs = Object.keys(rule.labels).filter((k) => k.startsWith(NODE_RESTRICTION_PREFIX));
  const inputs = outputs.length && !acknowledged ? kubeletInputs(rule) : [];
  if (!inputs.length) return [];
  return [
    `${outputs.map((k) => `the label ${quote(k)}`).join(', ')} is one a kubelet may not set on its own Node, ` +
      `but this rule derives it from what a kubelet sets (${inputs.join(', ')}): a node could give itself the label; ` +
      `match only on labels a kubelet cannot set (node-restriction.kubernetes.io/, node-role.kubernetes.io/, ...) and the field name, ${how}`,
  ];
}
