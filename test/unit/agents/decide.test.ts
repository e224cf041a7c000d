import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  checkOwnership,
  claimedOwners,
  decideNode,
  ownerOf,
  placementClaims,
  usablePlacements,
  type Placement,
} from '../../../src/agents/decide.ts';
import { parsePlacements } from '../../../src/agents/parse.ts';
import { AGENT_KEYS, FIELD_MANAGER, type AgentPlacementSpec } from '../../../src/agents/types.ts';
import { GATE_KEYS } from '../../../src/gates/types.ts';
import { KeyOwnership } from '../../../src/policy/nodes/ownership.ts';
import type { SlimPod } from '../../../src/policy/slim.ts';
import type { KubeObject } from '../../../src/runtime/api/meta.ts';

const spec = (s: Partial<AgentPlacementSpec> = {}): AgentPlacementSpec => ({
  podSelector: { matchLabels: { app: 'ateom' } },
  owner: { uidLabel: 'ate.dev/pool-uid' },
  nodeLabel: { key: 'ate.dev/atelet', value: 'true' },
  claimAnnotationPrefix: 'ate.dev/claim.',
  ...s,
});

const pod = (name: string, labels: Record<string, string>, extra: Partial<SlimPod> = {}): SlimPod => ({
  metadata: { name, namespace: 'ate', labels },
  spec: { nodeName: 'n1', containers: [] },
  status: { phase: 'Running' },
  ...extra,
});
const noLookup = () => undefined;
const nsLabels = () => ({});
const BERTH = 'berth-system';

describe('claims on a node', () => {
  const p: Placement = { name: 'atelet', spec: spec() };
  test('one claim per distinct owner, one label', () => {
    const pods = [
      pod('a1', { app: 'ateom', 'ate.dev/pool-uid': 'A' }),
      pod('a2', { app: 'ateom', 'ate.dev/pool-uid': 'A' }),
      pod('b1', { app: 'ateom', 'ate.dev/pool-uid': 'B' }),
    ];
    const d = decideNode(pods, [p], nsLabels, noLookup, BERTH);
    assert.deepEqual(d.desired.labels, { 'ate.dev/atelet': 'true' });
    assert.deepEqual(Object.keys(d.desired.annotations).sort(), ['ate.dev/claim.A', 'ate.dev/claim.B']);
    assert.deepEqual(d.placements.get('atelet')!.claims.get('A')!.pods, ['ate/a1', 'ate/a2']);
  });
  test('no counted pod: no claim and no label', () => {
    const pods = [
      pod('done', { app: 'ateom', 'ate.dev/pool-uid': 'A' }, { status: { phase: 'Succeeded' } }),
      pod('pending', { app: 'ateom', 'ate.dev/pool-uid': 'A' }, { spec: { containers: [] } }),
      pod('other', { app: 'web', 'ate.dev/pool-uid': 'A' }),
      pod('ownerless', { app: 'ateom' }),
    ];
    assert.deepEqual(decideNode(pods, [p], nsLabels, noLookup, BERTH).desired, {
      labels: {},
      annotations: {},
      taints: [],
    });
  });
  test('a namespaceSelector needs the namespace labels', () => {
    const sel: Placement = { name: 'x', spec: spec({ namespaceSelector: { matchLabels: { team: 'ate' } } }) };
    const pods = [pod('a1', { app: 'ateom', 'ate.dev/pool-uid': 'A' })];
    assert.equal(
      decideNode(pods, [sel], () => ({ team: 'ate' }), noLookup, BERTH).placements.get('x')!.claims.size,
      1,
    );
    assert.equal(
      decideNode(pods, [sel], () => ({ team: 'web' }), noLookup, BERTH).placements.get('x')!.claims.size,
      0,
    );
    assert.equal(
      decideNode(pods, [sel], () => undefined, noLookup, BERTH).placements.get('x')!.claims.size,
      0,
    );
  });
  test('two placements on one label key with different values: the first by name keeps it', () => {
    const a: Placement = {
      name: 'a',
      spec: spec({ nodeLabel: { key: 'agent', value: 'one' }, claimAnnotationPrefix: 'a/claim.' }),
    };
    const b: Placement = {
      name: 'b',
      spec: spec({ nodeLabel: { key: 'agent', value: 'two' }, claimAnnotationPrefix: 'b/claim.' }),
    };
    const pods = [pod('a1', { app: 'ateom', 'ate.dev/pool-uid': 'A' })];
    for (const order of [
      [a, b],
      [b, a],
    ]) {
      const d = decideNode(pods, order, nsLabels, noLookup, BERTH);
      assert.deepEqual(d.desired.labels, { agent: 'one' });
      assert.equal(d.placements.get('a')!.labelled, true);
      assert.equal(d.placements.get('b')!.labelled, false);
      assert.deepEqual(Object.keys(d.desired.annotations).sort(), ['a/claim.A', 'b/claim.A']);
    }
  });
});

