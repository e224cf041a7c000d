import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  admissionSelection,
  AdmissionScope,
  MAX_SCOPE_TERMS,
  SCOPE_CONDITION,
  type ScopeTerm,
} from '../../../src/policy/admission.ts';
import { celString, namespaceNameCel, selectorCel } from '../../../src/policy/match/cel.ts';
import type { KubeObject } from '../../../src/runtime/api/meta.ts';
import { rootLogger } from '../../../src/runtime/observability/log.ts';

const app = (v: string): ScopeTerm => ({ objectSelector: { matchLabels: { app: v } } });
const conditionOf = (terms: ScopeTerm[]): string => {
  const { selection } = admissionSelection(terms);
  assert.equal(selection.send, 'some');
  const [c, ...rest] = (selection.send === 'some' && selection.matchConditions) || [];
  assert.equal(rest.length, 0);
  assert.equal(c?.name, SCOPE_CONDITION);
  return c!.expression;
};

describe('celString', () => {
  test('quotes, backslashes and control characters are escaped, never passed through', () => {
    assert.equal(celString('a"b'), '"a\\u0022b"');
    assert.equal(celString('a\\b'), '"a\\u005cb"');
    assert.equal(celString('x\n) || true || ("'), '"x\\u000a) || true || (\\u0022"');
    assert.equal(celString('é😀'), '"\\u00e9\\U0001f600"');
  });

  test('a lone surrogate has no CEL spelling', () => {
    assert.equal(celString('a\ud800'), undefined);
  });
});

describe('selectorCel', () => {
  test('each operator over the object labels, guarded for an object without labels', () => {
    assert.equal(
      selectorCel({ matchLabels: { app: 'web' } }),
      '(has(object.metadata.labels) && "app" in object.metadata.labels && object.metadata.labels["app"] in ["web"])',
    );
    assert.equal(
      selectorCel({ matchExpressions: [{ key: 'tier', operator: 'NotIn', values: ['a', 'b'] }] }),
      '!(has(object.metadata.labels) && "tier" in object.metadata.labels && object.metadata.labels["tier"] in ["a", "b"])',
    );
    assert.equal(
      selectorCel({
        matchExpressions: [
          { key: 'x', operator: 'Exists' },
          { key: 'y', operator: 'DoesNotExist' },
        ],
      }),
      '(has(object.metadata.labels) && "x" in object.metadata.labels) && !(has(object.metadata.labels) && "y" in object.metadata.labels)',
    );
  });

  test('an empty selector or none selects everything', () => {
    assert.equal(selectorCel({}), 'true');
    assert.equal(selectorCel(undefined), 'true');
  });
});

describe('namespaceNameCel', () => {
  const name = 'kubernetes.io/metadata.name';
  test('what a selector says of the name, over request.namespace', () => {
    assert.equal(namespaceNameCel({ matchLabels: { [name]: 'a' } }, name), 'request.namespace in ["a"]');
    assert.equal(
      namespaceNameCel({ matchExpressions: [{ key: name, operator: 'NotIn', values: ['b'] }] }, name),
      '!(request.namespace in ["b"])',
    );
  });

  test('other labels are left out: the expression selects more, never less', () => {
    assert.equal(namespaceNameCel({ matchLabels: { team: 'a' } }, name), 'true');
  });
});

