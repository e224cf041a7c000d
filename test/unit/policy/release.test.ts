import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { KubeObject } from '../../../src/runtime/api/meta.ts';
import type { KubeClient } from '../../../src/runtime/client/client.ts';
import { taintId, taintRecordKey, type NodeTaint } from '../../../src/policy/nodes/write.ts';
import { releaseNodes } from '../../../src/policy/nodes/release.ts';
import { applyRecorder, nodeServer } from '../../helpers/fakeclient.ts';

const FM = 'berth-release-test';
const MINE: NodeTaint = { key: 'derived.example/gpu', value: 'dedicated', effect: 'NoSchedule' };
const ADMIN: NodeTaint = { key: 'dedicated', value: 'admin', effect: 'NoSchedule' };

/** A node where FM applied a label and an annotation and put a taint on (recorded), beside an admin's. */
const node = (): KubeObject => ({
  apiVersion: 'v1',
  kind: 'Node',
  metadata: {
    name: 'n1',
    uid: 'u1',
    resourceVersion: '10',
    labels: { 'derived.example/gpu': 'true', 'admin.example/pool': 'a' },
    annotations: { 'derived.example/note': 'x', [taintRecordKey(FM)]: JSON.stringify([taintId(MINE)]) },
    managedFields: [
      {
        manager: FM,
        operation: 'Apply',
        fieldsV1: {
          'f:metadata': {
            'f:labels': { 'f:derived.example/gpu': {} },
            'f:annotations': { 'f:derived.example/note': {} },
          },
        },
      },
      {
        manager: 'admin',
        operation: 'Update',
        fieldsV1: { 'f:metadata': { 'f:labels': { 'f:admin.example/pool': {} } } },
      },
    ],
  },
  spec: { taints: [ADMIN, MINE] },
});

/** The fake apiserver's node, its patches, and the apply bodies, behind one client. */
function cluster(n: KubeObject) {
  const server = nodeServer(n);
  const { client: recorder, applied } = applyRecorder();
  const client = {
    list: () => Promise.resolve({ items: server.node ? [server.node] : [] }),
    patch: server.client.patch,
    apply: recorder.apply,
  } as unknown as KubeClient;
  return { server, applied, client };
}

test("takes what the manager put on a node off it, and nobody else's", async () => {
  const { server, applied, client } = cluster(node());
  const said: string[] = [];
  await releaseNodes(client, FM, { say: (s) => said.push(s) });
  // Its taint and its record go, by compare-and-swap; the admin's taint stays.
  assert.deepEqual((server.node!['spec'] as { taints: NodeTaint[] }).taints, [ADMIN]);
  assert.equal(server.node!.metadata!.annotations![taintRecordKey(FM)], undefined);
  assert.equal(server.patches[0]![0]!.op, 'test', 'the uid is tested first');
  // Its label and annotation: an apply of nothing under its field manager, the node's uid in it.
  assert.deepEqual(applied, [{ apiVersion: 'v1', kind: 'Node', metadata: { name: 'n1', uid: 'u1' } }]);
  assert.deepEqual(said, [
    `node n1: removed taints ${taintId(MINE)}`,
    `node n1: removed label derived.example/gpu, annotation derived.example/note (${FM})`,
  ]);
});

test('a dry run says the same and sends nothing; a node without anything of the manager is left alone', async () => {
  const { server, applied, client } = cluster(node());
  const said: string[] = [];
  await releaseNodes(client, FM, { say: (s) => said.push(s), dryRun: true });
  assert.equal(said.length, 2);
  assert.deepEqual([server.patches, applied], [[], []]);

  const other = cluster(node());
  const quiet: string[] = [];
  await releaseNodes(other.client, 'berth-someone-else', { say: (s) => quiet.push(s) });
  assert.deepEqual([quiet, other.server.patches, other.applied], [[], [], []]);
});

test('a node gone meanwhile carries nothing any more', async () => {
  const { server, client } = cluster(node());
  const stale = server.node!;
  server.remove();
  const said: string[] = [];
  const gone = { ...client, list: () => Promise.resolve({ items: [stale] }) } as unknown as KubeClient;
  await releaseNodes(gone, FM, { say: (s) => said.push(s) });
  assert.deepEqual(said, []);
});
