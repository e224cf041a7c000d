// Matching and templates under hostile input: RE2 semantics in linear time, bounded programs and
// inputs, templates parsed in one pass. Timing claims are checked in a worker thread, so that an
// engine that backtracks fails this test instead of hanging it.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { Worker } from 'node:worker_threads';
import { RE2JS } from 're2js';
import { compileRule } from '../../../src/labels/decide/nodes.ts';
import { evalTerm, renderTemplate, templateErrors, type NodeView } from '../../../src/labels/match.ts';
import { MATCH_INPUT_MAX } from '../../../src/policy/match/requirement.ts';
import {
  programSizeBound,
  REGEXP_PROGRAM_MAX,
  RULE_REGEXP_PROGRAM_MAX,
} from '../../../src/policy/match/regexp.ts';
import type { MatchTerm } from '../../../src/labels/types.ts';
import { withSeed, type Prng } from '../../helpers/prng.ts';

const view = (labels: Record<string, string>, annotations: Record<string, string> = {}): NodeView => ({
  name: 'n1',
  labels,
  annotations,
  fields: {},
});
const regexTerm = (...values: string[]): MatchTerm => ({ annotation: 'v', operator: 'InRegexp', values });
const holds = (pattern: string, value: string) => evalTerm(view({}, { v: value }), regexTerm(pattern));

/** Compiles a NodeLabelRule whose one term is InRegexp over `values`; its errors. */
const regexRuleErrors = (...values: string[]) =>
  compileRule({
    apiVersion: 'berth.dev/v1alpha1',
    kind: 'NodeLabelRule',
    metadata: { name: 'r' },
    spec: { match: { anyOf: [regexTerm(...values)] }, labels: { 'example.com/x': 'true' } },
  }).errors;

describe('InRegexp: RE2 semantics', () => {
  test('finds a match anywhere, like Go regexp.MatchString in Kubernetes and node-feature-discovery', () => {
    assert.equal(holds('^v5\\.', 'v5.15.0'), true);
    assert.equal(holds('5\\.15', 'v5.15.0'), true, 'unanchored');
    assert.equal(holds('^5', 'v5.15.0'), false);
    assert.equal(holds('(?i)TESLA', 'nvidia-tesla-t4'), true);
    assert.equal(holds('[[:digit:]]+-azure$', '5.15.0-1051-azure'), true);
    assert.equal(holds('(?P<major>\\d+)\\.(?<minor>\\d+)', '6.1'), true, 'named groups, both spellings');
    assert.equal(holds('\\pL\\d', 'é1'), true, 'Unicode classes');
    assert.equal(holds('a.c', 'a\nc'), false, 'dot does not match a line break');
  });

  for (const [what, pattern] of [
    ['a backreference', '(a)\\1'],
    ['a lookahead', 'a(?=b)'],
    ['a negative lookahead', 'a(?!b)'],
    ['a lookbehind', '(?<=a)b'],
    ['a negative lookbehind', '(?<!a)b'],
    ['an atomic group', '(?>a+)b'],
    ['a possessive quantifier', 'a++b'],
    ['a named backreference', '(?P<x>a)\\k<x>'],
  ] as const) {
    test(`${what} makes the rule Invalid, saying RE2 cannot run it`, () => {
      const errors = regexRuleErrors(pattern).join('\n');
      assert.match(errors, /bad regular expression/);
      assert.match(errors, /RE2 syntax|invalid|unsupported/);
    });
  }

  test('the error for a backreference names RE2 syntax', () => {
    assert.match(
      regexRuleErrors('(a)\\1').join('\n'),
      /RE2 syntax, as Kubernetes and node-feature-discovery use/,
    );
  });

  test('a repeat count above 1000 is RE2 syntax error, as in Go', () => {
    assert.match(regexRuleErrors('a{1001}').join('\n'), /invalid repeat count/);
  });
});

