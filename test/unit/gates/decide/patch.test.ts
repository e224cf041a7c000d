import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { type Gate, parseGates } from '../../../../src/gates/decide/parse.ts';
import { nodePatch } from '../../../../src/gates/decide/patch.ts';
import { decideGate, decideGates, type GateDecision } from '../../../../src/gates/decide/state.ts';
import type { SlimNode } from '../../../../src/policy/slim.ts';
import {
  applyPatch,
  cilium,
  gate,
  gateObj,
  iso,
  minutesAgo,
  node,
  NOW,
  TAINT_KEY,
  workload,
} from '../fixtures.ts';

const STAMP = iso(NOW);

const TAINT = { key: TAINT_KEY, effect: 'NoSchedule' };
const NOT_READY_TAINT = { key: 'node.kubernetes.io/not-ready', effect: 'NoSchedule' };

/** A decision with only what nodePatch reads. */
const decision = (
  g: string,
  taint: boolean | undefined,
  annotations: Record<string, string | null> = {},
): GateDecision => ({ gate: g, state: 'Held', taint, annotations, unmet: [], why: '', timedOut: false });

/** nodePatch, then its ops applied to the node: they must apply cleanly. */
function patchAndApply(n: SlimNode, gates: Gate[], decisions: GateDecision[]) {
  const ops = nodePatch(n, gates, decisions);
  return { ops, after: applyPatch(n, ops) };
}

