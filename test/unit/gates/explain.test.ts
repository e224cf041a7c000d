// berth explain nodestartupgate: which nodes a gate holds (since when, what each still waits for)
// and why it leaves the others alone, its conditions with since-when and its counts as `-o json`
// gives them, and what an invalid or unknown gate says.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { explainerOf, explanationOf, explanationText } from '../../../src/explain.ts';
import { explainGate } from '../../../src/gates/explain.ts';
import type { KubeObject, ResourceRef } from '../../../src/runtime/api/meta.ts';
import type { KubeClient } from '../../../src/runtime/client/client.ts';
import { cilium, gateObj, node, NODE_OLD, NOW, TAINT_KEY } from './fixtures.ts';

const GATED_AT = 'cni.gates.berth.dev/gated-at';
const SINCE = '2026-11-21T09:50:01Z';
/** Held by Berth since it joined; its cilium pod not Ready yet. */
const held = node({
  name: 'held',
  taints: [{ key: TAINT_KEY, effect: 'NoSchedule' }],
  annotations: { [GATED_AT]: SINCE },
});
const nodes = [held, node({ name: 'ready' }), node({ name: 'old', created: NODE_OLD })];
const pods = new Map([
  ['held', [cilium(false)]],
  ['ready', [cilium(true)]],
]);
const invalid = gateObj('bad', { taint: { key: 'x y' } });

test('held nodes are in, with since-when and what they wait for; the others out, each with why', () => {
  const said = explainGate('cni', [gateObj('cni'), invalid], nodes, pods, NOW);
  const by = Object.fromEntries((said.subjects ?? []).map((s) => [s.name, s]));
  assert.equal(by['held']!.in, true);
  assert.match(by['held']!.why[0]!, new RegExp(`^Held since ${SINCE}: `));
  assert.deepEqual(by['held']!.why.slice(1), [
    'waiting for pods of DaemonSet kube-system/cilium: kube-system/cilium-x7k2p (Running) not Ready',
  ]);
  assert.deepEqual(by['ready'], {
    kind: 'Node',
    name: 'ready',
    in: false,
    why: ['Released: every requirement holds'],
  });
  assert.equal(by['old']!.in, false);
  assert.equal(
    by['old']!.why[0],
    'Released: not gated: the node existed before the gate and backfill is off',
  );
  // Another gate being invalid says nothing of this one.
  assert.deepEqual(said.lines, [`  taint ${TAINT_KEY}:NoSchedule, BootstrapOnly`]);
});

test('an invalid gate says why and holds nothing; a gate not among them holds no node', () => {
  const bad = explainGate('bad', [gateObj('cni'), invalid], nodes, pods, NOW);
  assert.equal(bad.subjects, undefined);
  assert.match(bad.lines[0]!, /^ {2}Invalid: invalid NodeStartupGate bad: spec\.taint\.key: /);
  assert.equal(bad.lines[1], '  holds no node');
  assert.deepEqual(explainGate('gone', [gateObj('cni')], nodes, pods, NOW), { lines: ['  holds no node'] });
});

test('berth explain nodestartupgate: conditions with since-when, counts, subjects and lines in -o json and as text', async () => {
  const object: KubeObject = {
    ...gateObj('cni'),
    status: {
      observedGeneration: 3,
      heldNodes: 1,
      conditions: [
        {
          type: 'Ready',
          status: 'True',
          reason: 'Reconciled',
          message: 'holds 1 node',
          lastTransitionTime: '2026-11-21T09:00:00Z',
        },
      ],
    },
  };
  const client = {
    get: async () => object,
    list: async (ref: ResourceRef) => ({
      items:
        ref.kind === 'NodeStartupGate'
          ? [object]
          : ref.kind === 'Node'
            ? nodes
            : ref.kind === 'Pod'
              ? [...pods].flatMap(([n, ps]) => ps.map((p) => ({ ...p, spec: { ...p.spec, nodeName: n } })))
              : [],
    }),
  } as unknown as KubeClient;
  const x = await explanationOf(client, explainerOf('nsg')!, 'cni', undefined, {}, 'berth-system');
  // What -o json prints: the kind and name, the status as it is, then what the gate says.
  const json = JSON.parse(JSON.stringify(x)) as typeof x;
  assert.deepEqual(Object.keys(json), ['kind', 'name', 'conditions', 'counts', 'subjects', 'lines']);
  assert.equal(json.kind, 'NodeStartupGate');
  assert.deepEqual(json.counts, { heldNodes: 1 }, 'observedGeneration is no count');
  assert.deepEqual(
    json.subjects!.map((s) => `${s.name} ${s.in}`),
    ['held true', 'ready false', 'old false'],
  );
  // The pods were listed for every node and grouped by theirs: the held node's cilium is not Ready.
  assert.equal(json.subjects![0]!.why.length, 2);
  const text = explanationText(x, new Date('2026-11-21T10:00:00Z'));
  assert.deepEqual(text.slice(0, 5), [
    'NodeStartupGate cni',
    '  Ready: True (Reconciled) since 2026-11-21T09:00:00Z (60m ago): holds 1 node',
    '  counts: heldNodes 1',
    '  acts on 1 node(s):',
    `    Node held: ${json.subjects![0]!.why[0]}`,
  ]);
  assert.ok(text.includes('  leaves alone 2 node(s):'), text.join('\n'));
});
