// Pure rule evaluation: does a term match a node, which term matched first, what does a templated
// value render to. No I/O here: the controller, dry runs and explain all call these.
import { RE2JS } from 're2js';
import type { KubeObject } from '../runtime/api/meta.ts';
import { NODE_FIELDS, type MatchTerm, type NodeField, type Rule } from './types.ts';
import { ANNOTATION_VALUE_MAX, escapeControl, quote } from './values.ts';

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

/**
 * The most characters of a node's value that Gt, Lt and InRegexp read: a longer value (a big
 * annotation, typically) never holds for them. With the program bound below, this bounds the cost of
 * every match: RE2 runs in time linear in program size times input length.
 */
export const MATCH_INPUT_MAX = 1024;
/**
 * The most RE2 instructions one InRegexp value, and all of a rule's together, may compile to.
 * Within these, RE2's DFA keeps its states for a 1024-character input, so a match costs
 * microseconds once warm and tens of milliseconds cold; a larger program (`\pL{990}`) makes it
 * fall back to the NFA: half a second per match.
 */
export const REGEXP_PROGRAM_MAX = 250;
export const RULE_REGEXP_PROGRAM_MAX = 1000;

/**
 * An upper bound on the RE2 program size of a pattern, without compiling it (compiling is linear
 * in the program, which counted repetition can make ~150 times the pattern's length: seconds for
 * the JavaScript RE2). Every character counts once; a group counts its branches; a repetition
 * counts its operand once per allowed copy. Over-counting only moves a pattern towards the limit.
 */
export function programSizeBound(pattern: string): number {
  interface Level {
    done: number; // branches closed by `|`
    branch: number; // the open branch
    last: number; // the size of the branch's last atom, which a repetition multiplies
  }
  const stack: Level[] = [];
  let cur: Level = { done: 0, branch: 0, last: 0 };
  const atom = (size: number) => {
    cur.branch += size;
    cur.last = size;
  };
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i]!;
    if (c === '\\' && pattern[i + 1] === 'Q') {
      // \Q…\E quotes literally: one instruction per character, no syntax inside.
      const end = pattern.indexOf('\\E', i + 2);
      const stop = end < 0 ? pattern.length : end + 2;
      cur.branch += stop - i;
      cur.last = 1;
      i = stop - 1;
    } else if (c === '\\') {
      i++;
      atom(1);
    } else if (c === '[') {
      // A class is one instruction; `]` first (or after `^`) is literal, `[:alpha:]` nests.
      let j = i + 1;
      if (pattern[j] === '^') j++;
      if (pattern[j] === ']') j++;
      for (; j < pattern.length && pattern[j] !== ']'; j++) {
        if (pattern[j] === '\\') j++;
        else if (pattern[j] === '[' && pattern[j + 1] === ':') {
          const end = pattern.indexOf(':]', j + 2);
          if (end > 0) j = end + 1;
        }
      }
      atom(1);
      i = j;
    } else if (c === '(') {
      // Group prefixes and flags compile to nothing: (?:, (?i-s:, (?P<name>, (?<name>; (?i) opens no group.
      const prefix = /^\(\?(?:[a-zA-Z-]*:|P?<[^>]{0,64}>|[a-zA-Z-]*\))/.exec(pattern.slice(i, i + 72))?.[0];
      if (prefix?.endsWith(')')) {
        i += prefix.length - 1;
        continue;
      }
      stack.push(cur);
      cur = { done: 0, branch: 0, last: 0 };
      i += (prefix?.length ?? 1) - 1;
    } else if (c === ')' && stack.length > 0) {
      const size = cur.done + cur.branch + 2;
      cur = stack.pop()!;
      atom(size);
    } else if (c === '|') {
      cur.done += cur.branch + 1;
      cur.branch = cur.last = 0;
    } else if (c === '{') {
      const m = /^\{(\d{1,7})(,(\d{0,7}))?\}/.exec(pattern.slice(i, i + 18));
      if (!m) {
        atom(1);
        continue;
      }
      // x{n,m}: m copies of x, each past the n-th optional (one more instruction); x{0}: nothing.
      const copies = Math.max(Number(m[1]), m[3] ? Number(m[3]) : 0);
      const size = copies * (cur.last + 1);
      cur.branch += size - cur.last;
      cur.last = size;
      i += m[0].length - 1;
    } else if (c === '*' || c === '+' || c === '?') {
      // A split and a jump around the operand, at most.
      cur.branch += 2;
      cur.last += 2;
    } else atom(1);
  }
  while (stack.length > 0) {
    const size = cur.done + cur.branch + 2;
    cur = stack.pop()!;
    atom(size);
  }
  return cur.done + cur.branch + 3; // a program starts and ends with bookkeeping instructions
}

