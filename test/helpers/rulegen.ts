// Generated NodeLabelRules and nodes for fuzz and abuse tests: careful ones (valid lists only,
// within the schema) and careless ones (hostile regular expressions, templates, keys and values).
import { OPERATORS } from '../../src/policy/match/requirement.ts';
import type { KubeObject } from '../../src/runtime/api/meta.ts';
import type { Prng } from './prng.ts';

export const KEYS = [
  'example.com/gpu',
  'example.com/zone',
  'kkohtaka.org/edgetpu',
  'feature.node.kubernetes.io/cpu-model',
  'kubernetes.io/arch',
  'node-role.kubernetes.io/edge',
  'a',
  'Bad Key',
  'x'.repeat(64),
  `${'d.'.repeat(130)}com/x`,
  'evil\nkey',
  'example.com/\u202egpu',
  '',
];

export const REGEXPS = [
  '(a+)+$',
  '^(a|aa)+$',
  '(.*a){20}',
  '^(\\w+\\s?)*$',
  '(x+x+)+y',
  '^v5\\.',
  '(?i)tesla|a100',
  '(a)\\1',
  'a(?=b)',
  '(?<!a)b',
  '.{1000}',
  'a{1000}'.repeat(146),
  '(\\pL{240})',
  '[',
  '(',
  '\\',
  '',
  '\u0000\n',
];

export const VALUES = [
  'true',
  'T4',
  '',
  'a b',
  'line\nbreak',
  `${'a'.repeat(40)}b`,
  'x'.repeat(63),
  'x'.repeat(64),
  '9'.repeat(30),
  '-12',
  '\u202eevil',
  'é',
];

export const TEMPLATES = [
  '{{ .match.value }}',
  '{{ .match.key }}',
  '{{ label "example.com/zone" }}',
  '{{ annotation "note" }}',
  '{{ field "architecture" }}',
  '{{ field "kernelVersion" }}-{{ field "osImage" }}',
  '{{ label "missing" }}',
  'prefix-{{ label "example.com/gpu" }}',
  '{{ annotation "big" }}{{ annotation "big" }}',
  '{{ field "gpu" }}',
  '{{ .nope }}',
  `{{${' '.repeat(4000)}`,
  '{{'.repeat(500),
  'x\n{{ .match.value }}',
];

/** The first `careful` entries of each list above are valid wherever they can appear. */
export const careful = { keys: 3, regexps: 6, values: 3, templates: 9 };

/**
 * A NodeLabelRule spec: a careful one draws only from the valid entries of each list and keeps to
 * the schema (it may still be invalid: a NoExecute taint without acknowledgement), a careless one
 * from all of them.
 */
export function ruleSpec(r: Prng): Record<string, unknown> {
  const ok = r.chance(0.5);
  const from = <T>(list: readonly T[], n: number): T => r.pick(ok ? list.slice(0, n) : list);
  const term = () => {
    const operator = ok ? r.pick(OPERATORS) : r.pick([...OPERATORS, 'Near'] as const);
    const subject = r.pick([
      { label: from(KEYS, careful.keys) },
      { annotation: r.pick(['note', 'big', 'example.com/zone']) },
      { field: from(['architecture', 'kernelVersion', 'name', 'nope'], 3) },
      ...(ok ? [] : [{ label: 'a', field: 'name' }]),
    ]);
    const values =
      operator === 'Exists' || operator === 'DoesNotExist'
        ? ok
          ? []
          : [r.pick(VALUES)]
        : operator === 'InRegexp'
          ? Array.from({ length: 1 + r.int(3) }, () => from(REGEXPS, careful.regexps))
          : operator === 'Gt' || operator === 'Lt'
            ? [from(['5', '-3', '99999999999999999999', 'x'], 3)]
            : Array.from({ length: (ok ? 1 : 0) + r.int(3) }, () => from(VALUES, careful.values));
    return { ...subject, operator, ...(values.length || (!ok && r.chance(0.2)) ? { values } : {}) };
  };
  const outputs = () =>
    Object.fromEntries(
      Array.from({ length: (ok ? 1 : 0) + r.int(3) }, () => [
        from(KEYS, careful.keys),
        r.chance(0.5) ? from(TEMPLATES, careful.templates) : from(VALUES, careful.values),
      ]),
    );
  const s: Record<string, unknown> = {
    match: {
      ...(r.chance(0.6) ? { allOf: Array.from({ length: r.int(3) }, term) } : {}),
      ...(ok || r.chance(0.7) ? { anyOf: Array.from({ length: (ok ? 1 : 0) + r.int(3) }, term) } : {}),
    },
  };
  if (ok || r.chance(0.8)) s['labels'] = outputs();
  if (r.chance(0.5)) s['annotations'] = outputs();
  if (r.chance(0.3))
    s['taints'] = Array.from({ length: 1 + r.int(2) }, () => ({
      key: from(KEYS, careful.keys),
      ...(r.chance(0.5)
        ? { value: ok ? r.pick(VALUES.slice(0, 2)) : r.pick([...VALUES, ...TEMPLATES]) }
        : {}),
      effect: ok
        ? r.pick(['NoSchedule', 'PreferNoSchedule', 'NoExecute'])
        : r.pick(['NoExecute', 'Sometimes']),
    }));
  if (r.chance(0.3)) s['acknowledgeNoExecute'] = r.chance(0.7);
  return s;
}

/** A node object (for pure tests) with labels, annotations and node info drawn from the lists above. */
export function nodeObject(r: Prng, name: string): KubeObject {
  const pick = () =>
    Object.fromEntries(Array.from({ length: r.int(5) }, () => [r.pick(KEYS), r.pick(VALUES)]));
  return {
    metadata: {
      name,
      labels: pick(),
      annotations: {
        ...(r.chance(0.5) ? { note: r.pick(VALUES) } : {}),
        ...(r.chance(0.3) ? { big: 'b'.repeat(r.pick([100, 3000, 5000])) } : {}),
      },
    },
    status: {
      nodeInfo: {
        architecture: r.pick(['amd64', 'arm64', '']),
        ...(r.chance(0.5)
          ? { kernelVersion: r.pick(['5.15.0-1051-azure', 'v5.4', `${'a'.repeat(40)}b`]) }
          : {}),
      },
    },
  };
}
