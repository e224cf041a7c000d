import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { type Gate, gateKeyClaims, parseGates } from '../../../../src/gates/decide/parse.ts';
import { decisionKeys, nodePatch } from '../../../../src/gates/decide/patch.ts';
import {
  decideGate,
  decideGates,
  leftOnNode,
  type GateDecision,
} from '../../../../src/gates/decide/state.ts';
import { EXEMPT_LABEL } from '../../../../src/gates/types.ts';
import type { SlimNode, SlimPod } from '../../../../src/policy/slim.ts';
import {
  applyPatch,
  cilium,
  gate,
  GATE_CREATED,
  gateObj,
  iso,
  minutesAgo,
  node,
  NODE_OLD,
  NOW,
  ownedBy,
  pod,
  TAINT_KEY,
  workload,
  type NodeOptions,
} from '../fixtures.ts';
import { deepFreeze } from '../../../../src/policy/intern.ts';

/** decideGate at NOW, on frozen inputs: it must not change what the caches hold. */
const decide = (g: Gate, n: SlimNode, pods: SlimPod[] = []): GateDecision =>
  decideGate(deepFreeze(g), deepFreeze(n), deepFreeze(pods), NOW);

const TAINT = { key: TAINT_KEY, effect: 'NoSchedule' };
/** The gate's taint record: its taint as kubectl writes it. */
const RECORD = `${TAINT_KEY}:NoSchedule`;
const NONE_YET = 'pods of DaemonSet kube-system/cilium: none on the node yet';
const NOT_READY = 'pods of DaemonSet kube-system/cilium: kube-system/cilium-x7k2p (Running) not Ready';

const g = gate('cni');
const K = g.keys;

/** A node the gate holds: its taint, gated-at `heldMinutes` ago and the taint record beside it. */
const heldNode = (heldMinutes: number, annotations: Record<string, string> = {}, o: NodeOptions = {}) =>
  node({
    taints: [{ key: 'node.kubernetes.io/not-ready', effect: 'NoSchedule' }, TAINT],
    annotations: { [K.gatedAt]: minutesAgo(heldMinutes), [K.taint]: RECORD, ...annotations },
    ...o,
  });

