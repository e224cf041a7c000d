// Label selectors as CEL, for the matchConditions of Berth's webhook configurations (policy/admission.ts).
// Every string a policy carries goes in as an escaped literal, never as code.
import { selectorRequirements, type LabelSelector } from './selector.ts';
import type { Requirement } from './requirement.ts';

/**
 * A CEL string literal of `s`: printable ASCII as is, the rest as \u or \U escapes; undefined for
 * a lone surrogate, which no escape spells (label keys, values and namespace names never hold one).
 */
export function celString(s: string): string | undefined {
  let out = '"';
  for (const ch of s) {
    const cp = ch.codePointAt(0)!;
    if (cp >= 0xd800 && cp <= 0xdfff) return undefined;
    if (cp >= 0x20 && cp < 0x7f && ch !== '"' && ch !== '\\') out += ch;
    else if (cp <= 0xffff) out += `\\u${cp.toString(16).padStart(4, '0')}`;
    else out += `\\U${cp.toString(16).padStart(8, '0')}`;
  }
  return `${out}"`;
}

const celList = (values: string[] | undefined): string | undefined => {
  const items = (values ?? []).map(celString);
  return items.every((i) => i !== undefined) ? `[${items.join(', ')}]` : undefined;
};

// The object's labels; `has` first, as an object without labels has no such field.
const LABELS = 'object.metadata.labels';

/** One requirement over the object's labels, or undefined when CEL cannot say it (another operator). */
function requirementCel(r: Requirement): string | undefined {
  const key = celString(r.key);
  if (key === undefined) return undefined;
  const present = `has(${LABELS}) && ${key} in ${LABELS}`;
  const values = celList(r.values);
  switch (r.operator) {
    case 'Exists':
      return `(${present})`;
    case 'DoesNotExist':
      return `!(${present})`;
    case 'In':
      return values && `(${present} && ${LABELS}[${key}] in ${values})`;
    case 'NotIn':
      return values && `!(${present} && ${LABELS}[${key}] in ${values})`;
    default:
      return undefined;
  }
}

/** A selector over `object.metadata.labels` as one CEL expression ('true' when it selects everything). */
export function selectorCel(selector: LabelSelector | undefined): string | undefined {
  const parts = selectorRequirements(selector).map(requirementCel);
  if (parts.some((p) => p === undefined)) return undefined;
  return parts.length ? parts.join(' && ') : 'true';
}

/**
 * What a namespaceSelector says of the namespace's name, as CEL over `request.namespace`: a
 * webhook's matchConditions see the request, not the namespace object, so requirements on other
 * labels are left out (the expression selects more, never less).
 */
export function namespaceNameCel(selector: LabelSelector | undefined, nameLabel: string): string {
  const parts = selectorRequirements(selector)
    .filter((r) => r.key === nameLabel)
    .map((r) => {
      const values = celList(r.values);
      if (r.operator === 'In' && values) return `request.namespace in ${values}`;
      if (r.operator === 'NotIn' && values) return `!(request.namespace in ${values})`;
      // Every namespace has the name label: Exists holds, DoesNotExist never does.
      return r.operator === 'DoesNotExist' ? 'false' : 'true';
    });
  return parts.length ? parts.join(' && ') : 'true';
}
