import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { KubeClient } from '../../../src/runtime/client/client.ts';
import { WriteLoopBreaker, type LoopTrip, type NodeKey } from '../../../src/policy/nodes/loopbreaker.ts';
import { nodeWriteMetrics } from '../../../src/policy/nodes/metrics.ts';
import { ApplyNodeWriter } from '../../../src/policy/nodes/apply.ts';
import { taintPatch } from '../../../src/policy/nodes/cas.ts';
import {
  changedKeys,
  leaveAsIs,
  nodeState,
  nodeWriteFor,
  taintRecordKey,
  type NodeOutputs,
  type NodeTaint,
} from '../../../src/policy/nodes/write.ts';
import { applyPatch } from '../gates/fixtures.ts';
import type { KubeObject } from '../../../src/runtime/api/meta.ts';
import { applyRecorder } from '../../helpers/fakeclient.ts';

const node = (name = 'n1'): KubeObject => ({ apiVersion: 'v1', kind: 'Node', metadata: { name, uid: 'u1' } });
const GATED: NodeKey = 'annotation w.gates.berth.dev/gated-at';

async function counter(name: 'writes' | 'loops', fieldManager: string): Promise<number> {
  const m = await nodeWriteMetrics[name].get();
  return m.values.find((v) => v.labels['field_manager'] === fieldManager)?.value ?? 0;
}

function breaker(limit = 10, windowMs = 60_000) {
  const c = { t: 1_000_000 };
  const trips: LoopTrip[] = [];
  const b = new WriteLoopBreaker({ limit, windowMs, clock: () => c.t, onTrip: (t) => trips.push(t) });
  return { b, c, trips };
}

