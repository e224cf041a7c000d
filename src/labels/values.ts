// Text that derived labels show and write. Messages quote user text through quote(): bounded and
// escaped, so a runaway or hostile line cannot make a runaway message or forge log lines. Output
// values, literal or rendered, pass one validator per output kind: what Kubernetes accepts, minus
// control characters everywhere.
import type { NodeOutputKind } from '../policy/nodes/plan.ts';
import { validateLabelValue } from '../policy/match/selector.ts';

/** Most characters of user text a message quotes. */
export const QUOTE_MAX = 64;

// C0 and C1 controls, DEL, line and paragraph separators, and bidirectional overrides (which can
// make a log line read differently from what it holds).
// eslint-disable-next-line no-control-regex -- finding control characters is the point
const UNSAFE = /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;
const hex = (c: string): string => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`;

/** User text for a message: a JSON string of at most `max` characters of it, control characters escaped. */
export function quote(s: string, max = QUOTE_MAX): string {
  const cut = s.length > max ? `${s.slice(0, max)}…` : s;
  return JSON.stringify(cut).replace(UNSAFE, hex);
}

/** `s` with control characters escaped but no quotes added: for paths and names in messages. */
export const escapeControl = (s: string): string => s.replace(UNSAFE, hex);

/** The longest annotation value Berth writes, literal or rendered (the rule schema's own bound). */
export const ANNOTATION_VALUE_MAX = 4096;

// eslint-disable-next-line no-control-regex -- finding control characters is the point
const CONTROL = /[\u0000-\u001f\u007f-\u009f\u2028\u2029]/;

/** Why `text` cannot appear in any output value: control characters and line breaks, never accepted. */
export function controlCharacterError(text: string): string | undefined {
  const c = CONTROL.exec(text)?.[0];
  return c === undefined
    ? undefined
    : `must not contain control characters or line breaks (found ${quote(c)})`;
}

/**
 * Why `value` cannot be the value of an output of `kind`, or undefined. Labels and taints take a
 * label value (as the apiserver requires); annotations take any text without control characters,
 * up to ANNOTATION_VALUE_MAX characters.
 */
export function outputValueError(kind: NodeOutputKind, value: string): string | undefined {
  if (kind !== 'annotation') return validateLabelValue(value);
  if (value.length > ANNOTATION_VALUE_MAX) return `must be no more than ${ANNOTATION_VALUE_MAX} characters`;
  return controlCharacterError(value);
}
