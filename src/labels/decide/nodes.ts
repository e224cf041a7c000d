// Pure decisions of derived node labels: compile a NodeLabelRule into a Rule, decide what a node's
// derived labels, annotations and taints should be, and the server-side apply that gets it there
// without touching anything another field manager owns.
import {
  nodeWriteFor,
  taintId,
  type NodeOutputKind,
  type NodeWrite,
  type NodeState,
} from '../../policy/nodes/write.ts';
import type { KeyPattern } from '../../policy/nodes/ownership.ts';
import type { KubeObject } from '../../runtime/api/meta.ts';
import { expressionProblems } from '../../policy/match/requirement.ts';
import { regexpErrors } from '../../policy/match/regexp.ts';
import { validateLabelKey } from '../../policy/match/selector.ts';
import { quote } from '../../policy/text.ts';
import {
  isTemplate,
  literalText,
  matchRule,
  renderTemplate,
  templateErrors,
  type NodeView,
  type RuleMatch,
} from '../match.ts';
import { type MatchTerm, type Rule, type Taint } from '../types.ts';
import { NodeLabelRule } from '../crd.ts';
import { nodeRestrictionErrors } from '../restriction.ts';
import { controlCharacterError, outputValueError } from '../values.ts';

// Keys under these domains belong to Kubernetes and its components; a rule must not forge them.
const RESERVED = /^([a-z0-9-]+\.)*(kubernetes\.io|k8s\.io)\//;
const ALLOWED_RESERVED = /^(node-role\.kubernetes\.io|node-restriction\.kubernetes\.io)\//;

/** What is wrong with an output key: not a label key, or under a domain Kubernetes reserves. */
export function keyErrors(what: string, key: string): string[] {
  const e = validateLabelKey(key);
  if (e) return [`${what} ${quote(key)}: ${e}`];
  if (RESERVED.test(key) && !ALLOWED_RESERVED.test(key)) {
    return [
      `${what} ${quote(key)} is in a namespace reserved for Kubernetes (only node-role.kubernetes.io and node-restriction.kubernetes.io are allowed)`,
    ];
  }
  return [];
}

function termErrors(where: string, t: MatchTerm): string[] {
  const subjects = [t.label, t.annotation, t.field].filter((x) => x !== undefined).length;
  return [
    ...(subjects !== 1 ? ['a term names exactly one of label, annotation or field'] : []),
    ...expressionProblems(t),
  ].map((e) => `${where}: ${e}`);
}

/**
 * The reasons a value cannot be an output of `kind`: a literal must be a valid value (one
 * validator for literals and renderings); a template must know its expressions, and its literal
 * text must hold no control character (every rendering would); the rest is checked per node.
 */
function valueErrors(what: string, kind: OutputKind, value: string): string[] {
  if (!isTemplate(value)) {
    const e = outputValueError(kind, value);
    return e ? [`${what} value ${quote(value)}: ${e}`] : [];
  }
  const e = controlCharacterError(literalText(value));
  return [...templateErrors(value), ...(e ? [`value ${quote(value)}: ${e}`] : [])].map(
    (x) => `${what}: ${x}`,
  );
}

const MAX_RULE_OUTPUTS = 128;

