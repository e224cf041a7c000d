import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  describeRequirement,
  podDone,
  requiredPods,
  selects,
  unmetRequirements,
  workloadPods,
} from '../../../../src/gates/decide/requirements.ts';
import { EXEMPT_LABEL } from '../../../../src/gates/types.ts';
import { cilium, gate, node, pod, workload } from '../fixtures.ts';

describe('selects', () => {
  const g = gate('gpu', {
    nodeSelector: { matchLabels: { 'node.kubernetes.io/instance-type': 'g5.xlarge' } },
    excludeNodeSelectors: [
      { matchLabels: { pool: 'system' } },
      { matchExpressions: [{ key: 'karpenter.sh/nodepool', operator: 'In', values: ['spot-legacy'] }] },
    ],
  });
  const gpu = { 'node.kubernetes.io/instance-type': 'g5.xlarge' };

  test('nodeSelector', () => {
    assert.equal(selects(g, gpu), true);
    assert.equal(selects(g, { 'node.kubernetes.io/instance-type': 'm7i.large' }), false);
    assert.equal(selects(g, {}), false);
    assert.equal(selects(g, undefined), false);
  });

  test('any exclusion wins', () => {
    assert.equal(selects(g, { ...gpu, pool: 'system' }), false);
    assert.equal(selects(g, { ...gpu, pool: 'batch' }), true);
    assert.equal(selects(g, { ...gpu, 'karpenter.sh/nodepool': 'spot-legacy' }), false);
    assert.equal(selects(g, { ...gpu, 'karpenter.sh/nodepool': 'default' }), true);
  });

  test('no nodeSelector selects every node, even one without labels', () => {
    const all = gate();
    assert.equal(selects(all, undefined), true);
    assert.equal(selects(all, { anything: 'x' }), true);
  });

  test(`${EXEMPT_LABEL}=true exempts a node; any other value does not`, () => {
    const all = gate();
    assert.equal(selects(all, { [EXEMPT_LABEL]: 'true' }), false);
    assert.equal(selects(g, { ...gpu, [EXEMPT_LABEL]: 'true' }), false);
    assert.equal(selects(all, { [EXEMPT_LABEL]: 'false' }), true);
    assert.equal(selects(all, { [EXEMPT_LABEL]: 'True' }), true);
  });
});

describe('workloadPods', () => {
  test('DaemonSet, static (Node-owned), terminal and deleting pods do not make a node busy', () => {
    const pods = [
      cilium(true),
      pod('kube-proxy-n1', { owner: { kind: 'Node', name: 'n1' }, phase: 'Running', ready: true }),
      pod('job-done', { namespace: 'batch', owner: { kind: 'Job', name: 'j' }, phase: 'Succeeded' }),
      pod('job-failed', { namespace: 'batch', owner: { kind: 'Job', name: 'j' }, phase: 'Failed' }),
      pod('leaving', {
        namespace: 'shop',
        owner: { kind: 'ReplicaSet', name: 'rs' },
        phase: 'Running',
        deleting: true,
      }),
    ];
    assert.deepEqual(workloadPods(pods), []);
  });

  test('a ReplicaSet pod, a bare pod and a Pending pod are workload', () => {
    const bare = pod('debug', { namespace: 'default', phase: 'Running' });
    const pending = pod('queued', { namespace: 'shop', owner: { kind: 'StatefulSet', name: 'db' } });
    const pods = [cilium(false), workload(), bare, pending];
    assert.deepEqual(
      workloadPods(pods).map((p) => p.metadata!.name),
      ['web-6d4cf56db6-abcde', 'debug', 'queued'],
    );
  });
});

describe('podDone', () => {
  test('Running and Ready', () => {
    assert.equal(podDone(cilium(true), undefined), true);
    assert.equal(podDone(cilium(false), undefined), false);
  });
  test('Ready but not Running (a stale condition) is not done', () => {
    assert.equal(podDone(pod('p', { phase: 'Pending', ready: true }), undefined), false);
    assert.equal(podDone(pod('p', { phase: 'Failed', ready: true }), undefined), false);
  });
  test('Running without conditions is not done', () => {
    assert.equal(podDone(pod('p', { phase: 'Running' }), undefined), false);
  });
  test('Succeeded is done, with or without conditions', () => {
    assert.equal(podDone(pod('p', { phase: 'Succeeded' }), undefined), true);
    assert.equal(podDone(pod('p', { phase: 'Succeeded', ready: false }), undefined), true);
  });
  test('the ready annotation "true" counts, only when the requirement names it', () => {
    const p = pod('p', { phase: 'Running', ready: false, annotations: { 'example.com/done': 'true' } });
    assert.equal(podDone(p, 'example.com/done'), true);
    assert.equal(podDone(p, undefined), false);
    assert.equal(podDone(p, 'example.com/other'), false);
    const no = pod('p', { phase: 'Pending', annotations: { 'example.com/done': 'yes' } });
    assert.equal(podDone(no, 'example.com/done'), false);
  });
});

