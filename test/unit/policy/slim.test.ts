import assert from 'node:assert/strict';
import { test } from 'node:test';
import { archCapability } from '../../../src/arch/index.ts';
import { declaringAnnotations } from '../../../src/capability.ts';
import { gatesCapability } from '../../../src/gates/index.ts';
import { interning, internedSize } from '../../../src/policy/intern.ts';
import { slimMetadata, slimNode, slimPod } from '../../../src/policy/slim.ts';
import type { KubeObject } from '../../../src/runtime/api/meta.ts';
import { podReady } from '../../../src/gates/decide/requirements.ts';

declaringAnnotations([archCapability, gatesCapability]);

const pod = (
  annotations: Record<string, string> | undefined,
  labels?: Record<string, string>,
): KubeObject => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { name: 'p', namespace: 'ns', uid: 'u', annotations, labels },
  spec: { containers: [{ name: 'c', image: 'img:1' }] },
});

test("a tenant's object keeps only the annotations a capability declared, each within its length", () => {
  const big = 'x'.repeat(2000);
  const m = slimMetadata(
    pod({
      'arch.berth.dev/policy': 'p1',
      'arch.berth.dev/skip': big,
      'arch.berth.dev/result': big,
      'example.com/ready': 'true',
      'example.com/blob': big,
      'kubernetes.io/config.mirror': 'abc',
    }).metadata,
  );
  assert.deepEqual(m.annotations, {
    'arch.berth.dev/policy': 'p1',
    'arch.berth.dev/result': big,
    'example.com/ready': 'true',
    'kubernetes.io/config.mirror': 'abc',
  });
  // The map stays, empty, where the object has one: a JSON patch adds to it key by key.
  assert.deepEqual(slimPod(pod({ 'example.com/blob': big })).metadata?.annotations, {});
  assert.equal(slimPod(pod(undefined)).metadata?.annotations, undefined);
});

test("a pod keeps only its Ready condition, all that Berth's controllers read of them", () => {
  const conditions = [
    'PodReadyToStartContainers',
    'Initialized',
    'Ready',
    'ContainersReady',
    'PodScheduled',
  ].map((type) => ({
    type,
    status: type === 'Ready' ? 'False' : 'True',
    reason: 'r',
    lastTransitionTime: 't',
  }));
  const slim = slimPod({ ...pod(undefined), status: { phase: 'Pending', conditions } });
  assert.deepEqual(slim.status.conditions, [{ type: 'Ready', status: 'False' }]);
  assert.equal(podReady(slim), false);
  assert.equal(slimPod({ ...pod(undefined), status: { phase: 'Pending' } }).status.conditions, undefined);
});

test('a node keeps every annotation but the last applied configuration', () => {
  const node = slimNode({
    apiVersion: 'v1',
    kind: 'Node',
    metadata: {
      name: 'n',
      annotations: { 'example.com/any': 'v', 'kubectl.kubernetes.io/last-applied-configuration': '{}' },
    },
  });
  assert.deepEqual(node.metadata?.annotations, { 'example.com/any': 'v' });
});

test("a node keeps its Berth controllers' managedFields entries, and of the others only the keys they share", () => {
  const fields = (labels: string[]) => ({
    'f:metadata': { 'f:labels': Object.fromEntries(labels.map((k) => [`f:${k}`, {}])) },
  });
  const node = slimNode({
    apiVersion: 'v1',
    kind: 'Node',
    metadata: {
      name: 'n',
      managedFields: [
        { manager: 'berth-labels', operation: 'Apply', fieldsV1: fields(['derived']) },
        // A client named by its user agent alone (the `berth` command, the sandbox that made the
        // node) is no controller of Berth's: its entry is another manager's.
        { manager: 'berth', operation: 'Update', fieldsV1: fields(['input', 'derived', 'zone']) },
        { manager: 'kubelet', operation: 'Update', fieldsV1: fields(['zone']) },
      ],
    },
  });
  assert.deepEqual(
    (node.metadata?.managedFields as { manager: string; fieldsV1: unknown }[]).map((e) => [
      e.manager,
      e.fieldsV1,
    ]),
    [
      ['berth-labels', fields(['derived'])],
      ['other-managers', fields(['derived'])],
    ],
  );
});
test('an interned value lives as long as a cached object holds it', () => {
  const t = interning('test-pod', slimPod);
  const start = internedSize();
  const value = `v-${'y'.repeat(40)}`;
  const a = t.fn(pod({}, { app: value }));
  const b = t.fn(pod({}, { app: value }));
  // Made but not cached (a webhook's, explain's): the table is only read.
  assert.deepEqual(internedSize(), start);
  t.lifecycle.cached(a);
  t.lifecycle.cached(b);
  const held = { strings: start.strings + 2, structures: start.structures + 1 };
  const { strings, structures } = internedSize();
  assert.deepEqual({ strings, structures }, held, 'the label value, the namespace; the container list');
  const c = t.fn(pod({}, { app: value }));
  assert.equal(c.metadata?.labels?.app, value);
  assert.equal(c.spec.containers, a.spec.containers, "a pod made now shares the first one's list");
  assert.throws(
    () => (c.spec.containers as unknown[]).push({}),
    TypeError,
    'frozen: one pod cannot change another',
  );
  t.lifecycle.dropped(a);
  assert.equal(internedSize().strings, held.strings, 'b holds them still');
  t.lifecycle.dropped(b);
  assert.deepEqual(internedSize(), start, 'the last holder gone, so are they');
});

