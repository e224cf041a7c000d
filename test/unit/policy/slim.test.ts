import assert from 'node:assert/strict';
import { test } from 'node:test';
import { archCapability } from '../../../src/arch/index.ts';
import { declaringAnnotations } from '../../../src/capability.ts';
import { gatesCapability } from '../../../src/gates/index.ts';
import { interning, internedSize, slimMetadata, slimNode, slimPod } from '../../../src/policy/slim.ts';
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
  assert.equal(internedSize().strings, start.strings + 4, 'the label value, the namespace, the container');
  t.lifecycle.dropped(a);
  assert.equal(internedSize().strings, start.strings + 4, 'b holds them still');
  t.lifecycle.dropped(b);
  t.lifecycle.dropped(b);
  assert.deepEqual(internedSize(), start, 'the last holder gone, so are they');
});

test('a value longer than 512 characters is never interned', () => {
  const t = interning('test-pod', slimPod);
  const start = internedSize();
  const a = t.fn(pod({}, { app: 'z'.repeat(513) }));
  t.lifecycle.cached(a);
  assert.equal(internedSize().strings, start.strings + 3, 'the namespace and the container only');
  t.lifecycle.dropped(a);
  assert.deepEqual(internedSize(), start);
});