describe('decideGate: the gate does not apply', () => {
  const picky = gate('cni', { nodeSelector: { matchLabels: { pool: 'gpu' } } });

  test('not selected, nothing of the gate on the node: nothing to do', () => {
    assert.deepEqual(decide(picky, node({ taints: [TAINT] })), {
      gate: 'cni',
      state: 'NotSelected',
      taint: undefined,
      annotations: {},
      unmet: [],
      timedOut: false,
      why: 'the gate does not select this node',
    });
  });

  test('not selected any more while held: taint off, annotations removed, a Removed release', () => {
    const d = decide(picky, heldNode(2, { [K.timedOutAt]: minutesAgo(1) }));
    assert.deepEqual(d, {
      gate: 'cni',
      state: 'NotSelected',
      taint: false,
      annotations: { [K.gatedAt]: null, [K.taint]: null, [K.timedOutAt]: null },
      unmet: [],
      timedOut: false,
      why: 'the gate does not select this node',
      release: { outcome: 'Removed', heldSeconds: 120 },
      event: {
        type: 'Normal',
        reason: 'Released',
        message: 'gate cni: released (the gate does not select this node)',
      },
    });
  });

  test('exempt label while held: released the same way', () => {
    const d = decide(g, heldNode(2, {}, { labels: { [EXEMPT_LABEL]: 'true' } }));
    assert.equal(d.state, 'NotSelected');
    assert.equal(d.taint, false);
    assert.deepEqual(d.annotations, { [K.gatedAt]: null, [K.taint]: null });
    assert.deepEqual(d.release, { outcome: 'Removed', heldSeconds: 120 });
  });

  test('held but the taint is already gone: only the annotations go (taint left alone)', () => {
    const d = decide(picky, node({ annotations: { [K.gatedAt]: minutesAgo(2) } }));
    assert.equal(d.taint, undefined);
    assert.deepEqual(d.annotations, { [K.gatedAt]: null });
    assert.deepEqual(d.release, { outcome: 'Removed', heldSeconds: 120 });
  });

  test('a taint of the same key but not held by Berth is not Berth’s to take off', () => {
    const d = decide(picky, node({ taints: [TAINT], annotations: { [K.timedOutAt]: minutesAgo(1) } }));
    assert.equal(d.taint, undefined);
    assert.deepEqual(d.annotations, { [K.timedOutAt]: null });
    assert.equal(d.release, undefined);
    assert.equal(d.event, undefined);
  });

  test('not selected never removes the completion annotation, even one berth-gates owns', () => {
    const n = node({
      annotations: { [K.completedAt]: minutesAgo(30) },
      managedFields: [ownedBy([K.completedAt])],
    });
    assert.deepEqual(decide(picky, n).annotations, {});
  });

  test('not enforced (the loser of a conflict) gives back what it held', () => {
    const { gates } = parseGates([gateObj('a-cni'), gateObj('b-cni')]);
    const loser = gates[1]!;
    assert.equal(loser.enforced, false);
    const n = node({ taints: [TAINT], annotations: { [loser.keys.gatedAt]: minutesAgo(5) } });
    const d = decide(loser, n, [cilium(false)]);
    assert.deepEqual(d, {
      gate: 'b-cni',
      state: 'NotSelected',
      taint: false,
      annotations: { [loser.keys.gatedAt]: null },
      unmet: [],
      timedOut: false,
      why: 'the gate is invalid or conflicting, and not enforced',
      release: { outcome: 'Removed', heldSeconds: 300 },
      event: {
        type: 'Normal',
        reason: 'Released',
        message: 'gate b-cni: released (the gate is invalid or conflicting, and not enforced)',
      },
    });
  });

  describe('a gate being deleted', () => {
    const deleting = gate('cni', {}, { deletionTimestamp: '2026-11-21T09:59:00Z' });
    const stamps = {
      [K.gatedAt]: minutesAgo(2),
      [K.timedOutAt]: minutesAgo(1),
      [K.completedAt]: minutesAgo(30),
    };

    test('takes back gated-at, the taint record, timed-out-at and the completion stamp it wrote (berth-gates, Update)', () => {
      const n = heldNode(2, stamps, {
        managedFields: [
          { manager: 'kubelet', operation: 'Update', fieldsV1: {} },
          ownedBy([K.gatedAt, K.completedAt]),
        ],
      });
      assert.deepEqual(decide(deleting, n), {
        gate: 'cni',
        state: 'NotSelected',
        taint: false,
        annotations: { [K.gatedAt]: null, [K.taint]: null, [K.timedOutAt]: null, [K.completedAt]: null },
        unmet: [],
        timedOut: false,
        why: 'the gate is being deleted',
        release: { outcome: 'Removed', heldSeconds: 120 },
        event: {
          type: 'Normal',
          reason: 'Released',
          message: 'gate cni: released (the gate is being deleted)',
        },
      });
    });

    test('leaves a completion annotation it does not own', () => {
      const notOwned: NodeOptions['managedFields'][] = [
        undefined,
        [ownedBy([K.completedAt], 'seed-tool')],
        [ownedBy([K.completedAt], 'berth-gates', 'Apply')],
        [ownedBy([K.gatedAt])],
        [{ ...ownedBy([K.completedAt]), subresource: 'status' }],
      ];
      for (const managedFields of notOwned) {
        const n = heldNode(2, stamps, managedFields ? { managedFields } : {});
        assert.deepEqual(
          decide(deleting, n).annotations,
          { [K.gatedAt]: null, [K.taint]: null, [K.timedOutAt]: null },
          JSON.stringify(managedFields),
        );
      }
    });

    test('a released node: only the owned completion stamp, no release event', () => {
      const n = node({
        annotations: { [K.completedAt]: minutesAgo(30) },
        managedFields: [ownedBy([K.completedAt])],
      });
      const d = decide(deleting, n);
      assert.deepEqual(d.annotations, { [K.completedAt]: null });
      assert.equal(d.taint, undefined);
      assert.equal(d.release, undefined);
      assert.equal(d.event, undefined);
    });

    test('deleting wins over dry run', () => {
      const dry = gate('cni', { dryRun: true }, { deletionTimestamp: '2026-11-21T09:59:00Z' });
      const d = decide(dry, heldNode(2));
      assert.equal(d.state, 'NotSelected');
      assert.equal(d.why, 'the gate is being deleted');
    });
  });
});