describe('nodePatch', () => {
  const g = gate('cni');
  const K = g.keys;

  test('no ops when nothing changes', () => {
    assert.deepEqual(nodePatch(node(), [g], [decision('cni', undefined)]), []);
    // The taint wanted is on, the annotation wanted has that value, the one removed is absent.
    const n = node({ taints: [TAINT], annotations: { [K.gatedAt]: STAMP } });
    assert.deepEqual(
      nodePatch(n, [g], [decision('cni', true, { [K.gatedAt]: STAMP, [K.timedOutAt]: null })]),
      [],
    );
    // A taint to take off that is not there.
    assert.deepEqual(nodePatch(node({ taints: [NOT_READY_TAINT] }), [g], [decision('cni', false)]), []);
    assert.deepEqual(nodePatch(node(), [g], []), []);
  });

  test('adding a taint to a node with taints: test then replace', () => {
    const n = node({ taints: [NOT_READY_TAINT], annotations: { other: 'x' } });
    const { ops, after } = patchAndApply(n, [g], [decision('cni', true, { [K.gatedAt]: STAMP })]);
    assert.deepEqual(ops, [
      { op: 'test', path: '/spec/taints', value: [NOT_READY_TAINT] },
      { op: 'replace', path: '/spec/taints', value: [NOT_READY_TAINT, TAINT] },
      { op: 'add', path: '/metadata/annotations/cni.gates.berth.dev~1gated-at', value: STAMP },
    ]);
    assert.deepEqual(after.spec.taints, [NOT_READY_TAINT, TAINT]);
    assert.deepEqual(after.metadata!.annotations, { other: 'x', [K.gatedAt]: STAMP });
  });

  test('adding a taint (with its value) to a node without taints: test the resourceVersion, then add', () => {
    const valued = gate('cni', { taint: { key: TAINT_KEY, value: 'cilium', effect: 'NoExecute' } });
    const n = node({ resourceVersion: '9876' });
    const { ops, after } = patchAndApply(n, [valued], [decision('cni', true, { [K.gatedAt]: STAMP })]);
    assert.deepEqual(ops, [
      { op: 'test', path: '/metadata/resourceVersion', value: '9876' },
      { op: 'add', path: '/spec/taints', value: [{ key: TAINT_KEY, value: 'cilium', effect: 'NoExecute' }] },
      { op: 'add', path: '/metadata/annotations/cni.gates.berth.dev~1gated-at', value: STAMP },
    ]);
    assert.deepEqual(after.spec.taints, [{ key: TAINT_KEY, value: 'cilium', effect: 'NoExecute' }]);
  });

  test('removing the taint and annotations: test+replace, test+remove each', () => {
    const other = { key: 'example.com/dedicated', value: 'gpu', effect: 'NoSchedule' };
    const n = node({
      taints: [other, { ...TAINT, value: 'set-by-webhook' }, NOT_READY_TAINT],
      annotations: { [K.gatedAt]: minutesAgo(2), [K.timedOutAt]: minutesAgo(1), keep: 'me' },
    });
    const d = decision('cni', false, { [K.gatedAt]: null, [K.timedOutAt]: null, [K.completedAt]: STAMP });
    const { ops, after } = patchAndApply(n, [g], [d]);
    assert.deepEqual(ops, [
      { op: 'test', path: '/spec/taints', value: n.spec.taints },
      { op: 'replace', path: '/spec/taints', value: [other, NOT_READY_TAINT] },
      { op: 'test', path: '/metadata/annotations/cni.gates.berth.dev~1gated-at', value: minutesAgo(2) },
      { op: 'remove', path: '/metadata/annotations/cni.gates.berth.dev~1gated-at' },
      { op: 'test', path: '/metadata/annotations/cni.gates.berth.dev~1timed-out-at', value: minutesAgo(1) },
      { op: 'remove', path: '/metadata/annotations/cni.gates.berth.dev~1timed-out-at' },
      { op: 'add', path: '/metadata/annotations/cni.gates.berth.dev~1completed-at', value: STAMP },
    ]);
    assert.deepEqual(after.spec.taints, [other, NOT_READY_TAINT]);
    assert.deepEqual(after.metadata!.annotations, { keep: 'me', [K.completedAt]: STAMP });
  });

  test('removing the last taint leaves an empty list', () => {
    const n = node({ taints: [TAINT], annotations: { [K.gatedAt]: STAMP } });
    const { ops, after } = patchAndApply(n, [g], [decision('cni', false, { [K.gatedAt]: null })]);
    assert.deepEqual(ops.slice(0, 2), [
      { op: 'test', path: '/spec/taints', value: [TAINT] },
      { op: 'replace', path: '/spec/taints', value: [] },
    ]);
    assert.deepEqual(after.spec.taints, []);
    assert.deepEqual(after.metadata!.annotations, {});
  });

  test('a changed value replaces the annotation (add); keys are JSON-pointer escaped', () => {
    // (No valid annotation key has a "~"; nodePatch escapes it all the same.)
    const n = node({ annotations: { 'example.com/a~b': 'old' } });
    const { ops, after } = patchAndApply(n, [g], [decision('cni', undefined, { 'example.com/a~b': STAMP })]);
    assert.deepEqual(ops, [{ op: 'add', path: '/metadata/annotations/example.com~1a~0b', value: STAMP }]);
    assert.deepEqual(after.metadata!.annotations, { 'example.com/a~b': STAMP });
  });

  test('a node with no annotations map: a resourceVersion test and one add of the whole map', () => {
    const other = gate('gpu', { taint: { key: 'startup.berth.dev/gpu' } });
    const n = node({ annotations: undefined, resourceVersion: '77' });
    const decisions = [
      decision('cni', undefined, { [K.gatedAt]: STAMP, [K.timedOutAt]: null }),
      decision('gpu', undefined, { 'gpu.gates.berth.dev/gated-at': STAMP }),
    ];
    const { ops, after } = patchAndApply(n, [g, other], decisions);
    assert.deepEqual(ops, [
      { op: 'test', path: '/metadata/resourceVersion', value: '77' },
      {
        op: 'add',
        path: '/metadata/annotations',
        value: { [K.gatedAt]: STAMP, 'gpu.gates.berth.dev/gated-at': STAMP },
      },
    ]);
    assert.deepEqual(after.metadata!.annotations, {
      [K.gatedAt]: STAMP,
      'gpu.gates.berth.dev/gated-at': STAMP,
    });
  });

  test('no annotations map and no taints: a single resourceVersion test covers both adds', () => {
    const n = node({ annotations: undefined, resourceVersion: '77' });
    const { ops, after } = patchAndApply(n, [g], [decision('cni', true, { [K.gatedAt]: STAMP })]);
    assert.deepEqual(ops, [
      { op: 'test', path: '/metadata/resourceVersion', value: '77' },
      { op: 'add', path: '/spec/taints', value: [TAINT] },
      { op: 'add', path: '/metadata/annotations', value: { [K.gatedAt]: STAMP } },
    ]);
    assert.deepEqual(after.spec.taints, [TAINT]);
  });

  test('no annotations map but taints: the resourceVersion test goes first', () => {
    const n = node({ annotations: undefined, taints: [NOT_READY_TAINT], resourceVersion: '77' });
    const { ops } = patchAndApply(n, [g], [decision('cni', true, { [K.gatedAt]: STAMP })]);
    assert.deepEqual(ops, [
      { op: 'test', path: '/metadata/resourceVersion', value: '77' },
      { op: 'test', path: '/spec/taints', value: [NOT_READY_TAINT] },
      { op: 'replace', path: '/spec/taints', value: [NOT_READY_TAINT, TAINT] },
      { op: 'add', path: '/metadata/annotations', value: { [K.gatedAt]: STAMP } },
    ]);
  });

  test('an empty annotations map is a map: per-key adds, no resourceVersion test', () => {
    const n = node({ annotations: {} });
    assert.deepEqual(nodePatch(n, [g], [decision('cni', undefined, { [K.gatedAt]: STAMP })]), [
      { op: 'add', path: '/metadata/annotations/cni.gates.berth.dev~1gated-at', value: STAMP },
    ]);
  });

  test('a taint one decision wants is never taken off by another for the same key and effect', () => {
    const { gates } = parseGates([gateObj('a-cni'), gateObj('b-cni')]);
    const n = node({ taints: [TAINT], annotations: { 'b-cni.gates.berth.dev/gated-at': STAMP } });
    // Whatever the order of the decisions.
    for (const decisions of [
      [
        decision('a-cni', true, { 'a-cni.gates.berth.dev/gated-at': STAMP }),
        decision('b-cni', false, { 'b-cni.gates.berth.dev/gated-at': null }),
      ],
      [
        decision('b-cni', false, { 'b-cni.gates.berth.dev/gated-at': null }),
        decision('a-cni', true, { 'a-cni.gates.berth.dev/gated-at': STAMP }),
      ],
    ]) {
      const { ops, after } = patchAndApply(n, gates, decisions);
      assert.equal(
        ops.some((o) => o.path === '/spec/taints'),
        false,
      );
      assert.deepEqual(after.spec.taints, [TAINT]);
      assert.deepEqual(after.metadata!.annotations, { 'a-cni.gates.berth.dev/gated-at': STAMP });
    }
  });

  test('a taint wanted twice is added once', () => {
    const { gates } = parseGates([gateObj('a-cni'), gateObj('b-cni')]);
    const { after } = patchAndApply(node({ taints: [NOT_READY_TAINT] }), gates, [
      decision('a-cni', true),
      decision('b-cni', true),
    ]);
    assert.deepEqual(after.spec.taints, [NOT_READY_TAINT, TAINT]);
  });

  test('two gates, one taint on and one off, in one replace', () => {
    const gpu = gate('gpu', { taint: { key: 'startup.berth.dev/gpu', effect: 'NoExecute' } });
    const gpuTaint = { key: 'startup.berth.dev/gpu', effect: 'NoExecute' };
    const n = node({ taints: [gpuTaint] });
    const { ops, after } = patchAndApply(n, [g, gpu], [decision('cni', true), decision('gpu', false)]);
    assert.deepEqual(ops, [
      { op: 'test', path: '/spec/taints', value: [gpuTaint] },
      { op: 'replace', path: '/spec/taints', value: [TAINT] },
    ]);
    assert.deepEqual(after.spec.taints, [TAINT]);
  });

  test('the compare-and-swap fails when the node changed since the cache saw it', () => {
    const n = node({ taints: [NOT_READY_TAINT], annotations: { [K.gatedAt]: minutesAgo(2) } });
    const ops = nodePatch(
      n,
      [g],
      [decision('cni', true, { [K.timedOutAt]: STAMP }), decision('cni', undefined, { [K.gatedAt]: null })],
    );
    const changedTaints = node({ taints: [], annotations: { [K.gatedAt]: minutesAgo(2) } });
    assert.throws(() => applyPatch(changedTaints, ops), /test \/spec\/taints failed/);
    const changedAnnotation = node({
      taints: [NOT_READY_TAINT],
      annotations: { [K.gatedAt]: minutesAgo(1) },
    });
    assert.throws(
      () => applyPatch(changedAnnotation, ops),
      /test \/metadata\/annotations\/cni.gates.berth.dev~1gated-at failed/,
    );
    const noAnn = node({ annotations: undefined, resourceVersion: '1' });
    const rvOps = nodePatch(noAnn, [g], [decision('cni', true, { [K.gatedAt]: STAMP })]);
    assert.throws(
      () => applyPatch({ ...noAnn, metadata: { ...noAnn.metadata, resourceVersion: '2' } }, rvOps),
      /resourceVersion failed/,
    );
  });

  describe('end to end with decideGate', () => {
    const run = (gates: Gate[], n: SlimNode, pods = [cilium(false)]) => {
      const decisions = decideGates(gates, n, pods, NOW);
      return { decisions, ...patchAndApply(n, gates, decisions) };
    };

    test('gate a new idle node, then release it when cilium is Ready', () => {
      const n = node({ taints: [NOT_READY_TAINT] });
      const first = run([g], n);
      assert.deepEqual(first.after.spec.taints, [NOT_READY_TAINT, TAINT]);
      assert.deepEqual(first.after.metadata!.annotations, {
        [K.gatedAt]: STAMP,
        [K.taint]: `${TAINT_KEY}:NoSchedule`,
      });
      // Ten minutes later, cilium is Ready.
      const later = decideGate(g, first.after, [cilium(true)], NOW + 600_000);
      assert.deepEqual(later.release, { outcome: 'Ready', heldSeconds: 600 });
      const released = applyPatch(first.after, nodePatch(first.after, [g], [later]));
      assert.deepEqual(released.spec.taints, [NOT_READY_TAINT]);
      assert.deepEqual(released.metadata!.annotations, { [K.completedAt]: iso(NOW + 600_000) });
      // And it stays released: nothing more to do.
      assert.deepEqual(
        nodePatch(released, [g], [decideGate(g, released, [cilium(false)], NOW + 700_000)]),
        [],
      );
    });

    test('a busy node is left alone', () => {
      assert.deepEqual(run([g], node({ taints: [NOT_READY_TAINT] }), [cilium(false), workload()]).ops, []);
    });

    test('the conflict loser hands over its node to the winner without the taint ever coming off', () => {
      const { gates } = parseGates([gateObj('a-cni'), gateObj('b-cni')]);
      const n = node({
        taints: [TAINT],
        annotations: {
          'b-cni.gates.berth.dev/gated-at': minutesAgo(1),
          'b-cni.gates.berth.dev/taint': 'startup.berth.dev/cni:NoSchedule',
        },
      });
      const { decisions, after } = run(gates, n);
      assert.deepEqual(
        decisions.map((d) => [d.gate, d.state, d.taint]),
        [
          ['a-cni', 'Held', true],
          ['b-cni', 'NotSelected', false],
        ],
      );
      assert.deepEqual(after.spec.taints, [TAINT]);
      // Held since the loser gated it: its minimum hold and timeout count from then.
      assert.deepEqual(after.metadata!.annotations, {
        'a-cni.gates.berth.dev/gated-at': minutesAgo(1),
        'a-cni.gates.berth.dev/taint': 'startup.berth.dev/cni:NoSchedule',
      });
    });
  });
});
