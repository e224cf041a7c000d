import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { parsePlacements, type ParseCache } from '../../../src/agents/parse.ts';
import { type AgentPlacementSpec } from '../../../src/agents/types.ts';
import { agentPlacementSpec } from '../../../src/agents/crd.ts';
import {
  claimKeyProblem,
  needsAcknowledgement,
  requiresLabel,
  validatePlacement,
} from '../../../src/agents/validate.ts';
import { selectorProblems } from '../../../src/policy/match/selector.ts';

// Through the real schema, so defaults apply as in the cluster.
const spec = (s: Record<string, unknown> = {}): AgentPlacementSpec =>
  agentPlacementSpec.parse({
    podSelector: { matchLabels: { app: 'ateom' } },
    owner: { uidLabel: 'ate.dev/pool-uid' },
    nodeLabel: { key: 'ate.dev/atelet' },
    claimAnnotationPrefix: 'ate.dev/claim.',
    ...s,
  });

describe('validatePlacement', () => {
  test('a usable placement has no problem', () => {
    assert.deepEqual(validatePlacement(spec()), []);
    assert.deepEqual(
      validatePlacement(
        spec({
          owner: { controllerRef: true },
          finalizer: { name: 'ate.dev/release' },
          waitForAgent: { port: 1 },
        }),
      ),
      [],
    );
  });

  // Each case breaks one thing; the problem names the field.
  const cases: [string, Record<string, unknown>, RegExp][] = [
    ['label key with a space', { nodeLabel: { key: 'ate dev/agent' } }, /^nodeLabel\.key /],
    ['label key with two slashes', { nodeLabel: { key: 'a/b/c' } }, /^nodeLabel\.key .*at most one/],
    ['label key name over 63', { nodeLabel: { key: `a/${'x'.repeat(64)}` } }, /^nodeLabel\.key .*63/],
    [
      'label value from a template',
      { nodeLabel: { key: 'a/b', value: '{{ label "x" }}' } },
      /^nodeLabel\.value /,
    ],
    ['label value with a newline', { nodeLabel: { key: 'a/b', value: 'a\nb' } }, /^nodeLabel\.value /],
    ['claim prefix with a space', { claimAnnotationPrefix: 'ate dev/claim.' }, /^claimAnnotationPrefix /],
    [
      'claim prefix leaving no room for a UID',
      { owner: { controllerRef: true }, claimAnnotationPrefix: `ate.dev/${'c'.repeat(30)}` },
      /^claimAnnotationPrefix .*63/,
    ],
    ['uidLabel not a label key', { owner: { uidLabel: 'pool uid' } }, /^owner\.uidLabel /],
    [
      'apiVersion with three parts',
      { owner: { uidLabel: 'p', apiVersion: 'a/b/c', kind: 'K' }, finalizer: { name: 'a.b/c' } },
      /^owner\.apiVersion /,
    ],
    [
      'kind with a dot',
      { owner: { uidLabel: 'p', apiVersion: 'v1', kind: 'Config.Map' }, finalizer: { name: 'a.b/c' } },
      /^owner\.kind /,
    ],
    [
      'finalizer without a domain',
      { owner: { uidLabel: 'p', apiVersion: 'v1', kind: 'ConfigMap' }, finalizer: { name: 'release' } },
      /^finalizer\.name .*qualified/,
    ],
    ['image with a space', { waitForAgent: { port: 1, image: 'busybox 1.36' } }, /^waitForAgent\.image /],
    [
      'In without values',
      { podSelector: { matchExpressions: [{ key: 'app', operator: 'In' }] } },
      /^podSelector\.matchExpressions\[0\]: operator In needs/,
    ],
    [
      'Exists with values',
      { podSelector: { matchExpressions: [{ key: 'app', operator: 'Exists', values: ['x'] }] } },
      /^podSelector\.matchExpressions\[0\]: operator Exists takes no/,
    ],
    [
      'namespaceSelector with a bad value',
      { namespaceSelector: { matchLabels: { team: '-ate' } } },
      /^namespaceSelector\.matchLabels\["team"\] value/,
    ],
    ['an empty podSelector', { podSelector: {} }, /every pod of the cluster.*acknowledgeAllPods/],
  ];
  for (const [name, s, want] of cases) {
    test(name, () => {
      const problems = validatePlacement(spec(s));
      assert.equal(problems.length, 1, problems.join('\n'));
      assert.match(problems[0]!, want);
    });
  }
});