describe('decideGate: dry run', () => {
  const dry = gate('cni', { dryRun: true });

  test('an idle new node that misses a requirement: WouldGate, nothing written', () => {
    assert.deepEqual(decide(dry, node(), [cilium(false)]), {
      gate: 'cni',
      state: 'WouldGate',
      taint: undefined,
      annotations: {},
      unmet: [NOT_READY],
      timedOut: false,
      why: 'dry run: would hold the node',
    });
  });

  test('everything holds: Released', () => {
    assert.deepEqual(decide(dry, node(), [cilium(true)]), {
      gate: 'cni',
      state: 'Released',
      taint: undefined,
      annotations: {},
      unmet: [],
      timedOut: false,
      why: 'dry run: would not hold the node',
    });
  });

  test('a busy node, or an old one without backfill, would not be gated', () => {
    assert.equal(decide(dry, node(), [cilium(false), workload()]).state, 'Released');
    assert.equal(decide(dry, node({ created: NODE_OLD }), []).state, 'Released');
    const backfill = gate('cni', { dryRun: true, backfill: true });
    assert.equal(decide(backfill, node({ created: NODE_OLD }), []).state, 'WouldGate');
  });

  test('completed nodes: never again in bootstrap-only mode, even when busy in continuous mode', () => {
    const done = { annotations: { [K.completedAt]: minutesAgo(30) } };
    assert.equal(decide(dry, node(done), []).state, 'Released');
    const continuous = gate('cni', { dryRun: true, mode: 'Continuous' });
    assert.equal(decide(continuous, node(done), [workload()]).state, 'WouldGate');
  });

  test('a node held before the dry run began is released (taint off, annotations removed)', () => {
    const d = decide(dry, heldNode(2, { [K.timedOutAt]: minutesAgo(1) }), [cilium(false)]);
    assert.deepEqual(d, {
      gate: 'cni',
      state: 'WouldGate',
      taint: false,
      annotations: { [K.gatedAt]: null, [K.taint]: null, [K.timedOutAt]: null },
      unmet: [NOT_READY],
      timedOut: false,
      why: 'dry run: would hold the node',
      release: { outcome: 'Removed', heldSeconds: 120 },
      event: { type: 'Normal', reason: 'Released', message: 'gate cni: released (dry run)' },
    });
  });
});

