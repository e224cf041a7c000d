// Text that derived labels write. Output values, literal or rendered, pass one validator per output
// kind: what Kubernetes accepts, minus control characters everywhere.
import type { NodeOutputKind } from '../policy/nodes/write.ts';
import { validateLabelValue } from '../policy/match/selector.ts';
import { quote } from '../policy/text.ts';

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
