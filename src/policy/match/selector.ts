// Labels: metav1.LabelSelector semantics (matchLabels and matchExpressions all hold; an empty
// selector selects everything, as in a NetworkPolicy or a webhook's namespaceSelector) and the
// apiserver's rules for label keys and values. Its schema for custom resources is in schema.ts:
// what matches here loads no zod (the webhook thread matches, docs/decisions/0023).
import {
  requirementHolds,
  requirementProblems,
  SELECTOR_OPERATORS,
  type Requirement,
  type Syntax,
} from './requirement.ts';
import { quote } from '../text.ts';
import { DNS1123_SUBDOMAIN } from '../../runtime/api/meta.ts';

export interface LabelSelectorRequirement extends Requirement {
  operator: (typeof SELECTOR_OPERATORS)[number];
}

export interface LabelSelector {
  matchLabels?: Record<string, string>;
  matchExpressions?: LabelSelectorRequirement[];
}

/** The selector's requirements, as metav1.LabelSelectorAsSelector reads it: each matchLabels entry is an In of its one value. */
export const selectorRequirements = (selector: LabelSelector | undefined): Requirement[] => [
  ...Object.entries(selector?.matchLabels ?? {}).map(([key, value]) => ({
    key,
    operator: 'In' as const,
    values: [value],
  })),
  ...(selector?.matchExpressions ?? []),
];

/** A selector as a person reads it: `app=web,tier In (a,b)`; an empty one selects everything. */
export function selectorText(s: LabelSelector | undefined): string {
  const parts = Object.entries(s?.matchLabels ?? {}).map(([k, v]) => `${k}=${v}`);
  for (const e of s?.matchExpressions ?? []) {
    const values = e.values?.length ? ` (${e.values.join(',')})` : '';
    parts.push(`${e.key} ${e.operator}${values}`);
  }
  return parts.join(',') || 'everything';
}

export function selectorMatches(
  selector: LabelSelector | undefined,
  labels: Record<string, string> | undefined,
): boolean {
  const l = labels ?? {};
  return selectorRequirements(selector).every((r) => requirementHolds(r, l));
}

const QUALIFIED_NAME = /^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/;
const NAME_CHARS =
  "alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

/** Why `key` is not a valid Kubernetes label key (`[prefix/]name`), or undefined when it is. */
export function validateLabelKey(key: string): string | undefined {
  const parts = key.split('/');
  if (parts.length > 2) return "must contain at most one '/' (an optional DNS subdomain prefix, then a name)";
  const name = parts.at(-1) ?? '';
  const prefix = parts.length === 2 ? (parts[0] ?? '') : undefined;
  if (prefix !== undefined) {
    if (prefix === '') return 'prefix part must be non-empty';
    if (prefix.length > 253) return 'prefix part must be no more than 253 characters';
    if (!DNS1123_SUBDOMAIN.test(prefix))
      return "prefix part must be a DNS-1123 subdomain: lowercase alphanumeric characters, '-' or '.', starting and ending with an alphanumeric character";
  }
  if (name === '') return 'name part must be non-empty';
  if (name.length > 63) return 'name part must be no more than 63 characters';
  if (!QUALIFIED_NAME.test(name)) return `name part must consist of ${NAME_CHARS}`;
  return undefined;
}

/** Why `value` is not a valid Kubernetes label value, or undefined when it is. */
export function validateLabelValue(value: string): string | undefined {
  if (value.length > 63) return 'must be no more than 63 characters';
  if (value !== '' && !QUALIFIED_NAME.test(value)) return `must be empty or consist of ${NAME_CHARS}`;
  return undefined;
}

/** Label keys and values as the apiserver accepts them: the syntax of a label selector's requirements. */
export const LABEL_SYNTAX: Syntax = { key: validateLabelKey, value: validateLabelValue };

/**
 * What metav1.LabelSelectorAsSelector would refuse in a selector (`at` names it in the messages):
 * invalid keys and values, values for Exists and DoesNotExist, none for In and NotIn. Evaluated
 * anyway, a NotIn of nothing would select everything and an In of nothing nothing.
 */
export function selectorProblems(sel: LabelSelector | undefined, at: string): string[] {
  const labels = Object.keys(sel?.matchLabels ?? {}).length;
  return selectorRequirements(sel).flatMap((r, i) =>
    requirementProblems(r, LABEL_SYNTAX).map((p) => {
      const where =
        i >= labels
          ? `${at}.matchExpressions[${i - labels}]`
          : p.key !== undefined
            ? `${at}.matchLabels`
            : `${at}.matchLabels[${quote(r.key)}]`;
      if (p.key !== undefined) return `${where} key ${quote(p.key)}: ${p.problem}`;
      if (p.value !== undefined) return `${where} value ${quote(p.value)}: ${p.problem}`;
      return `${where}: ${p.problem}`;
    }),
  );
}