describe('decideGate: a held node', () => {
  test('the taint was removed by someone else: a Manual release, completion stamped', () => {
    const n = node({ annotations: { [K.gatedAt]: minutesAgo(2), [K.timedOutAt]: minutesAgo(1) } });
    assert.deepEqual(decide(g, n, [cilium(false)]), {
      gate: 'cni',
      state: 'Released',
      taint: undefined,
      // Its requirements still fail: that it was released by hand is kept, until they hold.
      annotations: {
        [K.gatedAt]: null,
        [K.timedOutAt]: null,
        [K.completedAt]: iso(NOW),
        [K.releasedByHandAt]: iso(NOW),
      },
      unmet: [],
      timedOut: false,
      why: 'the taint was removed by someone else',
      release: { outcome: 'Manual', heldSeconds: 120 },
      event: {
        type: 'Normal',
        reason: 'Released',
        message: 'gate cni: the taint was removed by someone else after 120s',
      },
    });
  });

  test('a Manual release keeps an earlier completion stamp', () => {
    const n = node({
      annotations: { [K.gatedAt]: minutesAgo(2), [K.completedAt]: '2026-11-01T00:00:00.000Z' },
    });
    assert.deepEqual(decide(g, n).annotations, { [K.gatedAt]: null, [K.releasedByHandAt]: iso(NOW) });
    // Once every requirement holds, nothing is kept of it.
    assert.deepEqual(decide(g, n, [cilium(true)]).annotations, { [K.gatedAt]: null });
  });

  test('continuous mode does not put back a taint someone took off while requirements fail, only once they held and then fail', () => {
    const continuous = gate('cni', { mode: 'Continuous' });
    const byHand = decide(continuous, node({ annotations: { [K.gatedAt]: minutesAgo(2) } }), [cilium(false)]);
    assert.equal(byHand.release?.outcome, 'Manual');
    const after = node({ annotations: { [K.completedAt]: iso(NOW), [K.releasedByHandAt]: iso(NOW) } });
    const still = decide(continuous, after, [cilium(false)]);
    assert.deepEqual([still.state, still.taint], ['Released', undefined]);
    assert.match(
      still.why,
      /removed by someone else at .*; gated again only after its requirements have held/,
    );
    // They hold: the mark goes; they fail after that: gated again.
    assert.deepEqual(decide(continuous, after, [cilium(true)]).annotations, { [K.releasedByHandAt]: null });
    const again = decide(continuous, node({ annotations: { [K.completedAt]: iso(NOW) } }), [cilium(false)]);
    assert.deepEqual([again.state, again.taint], ['Held', true]);
  });

  test('a taint with the same key but another effect is not the gate’s taint', () => {
    const n = node({
      taints: [{ key: TAINT_KEY, effect: 'NoExecute' }],
      annotations: { [K.gatedAt]: minutesAgo(2) },
    });
    assert.equal(decide(g, n).release?.outcome, 'Manual');
  });

  test('everything holds and no minimum hold: released Ready', () => {
    assert.deepEqual(decide(g, heldNode(2), [cilium(true)]), {
      gate: 'cni',
      state: 'Released',
      taint: false,
      annotations: { [K.gatedAt]: null, [K.taint]: null, [K.completedAt]: '2026-11-21T10:00:00.000Z' },
      unmet: [],
      timedOut: false,
      why: 'every requirement holds',
      release: { outcome: 'Ready', heldSeconds: 120 },
      event: { type: 'Normal', reason: 'Released', message: 'gate cni: every requirement holds after 120s' },
    });
  });

  test('a Ready release clears an earlier timeout and keeps an earlier completion stamp', () => {
    const n = heldNode(2, { [K.timedOutAt]: minutesAgo(1), [K.completedAt]: '2026-11-01T00:00:00.000Z' });
    const d = decide(g, n, [cilium(true)]);
    assert.deepEqual(d.annotations, { [K.gatedAt]: null, [K.taint]: null, [K.timedOutAt]: null });
    assert.equal(d.timedOut, false);
  });

  test('heldSeconds is rounded to a tenth of a second', () => {
    const n = heldNode(0, { [K.gatedAt]: iso(NOW - 12_345) });
    assert.deepEqual(decide(g, n, [cilium(true)]).release, { outcome: 'Ready', heldSeconds: 12.3 });
  });

  test('an unreadable gated-at counts from the node’s creation', () => {
    const n = heldNode(0, { [K.gatedAt]: 'yesterday' });
    assert.deepEqual(decide(g, n, [cilium(true)]).release, { outcome: 'Ready', heldSeconds: 600 });
  });

  test('everything holds but the minimum hold has not passed: Held, requeued when it passes', () => {
    const slow = gate('cni', { minHoldSeconds: 300 });
    assert.deepEqual(decide(slow, heldNode(2), [cilium(true)]), {
      gate: 'cni',
      state: 'Held',
      taint: true,
      annotations: {},
      unmet: ['the minimum hold, until 2026-11-21T10:03:00.000Z'],
      timedOut: false,
      why: 'every requirement holds; the minimum hold has not passed',
      requeueAfterMs: 180_000,
    });
  });

  test('the minimum hold passed exactly: released', () => {
    const slow = gate('cni', { minHoldSeconds: 120 });
    assert.equal(decide(slow, heldNode(2), [cilium(true)]).release?.outcome, 'Ready');
  });

  test('waiting, no timeout: Held, no requeue', () => {
    const d = decide(g, heldNode(2), [cilium(false)]);
    assert.deepEqual(d, {
      gate: 'cni',
      state: 'Held',
      taint: true,
      annotations: {},
      unmet: [NOT_READY],
      timedOut: false,
      why: 'waiting for its requirements',
    });
    assert.equal('requeueAfterMs' in d, false);
  });

  test('waiting before the timeout: Held, requeued when the timeout runs out', () => {
    const t = gate('cni', { timeout: { seconds: 600, outcome: 'Release' } });
    assert.deepEqual(decide(t, heldNode(2), []), {
      gate: 'cni',
      state: 'Held',
      taint: true,
      annotations: {},
      unmet: [NONE_YET],
      timedOut: false,
      why: 'waiting for its requirements',
      requeueAfterMs: 480_000,
    });
  });

  test('timeout with outcome Release: released anyway, with a Warning', () => {
    const t = gate('cni', { timeout: { seconds: 600, outcome: 'Release' } });
    assert.deepEqual(decide(t, heldNode(10), [cilium(false)]), {
      gate: 'cni',
      state: 'Released',
      taint: false,
      annotations: {
        [K.gatedAt]: null,
        [K.taint]: null,
        [K.timedOutAt]: '2026-11-21T10:00:00.000Z',
        [K.completedAt]: '2026-11-21T10:00:00.000Z',
      },
      unmet: [NOT_READY],
      timedOut: true,
      why: 'released by the 600s timeout',
      release: { outcome: 'Timeout', heldSeconds: 600 },
      event: {
        type: 'Warning',
        reason: 'TimedOut',
        message: `gate cni: released after the 600s timeout although it still waits for: ${NOT_READY}`,
      },
    });
  });

  test('timeout with outcome Release joins every unmet requirement in the Warning', () => {
    const t = gate('cni', {
      timeout: { seconds: 60, outcome: 'Release' },
      requirements: {
        pods: [{ namespace: 'kube-system', daemonSet: 'cilium' }],
        nodeConditions: [{ type: 'Ready' }],
      },
    });
    const d = decide(t, heldNode(5), []);
    assert.equal(
      d.event?.message,
      `gate cni: released after the 60s timeout although it still waits for: ${NONE_YET}; node condition Ready is absent, needs True`,
    );
  });

  test('timeout with outcome KeepTainted: HeldTimedOut, stamped and warned about once', () => {
    const t = gate('cni', { timeout: { seconds: 600, outcome: 'KeepTainted' } });
    const first = decide(t, heldNode(11), [cilium(false)]);
    assert.deepEqual(first, {
      gate: 'cni',
      state: 'HeldTimedOut',
      taint: true,
      annotations: { [K.timedOutAt]: '2026-11-21T10:00:00.000Z' },
      unmet: [NOT_READY],
      timedOut: true,
      why: 'held past the 600s timeout (outcome KeepTainted)',
      event: {
        type: 'Warning',
        reason: 'TimedOut',
        message: `gate cni: still held after the 600s timeout, waiting for: ${NOT_READY}`,
      },
    });
    const later = decide(t, heldNode(20, { [K.timedOutAt]: minutesAgo(9) }), [cilium(false)]);
    assert.deepEqual(later, {
      gate: 'cni',
      state: 'HeldTimedOut',
      taint: true,
      annotations: {},
      unmet: [NOT_READY],
      timedOut: true,
      why: 'held past the 600s timeout (outcome KeepTainted)',
    });
  });

  test('a timed-out node whose requirements then hold is released Ready, its timeout cleared', () => {
    const t = gate('cni', { timeout: { seconds: 600, outcome: 'KeepTainted' } });
    const d = decide(t, heldNode(20, { [K.timedOutAt]: minutesAgo(9) }), [cilium(true)]);
    assert.equal(d.state, 'Released');
    assert.deepEqual(d.release, { outcome: 'Ready', heldSeconds: 1200 });
    assert.deepEqual(d.annotations, {
      [K.gatedAt]: null,
      [K.taint]: null,
      [K.timedOutAt]: null,
      [K.completedAt]: iso(NOW),
    });
  });
});

