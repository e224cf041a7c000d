// The match kernel: the operators of label selectors and rule terms, what values each takes, and
// whether a requirement holds for a key→value map. apimachinery's labels.Requirement and
// node-feature-discovery's MatchExpression are the models: a MatchExpression is an operator with
// its values, a Requirement names the key it reads. Selectors, NodeLabelRule terms and later
// matchers (image platforms, cell locations) pick their operators from this one set.
import { regexpsOf } from './regexp.ts';

/** Every operator the kernel evaluates, as Kubernetes and node-feature-discovery name them. */
export const OPERATORS = ['In', 'NotIn', 'Exists', 'DoesNotExist', 'Gt', 'Lt', 'InRegexp'] as const;
export type Operator = (typeof OPERATORS)[number];

/** The operators of a metav1.LabelSelector's matchExpressions. */
export const SELECTOR_OPERATORS = [
  'In',
  'NotIn',
  'Exists',
  'DoesNotExist',
] as const satisfies readonly Operator[];

export interface MatchExpression {
  operator: Operator;
  values?: string[] | undefined;
}

export interface Requirement extends MatchExpression {
  key: string;
}

/** What a key or a value must look like where a matcher has a syntax (label keys and values). */
export interface Syntax {
  key(key: string): string | undefined;
  value(value: string): string | undefined;
}

/** One thing wrong with a requirement: its key, one of its values, or (neither) its values for its operator. */
export interface RequirementProblem {
  key?: string;
  value?: string;
  problem: string;
}

const INTEGER = /^-?\d+$/;

/** Why the values do not fit the operator: none for Exists and DoesNotExist, one integer for Gt and Lt, some for the rest. */
export function expressionProblems(e: MatchExpression): string[] {
  const values = e.values ?? [];
  const out: string[] = [];
  const none = e.operator === 'Exists' || e.operator === 'DoesNotExist';
  if (none && values.length > 0) out.push(`operator ${e.operator} takes no values`);
  if (!none && values.length === 0) out.push(`operator ${e.operator} needs at least one value`);
  if ((e.operator === 'Gt' || e.operator === 'Lt') && (values.length !== 1 || !INTEGER.test(values[0]!)))
    out.push(`operator ${e.operator} takes exactly one integer value`);
  return out;
}

/** What is wrong with a requirement: its key and values in `syntax` (when given), and its values for its operator. */
export function requirementProblems(r: Requirement, syntax?: Syntax): RequirementProblem[] {
  const out: RequirementProblem[] = [];
  const keyProblem = syntax?.key(r.key);
  if (keyProblem) out.push({ key: r.key, problem: keyProblem });
  out.push(...expressionProblems(r).map((problem) => ({ problem })));
  for (const value of syntax ? (r.values ?? []) : []) {
    const problem = syntax?.value(value);
    if (problem) out.push({ value, problem });
  }
  return out;
}

/**
 * The most characters of a value that Gt, Lt and InRegexp read: a longer value (a big
 * annotation, typically) never holds for them. With the bounded RE2 programs (regexp.ts), this
 * bounds the cost of every match: RE2 runs in time linear in program size times input length.
 */
export const MATCH_INPUT_MAX = 1024;

/**
 * Whether `e` holds for a value (undefined: the key is absent). Kubernetes' rules: NotIn and
 * DoesNotExist hold when the key is absent; Gt and Lt compare integers of any size, and a value
 * that is not one never holds; InRegexp finds a match anywhere in the value.
 */
export function expressionHolds(e: MatchExpression, v: string | undefined): boolean {
  const values = e.values ?? [];
  switch (e.operator) {
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
      return e.operator === 'Gt' ? a > b : a < b;
    }
    case 'InRegexp':
      return v !== undefined && v.length <= MATCH_INPUT_MAX && regexpsOf(e).some((r) => r.test(v));
  }
}

/** The value of `key` in a map, undefined when the map has none: an inherited property (`constructor`) is no label. */
export const valueAt = (map: Readonly<Record<string, string>>, key: string): string | undefined =>
  Object.hasOwn(map, key) ? map[key] : undefined;

/** Whether `r` holds for a map of labels (annotations, fields): its key's value, or its absence. */
export const requirementHolds = (r: Requirement, map: Readonly<Record<string, string>>): boolean =>
  expressionHolds(r, valueAt(map, r.key));
