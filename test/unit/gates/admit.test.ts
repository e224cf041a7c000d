// The gates' Node CREATE admission (admit.ts): which gates taint and annotate a joining node.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { admitNode } from '../../../src/gates/admit.ts';
import { parseGates } from '../../../src/gates/decide/parse.ts';
import { EXEMPT_LABEL } from '../../../src/gates/types.ts';
import type { KubeObject } from '../../../src/runtime/api/meta.ts';
import { gateObj, iso, NOW, TAINT_KEY } from './fixtures.ts';

const STAMP = iso(NOW);

/** A Node as the webhook sees it at CREATE. */
const joining = (
  o: { labels?: Record<string, string>; annotations?: Record<string, string>; taints?: unknown[] } = {},
) =>
  ({
    apiVersion: 'v1',
    kind: 'Node',
    metadata: {
      name: 'ip-10-0-1-23.ec2.internal',
      labels: o.labels ?? { 'kubernetes.io/os': 'linux' },
      ...(o.annotations ? { annotations: o.annotations } : {}),
    },
    spec: o.taints ? { taints: o.taints } : {},
  }) as KubeObject;

describe('admitNode', () => {
  const cni = gateObj('cni');
  const gpu = gateObj('gpu', {
    taint: { key: 'startup.berth.dev/gpu', value: 'driver', effect: 'NoExecute' },
    nodeSelector: { matchLabels: { 'nvidia.com/gpu.present': 'true' } },
    requirements: { nodeConditions: [{ type: 'example.com/GPUReady' }] },
  });

  test('the taint and gated-at of every gate that selects the node', () => {
    const { gates } = parseGates([cni, gpu]);
    assert.deepEqual(admitNode(gates, joining(), NOW), {
      taints: [{ key: TAINT_KEY, effect: 'NoSchedule' }],
      annotations: {
        'cni.gates.berth.dev/gated-at': STAMP,
        'cni.gates.berth.dev/taint': 'startup.berth.dev/cni:NoSchedule',
      },
    });
    assert.deepEqual(admitNode(gates, joining({ labels: { 'nvidia.com/gpu.present': 'true' } }), NOW), {
      taints: [
        { key: TAINT_KEY, effect: 'NoSchedule' },
        { key: 'startup.berth.dev/gpu', value: 'driver', effect: 'NoExecute' },
      ],
      annotations: {
        'cni.gates.berth.dev/gated-at': STAMP,
        'cni.gates.berth.dev/taint': 'startup.berth.dev/cni:NoSchedule',
        'gpu.gates.berth.dev/gated-at': STAMP,
        'gpu.gates.berth.dev/taint': 'startup.berth.dev/gpu=driver:NoExecute',
      },
    });
  });

  test('skips gates in dry run, being deleted, not enforced, and exempt nodes', () => {
    const none = { taints: [], annotations: {} };
    const dry = parseGates([gateObj('cni', { dryRun: true })]).gates;
    assert.deepEqual(admitNode(dry, joining(), NOW), none);
    const deleting = parseGates([gateObj('cni', {}, { deletionTimestamp: '2026-11-21T09:00:00Z' })]).gates;
    assert.deepEqual(admitNode(deleting, joining(), NOW), none);
    const conflict = parseGates([gateObj('a'), gateObj('b')]).gates;
    assert.deepEqual(admitNode(conflict, joining(), NOW), {
      taints: [{ key: TAINT_KEY, effect: 'NoSchedule' }],
      annotations: {
        'a.gates.berth.dev/gated-at': STAMP,
        'a.gates.berth.dev/taint': 'startup.berth.dev/cni:NoSchedule',
      },
    });
    const invalid = parseGates([
      gateObj('cni', {
        requirements: { pods: [{ namespace: 'kube-system', daemonSet: 'cilium', readyAnnotation: 'x y' }] },
      }),
    ]).gates;
    assert.equal(invalid.length, 1);
    assert.deepEqual(admitNode(invalid, joining(), NOW), none);
    const all = parseGates([cni]).gates;
    assert.deepEqual(admitNode(all, joining({ labels: { [EXEMPT_LABEL]: 'true' } }), NOW), none);
    assert.deepEqual(admitNode([], joining(), NOW), none);
  });

  test('bootstrap only: a node that carries the completion annotation is not gated again; continuous is', () => {
    const annotations = { 'cni.gates.berth.dev/completed-at': '2026-11-01T00:00:00Z' };
    assert.deepEqual(admitNode(parseGates([cni]).gates, joining({ annotations }), NOW), {
      taints: [],
      annotations: {},
    });
    const continuous = parseGates([gateObj('cni', { mode: 'Continuous' })]).gates;
    assert.deepEqual(admitNode(continuous, joining({ annotations }), NOW), {
      taints: [{ key: TAINT_KEY, effect: 'NoSchedule' }],
      annotations: {
        'cni.gates.berth.dev/gated-at': STAMP,
        'cni.gates.berth.dev/taint': 'startup.berth.dev/cni:NoSchedule',
      },
    });
  });

  test('a taint already there (a Karpenter startup taint) is taken in charge, not duplicated', () => {
    const taints = [
      { key: TAINT_KEY, effect: 'NoSchedule' },
      { key: 'node.cloudprovider.kubernetes.io/uninitialized', value: 'true', effect: 'NoSchedule' },
    ];
    assert.deepEqual(admitNode(parseGates([cni]).gates, joining({ taints }), NOW), {
      taints: [],
      annotations: {
        'cni.gates.berth.dev/gated-at': STAMP,
        'cni.gates.berth.dev/taint': 'startup.berth.dev/cni:NoSchedule',
      },
    });
    // The same key with another effect is another taint.
    const other = [{ key: TAINT_KEY, effect: 'PreferNoSchedule' }];
    assert.deepEqual(admitNode(parseGates([cni]).gates, joining({ taints: other }), NOW).taints, [
      { key: TAINT_KEY, effect: 'NoSchedule' },
    ]);
  });

  test('a gated-at already there is kept', () => {
    const annotations = { 'cni.gates.berth.dev/gated-at': '2026-11-21T09:00:00.000Z' };
    assert.deepEqual(admitNode(parseGates([cni]).gates, joining({ annotations }), NOW), {
      taints: [{ key: TAINT_KEY, effect: 'NoSchedule' }],
      annotations: {},
    });
  });
});
