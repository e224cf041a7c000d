import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { regexpErrors, regexpsOf } from '../../../src/policy/match/regexp.ts';
import {
  expressionHolds,
  expressionProblems,
  MATCH_INPUT_MAX,
  OPERATORS,
  requirementHolds,
  requirementProblems,
  valueAt,
  type MatchExpression,
  type Operator,
} from '../../../src/policy/match/requirement.ts';
import {
  LABEL_SYNTAX,
  selectorMatches,
  selectorRequirements,
  type LabelSelector,
  type LabelSelectorRequirement,
} from '../../../src/policy/match/selector.ts';
import { withSeed } from '../../helpers/prng.ts';

describe('expressionProblems: the values each operator takes', () => {
  test('Exists and DoesNotExist take none', () => {
    for (const operator of ['Exists', 'DoesNotExist'] as const) {
      assert.deepEqual(expressionProblems({ operator }), []);
      assert.deepEqual(expressionProblems({ operator, values: [] }), []);
      assert.deepEqual(expressionProblems({ operator, values: ['x'] }), [
        `operator ${operator} takes no values`,
      ]);
    }
  });
  test('In, NotIn and InRegexp need at least one', () => {
    for (const operator of ['In', 'NotIn', 'InRegexp'] as const) {
      assert.deepEqual(expressionProblems({ operator, values: ['a', 'b'] }), []);
      assert.deepEqual(expressionProblems({ operator }), [`operator ${operator} needs at least one value`]);
    }
  });
  test('Gt and Lt take exactly one integer', () => {
    for (const operator of ['Gt', 'Lt'] as const) {
      assert.deepEqual(expressionProblems({ operator, values: ['-12'] }), []);
      assert.deepEqual(expressionProblems({ operator, values: ['1.5'] }), [
        `operator ${operator} takes exactly one integer value`,
      ]);
      assert.deepEqual(expressionProblems({ operator, values: ['1', '2'] }), [
        `operator ${operator} takes exactly one integer value`,
      ]);
      assert.deepEqual(expressionProblems({ operator }), [
        `operator ${operator} needs at least one value`,
        `operator ${operator} takes exactly one integer value`,
      ]);
    }
  });
});

describe('requirementProblems', () => {
  test('checks key and values only where a syntax applies', () => {
    const r = { key: 'bad key', operator: 'In' as const, values: ['ok', 'not ok!'] };
    assert.deepEqual(requirementProblems(r), []);
    const problems = requirementProblems(r, LABEL_SYNTAX);
    assert.deepEqual(
      problems.map((p) => [p.key, p.value]),
      [
        ['bad key', undefined],
        [undefined, 'not ok!'],
      ],
    );
    assert.match(problems[0]!.problem, /name part must consist of/);
    assert.match(problems[1]!.problem, /must be empty or consist of/);
  });
  test('reports the key, then the values for the operator, then each bad value', () => {
    const problems = requirementProblems({ key: 'a b', operator: 'Exists', values: ['x y'] }, LABEL_SYNTAX);
    assert.deepEqual(
      problems.map((p) => p.key ?? p.value ?? p.problem),
      ['a b', 'operator Exists takes no values', 'x y'],
    );
  });
});

describe('expressionHolds: Kubernetes semantics over a value or its absence', () => {
  const cases: [Operator, string[] | undefined, string | undefined, boolean][] = [
    ['In', ['a', 'b'], 'b', true],
    ['In', ['a'], 'c', false],
    ['In', ['a'], undefined, false],
    ['NotIn', ['a'], undefined, true],
    ['NotIn', ['a'], 'a', false],
    ['NotIn', ['a'], 'b', true],
    ['Exists', undefined, '', true],
    ['Exists', undefined, undefined, false],
    ['DoesNotExist', undefined, undefined, true],
    ['DoesNotExist', undefined, '', false],
    ['Gt', ['9'], '10', true],
    ['Gt', ['10'], '10', false],
    ['Lt', ['-1'], '-2', true],
    ['Gt', ['99999999999999999998'], '99999999999999999999', true],
    ['Gt', ['1'], 'x', false],
    ['Gt', ['1'], undefined, false],
    ['Lt', ['1'], undefined, false],
    ['InRegexp', ['^v5\\.'], 'v5.15.0', true],
    ['InRegexp', ['15'], 'v5.15.0', true],
    ['InRegexp', ['^v4'], 'v5.15.0', false],
    ['InRegexp', ['.*'], undefined, false],
  ];
  for (const [operator, values, value, want] of cases) {
    test(`${operator} ${JSON.stringify(values ?? [])} on ${value === undefined ? 'an absent key' : JSON.stringify(value)}: ${want}`, () => {
      assert.equal(expressionHolds({ operator, values }, value), want);
    });
  }
  test(`Gt, Lt and InRegexp read at most ${MATCH_INPUT_MAX} characters`, () => {
    const long = '9'.repeat(MATCH_INPUT_MAX + 1);
    assert.equal(expressionHolds({ operator: 'Gt', values: ['1'] }, long.slice(1)), true);
    assert.equal(expressionHolds({ operator: 'Gt', values: ['1'] }, long), false);
    assert.equal(expressionHolds({ operator: 'InRegexp', values: ['9'] }, long), false);
    assert.equal(expressionHolds({ operator: 'In', values: [long] }, long), true, 'In reads any length');
  });
  test('every operator is evaluated', () => {
    const seen = new Set(cases.map(([o]) => o));
    assert.deepEqual(
      [...OPERATORS].filter((o) => !seen.has(o)),
      [],
    );
  });
});