describe('decideGate: a node not held', () => {
  const continuous = gate('cni', { mode: 'Continuous', timeout: { seconds: 900, outcome: 'Release' } });
  const completed = { [K.completedAt]: '2026-11-21T08:00:00.000Z' };

  test('completed, bootstrap only: never gated again, whatever fails', () => {
    assert.deepEqual(decide(g, node({ annotations: completed }), [cilium(false)]), {
      gate: 'cni',
      state: 'Released',
      taint: undefined,
      annotations: {},
      unmet: [NOT_READY],
      timedOut: false,
      why: 'released at 2026-11-21T08:00:00.000Z (bootstrap only: never gated again)',
    });
  });

  test('completed, continuous, a requirement fails: gated again, even with workloads running', () => {
    const d = decide(continuous, node({ annotations: completed }), [cilium(false), workload()]);
    assert.deepEqual(d, {
      gate: 'cni',
      state: 'Held',
      taint: true,
      annotations: { [K.gatedAt]: '2026-11-21T10:00:00.000Z', [K.taint]: RECORD },
      unmet: [NOT_READY],
      timedOut: false,
      why: 'waiting for its requirements',
      event: {
        type: 'Normal',
        reason: 'Gated',
        message: `gate cni: tainted, a requirement failed after release (continuous mode); waiting for: ${NOT_READY}`,
      },
      requeueAfterMs: 900_000,
    });
  });

  test('completed, continuous, everything holds: stays open', () => {
    const d = decide(continuous, node({ annotations: completed }), [cilium(true)]);
    assert.equal(d.state, 'Released');
    assert.equal(d.why, 'every requirement holds');
    assert.equal(d.taint, undefined);
  });

  test('not completed, a busy node: not gated (its workloads may depend on it)', () => {
    assert.deepEqual(decide(g, node(), [cilium(false), workload()]), {
      gate: 'cni',
      state: 'Released',
      taint: undefined,
      annotations: {},
      unmet: [NOT_READY],
      timedOut: false,
      why: 'not gated: the node already runs workload pods (shop/web-6d4cf56db6-abcde)',
    });
  });

  test('an idle node created after the gate (the webhook missed it): gated', () => {
    const pods = [
      cilium(false),
      pod('kube-proxy-n1', { owner: { kind: 'Node', name: 'n1' }, phase: 'Running', ready: true }),
      pod('old-job', { namespace: 'batch', owner: { kind: 'Job', name: 'j' }, phase: 'Succeeded' }),
    ];
    assert.deepEqual(decide(g, node(), pods), {
      gate: 'cni',
      state: 'Held',
      taint: true,
      annotations: { [K.gatedAt]: '2026-11-21T10:00:00.000Z', [K.taint]: RECORD },
      unmet: [NOT_READY],
      timedOut: false,
      why: 'waiting for its requirements',
      event: {
        type: 'Normal',
        reason: 'Gated',
        message: `gate cni: tainted, the node joined without the taint (the webhook missed it); waiting for: ${NOT_READY}`,
      },
    });
  });

  test('a node created the same instant as the gate counts as created after it', () => {
    assert.equal(decide(g, node({ created: GATE_CREATED }), []).state, 'Held');
  });

  test('an idle node that existed before the gate: not gated unless backfill', () => {
    assert.deepEqual(decide(g, node({ created: NODE_OLD }), []), {
      gate: 'cni',
      state: 'Released',
      taint: undefined,
      annotations: {},
      unmet: [NONE_YET],
      timedOut: false,
      why: 'not gated: the node existed before the gate and backfill is off',
    });
    const backfill = gate('cni', { backfill: true });
    const d = decide(backfill, node({ created: NODE_OLD }), []);
    assert.equal(d.state, 'Held');
    assert.equal(d.taint, true);
    assert.deepEqual(d.annotations, { [K.gatedAt]: iso(NOW), [K.taint]: RECORD });
    assert.equal(
      d.event?.message,
      `gate cni: tainted, backfill of an idle node that existed before the gate; waiting for: ${NONE_YET}`,
    );
  });

  test('backfill never gates a busy node', () => {
    const backfill = gate('cni', { backfill: true });
    assert.equal(decide(backfill, node({ created: NODE_OLD }), [workload()]).state, 'Released');
  });

  test('everything holds: Released, nothing to write', () => {
    assert.deepEqual(decide(g, node(), [cilium(true)]), {
      gate: 'cni',
      state: 'Released',
      taint: undefined,
      annotations: {},
      unmet: [],
      timedOut: false,
      why: 'every requirement holds',
    });
  });

  test('a node released by a timeout reports timedOut while a requirement still fails', () => {
    const n = node({ annotations: { ...completed, [K.timedOutAt]: minutesAgo(60) } });
    const d = decide(g, n, [cilium(false)]);
    assert.equal(d.state, 'Released');
    assert.equal(d.timedOut, true);
    assert.deepEqual(d.annotations, {});
  });

  test('once its requirements hold, a node released by a timeout loses its timed-out-at', () => {
    const n = node({ annotations: { ...completed, [K.timedOutAt]: minutesAgo(60) } });
    const d = decide(g, n, [cilium(true)]);
    assert.equal(d.state, 'Released');
    assert.equal(d.timedOut, false);
    assert.deepEqual(d.annotations, { [K.timedOutAt]: null });
  });

  test('a node without an annotations map is treated as having none', () => {
    const d = decide(g, node({ annotations: undefined }), []);
    assert.equal(d.state, 'Held');
    assert.deepEqual(d.annotations, { [K.gatedAt]: iso(NOW), [K.taint]: RECORD });
  });
});