describe('owners', () => {
  test('controllerRef mode follows a ReplicaSet to its Deployment', () => {
    const rs: KubeObject = {
      metadata: {
        name: 'web-7d9',
        namespace: 'ate',
        uid: 'rs-uid',
        ownerReferences: [
          { apiVersion: 'apps/v1', kind: 'Deployment', name: 'web', uid: 'dep-uid', controller: true },
        ],
      },
    };
    const p = pod(
      'w',
      { app: 'ateom' },
      {
        metadata: {
          name: 'w',
          namespace: 'ate',
          labels: { app: 'ateom' },
          ownerReferences: [
            { apiVersion: 'apps/v1', kind: 'ReplicaSet', name: 'web-7d9', uid: 'rs-uid', controller: true },
          ],
        },
      },
    );
    const owner = ownerOf(p, spec({ owner: { controllerRef: true } }), (_v, kind, ns, name) =>
      kind === 'ReplicaSet' && ns === 'ate' && name === 'web-7d9' ? rs : undefined,
    );
    assert.deepEqual(owner, {
      uid: 'dep-uid',
      description: 'Deployment/ate/web',
      ref: { apiVersion: 'apps/v1', kind: 'Deployment', namespace: 'ate', name: 'web' },
    });
    // Without the ReplicaSet in the cache, the ReplicaSet itself is the owner.
    assert.equal(ownerOf(p, spec({ owner: { controllerRef: true } }), noLookup)?.uid, 'rs-uid');
  });
  test("claimedOwners reads the claims under the prefix that Berth's field manager owns, and only those", () => {
    const applied = (manager: string, keys: string[]) => ({
      manager,
      operation: 'Apply',
      fieldsV1: { 'f:metadata': { 'f:annotations': Object.fromEntries(keys.map((k) => [`f:${k}`, {}])) } },
    });
    const node: KubeObject = {
      metadata: {
        annotations: { 'ate.dev/claim.A': 'x', 'ate.dev/claim.B': 'y', 'ate.dev/claim.': 'y', other: 'z' },
        managedFields: [
          applied(FIELD_MANAGER, ['ate.dev/claim.A', 'ate.dev/claim.', 'other']),
          // B: a hand edit, or the controller Berth replaces. Berth never prunes it, so no owner waits for it.
          { ...applied('kubectl-edit', ['ate.dev/claim.B']), operation: 'Update' },
        ],
      },
    };
    assert.deepEqual(claimedOwners(node, 'ate.dev/claim.', FIELD_MANAGER), ['A']);
    assert.deepEqual(claimedOwners(node, 'other.dev/claim.', FIELD_MANAGER), []);
  });
});

describe('protected namespaces', () => {
  const inNs = (ns: string) => [
    pod(
      'a1',
      { app: 'ateom', 'ate.dev/pool-uid': 'A' },
      { metadata: { name: 'a1', namespace: ns, labels: { app: 'ateom', 'ate.dev/pool-uid': 'A' } } },
    ),
  ];
  const claims = (ns: string, s: Partial<AgentPlacementSpec> = {}) =>
    decideNode(
      inNs(ns),
      [{ name: 'x', spec: spec(s) }],
      () => ({ 'kubernetes.io/metadata.name': ns }),
      noLookup,
      BERTH,
    ).placements.get('x')!.claims.size;

  test("kube-* and Berth's namespace are not selected by a selector that does not name them", () => {
    assert.equal(claims('ate'), 1);
    for (const ns of ['kube-system', 'kube-public', 'kube-node-lease', BERTH]) {
      assert.equal(claims(ns), 0, ns);
      assert.equal(claims(ns, { namespaceSelector: {} }), 0, `${ns}, empty namespaceSelector`);
      assert.equal(
        claims(ns, {
          namespaceSelector: {
            matchExpressions: [{ key: 'kubernetes.io/metadata.name', operator: 'NotIn', values: ['x'] }],
          },
        }),
        0,
        `${ns}, NotIn`,
      );
    }
    // A namespace merely starting with "kube" is not protected.
    assert.equal(claims('kubeflow'), 1);
  });

  test('naming one explicitly selects it, and only it', () => {
    const named = (ns: string) => ({
      namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': ns } },
    });
    assert.equal(claims('kube-system', named('kube-system')), 1);
    assert.equal(claims(BERTH, named(BERTH)), 1);
    const listed = {
      namespaceSelector: {
        matchExpressions: [
          { key: 'kubernetes.io/metadata.name', operator: 'In' as const, values: ['ate', 'kube-public'] },
        ],
      },
    };
    assert.equal(claims('kube-public', listed), 1);
    assert.equal(claims('kube-system', listed), 0);
  });
});