test('nodes alike share their conditions, node info, annotations, taints and Berth managedFields, frozen', () => {
  const t = interning('test-node', slimNode);
  const start = internedSize();
  const node = (name: string, ready = 'True'): KubeObject => ({
    apiVersion: 'v1',
    kind: 'Node',
    metadata: {
      name,
      labels: { 'kubernetes.io/hostname': name },
      annotations: { 'node.alpha.kubernetes.io/ttl': '0' },
      managedFields: [
        {
          manager: 'berth-labels',
          operation: 'Apply',
          time: '2026-11-29T10:00:00Z',
          fieldsV1: { 'f:metadata': { 'f:labels': { 'f:derived': {} } } },
        },
      ],
    },
    spec: { taints: [{ key: 'k', effect: 'NoSchedule' }] },
    status: {
      nodeInfo: { architecture: 'amd64', kubeletVersion: 'v1.37.2', machineID: name },
      conditions: [
        { type: 'Ready', status: ready, reason: 'KubeletReady', message: name },
        { type: 'MemoryPressure', status: 'False' },
      ],
    },
  });
  const parts = (n: ReturnType<typeof slimNode>) => [
    n.status.conditions,
    n.status.nodeInfo,
    n.metadata?.annotations,
    n.spec.taints,
    n.metadata?.managedFields,
  ];
  const a = t.fn(node('a'));
  t.lifecycle.cached(a);
  const b = t.fn(node('b'));
  t.lifecycle.cached(b);
  parts(a).forEach((part, i) => assert.equal(parts(b)[i], part, `part ${i} shared`));
  assert.deepEqual(b.status.conditions, [
    { type: 'Ready', status: 'True' },
    { type: 'MemoryPressure', status: 'False' },
  ]);
  assert.deepEqual(b.status.nodeInfo, { architecture: 'amd64', kubeletVersion: 'v1.37.2' });
  assert.throws(() => ((b.status.conditions as { status: string }[])[0]!.status = 'False'), TypeError);
  const entry = b.metadata!.managedFields![0] as { fieldsV1: Record<string, unknown> };
  assert.throws(() => (entry.fieldsV1['f:metadata'] = {}), TypeError, 'frozen within too');
  const c = t.fn(node('c', 'False'));
  assert.notEqual(c.status.conditions, a.status.conditions, 'a node not alike has its own');
  assert.equal(c.status.nodeInfo, a.status.nodeInfo);
  t.lifecycle.dropped(a);
  t.lifecycle.dropped(b);
  assert.deepEqual(internedSize(), start, 'the last holder gone, so are they');
});

test('what a slim transform makes of its own object is that object: the lifecycle asks it again', () => {
  const full = {
    ...pod({ 'arch.berth.dev/policy': 'p1', 'example.com/blob': 'b' }, { app: 'a' }),
    metadata: {
      name: 'p',
      namespace: 'ns',
      uid: 'u',
      ownerReferences: [
        { apiVersion: 'apps/v1', kind: 'ReplicaSet', name: 'rs', uid: 'r', controller: true },
      ],
      annotations: { 'example.com/blob': 'b' },
    },
    spec: { nodeName: 'n', containers: [{ name: 'c', image: 'i' }], nodeSelector: { zone: 'z' } },
    status: { phase: 'Running', hostIP: '10.0.0.1', conditions: [{ type: 'Ready', status: 'True' }] },
  };
  const slim = slimPod(full);
  assert.deepEqual(slimPod(slim), slim);
  assert.deepEqual(slim.metadata?.annotations, {});
  const node = slimNode({
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name: 'n', labels: { a: 'b' }, annotations: { x: 'y' } },
    spec: { taints: [{ key: 'k', effect: 'NoSchedule' }] },
    status: { nodeInfo: { architecture: 'amd64' }, conditions: [{ type: 'Ready', status: 'True' }] },
  });
  assert.deepEqual(slimNode(node), node);
});

test('no tenant value spells the key of another pod list: a key is JSON', () => {
  const t = interning('test-pod', slimPod);
  const theirs = t.fn({
    ...pod({}),
    spec: {
      containers: [
        { name: 'a', image: 'b' },
        { name: 'c', image: 'd' },
      ],
    },
  });
  t.lifecycle.cached(theirs);
  const mine = slimPod({ ...pod({}), spec: { containers: [{ name: 'a', image: 'b\0c\0d' }] } });
  assert.deepEqual(mine.spec.containers, [{ name: 'a', image: 'b\0c\0d' }]);
  t.lifecycle.dropped(theirs);
});

test('a value longer than 512 characters is never interned', () => {
  const t = interning('test-pod', slimPod);
  const start = internedSize();
  const a = t.fn(pod({}, { app: 'z'.repeat(513) }));
  t.lifecycle.cached(a);
  assert.equal(internedSize().strings, start.strings + 1, 'the namespace only');
  t.lifecycle.dropped(a);
  assert.deepEqual(internedSize(), start);
});