describe('valueAt and requirementHolds', () => {
  test('an inherited property is no label', () => {
    for (const key of ['constructor', 'toString', '__proto__', 'hasOwnProperty']) {
      assert.equal(valueAt({}, key), undefined, key);
      assert.equal(requirementHolds({ key, operator: 'Exists' }, {}), false, key);
      assert.equal(requirementHolds({ key, operator: 'DoesNotExist' }, {}), true, key);
      const own = Object.fromEntries([[key, 'v']]) as Record<string, string>;
      assert.equal(valueAt(own, key), 'v', key);
      assert.equal(requirementHolds({ key, operator: 'In', values: ['v'] }, own), true, key);
    }
  });
});

describe('InRegexp programs', () => {
  test('are compiled once per expression and kept with it', () => {
    const e: MatchExpression = { operator: 'InRegexp', values: ['^a', 'b$'] };
    const first = regexpsOf(e);
    assert.equal(first.length, 2);
    assert.equal(regexpsOf(e), first);
    assert.notEqual(regexpsOf({ ...e }), first, 'another expression has its own');
  });
  test('regexpErrors keeps the programs of the expressions it accepts', () => {
    const ok: MatchExpression = { operator: 'InRegexp', values: ['^x'] };
    const bad: MatchExpression = { operator: 'InRegexp', values: ['('] };
    const errors = regexpErrors([ok, bad, { operator: 'In', values: ['('] }]);
    assert.deepEqual([...errors.keys()], [bad]);
    assert.match(errors.get(bad)![0]!, /^bad regular expression "\(":/);
    assert.equal(regexpsOf(ok).length, 1);
  });
});

describe('label selectors through the kernel', () => {
  test('matchLabels entries are In requirements of one value, before matchExpressions', () => {
    assert.deepEqual(
      selectorRequirements({
        matchExpressions: [{ key: 'b', operator: 'Exists' }],
        matchLabels: { a: '1' },
      }),
      [
        { key: 'a', operator: 'In', values: ['1'] },
        { key: 'b', operator: 'Exists' },
      ],
    );
    assert.deepEqual(selectorRequirements(undefined), []);
  });

  // What metav1.LabelSelector means, written out plainly over a Map: every matchLabels entry is the
  // key's value, and each expression holds as apimachinery's labels.Requirement.Matches says.
  const reference = (sel: LabelSelector, labels: Record<string, string>): boolean => {
    const m = new Map(Object.entries(labels));
    for (const [k, v] of Object.entries(sel.matchLabels ?? {})) if (!m.has(k) || m.get(k) !== v) return false;
    return (sel.matchExpressions ?? []).every((r) => {
      const values = r.values ?? [];
      if (r.operator === 'In') return m.has(r.key) && values.includes(m.get(r.key)!);
      if (r.operator === 'NotIn') return !m.has(r.key) || !values.includes(m.get(r.key)!);
      if (r.operator === 'Exists') return m.has(r.key);
      return !m.has(r.key);
    });
  };

  const CASES = 5000;
  test(`selectorMatches agrees with a plain reference on ${CASES} generated selectors and label maps`, () =>
    withSeed('selector property', (r) => {
      // Few keys and values, so that selectors and labels meet often; inherited property names included.
      const keys = ['a', 'b', 'example.com/c', 'constructor', '__proto__', 'toString'];
      const vals = ['', '1', '2', 'x'];
      const some = <T>(items: readonly T[], max: number): T[] =>
        Array.from({ length: r.int(max + 1) }, () => r.pick(items));
      const record = (max: number) =>
        Object.fromEntries(some(keys, max).map((k) => [k, r.pick(vals)])) as Record<string, string>;
      const outcomes = { true: 0, false: 0 };
      for (let i = 0; i < CASES; i++) {
        const sel: LabelSelector = {};
        if (r.chance(0.5)) sel.matchLabels = record(2);
        if (r.chance(0.8)) {
          sel.matchExpressions = some(keys, 3).map((key): LabelSelectorRequirement => {
            const operator = r.pick(['In', 'NotIn', 'Exists', 'DoesNotExist'] as const);
            return operator === 'In' || operator === 'NotIn'
              ? { key, operator, values: [...new Set(some(vals, 3))] }
              : { key, operator };
          });
        }
        const labels = record(4);
        const want = reference(sel, labels);
        assert.equal(
          selectorMatches(sel, labels),
          want,
          `selector ${JSON.stringify(sel)} on labels ${JSON.stringify(labels)}`,
        );
        outcomes[`${want}`]++;
      }
      // Both answers must be common, or the comparison proves little.
      assert.ok(outcomes.true > CASES / 10 && outcomes.false > CASES / 10, JSON.stringify(outcomes));
    }));
});
