// A gate gone from the API while a node still carries its keys: the webhook of a replica that had
// not yet seen the gate deleted tainted the node for it, or someone removed the gate's finalizer.
// Berth rebuilds what the gate left from its taint record and takes it back.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { nodePatch } from '../../../../src/gates/decide/patch.ts';
import { decideGates } from '../../../../src/gates/decide/state.ts';
import { gatesNamedOn, strayGate } from '../../../../src/gates/decide/stray.ts';
import { applyPatch, cilium, gate, minutesAgo, node, NOW, TAINT_KEY } from '../fixtures.ts';

const OLD = 'old.gates.berth.dev';
const TAINT = { key: TAINT_KEY, effect: 'NoSchedule' };
const OTHER = { key: 'node.kubernetes.io/not-ready', effect: 'NoSchedule' };

describe('gatesNamedOn', () => {
  test("the names of the gates whose own keys are on the node, and no other key's", () => {
    const n = node({
      annotations: {
        [`${OLD}/gated-at`]: minutesAgo(1),
        [`${OLD}/taint`]: `${TAINT_KEY}:NoSchedule`,
        'done.gates.berth.dev/completed-at': minutesAgo(9),
        'late.gates.berth.dev/timed-out-at': minutesAgo(2),
        // Not a gate's key: another suffix, the domain itself, a lookalike domain.
        'x.gates.berth.dev/ready': 'true',
        'gates.berth.dev/exempt': 'true',
        'y.notgates.berth.dev/gated-at': 'x',
        'example.com/cni-ready': 'true',
      },
    });
    assert.deepEqual(gatesNamedOn(n).sort(), ['done', 'late', 'old']);
    assert.deepEqual(gatesNamedOn(node({ annotations: undefined })), []);
  });
});

describe('strayGate', () => {
  test('a held node with a record: the taint is taken off with every key of the gate, and says why', () => {
    const n = node({
      taints: [OTHER, TAINT],
      annotations: {
        [`${OLD}/gated-at`]: minutesAgo(1),
        [`${OLD}/taint`]: `${TAINT_KEY}:NoSchedule`,
        [`${OLD}/timed-out-at`]: minutesAgo(1),
        keep: 'theirs',
      },
    });
    const stray = strayGate('old', n)!;
    assert.deepEqual(stray.spec.taint, TAINT);
    const [d] = decideGates([stray], n, [cilium(false)], NOW);
    assert.equal(d!.state, 'NotSelected');
    assert.equal(d!.taint, false);
    assert.equal(d!.why, 'the gate no longer exists');
    assert.equal(d!.event?.message, 'gate old: released (the gate no longer exists)');
    const after = applyPatch(n, nodePatch(n, [stray], [d!]));
    assert.deepEqual(after.spec.taints, [OTHER]);
    assert.deepEqual(after.metadata!.annotations, { keep: 'theirs' });
  });

  test('a record with a value is read back whole', () => {
    const n = node({
      taints: [{ key: 'startup.berth.dev/gpu', value: 'driver', effect: 'NoExecute' }],
      annotations: {
        [`${OLD}/gated-at`]: minutesAgo(1),
        [`${OLD}/taint`]: 'startup.berth.dev/gpu=driver:NoExecute',
      },
    });
    const stray = strayGate('old', n)!;
    assert.deepEqual(stray.spec.taint, {
      key: 'startup.berth.dev/gpu',
      value: 'driver',
      effect: 'NoExecute',
    });
    const [d] = decideGates([stray], n, [], NOW);
    assert.deepEqual(applyPatch(n, nodePatch(n, [stray], [d!])).spec.taints, []);
  });

  test('held with no record, or one that is not a taint: unknown, nothing taken', () => {
    const held = { [`${OLD}/gated-at`]: minutesAgo(1) };
    assert.equal(strayGate('old', node({ taints: [TAINT], annotations: held })), undefined);
    for (const bad of ['', 'no-effect', `${TAINT_KEY}:Sometimes`, 'not a key!!:NoSchedule', ':NoSchedule']) {
      const n = node({ taints: [TAINT], annotations: { ...held, [`${OLD}/taint`]: bad } });
      assert.equal(strayGate('old', n), undefined, bad);
    }
  });

  test("not held: the stamps it wrote go, a taint of the same key stays (it is not the gate's)", () => {
    const n = node({
      taints: [TAINT],
      annotations: { [`${OLD}/timed-out-at`]: minutesAgo(3) },
    });
    const stray = strayGate('old', n)!;
    const [d] = decideGates([stray], n, [], NOW);
    assert.equal(d!.taint, undefined);
    assert.equal(d!.event, undefined);
    const after = applyPatch(n, nodePatch(n, [stray], [d!]));
    assert.deepEqual(after.spec.taints, [TAINT]);
    assert.deepEqual(after.metadata!.annotations, {});
  });

  test('a live gate holding the node with the same taint keeps it while the stray lets go', () => {
    const live = gate('cni');
    const n = node({
      taints: [TAINT],
      annotations: {
        [`${OLD}/gated-at`]: minutesAgo(2),
        [`${OLD}/taint`]: `${TAINT_KEY}:NoSchedule`,
        [live.keys.gatedAt]: minutesAgo(1),
        [live.keys.taint]: `${TAINT_KEY}:NoSchedule`,
      },
    });
    const stray = strayGate('old', n)!;
    const decisions = decideGates([live, stray], n, [cilium(false)], NOW);
    assert.deepEqual(
      decisions.map((d) => [d.gate, d.state, d.taint]),
      [
        ['cni', 'Held', true],
        ['old', 'NotSelected', false],
      ],
    );
    const after = applyPatch(n, nodePatch(n, [live, stray], decisions));
    assert.deepEqual(after.spec.taints, [TAINT]);
    assert.deepEqual(after.metadata!.annotations, {
      [live.keys.gatedAt]: minutesAgo(1),
      [live.keys.taint]: `${TAINT_KEY}:NoSchedule`,
    });
  });
});