describe('requiredPods', () => {
  const mine = cilium(true, 'cilium-a');
  const otherDs = pod('calico-a', {
    labels: { 'k8s-app': 'cilium' },
    owner: { kind: 'DaemonSet', name: 'calico' },
    phase: 'Running',
  });
  const otherNs = pod('cilium-b', {
    namespace: 'cilium-system',
    labels: { 'k8s-app': 'cilium' },
    owner: { kind: 'DaemonSet', name: 'cilium' },
    phase: 'Running',
  });
  const rsNamedCilium = pod('cilium-rs', {
    labels: { 'k8s-app': 'cilium' },
    owner: { kind: 'ReplicaSet', name: 'cilium' },
    phase: 'Running',
  });
  const deleting = pod('cilium-old', {
    labels: { 'k8s-app': 'cilium' },
    owner: { kind: 'DaemonSet', name: 'cilium' },
    phase: 'Running',
    deleting: true,
  });
  const all = [mine, otherDs, otherNs, rsNamedCilium, deleting];

  test('by DaemonSet: owner kind DaemonSet, its name and the namespace; deleting pods ignored', () => {
    const r = { namespace: 'kube-system', daemonSet: 'cilium' };
    assert.deepEqual(
      requiredPods(r, all).map((p) => p.metadata!.name),
      ['cilium-a'],
    );
  });

  test('by selector, in a namespace or in all of them', () => {
    const inNs = { namespace: 'kube-system', selector: { matchLabels: { 'k8s-app': 'cilium' } } };
    assert.deepEqual(
      requiredPods(inNs, all).map((p) => p.metadata!.name),
      ['cilium-a', 'calico-a', 'cilium-rs'],
    );
    const anywhere = { selector: { matchLabels: { 'k8s-app': 'cilium' } } };
    assert.deepEqual(
      requiredPods(anywhere, all).map((p) => p.metadata!.name),
      ['cilium-a', 'calico-a', 'cilium-b', 'cilium-rs'],
    );
    const expr = {
      selector: { matchExpressions: [{ key: 'k8s-app', operator: 'NotIn' as const, values: ['cilium'] }] },
    };
    assert.deepEqual(requiredPods(expr, all), []);
  });
});

describe('unmetRequirements', () => {
  const g = gate('cni', {
    requirements: {
      pods: [
        { namespace: 'kube-system', daemonSet: 'cilium' },
        {
          namespace: 'kube-system',
          selector: { matchLabels: { app: 'csi' } },
          readyAnnotation: 'example.com/done',
        },
      ],
      nodeConditions: [{ type: 'Ready' }, { type: 'NetworkUnavailable', status: 'False' }],
    },
  });
  const csi = (name: string, o: Parameters<typeof pod>[1] = {}) =>
    pod(name, { labels: { app: 'csi' }, owner: { kind: 'DaemonSet', name: 'csi' }, ...o });
  const healthy = [
    { type: 'Ready', status: 'True' },
    { type: 'NetworkUnavailable', status: 'False' },
  ];

  test('nothing on the node yet, and absent conditions', () => {
    assert.deepEqual(unmetRequirements(g, node(), []), [
      'pods of DaemonSet kube-system/cilium: none on the node yet',
      'pods app=csi in kube-system: none on the node yet',
      'node condition Ready is absent, needs True',
      'node condition NetworkUnavailable is absent, needs False',
    ]);
  });

  test('pods not Ready, named (at most three) with their phase', () => {
    const pods = [
      cilium(false, 'cilium-a'),
      csi('csi-1', { phase: 'Running', ready: false }),
      csi('csi-2'),
      csi('csi-3', { phase: 'Failed' }),
      csi('csi-4', { phase: 'Pending' }),
      csi('csi-5', { phase: 'Running', ready: true }),
    ];
    const n = node({
      conditions: [
        { type: 'Ready', status: 'Unknown' },
        { type: 'NetworkUnavailable', status: 'True' },
      ],
    });
    assert.deepEqual(unmetRequirements(g, n, pods), [
      'pods of DaemonSet kube-system/cilium: kube-system/cilium-a (Running) not Ready',
      'pods app=csi in kube-system: kube-system/csi-1 (Running), kube-system/csi-2 (Pending), kube-system/csi-3 (Failed) and 1 more not Ready',
      'node condition Ready is Unknown, needs True',
      'node condition NetworkUnavailable is True, needs False',
    ]);
  });

  test('everything holds: no unmet requirement', () => {
    const pods = [
      cilium(true),
      csi('csi-1', { phase: 'Running', ready: false, annotations: { 'example.com/done': 'true' } }),
      csi('csi-2', { phase: 'Succeeded' }),
    ];
    assert.deepEqual(unmetRequirements(g, node({ conditions: healthy }), pods), []);
  });

  test('a gate with node conditions only', () => {
    const c = gate('ready', { requirements: { nodeConditions: [{ type: 'example.com/GPUReady' }] } });
    assert.deepEqual(unmetRequirements(c, node(), [cilium(true)]), [
      'node condition example.com/GPUReady is absent, needs True',
    ]);
    const ok = node({ conditions: [{ type: 'example.com/GPUReady', status: 'True' }] });
    assert.deepEqual(unmetRequirements(c, ok, []), []);
  });

  test('describeRequirement', () => {
    assert.equal(
      describeRequirement({ namespace: 'kube-system', daemonSet: 'cilium' }),
      'pods of DaemonSet kube-system/cilium',
    );
    assert.equal(describeRequirement({ selector: {} }), 'pods everything');
    assert.equal(
      describeRequirement({
        selector: {
          matchLabels: { a: '1' },
          matchExpressions: [
            { key: 'b', operator: 'In', values: ['x', 'y'] },
            { key: 'c', operator: 'Exists' },
          ],
        },
      }),
      'pods a=1,b In (x,y),c Exists',
    );
  });
});