describe('WriteLoopBreaker', () => {
  test('two writers fighting over a key: stopped after `limit` writes, with one trip, and free again after the window', async () => {
    const { b, c, trips } = breaker(10, 60_000);
    const n = node();
    const loopsBefore = await counter('loops', 'berth-labels');
    const writesBefore = await counter('writes', 'berth-labels');
    // The fight: labels sets gated-at, gates removes it, some 50 times a second.
    let written = 0;
    for (let i = 0; i < 500; i++) {
      const fm = i % 2 ? 'berth-gates' : 'berth-labels';
      c.t += 20;
      if (b.hold(n, fm, [GATED]).held.length) continue;
      await b.write(n, fm, [GATED], async () => written++);
    }
    assert.equal(written, 10, 'ten writes in ten seconds of fighting, then none');
    assert.equal(trips.length, 1, 'one Warning for the trip');
    assert.deepEqual(
      { key: trips[0]!.key, writers: trips[0]!.writers, writes: trips[0]!.writes },
      { key: GATED, writers: ['berth-gates', 'berth-labels'], writes: 10 },
    );
    assert.equal(await counter('writes', 'berth-labels'), writesBefore + 5);
    assert.equal(await counter('loops', 'berth-labels'), loopsBefore + 1, 'counted once per trip and writer');

    // When the oldest write leaves the window, the key may be written again.
    const { retryAfterMs } = b.hold(n, 'berth-labels', [GATED]);
    assert.equal(retryAfterMs, 1_000_020 + 60_000 - c.t, 'the first write was at 1_000_020');
    c.t += retryAfterMs!;
    assert.deepEqual(b.hold(n, 'berth-labels', [GATED]).held, []);
    await b.write(n, 'berth-labels', [GATED], async () => written++);
    // Still fighting: the window holds ten writes again, and that is a new trip.
    assert.deepEqual(b.hold(n, 'berth-gates', [GATED]).held, [GATED]);
    assert.equal(trips.length, 2);
  });

  test('legitimate churn below the limit is never held, other keys and nodes are counted apart', async () => {
    const { b, c, trips } = breaker(10, 60_000);
    // A key rewritten every 6.5 s, for ten minutes.
    for (let i = 0; i < 100; i++) {
      c.t += 6_500;
      assert.deepEqual(b.hold(node(), 'berth-labels', ['label a/b']).held, []);
      await b.write(node(), 'berth-labels', ['label a/b'], async () => {});
    }
    for (let i = 0; i < 10; i++) await b.write(node(), 'berth-agents', ['label c/d'], async () => {});
    c.t += 6_500;
    assert.deepEqual(b.hold(node(), 'berth-agents', ['label c/d', 'label a/b']).held, ['label c/d']);
    assert.deepEqual(b.hold(node('n2'), 'berth-agents', ['label c/d']).held, []);
    assert.equal(trips.length, 1);
  });

  test('claims that follow pods (decided without reading the node) are never held, however fast; a key someone undoes is', async () => {
    const { b, c, trips } = breaker(10, 60_000);
    // Claims under pod churn: one writer changes a key 50 times a second for a minute, and nobody
    // else touches it. The cache may lag one write behind (the next write sees the old node).
    let n: KubeObject = { ...node(), metadata: { ...node().metadata, resourceVersion: '1', labels: {} } };
    let stale = n;
    for (let i = 0; i < 3000; i++) {
      c.t += 20;
      const seen = i % 3 === 0 ? stale : n;
      assert.deepEqual(b.hold(seen, 'berth-agents', ['label a/b']).held, []);
      const next = {
        ...n,
        metadata: { ...n.metadata, resourceVersion: String(i + 2), labels: { 'a/b': String(i % 2) } },
      };
      await b.write(seen, 'berth-agents', ['label a/b'], async () => next, { decidesFromNode: false });
      stale = n;
      n = next;
    }
    assert.equal(trips.length, 0);
    // A fight on another key of the same node is held; the churning key and other nodes are not.
    let m = n;
    for (let i = 0; i < 12; i++) {
      const fm = i % 2 ? 'berth-x' : 'berth-y';
      const next = {
        ...m,
        metadata: {
          ...m.metadata,
          resourceVersion: String(10_000 + i),
          labels: { ...m.metadata!.labels, 'c/d': fm },
        },
      };
      await b.write(m, fm, ['label c/d'], async () => next, { decidesFromNode: false });
      m = next;
    }
    assert.deepEqual(b.hold(m, 'berth-x', ['label c/d', 'label a/b']).held, ['label c/d']);
    assert.deepEqual(b.hold(node('n2'), 'berth-x', ['label c/d']).held, []);
    assert.equal(trips.length, 1);
  });

  test('a failed write counts in the metric but not against the key', async () => {
    const { b } = breaker(1, 60_000);
    const before = await counter('writes', 'berth-x');
    await assert.rejects(
      b.write(node(), 'berth-x', ['label a/b'], () => Promise.reject(new Error('422'))),
      /422/,
    );
    assert.equal(await counter('writes', 'berth-x'), before + 1);
    assert.deepEqual(b.hold(node(), 'berth-x', ['label a/b']).held, []);
  });

  test('forgets the keys nobody wrote within a window', async () => {
    const { b, c } = breaker(10, 60_000);
    for (let i = 0; i < 50; i++)
      await b.write(node(`n${i}`), 'berth-x', ['label a/b', 'label c/d'], async () => node(`n${i}`));
    assert.equal(b.tracked, 100);
    c.t += 61_000;
    await b.write(node('n0'), 'berth-x', ['label a/b'], async () => node('n0'));
    assert.equal(b.tracked, 1);
  });
});

const FM = 'berth-test';
/** A node with `labels` and `annotations`, and which of them FM owns. */
function ownedNode(
  labels: Record<string, string>,
  annotations: Record<string, string>,
  owned: { labels: string[]; annotations: string[] },
  taints: { key: string; value?: string; effect: string }[] = [],
  ownedTaints: string[] = [],
): KubeObject {
  const f = (keys: string[]) => Object.fromEntries(keys.map((k) => [`f:${k}`, {}]));
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: {
      name: 'n1',
      uid: 'u1',
      resourceVersion: '1',
      labels,
      annotations: {
        ...annotations,
        ...(ownedTaints.length ? { [taintRecordKey(FM)]: JSON.stringify(ownedTaints) } : {}),
      },
      managedFields: [
        {
          manager: FM,
          operation: 'Apply',
          fieldsV1: { 'f:metadata': { 'f:labels': f(owned.labels), 'f:annotations': f(owned.annotations) } },
        },
      ],
    },
    spec: { taints },
  };
}

