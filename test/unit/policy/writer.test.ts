import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { KubeClient } from '../../../src/runtime/client/client.ts';
import { WriteLoopBreaker } from '../../../src/policy/nodes/loopbreaker.ts';
import { ApplyNodeWriter } from '../../../src/policy/nodes/apply.ts';
import { WriteSpacing } from '../../../src/runtime/controller/spacing.ts';
import { nodeState, nodeWriteFor, type NodeOutputs } from '../../../src/policy/nodes/write.ts';
import { OTHER_MANAGERS, slimNode } from '../../../src/policy/slim.ts';
import type { KubeObject } from '../../../src/runtime/api/meta.ts';
import { applyRecorder } from '../../helpers/fakeclient.ts';

const FM = 'berth-test';

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

describe('nodeWriteFor', () => {
  test('says which kinds of output a write would change', () => {
    const n = node({ agent: 'true' }, { 'claim.a': 'x' });
    const plan = (d: NodeOutputs) => nodeWriteFor(nodeState(n, FM), d);
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
    const same = nodeWriteFor(state, want({ zone: 'admin', agent: 'true' }, {}));
    assert.deepEqual([same.inSync, same.foreign], [true, []]);
    const other = nodeWriteFor(state, want({ zone: 'amd64', agent: 'true' }, {}));
    assert.deepEqual(other.foreign, [{ kind: 'label', key: 'zone' }]);
    // The write drops this manager's share of the key; the other manager's value stays.
    assert.deepEqual([other.labels, other.changed], [{ agent: 'true' }, ['label']]);
  });
});

/** A writer whose claims wait a minute after a node's last write: longer than any test runs. */
function spaced(client: KubeClient): ApplyNodeWriter {
  return new ApplyNodeWriter(
    () => client,
    FM,
    { addEventHandler: () => {} },
    { breaker: new WriteLoopBreaker(), spacing: new WriteSpacing(60_000) },
  );
}

describe('ApplyNodeWriter with a WriteSpacing', () => {
  test("annotation-only writes wait for the node's spacing, label writes never do", async () => {
    const { client, applied } = applyRecorder();
    const writer = spaced(client);
    const n = node({ agent: 'true' }, { 'claim.a': 'x' });
    // A quiet node: written at once.
    const first = await writer.sync(n, want({ agent: 'true' }, { 'claim.a': 'x', 'claim.b': 'y' }));
    assert.equal(first.wrote, true);
    assert.equal(applied.length, 1);
    // Written a moment ago: the next claim waits, and says for how long.
    const n2 = node({ agent: 'true' }, { 'claim.a': 'x', 'claim.b': 'y' });
    const claims = await writer.sync(n2, want({ agent: 'true' }, { 'claim.a': 'x' }));
    assert.equal(claims.held, true);
    assert.equal(claims.wrote, false);
    assert.ok(claims.retryAfterMs! > 59_000 && claims.retryAfterMs! <= 60_000, String(claims.retryAfterMs));
    assert.equal(applied.length, 1);
    // The label steers scheduling: it goes at once.
    const label = await writer.sync(n2, want({}, {}));
    assert.equal(label.wrote, true);
    assert.equal(applied.length, 2);
  });

  test('a node in sync keeps its spacing; a node that is gone loses it', async () => {
    const { client, applied } = applyRecorder();
    const writer = spaced(client);
    await writer.sync(node(), want({ agent: 'true' }, { 'claim.a': 'x' }));
    const written = node({ agent: 'true' }, { 'claim.a': 'x' });
    // The write's watch event: in sync.
    assert.equal((await writer.sync(written, want({ agent: 'true' }, { 'claim.a': 'x' }))).inSync, true);
    assert.equal((await writer.sync(written, want({ agent: 'true' }, {}))).held, true);
    writer.forget('n1');
    assert.equal((await writer.sync(written, want({ agent: 'true' }, {}))).wrote, true);
    assert.equal(applied.length, 2);
  });

  test('judges a change against a write still on its way back, not the older cache', async () => {
    let applies = 0;
    const client = {
      apply: () => Promise.resolve({ metadata: { resourceVersion: String(++applies + 1) } }),
    } as unknown as KubeClient;
    const writer = spaced(client);
    const bare = node();
    // The first claim brings the label: written at once.
    assert.equal((await writer.sync(bare, want({ agent: 'true' }, { 'claim.a': 'x' }))).wrote, true);
    // The cache has not seen that write yet: the label is on its way, so a second claim may wait.
    const second = await writer.sync(bare, want({ agent: 'true' }, { 'claim.a': 'x', 'claim.b': 'y' }));
    assert.equal(second.held, true);
    assert.equal(applies, 1);
  });
});