// Compiled once per term object: a rule's terms live as long as the rule, and so do their programs
// (and the DFA states RE2 caches in them).
const compiled = new WeakMap<MatchTerm, RE2JS[]>();

/**
 * Compiles a regular expression with RE2 semantics (as Kubernetes and node-feature-discovery match
 * InRegexp); throws, saying why, when RE2 cannot run it or it compiles to more than
 * REGEXP_PROGRAM_MAX instructions, or more than the `left` of its rule's budget.
 */
export function compileRegexp(source: string, left = RULE_REGEXP_PROGRAM_MAX): RE2JS {
  const budget = Math.min(REGEXP_PROGRAM_MAX, left);
  // A bound well above the budget: the estimate over-counts, so it only stops the hopeless ones.
  const bound = programSizeBound(source);
  if (bound > 10 * budget) throw new Error(tooLarge(`an estimated ${bound}`, left));
  let re: RE2JS;
  try {
    re = RE2JS.compile(source);
  } catch (e) {
    const why = escapeControl((e as Error).message).slice(0, 200);
    const hint = /Perl syntax|escape sequence|named capture/.test(why)
      ? ' (RE2 syntax, as Kubernetes and node-feature-discovery use: no backreferences or lookaround)'
      : '';
    throw new Error(`${why}${hint}`, { cause: e });
  }
  if (re.programSize() > budget) throw new Error(tooLarge(String(re.programSize()), left));
  return re;
}

const tooLarge = (size: string, left: number): string =>
  `compiles to ${size} RE2 instructions; one value may have at most ${REGEXP_PROGRAM_MAX}, and all of a rule's at most ${RULE_REGEXP_PROGRAM_MAX}` +
  `${left < RULE_REGEXP_PROGRAM_MAX ? ` (${left} left)` : ''}: simplify it (fewer or smaller counted repetitions)`;

/** The programs of an InRegexp term, compiled on first use (its values were checked by ruleErrors). */
function termRegexps(term: MatchTerm): RE2JS[] {
  let res = compiled.get(term);
  if (!res) {
    res = (term.values ?? []).map((v) => compileRegexp(v));
    compiled.set(term, res);
  }
  return res;
}

/**
 * Checks the InRegexp values of a rule's terms within the rule's budget of RULE_REGEXP_PROGRAM_MAX
 * instructions and keeps their programs for matching; the reasons each failing term has.
 */
export function regexpErrors(terms: MatchTerm[]): Map<MatchTerm, string[]> {
  const errors = new Map<MatchTerm, string[]>();
  let left = RULE_REGEXP_PROGRAM_MAX;
  // Compiling is the cost to bound here, refused programs included: once the estimates of what was
  // compiled pass ten budgets, the rest is not even tried (64 values in each of 96 terms could be).
  // A pattern refused on its estimate alone costs a scan of its text, and counts nothing.
  let effort = 10 * RULE_REGEXP_PROGRAM_MAX;
  for (const term of terms) {
    if (term.operator !== 'InRegexp') continue;
    const res: RE2JS[] = [];
    const problems: string[] = [];
    for (const v of term.values ?? []) {
      const bound = programSizeBound(v);
      if (bound <= 10 * Math.min(REGEXP_PROGRAM_MAX, left)) effort -= bound;
      if (effort < 0) {
        problems.push(
          `too many or too large regular expressions in one rule: at most ${RULE_REGEXP_PROGRAM_MAX} RE2 instructions in all`,
        );
        errors.set(term, problems);
        return errors;
      }
      try {
        const re = compileRegexp(v, left);
        left -= re.programSize();
        res.push(re);
      } catch (e) {
        problems.push(`bad regular expression ${quote(v)}: ${(e as Error).message}`);
      }
    }
    if (problems.length) errors.set(term, problems);
    else compiled.set(term, res);
  }
  return errors;
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
      if (v === undefined || v.length > MATCH_INPUT_MAX || !INTEGER.test(v) || !INTEGER.test(values[0] ?? ''))
        return false;
      const a = BigInt(v);
      const b = BigInt(values[0]!);
      return term.operator === 'Gt' ? a > b : a < b;
    }
    case 'InRegexp':
      return v !== undefined && v.length <= MATCH_INPUT_MAX && termRegexps(term).some((r) => r.test(v));
  }
}

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
    first: { term: hit.term, key: subjectOf(hit.term).key, value: lookup(view, hit.term) },
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
  if (read === 'field' && !(m[2]! in NODE_FIELDS))
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
      return view.labels[e.key];
    case 'annotation':
      return view.annotations[e.key];
    case 'field':
      return view.fields[e.key as NodeField];
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