describe('ApplyNodeWriter and the loop breaker', () => {
  test('changedKeys: what a write changes, not what it merely keeps', () => {
    const n = ownedNode(
      { a: '1', b: '2', mine: 'x' },
      { c: '3' },
      { labels: ['a', 'mine'], annotations: ['c'] },
      [
        { key: 't', value: 'v', effect: 'NoSchedule' },
        { key: 'w', effect: 'NoSchedule' },
      ],
      ['t:NoSchedule', 'w:NoSchedule'],
    );
    const state = nodeState(n, FM);
    const want: NodeOutputs = {
      labels: { a: '1', b: '2', d: '4' },
      annotations: {},
      taints: [
        { key: 't', value: 'v', effect: 'NoSchedule' },
        { key: 'u', effect: 'NoExecute' },
      ],
    };
    assert.deepEqual(changedKeys(state, nodeWriteFor(state, want)).sort(), [
      'annotation c',
      'label d',
      'label mine',
      'taint u',
      'taint w',
    ]);
  });

  test('leaveAsIs: a held key keeps its value while the manager owns it, and is not taken up when it does not', () => {
    const n = ownedNode({ mine: 'old', theirs: 'x' }, {}, { labels: ['mine'], annotations: [] });
    const state = nodeState(n, FM);
    const want: NodeOutputs = {
      labels: { mine: 'new', fresh: 'y', other: 'z' },
      annotations: {},
      taints: [],
    };
    assert.deepEqual(leaveAsIs(state, want, ['label mine', 'label fresh']).labels, {
      mine: 'old',
      other: 'z',
    });
    assert.deepEqual(leaveAsIs(state, { labels: {}, annotations: {}, taints: [] }, ['label mine']).labels, {
      mine: 'old',
    });
  });

  test('a held key is left as it is, the rest is written, and the writer is told when to come back', async () => {
    const { client, applied } = applyRecorder();
    const { b, c } = breaker(2, 60_000);
    const writer = new ApplyNodeWriter(() => client, FM, { addEventHandler: () => {} }, { breaker: b });
    const n = ownedNode({ loop: 'a' }, {}, { labels: ['loop'], annotations: [] });
    for (let i = 0; i < 2; i++) await b.write(n, 'berth-other', ['label loop'], async () => {});
    c.t += 1_000;
    const r = await writer.sync(n, { labels: { loop: 'b', calm: 'c' }, annotations: {}, taints: [] });
    assert.equal(r.wrote, true);
    assert.equal(r.retryAfterMs, 59_000);
    assert.deepEqual(
      applied[0]!.metadata!.labels,
      { loop: 'a', calm: 'c' },
      'loop kept as it is, calm written',
    );
    // Only the held key differs: nothing to write, come back later.
    const calm = ownedNode({ loop: 'a', calm: 'c' }, {}, { labels: ['loop', 'calm'], annotations: [] });
    const again = await writer.sync(calm, { labels: { loop: 'b', calm: 'c' }, annotations: {}, taints: [] });
    assert.equal(again.wrote, false);
    assert.equal(again.retryAfterMs, 59_000);
    assert.equal(applied.length, 1);
  });
});