/** Checks the outputs and terms of a rule; the reasons it cannot be applied, if any. */
export function ruleErrors(rule: Rule): string[] {
  const errors: string[] = [];
  if (rule.allOf.length + rule.anyOf.length === 0)
    errors.push('match needs at least one term in allOf or anyOf');
  const regexps = regexpErrors([...rule.allOf, ...rule.anyOf]);
  const terms = (group: string, list: MatchTerm[]) =>
    list.forEach((t, i) => {
      const where = `match.${group}[${i}]`;
      errors.push(...termErrors(where, t), ...(regexps.get(t) ?? []).map((e) => `${where}: ${e}`));
    });
  terms('allOf', rule.allOf);
  terms('anyOf', rule.anyOf);
  for (const [k, v] of Object.entries(rule.labels))
    errors.push(...keyErrors('label', k), ...valueErrors(`label ${quote(k)}`, 'label', v));
  for (const [k, v] of Object.entries(rule.annotations))
    errors.push(...keyErrors('annotation', k), ...valueErrors(`annotation ${quote(k)}`, 'annotation', v));
  for (const t of rule.taints) {
    errors.push(...keyErrors('taint', t.key));
    if (isTemplate(t.value ?? '')) errors.push(`taint ${quote(t.key)}: a taint value takes no template`);
    else errors.push(...valueErrors(`taint ${quote(t.key)}`, 'taint', t.value ?? ''));
  }
  if (Object.keys(rule.labels).length + Object.keys(rule.annotations).length + rule.taints.length === 0) {
    errors.push('a rule sets at least one label, annotation or taint');
  }
  // Every output is rendered on every matching node at each reconcile; the schema bounds taints only.
  const outputs = Object.keys(rule.labels).length + Object.keys(rule.annotations).length;
  if (outputs > MAX_RULE_OUTPUTS)
    errors.push(
      `a rule sets at most ${MAX_RULE_OUTPUTS} labels and annotations together; this one sets ${outputs}`,
    );
  return errors;
}

export const ruleNameOf = (crName: string): string => `nodelabelrule/${crName}`;

/** Every key a rule writes, for the ownership check (taints by key, whatever the effect). */
export const outputKeys = (rule: Rule): KeyPattern[] => [
  ...Object.keys(rule.labels).map((key) => ({ kind: 'label' as const, key })),
  ...Object.keys(rule.annotations).map((key) => ({ kind: 'annotation' as const, key })),
  ...rule.taints.map((t) => ({ kind: 'taint' as const, key: t.key })),
];

/**
 * One owner per key: a rule that would write a key another capability owns is refused, whole, with
 * why (`owned`: what KeyOwnership.violations says of derived labels' keys); the others apply.
 */
export function refuseOwned(
  rules: Rule[],
  owned: (keys: KeyPattern[]) => string[],
): { rules: Rule[]; refused: Map<string, string[]> } {
  const refused = new Map<string, string[]>();
  for (const r of rules) {
    const why = owned(outputKeys(r));
    if (why.length) refused.set(r.name, why);
  }
  return { rules: rules.filter((r) => !refused.has(r.name)), refused };
}

/** Compiles a NodeLabelRule object (from the API or a file) into a Rule, or says why it cannot. */
export function compileRule(obj: KubeObject): { rule?: Rule; errors: string[] } {
  const parsed = NodeLabelRule.parse(obj);
  if (!parsed.success) return { errors: [parsed.error] };
  const { metadata, spec } = parsed.data;
  const rule: Rule = {
    name: ruleNameOf(metadata.name!),
    source: {
      kind: 'NodeLabelRule',
      name: metadata.name!,
      ...(metadata.uid ? { uid: metadata.uid } : {}),
      ...(metadata.generation !== undefined ? { generation: metadata.generation } : {}),
    },
    allOf: spec.match.allOf ?? [],
    anyOf: spec.match.anyOf ?? [],
    labels: spec.labels ?? {},
    annotations: spec.annotations ?? {},
    taints: spec.taints ?? [],
    ...(spec.evictOnRemoval ? { evictOnRemoval: spec.evictOnRemoval } : {}),
  };
  const errors = ruleErrors(rule);
  // Evicting every pod that does not tolerate it is a taint's whole point with NoExecute: only on request.
  const noExecute = rule.taints.filter((t) => t.effect === 'NoExecute').map((t) => t.key);
  if (noExecute.length && spec.acknowledgeNoExecute !== true)
    errors.push(
      `the NoExecute taint ${noExecute.map((k) => quote(k)).join(', ')} evicts every pod that does not tolerate it from each matching node: set spec.acknowledgeNoExecute: true to mean it (berth rules test counts the pods)`,
    );
  errors.push(
    ...nodeRestrictionErrors(
      rule,
      spec.acknowledgeKubeletInputs === true,
      'or set spec.acknowledgeKubeletInputs: true to mean it',
    ),
  );
  return errors.length ? { errors } : { rule, errors };
}