describe('InRegexp: bounded cost', () => {
  test(`one value compiles to at most ${REGEXP_PROGRAM_MAX} instructions`, () => {
    assert.deepEqual(regexRuleErrors('[a-z]{200}'), []);
    assert.match(
      regexRuleErrors('.{1000}').join('\n'),
      /compiles to 1002 RE2 instructions; one value may have at most 250/,
    );
  });

  test(`all of a rule's values together compile to at most ${RULE_REGEXP_PROGRAM_MAX}`, () => {
    const big = '[a-z]{240}'; // 242 instructions
    assert.deepEqual(regexRuleErrors(big, big, big, big), []);
    const errors = regexRuleErrors(big, big, big, big, big);
    assert.equal(errors.length, 1, errors.join('\n'));
    assert.match(errors[0]!, /match\.anyOf\[0\]: bad regular expression "\[a-z\]\{240\}": .*\(32 left\)/);
  });

  test('a pattern whose program would be huge is refused before compiling (compiling it took seconds)', () => {
    const huge = 'a{1000}'.repeat(146); // 1022 characters, 146,002 instructions
    const t0 = performance.now();
    const errors = regexRuleErrors(huge);
    const ms = performance.now() - t0;
    assert.match(errors.join('\n'), /an estimated \d+ RE2 instructions/);
    assert.ok(ms < 100, `refusing took ${ms.toFixed(0)} ms`);
  });

  test('checking a rule stops once its patterns are too many to compile: 96 terms of 64 values each', () => {
    const terms = Array.from({ length: 96 }, (_, i) => ({
      label: 'a',
      operator: 'InRegexp' as const,
      values: Array.from({ length: 64 }, (_, j) => `[a-z]{${90 + ((i + j) % 10)}}`),
    }));
    const t0 = performance.now();
    const errors = compileRule({
      apiVersion: 'berth.dev/v1alpha1',
      kind: 'NodeLabelRule',
      metadata: { name: 'r' },
      spec: {
        match: { allOf: terms.slice(0, 32), anyOf: terms.slice(32) },
        labels: { 'example.com/x': 'true' },
      },
    }).errors;
    const ms = performance.now() - t0;
    assert.match(errors.join('\n'), /too many or too large regular expressions in one rule/);
    assert.ok(ms < 1000, `checking took ${ms.toFixed(0)} ms`);
  });

  test(`Gt, Lt and InRegexp read at most ${MATCH_INPUT_MAX} characters of a value`, () => {
    assert.equal(holds('x', 'x'.repeat(MATCH_INPUT_MAX)), true);
    assert.equal(holds('x', 'x'.repeat(MATCH_INPUT_MAX + 1)), false);
    const digits = '9'.repeat(MATCH_INPUT_MAX + 1);
    assert.equal(
      evalTerm(view({}, { v: digits }), { annotation: 'v', operator: 'Gt', values: ['1'] }),
      false,
    );
    assert.equal(
      evalTerm(view({}, { v: digits.slice(1) }), { annotation: 'v', operator: 'Gt', values: ['1'] }),
      true,
    );
  });

  // Classic catastrophic-backtracking patterns: exponential or high-degree polynomial for a
  // backtracking engine (the issue's `(a+)+$` never returned), linear for RE2.
  const classic: [pattern: string, input: string, expected: boolean][] = [
    ['(a+)+$', `${'a'.repeat(40)}b`, false],
    ['^(a+)+$', `${'a'.repeat(40)}b`, false],
    ['(a|a)*$', `${'a'.repeat(40)}b`, true],
    ['(a|aa)+$', `${'a'.repeat(40)}b`, false],
    ['(a*)*b', 'a'.repeat(MATCH_INPUT_MAX), false],
    ['(.*a){20}', `${'a'.repeat(19)}${'b'.repeat(1000)}`, false],
    ['^(\\w+\\s?)*$', `${'word '.repeat(40)}!`, false],
    ['(x+x+)+y', 'x'.repeat(MATCH_INPUT_MAX), false],
    ['^(([a-z])+.)+[A-Z]([a-z])+$', `${'a'.repeat(60)}!`, false],
    [
      '^([a-zA-Z0-9])(([\\-.]|[_]+)?([a-zA-Z0-9]+))*(@){1}[a-z0-9]+[.]{1}(([a-z]{2,3})|([a-z]{2,3}[.]{1}[a-z]{2,3}))$',
      `${'a'.repeat(60)}!`,
      false,
    ],
    ['^(\\d+)*$', `${'1'.repeat(60)}x`, false],
    ['(?:a|b|ab)*c', 'ab'.repeat(MATCH_INPUT_MAX / 2), false],
    ['((ab)*)*c', 'ab'.repeat(MATCH_INPUT_MAX / 2), false],
    ['(\\pL{200})', 'é'.repeat(MATCH_INPUT_MAX), true],
  ];

  test(`${classic.length} classic ReDoS patterns each match in milliseconds (in a worker, so a backtracking engine fails instead of hanging)`, async () => {
    const results = await inWorker(classic, 30_000);
    for (const [pattern, input, expected] of classic) {
      const r = results.find((x) => x.pattern === pattern);
      assert.ok(r, `no result for ${pattern}: it did not finish`);
      assert.equal(r.held, expected, `${pattern} on ${input.slice(0, 20)}… (${input.length} chars)`);
      // Generous for a loaded two-core machine; a backtracking engine needs hours for the first one.
      assert.ok(r.ms < 500, `${pattern} took ${r.ms.toFixed(0)} ms`);
    }
  });

  test('the bound on program size holds for generated patterns, and lets every value within the limit through', async () => {
    await withSeed('programSizeBound', (r) => {
      let compiled = 0;
      for (let i = 0; i < 400; i++) {
        const p = randomPattern(r, 3);
        let size: number;
        try {
          size = RE2JS.compile(p).programSize();
        } catch {
          continue; // not RE2 syntax: nothing to bound
        }
        compiled++;
        const bound = programSizeBound(p);
        assert.ok(bound >= size, `${JSON.stringify(p)}: bound ${bound} < program ${size}`);
        // compileRegexp refuses unseen only above 10 x the limit: no value within it may get there.
        if (size <= REGEXP_PROGRAM_MAX)
          assert.ok(
            bound <= 10 * REGEXP_PROGRAM_MAX,
            `${JSON.stringify(p)}: bound ${bound} for program ${size}`,
          );
      }
      assert.ok(compiled > 200, `only ${compiled} of 400 generated patterns compiled`);
    });
  });
});

