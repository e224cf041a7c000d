// berth plan of NodeStartupGates: which nodes a new or changed gate would hold now, what deleting
// one gives back, and the warning when every node would be held.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { planGates } from '../../../src/gates/plan.ts';
import type { KubeObject } from '../../../src/runtime/api/meta.ts';
import { gateObj, node, NODE_NEW, NODE_OLD, NOW, pod, TAINT_KEY } from './fixtures.ts';

const pending = { ...pod('web', { namespace: 'shop', phase: 'Pending' }), spec: {} };

test('a new gate holds only nodes that join after it; with backfill, every selected node', () => {
  const fresh = { ...gateObj('cni'), metadata: { name: 'cni' } } as KubeObject & { spec: object };
  const nodes = [
    node({ name: 'old', created: NODE_OLD }),
    node({ name: 'new', created: new Date(NOW + 1000).toISOString() }),
  ];
  const plain = planGates([], [fresh], false, nodes, [], NOW);
  assert.deepEqual(
    plain.effects.map((e) => `${e.op} ${e.name}`),
    ['+ new'],
  );
  assert.deepEqual(plain.warnings, []);

  const backfill = planGates(
    [],
    [{ ...fresh, spec: { ...fresh.spec, backfill: true } }],
    false,
    nodes,
    [pending],
    NOW,
  );
  assert.deepEqual(
    backfill.effects.filter((e) => e.kind === 'Node').map((e) => `${e.op} ${e.name}`),
    ['+ old', '+ new'],
  );
  assert.match(backfill.warnings[0]!, /would hold every node \(2\)/);
  assert.deepEqual(
    backfill.effects.filter((e) => e.kind === 'Pod').map((e) => e.name),
    ['shop/web'],
  );
});

test('deleting a gate gives back its taint where it holds the node', () => {
  const held = node({
    name: 'n1',
    created: NODE_NEW,
    annotations: { 'cni.gates.berth.dev/gated-at': '2026-11-21T09:50:01Z' },
    taints: [{ key: TAINT_KEY, effect: 'NoSchedule' }],
  });
  const p = planGates([gateObj('cni')], [gateObj('cni')], true, [held, node({ name: 'n2' })], [], NOW);
  assert.deepEqual(
    p.effects.map((e) => `${e.op} ${e.name} ${e.by}`),
    ['- n1 NodeStartupGate cni'],
  );
});

test('an invalid gate is an error, not a plan', () => {
  const p = planGates([], [gateObj('bad', { after: ['bad'] })], false, [node()], [], NOW);
  assert.match(p.errors[0]!, /NodeStartupGate bad would be Invalid/);
});