test('an owner UID that makes no valid claim key is rejected, and the other claims stay', () => {
  const long = 'u'.repeat(63);
  const pods = [
    pod('a1', { app: 'ateom', 'ate.dev/pool-uid': 'A' }),
    pod('l1', { app: 'ateom', 'ate.dev/pool-uid': long }),
  ];
  const d = decideNode(pods, [{ name: 'x', spec: spec() }], nsLabels, noLookup, BERTH);
  assert.deepEqual(Object.keys(d.desired.annotations), ['ate.dev/claim.A']);
  const r = d.placements.get('x')!;
  assert.deepEqual([...r.claims.keys()], ['A']);
  assert.equal(r.rejected.length, 1);
  assert.match(
    r.rejected[0]!,
    /^pod ate\/l1: claim key "ate\.dev\/claim\.u+…": name part must be no more than 63/,
  );
});

describe('what the agents claim on nodes', () => {
  const obj = (name: string, s: Partial<AgentPlacementSpec>) => ({ metadata: { name }, spec: spec(s) });
  const { parsed } = parsePlacements([
    obj('atelet', {}),
    obj('bad', { nodeLabel: { key: 'a b', value: 'true' }, claimAnnotationPrefix: 'bad.dev/claim.' }),
    obj('sneaky', {
      nodeLabel: { key: 'warmup.gates.berth.dev/agent', value: 'true' },
      claimAnnotationPrefix: 'sneaky.dev/claim.',
    }),
  ]);
  const keys = new KeyOwnership();
  keys.declare('gates', GATE_KEYS);
  keys.declare('agents', AGENT_KEYS);
  const checked = checkOwnership(parsed, (k) => keys.violations('agents', k));

  test("checkOwnership adds a gate's key to a placement's problems, and leaves the others as they are", () => {
    assert.deepEqual(checked[2]!.problems, ['label warmup.gates.berth.dev/agent is owned by startup gates']);
    assert.equal(checked[0], parsed[0]);
    assert.equal(checked[1], parsed[1]);
    assert.equal(parsed[2]!.problems.length, 0, 'the parsed placement is not changed');
  });

  test('a claim prefix overlapping that of a placement first by name is a problem of the later one', () => {
    const { parsed: two } = parsePlacements([
      obj('b', { nodeLabel: { key: 'b.dev/agent', value: 'true' }, claimAnnotationPrefix: 'ate.dev/claim.' }),
      obj('a', {}),
      obj('c', {
        nodeLabel: { key: 'c.dev/agent', value: 'true' },
        claimAnnotationPrefix: 'ate.dev/claim.x',
      }),
      obj('d', { nodeLabel: { key: 'd.dev/agent', value: 'true' }, claimAnnotationPrefix: 'ate.dev/claim' }),
      obj('e', {
        nodeLabel: { key: 'e.dev/agent', value: 'true' },
        claimAnnotationPrefix: 'other.dev/claim.',
      }),
      // Invalid (a bad label key): it holds no prefix, so f's is free.
      obj('0', { nodeLabel: { key: 'a b', value: 'true' }, claimAnnotationPrefix: 'free.dev/' }),
      obj('f', { nodeLabel: { key: 'f.dev/agent', value: 'true' }, claimAnnotationPrefix: 'free.dev/f.' }),
    ]);
    const problems = checkOwnership(two, () => []).map((p) => [p.name, p.problems.length]);
    assert.deepEqual(problems, [
      ['b', 1],
      ['a', 0],
      ['c', 1],
      ['d', 1],
      ['e', 0],
      ['0', 1],
      ['f', 0],
    ]);
    assert.match(
      checkOwnership(two, () => [])[0]!.problems[0]!,
      /^claimAnnotationPrefix "ate\.dev\/claim\." overlaps "ate\.dev\/claim\." of AgentPlacement a \(first by name\)/,
    );
  });

  test('only usable placements claim: an invalid or outranked one leaves its keys to others', () => {
    assert.deepEqual(
      usablePlacements(checked).map((p) => p.name),
      ['atelet'],
    );
    assert.deepEqual(placementClaims(checked), [
      { pattern: { kind: 'label', key: 'ate.dev/atelet' }, owner: 'AgentPlacement atelet' },
      { pattern: { kind: 'annotation', prefix: 'ate.dev/claim.' }, owner: 'AgentPlacement atelet' },
    ]);
    // Unchecked, the outranked placement would claim its label and claims.
    assert.equal(placementClaims(parsed).length, 4);
  });
});