/** A random regular expression over a small alphabet, `depth` levels of groups deep. */
function randomPattern(r: Prng, depth: number): string {
  const atoms = ['a', 'b', '.', '\\d', '\\pL', '[a-c]', '[^x]', '[[:alpha:]]', '\\Qa(\\E', '^', '$', '\\b'];
  const quantifiers = [
    '',
    '',
    '*',
    '+',
    '?',
    '*?',
    '{2}',
    '{0,3}',
    '{5,}',
    `{${r.int(60)}}`,
    `{1,${r.int(40) + 1}}`,
  ];
  let out = '';
  for (let i = 0, n = 1 + r.int(4); i < n; i++) {
    const atom =
      depth > 0 && r.chance(0.35)
        ? `(${r.pick(['', '?:', '?i:', '?P<g>'])}${randomPattern(r, depth - 1)}${r.chance(0.3) ? `|${randomPattern(r, depth - 1)}` : ''})`
        : r.pick(atoms);
    out += atom + r.pick(quantifiers);
  }
  return out;
}

interface Timed {
  pattern: string;
  held: boolean;
  ms: number;
}

/** Evaluates each case with evalTerm in a worker thread; gives up (terminating it) after timeoutMs. */
async function inWorker(cases: [string, string, boolean][], timeoutMs: number): Promise<Timed[]> {
  const code = `
    const { parentPort, workerData } = require('node:worker_threads');
    import(workerData.module).then(({ evalTerm }) => {
      const term = (p) => ({ annotation: 'v', operator: 'InRegexp', values: [p] });
      const view = (v) => ({ name: 'n', labels: {}, annotations: { v }, fields: {} });
      evalTerm(view('warm up the JIT'), term('^w\\\\w+'));
      for (const [pattern, input] of workerData.cases) {
        const t0 = performance.now();
        const held = evalTerm(view(input), term(pattern));
        parentPort.postMessage({ pattern, held, ms: performance.now() - t0 });
      }
      parentPort.postMessage('done');
    });`;
  const module = new URL('../../../src/labels/match.ts', import.meta.url).href;
  const worker = new Worker(code, { eval: true, workerData: { module, cases } });
  const results: Timed[] = [];
  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () =>
          reject(
            new Error(
              `matching did not finish in ${timeoutMs} ms; stuck after ${results.length} cases, on ${cases[results.length]?.[0]}`,
            ),
          ),
        timeoutMs,
      );
      worker.on('message', (m: Timed | 'done') => {
        if (m !== 'done') results.push(m);
        else {
          clearTimeout(timer);
          resolve();
        }
      });
      worker.on('error', (e) => {
        clearTimeout(timer);
        reject(e);
      });
    });
  } finally {
    await worker.terminate();
  }
  return results;
}