export type OutputKind = NodeOutputKind;

export interface Output {
  kind: OutputKind;
  /** For taints, "key:effect". */
  key: string;
  value: string;
  rule: string;
}

export interface Conflict {
  kind: OutputKind;
  key: string;
  winner: Output;
  losers: Output[];
}

/** An output of a matching rule that is not set on a node, and why. */
export interface SkippedOutput {
  rule: string;
  kind: OutputKind;
  key: string;
  message: string;
}

export interface NodeDecision {
  labels: Record<string, string>;
  annotations: Record<string, string>;
  taints: Taint[];
  /** Every rule's match on this node, by rule name. */
  matches: Map<string, RuleMatch>;
  /** The outputs that won, each with its rule. */
  outputs: Output[];
  conflicts: Conflict[];
  /** Templated values that rendered to something the output does not accept: a problem to fix. */
  renderErrors: SkippedOutput[];
  /** Templated values that read an input this node lacks: not set here, by design. */
  missingInputs: SkippedOutput[];
}

/**
 * What the derived outputs of a node should be. Rules are taken in name order and the first to
 * claim a key keeps it: a conflict always resolves the same way, whatever order events came in.
 */
export function decide(view: NodeView, rules: Rule[]): NodeDecision {
  const d: NodeDecision = {
    labels: {},
    annotations: {},
    taints: [],
    matches: new Map(),
    outputs: [],
    conflicts: [],
    renderErrors: [],
    missingInputs: [],
  };
  const claimed = new Map<string, Output>();
  const taints = new Map<string, Taint>();
  const sorted = [...rules].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const claim = (o: Output) => {
    const id = `${o.kind}\u0000${o.key}`;
    const held = claimed.get(id);
    if (!held) {
      claimed.set(id, o);
      d.outputs.push(o);
      return true;
    }
    if (held.value !== o.value) {
      let c = d.conflicts.find((x) => x.kind === o.kind && x.key === o.key);
      if (!c) d.conflicts.push((c = { kind: o.kind, key: o.key, winner: held, losers: [] }));
      c.losers.push(o);
    }
    return false;
  };
  for (const rule of sorted) {
    const m = matchRule(view, rule);
    d.matches.set(rule.name, m);
    if (!m.matched) continue;
    for (const [kind, values, into] of [
      ['label', rule.labels, d.labels],
      ['annotation', rule.annotations, d.annotations],
    ] as const) {
      for (const [key, tpl] of Object.entries(values)) {
        const r = renderTemplate(tpl, view, m.first);
        const skip = (list: SkippedOutput[], message: string) =>
          list.push({ rule: rule.name, kind, key, message: `${kind} ${quote(key)}: ${message}` });
        if ('missing' in r) skip(d.missingInputs, `not set: this node has no input for ${r.missing}`);
        else if ('error' in r) skip(d.renderErrors, r.error);
        else {
          const err = outputValueError(kind, r.value);
          if (err) skip(d.renderErrors, `rendered ${quote(r.value)}: ${err}`);
          else if (claim({ kind, key, value: r.value, rule: rule.name })) into[key] = r.value;
        }
      }
    }
    for (const t of rule.taints) {
      if (claim({ kind: 'taint', key: taintId(t), value: t.value ?? '', rule: rule.name }))
        taints.set(taintId(t), t);
    }
  }
  d.taints = [...taints.values()];
  return d;
}

export interface TracedNodeWrite extends NodeWrite {
  /** The outputs held back because another field manager set their key to a different value. */
  foreignOutputs: Output[];
}

/** The outputs behind held-back keys: which rule wanted each. */
export const tracedOutputs = (d: NodeDecision, keys: NodeWrite['foreign']): Output[] =>
  keys.map((f) => d.outputs.find((o) => o.kind === f.kind && o.key === f.key)!);

/** The node write for a decision, with held-back keys traced to the rules that wanted them. */
export function tracedNodeWrite(state: NodeState, d: NodeDecision): TracedNodeWrite {
  const write = nodeWriteFor(state, d);
  return { ...write, foreignOutputs: tracedOutputs(d, write.foreign) };
}
