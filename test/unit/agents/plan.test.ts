import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { ClusterView } from '../../../src/agents/explain.ts';
import { planPlacements, type PlacementChange } from '../../../src/agents/plan.ts';
import type { KeyPattern } from '../../../src/policy/nodes/ownership.ts';
import type { SlimPod } from '../../../src/policy/slim.ts';

const BERTH = 'berth-system';

const pod = (name: string, node: string | undefined, labels: Record<string, string>): SlimPod => ({
  metadata: { name, namespace: 'ate', labels, annotations: {} },
  spec: { ...(node ? { nodeName: node } : {}), containers: [] },
  status: { phase: 'Running' },
});

const view: ClusterView = {
  pods: [
    pod('w1', 'n1', { app: 'w', pool: 'A' }),
    pod('w2', 'n1', { app: 'w', pool: 'B' }),
    pod('w3', 'n2', { app: 'w', pool: 'A' }),
    pod('pending', undefined, { app: 'w', pool: 'A' }),
    pod('other', 'n3', { app: 'other', pool: 'O' }),
  ],
  namespaces: new Map([['ate', { 'kubernetes.io/metadata.name': 'ate' }]]),
  owners: new Map(),
};

const placement = (name: string, spec: Record<string, unknown> = {}) => ({
  apiVersion: 'berth.dev/v1alpha1',
  kind: 'AgentPlacement',
  metadata: { name },
  spec: {
    owner: { uidLabel: 'pool' },
    nodeLabel: { key: `x/${name}` },
    claimAnnotationPrefix: `x/${name}.`,
    podSelector: { matchLabels: { app: 'w' } },
    ...spec,
  },
});

const change = (c: Partial<PlacementChange>): PlacementChange => ({
  current: [],
  change: [],
  deleting: false,
  view,
  nodes: ['n1', 'n2', 'n3'],
  owned: () => [],
  berthNamespace: BERTH,
  ...c,
});

/** The effects as `node op what (by)`, sorted. */
const lines = (p: ReturnType<typeof planPlacements>) =>
  p.effects.map((e) => `${e.name} ${e.op} ${e.what} (${e.by})`).sort();

test('applying a placement: the nodes of its counted pods gain its label and one claim per owner', () => {
  const p = planPlacements(change({ change: [placement('a')] }));
  assert.deepEqual(lines(p), [
    'n1 + annotation x/a.A=ate (AgentPlacement a)',
    'n1 + annotation x/a.B=ate (AgentPlacement a)',
    'n1 + label x/a=true (AgentPlacement a)',
    'n2 + annotation x/a.A=ate (AgentPlacement a)',
    'n2 + label x/a=true (AgentPlacement a)',
  ]);
  assert.deepEqual([p.errors, p.warnings, p.unknown], [[], [], []]);
});

test('deleting an existing placement takes back what it claims; applying it again changes nothing', () => {
  const current = [placement('a')];
  const gone = planPlacements(change({ current, change: [placement('a')], deleting: true }));
  assert.equal(gone.effects.length, 5);
  assert.ok(gone.effects.every((e) => e.op === '-' && e.by === 'AgentPlacement a'));
  assert.deepEqual(planPlacements(change({ current, change: [placement('a')] })).effects, []);
});

test('a new label value is a change of the label, the claims stay', () => {
  const p = planPlacements(
    change({
      current: [placement('a')],
      change: [placement('a', { nodeLabel: { key: 'x/a', value: 'v2' } })],
    }),
  );
  assert.deepEqual(lines(p), [
    'n1 ~ label x/a: true -> v2 (AgentPlacement a)',
    'n2 ~ label x/a: true -> v2 (AgentPlacement a)',
  ]);
});

test('refused as the controller refuses: a gate-owned key and an overlapping claim prefix are errors', () => {
  const owned = (keys: KeyPattern[]) =>
    keys.some((k) => k.kind === 'label' && 'key' in k && k.key === 'x/gated')
      ? ['label x/gated is NodeStartupGate g']
      : [];
  const p = planPlacements(
    change({
      current: [placement('a')],
      change: [
        placement('b', { claimAnnotationPrefix: 'x/a.more.' }),
        placement('c', { nodeLabel: { key: 'x/gated' } }),
        { ...placement('d'), spec: { podSelector: {} } },
      ],
      owned,
    }),
  );
  assert.deepEqual(p.effects, []);
  assert.equal(p.errors.length, 3);
  assert.match(
    p.errors.find((e) => e.includes(' b '))!,
    /overlaps "x\/a\." of AgentPlacement a \(first by name\)/,
  );
  assert.match(
    p.errors.find((e) => e.includes(' c '))!,
    /label x\/gated is NodeStartupGate g/,
  );
  assert.match(
    p.errors.find((e) => e.includes(' d '))!,
    /would be Invalid and apply nothing/,
  );
});

test('a placement first by name that takes an overlapping prefix makes the one of the cluster give up its claims', () => {
  const p = planPlacements(
    change({ current: [placement('b')], change: [placement('a', { claimAnnotationPrefix: 'x/b' })] }),
  );
  assert.match(p.warnings.join('\n'), /AgentPlacement b would become Invalid and give up its claims/);
  assert.ok(lines(p).includes('n1 - annotation x/b.A=ate (AgentPlacement b)'));
  assert.ok(lines(p).includes('n1 + annotation x/bA=ate (AgentPlacement a)'));
});

test('claiming every node is a warning', () => {
  const p = planPlacements(
    change({ change: [placement('all', { podSelector: { matchLabels: {} }, acknowledgeAllPods: true })] }),
  );
  assert.deepEqual(p.warnings, [
    'AgentPlacement all would claim every node (3): each would carry x/all=true',
  ]);
});

test('waitForAgent: a warning when every selected pod would wait, otherwise how many, as unknown', () => {
  const every = planPlacements(change({ change: [placement('a', { waitForAgent: { port: 9 } })] }));
  assert.match(
    every.warnings.join('\n'),
    /every pod it selects \(4 now\) would, created again, wait for the agent on port 9/,
  );
  const some = planPlacements(
    change({
      view: { ...view, pods: [...view.pods, pod('ownerless', 'n3', { app: 'w' })] },
      change: [placement('a', { waitForAgent: { port: 9 } })],
    }),
  );
  assert.deepEqual(some.warnings, []);
  assert.match(some.unknown.join('\n'), /4 of the 5 pod\(s\) it selects now would, created again, wait/);
});

test('a pod whose owner makes no valid claim key is said, not claimed', () => {
  const p = planPlacements(
    change({
      view: { ...view, pods: [pod('long', 'n3', { app: 'w', pool: 'L'.repeat(300) })] },
      change: [placement('a')],
    }),
  );
  assert.deepEqual(p.effects, []);
  assert.match(p.unknown.join('\n'), /AgentPlacement a: no claim for pod ate\/long: claim key/);
});