describe('templates', () => {
  test('parsing is linear: hostile 4 KiB values return at once (a backtracking parser took seconds)', () => {
    for (const value of [
      `{{${' '.repeat(4090)}`,
      '{{'.repeat(2048),
      `${'{{ '.repeat(1000)}}}`,
      '{{ }}'.repeat(800),
      `{{ label "${'x'.repeat(4000)}`,
      `{{ label ${' '.repeat(4000)}"x }}`,
    ]) {
      const t0 = performance.now();
      templateErrors(value);
      renderTemplate(value, view({ x: 'y' }), undefined);
      const ms = performance.now() - t0;
      assert.ok(ms < 50, `${JSON.stringify(value.slice(0, 20))}… took ${ms.toFixed(0)} ms`);
    }
  });

  test('unknown expressions and fields are errors; unclosed braces are text', () => {
    assert.deepEqual(templateErrors('{{ .nope }}'), ['unknown template expression {{ .nope }}']);
    assert.deepEqual(templateErrors('{{ field "gpu" }}'), ['unknown node field "gpu" in {{ field "gpu" }}']);
    assert.deepEqual(templateErrors('{{ label "a" '), []);
    assert.deepEqual(renderTemplate('x-{{ label "a" ', view({ a: '1' }), undefined), {
      value: 'x-{{ label "a" ',
    });
  });

  test("an object's inherited members are no field, label or annotation", () => {
    for (const name of ['constructor', '__proto__', 'toString', 'hasOwnProperty'])
      assert.deepEqual(templateErrors(`{{ field "${name}" }}`), [
        `unknown node field "${name}" in {{ field "${name}" }}`,
      ]);
    for (const read of ['label', 'annotation'])
      for (const name of ['__proto__', 'constructor'])
        assert.deepEqual(renderTemplate(`v{{ ${read} "${name}" }}`, view({}), undefined), {
          missing: `{{ ${read} "${name}" }}`,
        });
    // A label that really has such a name is read like any other.
    assert.deepEqual(renderTemplate('{{ label "constructor" }}', view({ constructor: 'x' }), undefined), {
      value: 'x',
    });
  });

  test('a rendering never exceeds the longest value any output takes', () => {
    const big = 'x'.repeat(3000);
    assert.deepEqual(renderTemplate('{{ annotation "big" }}', view({}, { big }), undefined), { value: big });
    assert.deepEqual(
      renderTemplate('{{ annotation "big" }}{{ annotation "big" }}', view({}, { big }), undefined),
      {
        error: 'renders to more than 4096 characters',
      },
    );
  });

  test('.match.value of a term that holds for a missing key is a missing input', () => {
    const first = { term: { label: 'k', operator: 'DoesNotExist' as const }, key: 'k', value: undefined };
    assert.deepEqual(renderTemplate('{{ .match.key }}', view({}), first), { value: 'k' });
    assert.deepEqual(renderTemplate('v{{ .match.value }}', view({}), first), {
      missing: '{{ .match.value }}',
    });
  });
});
