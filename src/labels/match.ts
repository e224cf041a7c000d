// Pure rule evaluation: does a term match a node, which term matched first, what does a templated
// value render to. No I/O here: the controller, dry runs and explain all call these.
import type { KubeObject } from '../runtime/api/meta.ts';
import { expressionHolds, valueAt } from '../policy/match/requirement.ts';
import { escapeControl, quote } from '../policy/text.ts';
import { NODE_FIELDS, type MatchTerm, type NodeField, type Rule } from './types.ts';
import { ANNOTATION_VALUE_MAX } from './values.ts';

/** What a rule can see of a node. */
export interface NodeView {
  name: string;
  labels: Record<string, string>;
  annotations: Record<string, string>;
  fields: Partial<Record<NodeField, string>>;
}

export function nodeView(node: KubeObject): NodeView {
  const fields: Partial<Record<NodeField, string>> = {};
  for (const [f, path] of Object.entries(NODE_FIELDS) as [NodeField, string][]) {
    let v: unknown = node;
    for (const p of path.split('.')) v = (v as Record<string, unknown> | undefined)?.[p];
    if (typeof v === 'string' && v !== '') fields[f] = v;
  }
  return {
    name: node.metadata?.name ?? '',
    labels: node.metadata?.labels ?? {},
    annotations: node.metadata?.annotations ?? {},
    fields,
  };
}

/** "label kkohtaka.org/edgetpu", "field architecture": how a term's subject reads in explanations. */
export function subjectOf(term: MatchTerm): { kind: 'label' | 'annotation' | 'field'; key: string } {
  if (term.label !== undefined) return { kind: 'label', key: term.label };
  if (term.annotation !== undefined) return { kind: 'annotation', key: term.annotation };
  return { kind: 'field', key: term.field ?? '' };
}

/** The node's value a term reads; undefined when the node has none. */
export function termValue(view: NodeView, term: MatchTerm): string | undefined {
  const s = subjectOf(term);
  if (s.kind === 'label') return valueAt(view.labels, s.key);
  if (s.kind === 'annotation') return valueAt(view.annotations, s.key);
  return view.fields[s.key as NodeField];
}

/** Whether a term holds on a node: the match kernel's operators over the value it reads. */
export const evalTerm = (view: NodeView, term: MatchTerm): boolean =>
  expressionHolds(term, termValue(view, term));

export interface MatchedTerm {
  term: MatchTerm;
  key: string;
  /** Absent when the term holds for a missing key (NotIn, DoesNotExist). */
  value: string | undefined;
}

export interface RuleMatch {
  matched: boolean;
  /** The first anyOf term that held (or, without anyOf, the first allOf term): what {{ .match.key }} and {{ .match.value }} read. */
  first?: MatchedTerm;
  /** Each term with whether it held, for explain. */
  terms: { group: 'allOf' | 'anyOf'; term: MatchTerm; held: boolean }[];
}

export function matchRule(view: NodeView, rule: Rule): RuleMatch {
  // Every term is evaluated (no short circuit) so that explain can show all of them.
  const terms: RuleMatch['terms'] = [
    ...rule.allOf.map((term) => ({ group: 'allOf' as const, term, held: evalTerm(view, term) })),
    ...rule.anyOf.map((term) => ({ group: 'anyOf' as const, term, held: evalTerm(view, term) })),
  ];
  const all = terms.filter((t) => t.group === 'allOf').every((t) => t.held);
  const any = rule.anyOf.length === 0 || terms.some((t) => t.group === 'anyOf' && t.held);
  const matched = all && any && terms.length > 0;
  if (!matched) return { matched, terms };
  // anyOf says which variant matched, so its first held term is the one templates read; allOf otherwise.
  const hit = terms.find((t) => t.group === 'anyOf' && t.held) ?? terms.find((t) => t.held)!;
  return {
    matched,
    terms,
    first: { term: hit.term, key: subjectOf(hit.term).key, value: termValue(view, hit.term) },
  };
}

