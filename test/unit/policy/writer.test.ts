import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { KubeClient } from '../../../src/runtime/client/client.ts';
import { WriteLoopBreaker } from '../../../src/policy/nodes/loopbreaker.ts';
import { ApplyNodeWriter } from '../../../src/policy/nodes/apply.ts';
import { BurstHold } from '../../../src/policy/nodes/burst.ts';
import { nodeState, planNodeApply, type NodeOutputs } from '../../../src/policy/nodes/plan.ts';
import { OTHER_MANAGERS, slimNode } from '../../../src/policy/slim.ts';
import type { KubeObject } from '../../../src/runtime/api/meta.ts';
import { applyRecorder } from '../../helpers/fakeclient.ts';

const FM = 'berth-test';

function fakeClock(start = 1000) {
  return {
    t: start,
    now() {
      return this.t;
    },
  };
}

/** A node carrying `labels` and `annotations`, all of them owned by FM. */
const node = (labels: Record<string, string> = {}, annotations: Record<string, string> = {}): KubeObject => ({
  apiVersion: 'v1',
  kind: 'Node',
  metadata: {
    name: 'n1',
    uid: 'u1',
    resourceVersion: '1',
    labels,
    annotations,
    managedFields: [
      {
        manager: FM,
        operation: 'Apply',
        fieldsV1: {
          'f:metadata': {
            'f:labels': Object.fromEntries(Object.keys(labels).map((k) => [`f:${k}`, {}])),
            'f:annotations': Object.fromEntries(Object.keys(annotations).map((k) => [`f:${k}`, {}])),
          },
        },
      },
    ],
  },
});
const want = (labels: Record<string, string>, annotations: Record<string, string>): NodeOutputs => ({
  labels,
  annotations,
  taints: [],
});

describe('planNodeApply', () => {
  test('says which kinds of output a write would change', () => {
    const n = node({ agent: 'true' }, { 'claim.a': 'x' });
    const plan = (d: NodeOutputs) => planNodeApply(nodeState(n, FM), d);
    assert.deepEqual(plan(want({ agent: 'true' }, { 'claim.a': 'x' })).changed, []);
    assert.equal(plan(want({ agent: 'true' }, { 'claim.a': 'x' })).inSync, true);
    assert.deepEqual(plan(want({ agent: 'true' }, { 'claim.a': 'x', 'claim.b': 'y' })).changed, [
      'annotation',
    ]);
    assert.deepEqual(plan(want({}, {})).changed, ['label', 'annotation']);
    assert.deepEqual(
      plan({ ...want({ agent: 'true' }, { 'claim.a': 'x' }), taints: [{ key: 't', effect: 'NoSchedule' }] })
        .changed,
      ['taint'],
    );
  });

  test('a key another manager owns too is left alone when this write would change it', () => {
    // Both set zone=admin (shared ownership); an apply of another value would be a 409 conflict.
    const n = node({ zone: 'admin', agent: 'true' });
    n.metadata!.labels!['admin-only'] = 'x';
    n.metadata!.managedFields!.push({
      manager: 'admin',
      operation: 'Update',
      fieldsV1: { 'f:metadata': { 'f:labels': { 'f:zone': {}, 'f:admin-only': {} } }, 'f:spec': {} },
    });
    // As the informer caches it: Berth's entries, and of the others only the keys shared with Berth.
    const slim = slimNode(n);
    assert.deepEqual(slim.metadata?.managedFields, [
      n.metadata!.managedFields![0],
      {
        manager: OTHER_MANAGERS,
        operation: 'Update',
        fieldsV1: { 'f:metadata': { 'f:labels': { 'f:zone': {} } } },
      },
    ]);
    const state = nodeState(slim, FM);
    assert.deepEqual(state.shared.labels, ['zone']);
    const same = planNodeApply(state, want({ zone: 'admin', agent: 'true' }, {}));
    assert.deepEqual([same.inSync, same.foreign], [true, []]);
    const other = planNodeApply(state, want({ zone: 'amd64', agent: 'true' }, {}));
    assert.deepEqual(other.foreign, [{ kind: 'label', key: 'zone' }]);
    // The write drops this manager's share of the key; the other manager's value stays.
    assert.deepEqual([other.labels, other.changed], [{ agent: 'true' }, ['label']]);
  });
});

