import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { claimedOwners, decideNode, ownerOf, type Placement } from '../../../src/agents/decide.ts';
import type { AgentPlacementSpec } from '../../../src/agents/types.ts';
import type { SlimPod } from '../../../src/runtime/transforms.ts';
import type { KubeObject } from '../../../src/runtime/types.ts';

const spec = (s: Partial<AgentPlacementSpec> = {}): AgentPlacementSpec => ({
  podSelector: { matchLabels: { app: 'ateom' } },
  owner: { uidLabel: 'ate.dev/pool-uid' },
  nodeLabel: { key: 'ate.dev/atelet', value: 'true' },
  claimAnnotationPrefix: 'ate.dev/claim.',
  ...s,
});

const pod = (name: string, labels: Record<string, string>, extra: Partial<SlimPod> = {}): SlimPod => ({
  metadata: { name, namespace: 'ate', labels },
  spec: { nodeName: 'n1', containers: [] },
  status: { phase: 'Running' },
  ...extra,
});
const noLookup = () => undefined;
const nsLabels = () => ({});

describe('claims on a node', () => {
  const p: Placement = { name: 'atelet', spec: spec() };
  test('one claim per distinct owner, one label', () => {
    const pods = [
      pod('a1', { app: 'ateom', 'ate.dev/pool-uid': 'A' }),
      pod('a2', { app: 'ateom', 'ate.dev/pool-uid': 'A' }),
      pod('b1', { app: 'ateom', 'ate.dev/pool-uid': 'B' }),
    ];
    const d = decideNode(pods, [p], nsLabels, noLookup);
    assert.deepEqual(d.desired.labels, { 'ate.dev/atelet': 'true' });
    assert.deepEqual(Object.keys(d.desired.annotations).sort(), ['ate.dev/claim.A', 'ate.dev/claim.B']);
    assert.deepEqual(d.placements.get('atelet')!.claims.get('A')!.pods, ['ate/a1', 'ate/a2']);
  });
  test('no counted pod: no claim and no label', () => {
    const pods = [
      pod('done', { app: 'ateom', 'ate.dev/pool-uid': 'A' }, { status: { phase: 'Succeeded' } }),
      pod('pending', { app: 'ateom', 'ate.dev/pool-uid': 'A' }, { spec: { containers: [] } }),
      pod('other', { app: 'web', 'ate.dev/pool-uid': 'A' }),
      pod('ownerless', { app: 'ateom' }),
    ];
    assert.deepEqual(decideNode(pods, [p], nsLabels, noLookup).desired, {
      labels: {},
      annotations: {},
      taints: [],
    });
  });
  test('a namespaceSelector needs the namespace labels', () => {
    const sel: Placement = { name: 'x', spec: spec({ namespaceSelector: { matchLabels: { team: 'ate' } } }) };
    const pods = [pod('a1', { app: 'ateom', 'ate.dev/pool-uid': 'A' })];
    assert.equal(
      decideNode(pods, [sel], () => ({ team: 'ate' }), noLookup).placements.get('x')!.claims.size,
      1,
    );
    assert.equal(
      decideNode(pods, [sel], () => ({ team: 'web' }), noLookup).placements.get('x')!.claims.size,
      0,
    );
    assert.equal(decideNode(pods, [sel], () => undefined, noLookup).placements.get('x')!.claims.size, 0);
  });
  test('two placements on one label key with different values: the first by name keeps it', () => {
    const a: Placement = {
      name: 'a',
      spec: spec({ nodeLabel: { key: 'agent', value: 'one' }, claimAnnotationPrefix: 'a/claim.' }),
    };
    const b: Placement = {
      name: 'b',
      spec: spec({ nodeLabel: { key: 'agent', value: 'two' }, claimAnnotationPrefix: 'b/claim.' }),
    };
    const pods = [pod('a1', { app: 'ateom', 'ate.dev/pool-uid': 'A' })];
    for (const order of [
      [a, b],
      [b, a],
    ]) {
      const d = decideNode(pods, order, nsLabels, noLookup);
      assert.deepEqual(d.desired.labels, { agent: 'one' });
      assert.equal(d.placements.get('a')!.labelled, true);
      assert.equal(d.placements.get('b')!.labelled, false);
      assert.deepEqual(Object.keys(d.desired.annotations).sort(), ['a/claim.A', 'b/claim.A']);
    }
  });
});

describe('owners', () => {
  test('controllerRef mode follows a ReplicaSet to its Deployment', () => {
    const rs: KubeObject = {
      metadata: {
        name: 'web-7d9',
        namespace: 'ate',
        uid: 'rs-uid',
        ownerReferences: [
          { apiVersion: 'apps/v1', kind: 'Deployment', name: 'web', uid: 'dep-uid', controller: true },
        ],
      },
    };
    const p = pod(
      'w',
      { app: 'ateom' },
      {
        metadata: {
          name: 'w',
          namespace: 'ate',
          labels: { app: 'ateom' },
          ownerReferences: [
            { apiVersion: 'apps/v1', kind: 'ReplicaSet', name: 'web-7d9', uid: 'rs-uid', controller: true },
          ],
        },
      },
    );
    const owner = ownerOf(p, spec({ owner: { controllerRef: true } }), (_v, kind, ns, name) =>
      kind === 'ReplicaSet' && ns === 'ate' && name === 'web-7d9' ? rs : undefined,
    );
    assert.deepEqual(owner, {
      uid: 'dep-uid',
      description: 'Deployment/ate/web',
      ref: { apiVersion: 'apps/v1', kind: 'Deployment', namespace: 'ate', name: 'web' },
    });
    // Without the ReplicaSet in the cache, the ReplicaSet itself is the owner.
    assert.equal(ownerOf(p, spec({ owner: { controllerRef: true } }), noLookup)?.uid, 'rs-uid');
  });
  test('claimedOwners reads claim annotations by prefix', () => {
    assert.deepEqual(
      claimedOwners(
        { metadata: { annotations: { 'ate.dev/claim.A': 'x', 'ate.dev/claim.': 'y', other: 'z' } } },
        ['ate.dev/claim.'],
      ),
      ['A'],
    );
  });
});