describe('the acknowledgement', () => {
  test('a selector requires a label with matchLabels, In or Exists; NotIn and DoesNotExist do not', () => {
    assert.equal(requiresLabel(undefined), false);
    assert.equal(requiresLabel({}), false);
    assert.equal(requiresLabel({ matchLabels: {} }), false);
    assert.equal(requiresLabel({ matchLabels: { a: 'b' } }), true);
    assert.equal(requiresLabel({ matchExpressions: [{ key: 'a', operator: 'Exists' }] }), true);
    assert.equal(requiresLabel({ matchExpressions: [{ key: 'a', operator: 'In', values: ['x'] }] }), true);
    assert.equal(
      requiresLabel({
        matchExpressions: [
          { key: 'a', operator: 'NotIn', values: ['x'] },
          { key: 'b', operator: 'DoesNotExist' },
        ],
      }),
      false,
    );
  });

  test('is needed for every pod of the cluster, or every new pod of a namespace with waitForAgent', () => {
    const team = { namespaceSelector: { matchLabels: { team: 'ate' } } };
    const optOut = { podSelector: { matchExpressions: [{ key: 'skip', operator: 'DoesNotExist' }] } };
    assert.match(needsAcknowledgement(spec({ podSelector: {} }))!, /every pod of the cluster/);
    assert.match(needsAcknowledgement(spec({ ...optOut }))!, /every pod of the cluster/);
    assert.match(
      needsAcknowledgement(spec({ podSelector: {}, namespaceSelector: { matchExpressions: [] } }))!,
      /every pod of the cluster/,
    );
    assert.equal(needsAcknowledgement(spec({ podSelector: {}, ...team })), undefined);
    assert.match(
      needsAcknowledgement(spec({ podSelector: {}, ...team, waitForAgent: { port: 1 } }))!,
      /every new pod/,
    );
    assert.equal(needsAcknowledgement(spec({ waitForAgent: { port: 1 } })), undefined);
    // Acknowledged: usable.
    assert.deepEqual(
      validatePlacement(
        spec({ podSelector: {}, ...team, waitForAgent: { port: 1 }, acknowledgeAllPods: true }),
      ),
      [],
    );
    assert.equal(validatePlacement(spec({ podSelector: {}, acknowledgeAllPods: false })).length, 1);
  });
});

test('selectorProblems and claimKeyProblem', () => {
  assert.deepEqual(selectorProblems({ matchLabels: { 'a/b': 'c' } }, 's'), []);
  assert.equal(selectorProblems({ matchLabels: { 'a b': 'c d' } }, 's').length, 2);
  assert.equal(claimKeyProblem('ate.dev/claim.', 'A'), undefined);
  assert.match(claimKeyProblem('ate.dev/claim.', 'x'.repeat(63))!, /claim key "ate\.dev\/claim\.x+…": .*63/);
});

test('parsePlacements keeps what parses, with its problems, and says why the rest does not', () => {
  const obj = (name: string, s: unknown) => ({ metadata: { name }, spec: s });
  const { parsed, errors } = parsePlacements([
    obj('good', spec()),
    obj('bad-label', spec({ nodeLabel: { key: 'a b' } })),
    obj('no-owner', { podSelector: {} }),
  ]);
  assert.deepEqual(
    parsed.map((p) => [p.name, p.problems.length]),
    [
      ['good', 0],
      ['bad-label', 1],
    ],
  );
  assert.deepEqual([...errors.keys()], ['no-owner']);
  assert.match(errors.get('no-owner')!, /owner/);
});

test('huge values are refused fast, and quoted bounded and escaped', () => {
  const huge = 'x'.repeat(200_000);
  const started = performance.now();
  const problems = [
    ...validatePlacement(spec({ owner: { uidLabel: huge } })),
    ...validatePlacement(
      spec({
        owner: { uidLabel: 'p', apiVersion: `${huge}/v1`, kind: huge },
        finalizer: { name: 'a.b/c' },
      }),
    ),
    ...validatePlacement(spec({ podSelector: { matchLabels: { [huge]: `a\n${huge}` } } })),
  ];
  assert.ok(performance.now() - started < 100, `${performance.now() - started} ms`);
  assert.equal(problems.length, 5, problems.join('\n'));
  for (const p of problems) assert.ok(p.length < 400, p.slice(0, 500));
  assert.ok(
    problems.some((p) => p.includes('"a\\nxxx')),
    'a newline is escaped',
  );
});

test('parsePlacements with a cache parses a spec again only for a new generation', () => {
  const cache: ParseCache = new Map();
  const obj = (generation: number, key: string, status = {}) => ({
    metadata: { name: 'p', uid: 'u1', generation },
    spec: spec({ nodeLabel: { key } }),
    status,
  });
  const first = parsePlacements([obj(1, 'a/b')], cache).parsed[0]!;
  // A status write: same generation, same parse; the object is the new one.
  const statusWrite = obj(1, 'a/b', { claims: 1 });
  const second = parsePlacements([statusWrite], cache).parsed[0]!;
  assert.equal(second.spec, first.spec);
  assert.equal(second.obj, statusWrite);
  const third = parsePlacements([obj(2, 'bad key')], cache).parsed[0]!;
  assert.equal(third.problems.length, 1);
  assert.equal(parsePlacements([], cache).parsed.length, 0);
  assert.equal(cache.size, 0, 'deleted placements are forgotten');
});