describe('admissionSelection', () => {
  test('no policy: no webhook entry', () => {
    assert.deepEqual(admissionSelection([]), { selection: { send: 'none' } });
  });

  test('a policy that selects everything: everything, as without a scope', () => {
    assert.deepEqual(admissionSelection([app('web'), {}]).selection, { send: 'all' });
    assert.deepEqual(admissionSelection([{ namespaceSelector: {}, objectSelector: {} }]).selection, {
      send: 'all',
    });
  });

  test('one policy: its own selectors, no CEL', () => {
    const term = {
      namespaceSelector: { matchLabels: { team: 'a' } },
      objectSelector: { matchLabels: { app: 'web' } },
    };
    assert.deepEqual(admissionSelection([term]), { selection: { send: 'some', ...term } });
    assert.deepEqual(admissionSelection([{ namespaceSelector: term.namespaceSelector }]), {
      selection: { send: 'some', namespaceSelector: term.namespaceSelector },
    });
  });

  test('policies that say the same (in any order) count once', () => {
    const a = {
      objectSelector: { matchExpressions: [{ key: 'x', operator: 'In' as const, values: ['1', '2'] }] },
    };
    const b = {
      objectSelector: { matchExpressions: [{ key: 'x', operator: 'In' as const, values: ['2', '1'] }] },
    };
    assert.deepEqual(admissionSelection([a, b]), { selection: { send: 'some', ...a } });
  });

  test('namespace selectors on one key with In: one In of every value', () => {
    const ns = (v: string) => ({ namespaceSelector: { matchLabels: { team: v } } });
    assert.deepEqual(admissionSelection([ns('b'), ns('a')]).selection, {
      send: 'some',
      namespaceSelector: { matchExpressions: [{ key: 'team', operator: 'In', values: ['a', 'b'] }] },
    });
  });

  test('different pod selectors in the same namespaces: the namespace selector, and one condition OR-ing them', () => {
    const namespaceSelector = { matchLabels: { team: 'a' } };
    const { selection } = admissionSelection([
      { ...app('web'), namespaceSelector },
      { ...app('db'), namespaceSelector },
    ]);
    assert.equal(selection.send, 'some');
    assert.deepEqual(selection.send === 'some' && selection.namespaceSelector, namespaceSelector);
    assert.equal(
      conditionOf([app('web'), app('db')]),
      `((${selectorCel(app('web').objectSelector)})) || ((${selectorCel(app('db').objectSelector)}))`,
    );
  });

  test('namespaces by name go into the condition, over request.namespace', () => {
    const named = (ns: string, a: string) => ({
      ...app(a),
      namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': ns } },
    });
    const expr = conditionOf([named('n1', 'web'), named('n2', 'db')]);
    assert.match(expr, /\(request\.namespace in \["n1"\]\)/);
    assert.match(expr, /\(request\.namespace in \["n2"\]\)/);
  });

  test('a policy by namespace labels alone, beside another: CEL cannot see the namespace, so everything', () => {
    const r = admissionSelection([{ namespaceSelector: { matchLabels: { team: 'a' } } }, app('web')]);
    assert.deepEqual(r.selection, { send: 'all' });
    assert.match(r.broad!, /namespaces by labels/);
  });

  test('too many distinct policies, or too long a condition: everything, and says why', () => {
    const many = Array.from({ length: MAX_SCOPE_TERMS + 1 }, (_, i) => app(`a${i}`));
    assert.deepEqual(admissionSelection(many).selection, { send: 'all' });
    assert.match(admissionSelection(many).broad!, /more than 32/);
    const long = [app('x'.repeat(5000)), app('y'.repeat(5000))];
    assert.deepEqual(admissionSelection(long).selection, { send: 'all' });
    assert.match(admissionSelection(long).broad!, /characters of CEL/);
  });

  test('a hostile label value stays a string literal', () => {
    const expr = conditionOf([app('") || true || ("'), app('b')]);
    assert.ok(!expr.includes('") || true'), expr);
  });
});

describe('AdmissionScope', () => {
  const policy = (name: string, generation: number, uid = name): KubeObject => ({
    metadata: { name, uid, generation },
  });
  const scopeOf = (objects: KubeObject[]) => {
    const handlers: { onAdd?: () => void }[] = [];
    const scope = new AdmissionScope({
      webhook: 'w',
      objects: { list: () => objects, addEventHandler: (h) => handlers.push(h as never) },
      terms: () => objects.map(() => app('web')),
      log: rootLogger,
    });
    return { scope, handlers };
  };

  test('covers everything while no registrar engages it (registered by the install, webhooks off, stopped)', () => {
    const { scope } = scopeOf([policy('p', 1)]);
    assert.equal(scope.covers(policy('p', 1)), true);
    const release = scope.engage();
    assert.equal(scope.covers(policy('p', 1)), false);
    release();
    release();
    assert.equal(scope.covers(policy('p', 1)), true);
  });

  test('covers a generation once a selection computed from it is applied, and says so once', () => {
    const objects = [policy('p', 1)];
    const { scope } = scopeOf(objects);
    scope.engage();
    const covered: string[][] = [];
    scope.onCovered((names) => covered.push(names));
    const { token } = scope.selection();
    objects[0] = policy('p', 2);
    assert.equal(scope.covers(objects[0]), false);
    scope.applied(token);
    assert.equal(scope.covers(policy('p', 1)), true);
    assert.equal(scope.covers(objects[0]), false, 'generation 2 came after the selection');
    scope.applied(scope.selection().token);
    assert.equal(scope.covers(objects[0]), true);
    scope.applied(scope.selection().token);
    assert.deepEqual(covered, [['p'], ['p']]);
  });

  test('a policy deleted and made again under its name is not covered by its predecessor', () => {
    const objects = [policy('p', 1, 'old')];
    const { scope } = scopeOf(objects);
    scope.engage();
    scope.applied(scope.selection().token);
    assert.equal(scope.covers(policy('p', 1, 'new')), false);
  });
});