/** One {{ expression }} of a template: what it reads, or why it is not one Berth knows. */
type Expression =
  | { read: 'match.key' | 'match.value'; text: string }
  | { read: 'label' | 'annotation' | 'field'; key: string; text: string }
  | { error: string; text: string };

// Anchored and without nested quantifiers: linear in the expression's length.
const CALL = /^(label|annotation|field)\s+"([^"]+)"$/;

function expression(text: string): Expression {
  if (text === '.match.key') return { read: 'match.key', text };
  if (text === '.match.value') return { read: 'match.value', text };
  const m = CALL.exec(text);
  if (!m) return { error: `unknown template expression {{ ${escapeControl(text).slice(0, 80)} }}`, text };
  const read = m[1] as 'label' | 'annotation' | 'field';
  // Own keys only: `in` would take an object's inherited members (constructor, __proto__) for fields.
  if (read === 'field' && !Object.hasOwn(NODE_FIELDS, m[2]!))
    return { error: `unknown node field ${quote(m[2]!)} in {{ ${escapeControl(text).slice(0, 80)} }}`, text };
  return { read, key: m[2]!, text };
}

/** Splits a value into literal text and {{ expressions }}: `{{` to the first `}}` after it, in one pass. */
function parseTemplate(value: string): (string | Expression)[] {
  const parts: (string | Expression)[] = [];
  let at = 0;
  for (;;) {
    const open = value.indexOf('{{', at);
    const close = open < 0 ? -1 : value.indexOf('}}', open + 2);
    if (close < 0) break;
    if (open > at) parts.push(value.slice(at, open));
    parts.push(expression(value.slice(open + 2, close).trim()));
    at = close + 2;
  }
  if (at < value.length) parts.push(value.slice(at));
  return parts;
}

/** The node inputs a value's template reads by name (`.match.*` reads a term's, already an input). */
export const templateReads = (value: string): { kind: 'label' | 'annotation' | 'field'; key: string }[] =>
  parseTemplate(value).flatMap((p) =>
    typeof p !== 'string' && 'read' in p && 'key' in p ? [{ kind: p.read, key: p.key }] : [],
  );

/** The template errors of a value (unknown expressions, unknown fields), for rule validation. */
export const templateErrors = (value: string): string[] =>
  parseTemplate(value).flatMap((p) => (typeof p !== 'string' && 'error' in p ? [p.error] : []));

export const isTemplate = (value: string): boolean => parseTemplate(value).some((p) => typeof p !== 'string');

/** The literal text of a value, its expressions left out: what every rendering contains. */
export const literalText = (value: string): string =>
  parseTemplate(value)
    .filter((p) => typeof p === 'string')
    .join('');

function read(e: Exclude<Expression, { error: string }>, view: NodeView, first: MatchedTerm | undefined) {
  switch (e.read) {
    case 'match.key':
      return first?.key;
    case 'match.value':
      return first?.value;
    case 'label':
      return valueAt(view.labels, e.key);
    case 'annotation':
      return valueAt(view.annotations, e.key);
    case 'field':
      return valueAt(view.fields, e.key);
  }
}

/**
 * What a value renders to on a node: the text, or the input it reads that the node lacks (then
 * the output is not set at all: an empty value would claim a fact the node does not have), or an
 * error when it would exceed ANNOTATION_VALUE_MAX, the longest value any output takes.
 */
export type Rendered = { value: string } | { missing: string } | { error: string };

export function renderTemplate(value: string, view: NodeView, first: MatchedTerm | undefined): Rendered {
  let out = '';
  for (const p of parseTemplate(value)) {
    if (typeof p === 'string') out += p;
    else if ('error' in p) return { error: p.error };
    else {
      const text = read(p, view, first);
      if (text === undefined) return { missing: `{{ ${escapeControl(p.text).slice(0, 80)} }}` };
      out += text;
    }
    if (out.length > ANNOTATION_VALUE_MAX)
      return { error: `renders to more than ${ANNOTATION_VALUE_MAX} characters` };
  }
  return { value: out };
}