describe('ApplyNodeWriter: taints, an atomic list, by compare-and-swap patch with a record', () => {
  const admin = { key: 'dedicated', value: 'admin', effect: 'NoSchedule' };
  const mine = { key: 'accelerators/gpu', value: 'dedicated', effect: 'NoSchedule' };

  test("taintPatch puts its taint beside anyone else's, records it, and takes back only its own", () => {
    const bare = ownedNode({}, {}, { labels: [], annotations: [] }, [admin]);
    const on = applyPatch(bare, taintPatch(bare, FM, [mine]));
    assert.deepEqual((on['spec'] as { taints: unknown[] }).taints, [admin, mine]);
    assert.equal(
      on.metadata!.annotations![taintRecordKey(FM)],
      '{"accelerators/gpu:NoSchedule":"dedicated"}',
      'each taint with the value written',
    );
    assert.deepEqual(nodeState(on, FM).owned.taints, ['accelerators/gpu:NoSchedule']);
    // A new value for its own taint, in place.
    const changed = applyPatch(on, taintPatch(on, FM, [{ ...mine, value: 'shared' }]));
    assert.deepEqual((changed['spec'] as { taints: unknown[] }).taints, [
      admin,
      { ...mine, value: 'shared' },
    ]);
    // No more taints: its own comes off, the admin's stays, and so does the record go.
    const off = applyPatch(changed, taintPatch(changed, FM, []));
    assert.deepEqual((off['spec'] as { taints: unknown[] }).taints, [admin]);
    assert.equal(off.metadata!.annotations![taintRecordKey(FM)], undefined);
    assert.deepEqual(taintPatch(off, FM, []), [], 'nothing left to do');
  });

  test('the patch fails, instead of losing a change, when the taints or the node changed meanwhile', () => {
    const bare = ownedNode({}, {}, { labels: [], annotations: [] }, [admin]);
    const ops = taintPatch(bare, FM, [mine]);
    assert.throws(() => applyPatch({ ...bare, spec: { taints: [] } }, ops), /test \/spec\/taints failed/);
    assert.throws(
      () => applyPatch({ ...bare, metadata: { ...bare.metadata, uid: 'recreated' } }, ops),
      /test \/metadata\/uid failed/,
    );
  });

  test("a taint recorded but removed by someone else is not Berth's any more; one never recorded is not taken", () => {
    const n = ownedNode(
      {},
      {},
      { labels: [], annotations: [] },
      [admin],
      ['accelerators/gpu:NoSchedule', 'gone:NoSchedule'],
    );
    assert.deepEqual(nodeState(n, FM).owned.taints, []);
    const p = nodeWriteFor(nodeState(n, FM), {
      labels: {},
      annotations: {},
      taints: [{ ...admin, value: 'mine' }],
    });
    assert.deepEqual(p.foreign, [{ kind: 'taint', key: 'dedicated:NoSchedule' }]);
  });

  const bare = (taints: NodeTaint[], record?: string): KubeObject => {
    const n = ownedNode({}, {}, { labels: [], annotations: [] }, taints);
    if (record) n.metadata!.annotations![taintRecordKey(FM)] = record;
    return n;
  };
  const outputs = (taints: NodeTaint[]): NodeOutputs => ({ labels: {}, annotations: {}, taints });
  const taintsOn = (n: KubeObject) => (n['spec'] as { taints: NodeTaint[] }).taints;

  test('a taint already on the node, of the same value, is not taken: foreign, never recorded, never removed', () => {
    // An admin's `kubectl taint` before the rule came: the same key, effect and value.
    const n = bare([admin, mine]);
    const plan = nodeWriteFor(nodeState(n, FM), outputs([mine]));
    assert.deepEqual(plan.foreign, [{ kind: 'taint', key: 'accelerators/gpu:NoSchedule' }]);
    assert.deepEqual([plan.taints, plan.inSync], [[], true], 'nothing of its own to write');
    assert.deepEqual(taintPatch(n, FM, [mine]), [], 'not recorded, even when asked to');
    // The rule stops matching: the taint stays the admin's.
    assert.deepEqual(taintPatch(n, FM, []), []);
    assert.equal(nodeWriteFor(nodeState(n, FM), outputs([])).inSync, true);
  });

  test('a taint Berth put on whose value someone changed is theirs: not written back, dropped from the record, left on the node', () => {
    const n = bare([admin, { ...mine, value: 'taken' }], '{"accelerators/gpu:NoSchedule":"dedicated"}');
    assert.deepEqual(nodeState(n, FM).owned.taints, []);
    const plan = nodeWriteFor(nodeState(n, FM), outputs([mine]));
    assert.deepEqual(plan.foreign, [{ kind: 'taint', key: 'accelerators/gpu:NoSchedule' }]);
    assert.deepEqual([plan.taints, plan.changed], [[], ['taint']], 'a write of the record alone');
    const after = applyPatch(n, taintPatch(n, FM, plan.taints));
    assert.deepEqual(taintsOn(after), [admin, { ...mine, value: 'taken' }], 'their value stays');
    assert.equal(after.metadata!.annotations![taintRecordKey(FM)], undefined, 'no longer recorded');
    // From then on it is like any taint of someone else's: held back, nothing to write.
    const again = nodeWriteFor(nodeState(after, FM), outputs([mine]));
    assert.deepEqual([again.foreign.length, again.inSync], [1, true]);
    // And were it set back to Berth's value, Berth would not take it back either.
    const back = applyPatch(after, [{ op: 'replace', path: '/spec/taints/1/value', value: 'dedicated' }]);
    assert.deepEqual(taintPatch(back, FM, []), []);
  });

  test("an earlier version's record (ids only) still owns its taints, and is written again with their values", () => {
    const n = bare([admin, mine], '["accelerators/gpu:NoSchedule"]');
    assert.deepEqual(nodeState(n, FM).owned.taints, ['accelerators/gpu:NoSchedule']);
    const plan = nodeWriteFor(nodeState(n, FM), outputs([mine]));
    assert.deepEqual([plan.foreign, plan.taints, plan.changed], [[], [mine], ['taint']]);
    assert.deepEqual(changedKeys(nodeState(n, FM), plan), [], 'the taints themselves do not change');
    const after = applyPatch(n, taintPatch(n, FM, plan.taints));
    assert.deepEqual(taintsOn(after), [admin, mine]);
    assert.equal(
      after.metadata!.annotations![taintRecordKey(FM)],
      '{"accelerators/gpu:NoSchedule":"dedicated"}',
    );
    assert.equal(nodeWriteFor(nodeState(after, FM), outputs([mine])).inSync, true);
  });

  test('sync: labels by server-side apply (never spec.taints), taints by a JSON patch on what the apply left', async () => {
    const calls: { kind: string; body: unknown }[] = [];
    const client = {
      apply: (_ref: unknown, body: KubeObject) => {
        calls.push({ kind: 'apply', body });
        // The apply's answer: the node with the labels, a newer version.
        return Promise.resolve({
          ...node0,
          metadata: { ...node0.metadata, labels: body.metadata!.labels, resourceVersion: '2' },
        });
      },
      patch: (_ref: unknown, _name: string, ops: unknown) => {
        calls.push({ kind: 'patch', body: ops });
        return Promise.resolve({ metadata: { resourceVersion: '3' } });
      },
    } as unknown as KubeClient;
    const node0 = ownedNode({}, {}, { labels: [], annotations: [] }, [admin]);
    const writer = new ApplyNodeWriter(
      () => client,
      FM,
      { addEventHandler: () => {} },
      { breaker: new WriteLoopBreaker() },
    );
    const r = await writer.sync(node0, { labels: { gpu: 'true' }, annotations: {}, taints: [mine] });
    assert.equal(r.wrote, true);
    assert.deepEqual(
      calls.map((c) => c.kind),
      ['apply', 'patch'],
    );
    assert.equal((calls[0]!.body as KubeObject)['spec'], undefined, 'the apply never claims the atomic list');
    assert.deepEqual(
      (calls[1]!.body as { op: string; path: string }[]).find((o) => o.op === 'replace'),
      { op: 'replace', path: '/spec/taints', value: [admin, mine] },
    );
  });
});