describe('BurstHold', () => {
  const burstHold = (clock = fakeClock(), released: string[][] = []) =>
    new BurstHold({
      burstPerSecond: 100,
      maxHoldMs: 5_000,
      release: (names) => released.push(names),
      clock,
    });

  test('holds nothing while changes come slower than the burst rate', () => {
    const clock = fakeClock();
    const h = burstHold(clock);
    for (let i = 0; i < 100; i++) {
      clock.t += 20; // 50 per second
      h.observe();
    }
    assert.equal(h.inBurst(), false);
    assert.equal(h.hold('n1'), false);
    assert.equal(h.held, 0);
  });

  test('holds during a burst and releases once it has passed', async () => {
    const clock = fakeClock();
    const released: string[][] = [];
    const h = burstHold(clock, released);
    h.observe(200);
    assert.equal(h.inBurst(), true);
    assert.equal(h.hold('n1'), true);
    assert.equal(h.hold('n2'), true);
    assert.equal(h.held, 2);
    await sleep(150);
    assert.deepEqual(released, [], 'nothing is released while the burst lasts');
    // Between half and all of the burst rate the burst goes on; below half it is over.
    clock.t += 300 * Math.log(2);
    assert.equal(h.inBurst(), true);
    clock.t += 2_000;
    await sleep(150);
    assert.deepEqual(released.at(-1), ['n1', 'n2']);
    // A held node stays held until written or found in sync.
    h.done('n1');
    h.done('n2');
    assert.equal(h.held, 0);
    assert.equal(h.hold('n1'), false);
  });

  test('never holds a node longer than maxHoldMs, even while the burst lasts', async () => {
    const clock = fakeClock();
    const released: string[][] = [];
    const h = burstHold(clock, released);
    h.observe(200);
    assert.equal(h.hold('n1'), true);
    for (let t = 0; t < 5_000; t += 100) {
      clock.t += 100;
      h.observe(20);
    }
    assert.equal(h.inBurst(), true);
    await sleep(150);
    assert.deepEqual(released.at(-1), ['n1']);
    assert.equal(h.hold('n1'), false, 'held long enough: written now');
    h.done('n1');
  });
});

/** A writer whose burst hold is in a burst already (200 changes against 100 a second). */
function inBurst(client: KubeClient): { writer: ApplyNodeWriter; hold: BurstHold } {
  const hold = new BurstHold({
    burstPerSecond: 100,
    maxHoldMs: 5_000,
    release: () => {},
    clock: fakeClock(),
  });
  const writer = new ApplyNodeWriter(
    () => client,
    FM,
    { addEventHandler: () => {} },
    {
      breaker: new WriteLoopBreaker(),
      burst: hold,
    },
  );
  hold.observe(200);
  return { writer, hold };
}

describe('ApplyNodeWriter with a BurstHold', () => {
  test('holds annotation-only writes during a burst, never label writes', async () => {
    const { client, applied } = applyRecorder();
    const { writer, hold } = inBurst(client);

    const n = node({ agent: 'true' }, { 'claim.a': 'x' });
    const claims = await writer.sync(n, want({ agent: 'true' }, { 'claim.a': 'x', 'claim.b': 'y' }));
    assert.equal(claims.held, true);
    assert.equal(claims.wrote, false);
    assert.equal(applied.length, 0);
    assert.equal(hold.held, 1);

    const label = await writer.sync(n, want({}, {}));
    assert.equal(label.wrote, true);
    assert.equal(applied.length, 1);
    assert.equal(hold.held, 0, 'a write ends the hold');
  });

  test('judges a change against a write still on its way back, not the older cache', async () => {
    let applies = 0;
    const client = {
      apply: () => Promise.resolve({ metadata: { resourceVersion: String(++applies + 1) } }),
    } as unknown as KubeClient;
    const { writer } = inBurst(client);
    const bare = node();
    // The first claim brings the label: written at once.
    assert.equal((await writer.sync(bare, want({ agent: 'true' }, { 'claim.a': 'x' }))).wrote, true);
    // The cache has not seen that write yet: the label is on its way, so a second claim may wait.
    const second = await writer.sync(bare, want({ agent: 'true' }, { 'claim.a': 'x', 'claim.b': 'y' }));
    assert.equal(second.held, true);
    assert.equal(applies, 1);
  });
});
