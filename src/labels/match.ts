// Pure rule evaluation: does a term match a node, which term matched first, what does a templated
// value render to. No I/O here: the controller, dry runs and explain all call these.
import type { KubeObject } from '../runtime/types.ts';
import { NODE_FIELDS, type MatchTerm, type NodeField, type Rule } from './types.ts';

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

function lookup(view: NodeView, term: MatchTerm): string | undefined {
  const s = subjectOf(term);
  if (s.kind === 'label') return view.labels[s.key];
  if (s.kind === 'annotation') return view.annotations[s.key];
  return view.fields[s.key as NodeField];
}

const regexCache = new Map<string, RegExp>();
/** Compiles (once) a rule's regular expression; throws on a bad one, which compileRule reports. */
export function regex(source: string): RegExp {
  let r = regexCache.get(source);
  if (!r) {
    r = new RegExp(source);
    if (regexCache.size > 10_000) regexCache.clear();
    regexCache.set(source, r);
  }
  return r;
}

const INTEGER = /^-?\d+$/;

/** Kubernetes NodeSelectorRequirement semantics: NotIn and DoesNotExist hold when the key is absent. */
export function evalTerm(view: NodeView, term: MatchTerm): boolean {
  const v = lookup(view, term);
  const values = term.values ?? [];
  switch (term.operator) {
    case 'Exists':
      return v !== undefined;
    case 'DoesNotExist':
      return v === undefined;
    case 'In':
      return v !== undefined && values.includes(v);
    case 'NotIn':
      return v === undefined || !values.includes(v);
    case 'Gt':
    case 'Lt': {
      if (v === undefined || !INTEGER.test(v) || !INTEGER.test(values[0] ?? '')) return false;
      const a = BigInt(v);
      const b = BigInt(values[0]!);
      return term.operator === 'Gt' ? a > b : a < b;
    }
    case 'InRegexp':
      return v !== undefined && values.some((r) => regex(r).test(v));
  }
}

export interface MatchedTerm {
  term: MatchTerm;
  key: string;
  value: string;
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
    first: { term: hit.term, key: subjectOf(hit.term).key, value: lookup(view, hit.term) ?? '' },
  };
}

const TEMPLATE = /\{\{\s*(.*?)\s*\}\}/g;
const EXPRESSIONS: {
  re: RegExp;
  read: (view: NodeView, first: MatchedTerm | undefined, arg: string) => string;
}[] = [
  { re: /^\.match\.key$/, read: (_v, f) => f?.key ?? '' },
  { re: /^\.match\.value$/, read: (_v, f) => f?.value ?? '' },
  { re: /^label\s+"([^"]+)"$/, read: (v, _f, k) => v.labels[k] ?? '' },
  { re: /^annotation\s+"([^"]+)"$/, read: (v, _f, k) => v.annotations[k] ?? '' },
  { re: /^field\s+"([^"]+)"$/, read: (v, _f, k) => v.fields[k as NodeField] ?? '' },
];

/** The template errors of a value (unknown expressions, unknown fields), for rule validation. */
export function templateErrors(value: string): string[] {
  const errors: string[] = [];
  for (const m of value.matchAll(TEMPLATE)) {
    const expr = m[1]!;
    const e = EXPRESSIONS.find((x) => x.re.test(expr));
    if (!e) errors.push(`unknown template expression {{ ${expr} }}`);
    const field = expr.match(/^field\s+"([^"]+)"$/)?.[1];
    if (field !== undefined && !(field in NODE_FIELDS))
      errors.push(`unknown node field "${field}" in {{ ${expr} }}`);
  }
  return errors;
}

export const isTemplate = (value: string): boolean => /\{\{.*?\}\}/.test(value);

export function renderTemplate(value: string, view: NodeView, first: MatchedTerm | undefined): string {
  return value.replace(TEMPLATE, (_all, expr: string) => {
    for (const e of EXPRESSIONS) {
      const m = expr.match(e.re);
      if (m) return e.read(view, first, m[1] ?? '');
    }
    return '';
  });
}