describe('decideGate: continuous mode after a release while requirements still fail', () => {
  const continuous = gate('cni', { mode: 'Continuous', timeout: { seconds: 600, outcome: 'Release' } });
  const CK = continuous.keys;

  test('a node the timeout released (timed-out-at present) is not gated again for the same failing requirement', () => {
    const released = node({
      annotations: { [CK.timedOutAt]: iso(NOW - 1000), [CK.completedAt]: iso(NOW - 1000) },
    });
    const d = decide(continuous, released, [cilium(false)]);
    assert.equal(d.state, 'Released');
    assert.equal(d.taint, undefined);
  });
});

describe('decideGate: a taint Berth did not put on stays whoever put it on', () => {
  // An admin's taint with the gate's key (any value): the gate does not take it over, backfill or not.
  const admin = { key: TAINT_KEY, value: 'admin', effect: 'NoSchedule' };

  test('an existing idle node tainted by hand: backfill leaves it alone', () => {
    const backfill = gate('cni', { backfill: true });
    assert.deepEqual(decide(backfill, node({ created: NODE_OLD, taints: [admin] }), []), {
      gate: 'cni',
      state: 'Released',
      taint: undefined,
      annotations: {},
      unmet: [NONE_YET],
      timedOut: false,
      why: `not gated: the node already carries the taint ${TAINT_KEY}:NoSchedule, which Berth did not put on; it stays theirs`,
    });
  });

  test('nor does the fallback on a new node, nor continuous mode on a completed one', () => {
    assert.equal(decide(g, node({ taints: [admin] }), []).taint, undefined);
    const continuous = gate('cni', { mode: 'Continuous' });
    const d = decide(
      continuous,
      node({ taints: [admin], annotations: { [K.completedAt]: minutesAgo(5) } }),
      [],
    );
    assert.deepEqual([d.taint, d.annotations], [undefined, {}]);
  });

  test('the same key with another effect is another taint: the gate puts its own on', () => {
    const d = decide(g, node({ taints: [{ ...admin, effect: 'NoExecute' }] }), []);
    assert.deepEqual([d.state, d.taint], ['Held', true]);
  });

  test('dry run does not count it as a node it would gate', () => {
    const dry = gate('cni', { dryRun: true, backfill: true });
    assert.equal(decide(dry, node({ created: NODE_OLD, taints: [admin] }), []).state, 'Released');
  });

  test('deleting the gate leaves it: the gate never held the node', () => {
    const deleting = { ...gate('cni', { backfill: true }), deleting: true };
    const d = decide(deleting, node({ created: NODE_OLD, taints: [admin] }), []);
    assert.deepEqual([d.taint, d.annotations], [undefined, {}]);
  });

  test("another gate's hold on the same taint is Berth's: handed over (decideGates)", () => {
    const { gates } = parseGates([gateObj('a-cni'), gateObj('b-cni')]);
    const n = node({ taints: [TAINT], annotations: { 'b-cni.gates.berth.dev/gated-at': minutesAgo(1) } });
    assert.deepEqual(
      decideGates(gates, n, [], NOW).map((d) => [d.gate, d.taint]),
      [
        ['a-cni', true],
        ['b-cni', false],
      ],
    );
  });

  test('a winner newer than the node takes it over from the loser, held since the loser gated it', () => {
    // Created a minute ago, after the node joined, with backfill off: mayGate would refuse a new
    // hold, but the taint the loser holds is Berth's, and the node's requirements are not met yet.
    const { gates } = parseGates([
      gateObj(
        'a-cni',
        { timeout: { seconds: 600, outcome: 'Release' } },
        { creationTimestamp: minutesAgo(1) },
      ),
      gateObj('b-cni'),
    ]);
    const [winner, loser] = gates;
    const n = node({ taints: [TAINT], annotations: { [loser!.keys.gatedAt]: minutesAgo(3) } });
    const [a, b] = decideGates(gates, n, [cilium(false)], NOW);
    assert.deepEqual(
      [a!.state, a!.taint, a!.annotations[winner!.keys.gatedAt], a!.requeueAfterMs],
      ['Held', true, minutesAgo(3), 7 * 60_000],
    );
    assert.match(a!.event!.message, /took over the node from gate b-cni/);
    assert.deepEqual([b!.state, b!.taint], ['NotSelected', false]);
    // The taint stays: the loser's release does not take off what the winner holds.
    assert.deepEqual(applyPatch(n, nodePatch(n, gates, [a!, b!])).spec.taints, [TAINT]);
  });
});