describe('the taint record', () => {
  test('a node held since before records gets one, and only while it stays held', () => {
    const g = gate('cni');
    const held = node({ taints: [TAINT], annotations: { [g.keys.gatedAt]: minutesAgo(1) } });
    const [d] = decideGates([g], held, [cilium(false)], NOW);
    assert.equal(d!.state, 'Held');
    assert.deepEqual(d!.annotations, { [g.keys.taint]: `${TAINT_KEY}:NoSchedule` });
    // Released in the same pass: no record is written only to be removed.
    const [r] = decideGates([g], held, [cilium(true)], NOW);
    assert.equal(r!.state, 'Released');
    assert.equal(g.keys.taint in r!.annotations, false);
  });

  test('a gate created again with another taint while Berth was away: the taint its record names comes off, the new one goes on', () => {
    const FORMER = { key: 'startup.berth.dev/old', effect: 'NoExecute' };
    const g = gate('cni');
    const held = node({
      taints: [OTHER, FORMER],
      annotations: { [g.keys.gatedAt]: minutesAgo(1), [g.keys.taint]: 'startup.berth.dev/old:NoExecute' },
    });
    const [d] = decideGates([g], held, [cilium(false)], NOW);
    assert.equal(d!.state, 'Held');
    assert.deepEqual(d!.formerTaint, FORMER);
    assert.deepEqual(d!.annotations, { [g.keys.taint]: `${TAINT_KEY}:NoSchedule` });
    let after = applyPatch(held, nodePatch(held, [g], [d!]));
    assert.deepEqual(after.spec.taints, [OTHER, TAINT]);
    // Requirements met in the same pass: both taints off, and the record with them.
    const [r] = decideGates([g], held, [cilium(true)], NOW);
    assert.equal(r!.state, 'Released');
    after = applyPatch(held, nodePatch(held, [g], [r!]));
    assert.deepEqual(after.spec.taints, [OTHER]);
    assert.equal(g.keys.taint in after.metadata!.annotations!, false);
    // The former taint gone already (by hand): nothing to take.
    const clean = node({ taints: [OTHER, TAINT], annotations: held.metadata!.annotations! });
    assert.equal(decideGates([g], clean, [cilium(false)], NOW)[0]!.formerTaint, undefined);
  });

  test("a former taint another gate holds the node with is that gate's, and stays", () => {
    const FORMER = { key: 'startup.berth.dev/old', effect: 'NoExecute' };
    const g = gate('cni');
    const owner = gate('old', { taint: FORMER });
    const held = node({
      taints: [FORMER],
      annotations: {
        [g.keys.gatedAt]: minutesAgo(1),
        [g.keys.taint]: 'startup.berth.dev/old:NoExecute',
        [owner.keys.gatedAt]: minutesAgo(1),
        [owner.keys.taint]: 'startup.berth.dev/old:NoExecute',
      },
    });
    const ds = decideGates([g, owner], held, [cilium(false)], NOW);
    assert.deepEqual(
      ds.map((d) => d.state),
      ['Held', 'Held'],
    );
    const after = applyPatch(held, nodePatch(held, [g, owner], ds));
    assert.deepEqual(after.spec.taints, [FORMER, TAINT]);
  });
});