describe('decisionKeys and gateKeyClaims', () => {
  test('the keys a decision changes: its taint when it goes on or off, annotations set anew or removed', () => {
    const n = node({
      taints: [TAINT],
      annotations: { [K.gatedAt]: minutesAgo(3), [K.taint]: RECORD, [K.timedOutAt]: 'x' },
    });
    const d = decide(g, n, [cilium(true)]);
    assert.deepEqual(decisionKeys(n, g, d), [
      `taint ${TAINT_KEY}`,
      `annotation ${K.gatedAt}`,
      `annotation ${K.timedOutAt}`,
      `annotation ${K.completedAt}`,
      `annotation ${K.taint}`,
    ]);
    const held = decide(g, n, [cilium(false)]);
    assert.deepEqual(decisionKeys(n, g, held), [], 'still held: nothing changes');
  });

  test('a gate claims its annotation prefix, taint and completion annotation, under its own name', () => {
    const custom = gate('warmup', { completionAnnotation: 'startup.k8s.io/completedAt' });
    assert.deepEqual(gateKeyClaims([custom]), [
      { pattern: { kind: 'any', prefix: 'warmup.gates.berth.dev/' }, owner: 'NodeStartupGate warmup' },
      { pattern: { kind: 'taint', key: TAINT_KEY }, owner: 'NodeStartupGate warmup' },
      { pattern: { kind: 'annotation', key: 'startup.k8s.io/completedAt' }, owner: 'NodeStartupGate warmup' },
    ]);
  });
});

describe('leftOnNode', () => {
  const g = gate();
  test('gated-at or timed-out-at left', () => {
    assert.equal(leftOnNode(g, node()), false);
    assert.equal(leftOnNode(g, node({ annotations: undefined })), false);
    assert.equal(leftOnNode(g, node({ annotations: { [g.keys.gatedAt]: 'x' } })), true);
    assert.equal(leftOnNode(g, node({ annotations: { [g.keys.timedOutAt]: 'x' } })), true);
  });
  test('the completion annotation counts only when berth-gates wrote it (Update)', () => {
    const annotations = { [g.keys.completedAt]: '2026-11-21T09:00:00.000Z' };
    assert.equal(leftOnNode(g, node({ annotations })), false);
    assert.equal(leftOnNode(g, node({ annotations, managedFields: [ownedBy([g.keys.completedAt])] })), true);
    assert.equal(
      leftOnNode(
        g,
        node({ annotations, managedFields: [ownedBy([g.keys.completedAt], 'berth-gates', 'Apply')] }),
      ),
      false,
    );
    assert.equal(
      leftOnNode(g, node({ annotations, managedFields: [ownedBy([g.keys.completedAt], 'kubelet')] })),
      false,
    );
  });
});
