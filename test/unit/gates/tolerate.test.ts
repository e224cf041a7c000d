import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { parseGates } from '../../../src/gates/decide/parse.ts';
import { gatesWaitingFor, missingTolerations, tolerationsPatch } from '../../../src/gates/tolerate.ts';
import { tolerates, tolerationFor, type Toleration } from '../../../src/policy/nodes/taints.ts';
import type { KubeObject } from '../../../src/runtime/api/meta.ts';
import { applyPatch, gateObj, TAINT_KEY } from './fixtures.ts';

describe('tolerates (core/v1 Toleration.ToleratesTaint)', () => {
  const taint = { key: 'startup.berth.dev/cni', effect: 'NoSchedule' };
  const valued = { key: 'startup.berth.dev/cni', value: 'cilium', effect: 'NoExecute' };

  test('an empty key with Exists tolerates every taint; with an effect, every taint of it', () => {
    assert.equal(tolerates({ operator: 'Exists' }, taint), true);
    assert.equal(tolerates({ operator: 'Exists' }, valued), true);
    assert.equal(tolerates({ operator: 'Exists', effect: 'NoSchedule' }, taint), true);
    assert.equal(tolerates({ operator: 'Exists', effect: 'NoSchedule' }, valued), false);
  });

  test('Exists with the key, any value; an empty effect matches every effect', () => {
    assert.equal(tolerates({ key: taint.key, operator: 'Exists' }, valued), true);
    assert.equal(tolerates({ key: taint.key, operator: 'Exists', effect: 'NoExecute' }, valued), true);
    assert.equal(tolerates({ key: taint.key, operator: 'Exists', effect: 'NoSchedule' }, valued), false);
    assert.equal(tolerates({ key: 'other.example.com/x', operator: 'Exists' }, taint), false);
  });

  test('Equal (or no operator) compares the value; an absent value equals the empty one', () => {
    assert.equal(tolerates({ key: valued.key, operator: 'Equal', value: 'cilium' }, valued), true);
    assert.equal(tolerates({ key: valued.key, value: 'cilium' }, valued), true);
    assert.equal(tolerates({ key: valued.key, operator: 'Equal', value: 'calico' }, valued), false);
    assert.equal(tolerates({ key: valued.key, operator: 'Equal' }, valued), false);
    assert.equal(tolerates({ key: taint.key, operator: 'Equal' }, taint), true);
    assert.equal(tolerates({ key: taint.key, operator: 'Equal', value: '' }, taint), true);
    assert.equal(tolerates({ key: taint.key, operator: 'Equal', value: 'x' }, taint), false);
    assert.equal(
      tolerates({ key: taint.key, operator: 'Equal', value: 'cilium', effect: 'NoSchedule' }, valued),
      false,
    );
  });

  test('tolerationSeconds does not matter', () => {
    assert.equal(tolerates({ key: taint.key, operator: 'Exists', tolerationSeconds: 30 }, taint), true);
  });
});

describe('tolerationFor', () => {
  test('Exists for a taint without a value, Equal for one with', () => {
    assert.deepEqual(tolerationFor({ key: 'a.example.com/t', effect: 'NoSchedule' }), {
      key: 'a.example.com/t',
      operator: 'Exists',
      effect: 'NoSchedule',
    });
    assert.deepEqual(tolerationFor({ key: 'a.example.com/t', value: '', effect: 'NoSchedule' }), {
      key: 'a.example.com/t',
      operator: 'Exists',
      effect: 'NoSchedule',
    });
    assert.deepEqual(tolerationFor({ key: 'a.example.com/t', value: 'v1', effect: 'NoExecute' }), {
      key: 'a.example.com/t',
      operator: 'Equal',
      value: 'v1',
      effect: 'NoExecute',
    });
  });

  test('what it returns tolerates the taint it was made for', () => {
    for (const t of [
      { key: 'a.example.com/t', effect: 'NoSchedule' },
      { key: 'a.example.com/t', value: 'v1', effect: 'PreferNoSchedule' },
    ])
      assert.equal(tolerates(tolerationFor(t), t), true);
  });
});

const daemonSet = (
  name: string,
  namespace: string,
  labels: Record<string, string>,
  tolerations?: Toleration[],
): KubeObject => ({
  apiVersion: 'apps/v1',
  kind: 'DaemonSet',
  metadata: { name, namespace, resourceVersion: '314' },
  spec: {
    selector: { matchLabels: labels },
    template: {
      metadata: { labels },
      spec: {
        containers: [{ name: 'agent', image: 'quay.io/cilium/cilium:v1.18.0' }],
        ...(tolerations ? { tolerations } : {}),
      },
    },
  },
});

const { gates } = parseGates([
  gateObj('cni'), // kube-system/cilium by DaemonSet name
  gateObj('csi', {
    taint: { key: 'startup.berth.dev/csi', value: 'ebs', effect: 'NoExecute' },
    requirements: {
      pods: [{ namespace: 'kube-system', selector: { matchLabels: { app: 'ebs-csi-node' } } }],
    },
  }),
  gateObj('anyns', {
    taint: { key: 'startup.berth.dev/agent' },
    requirements: {
      pods: [{ selector: { matchExpressions: [{ key: 'app', operator: 'In', values: ['agent'] }] } }],
    },
  }),
  gateObj('conditions', {
    taint: { key: 'startup.berth.dev/ready' },
    requirements: { nodeConditions: [{ type: 'Ready' }] },
  }),
]);
const names = (gs: { name: string }[]) => gs.map((g) => g.name);

describe('gatesWaitingFor', () => {
  test('by DaemonSet name and namespace', () => {
    assert.deepEqual(
      names(gatesWaitingFor(daemonSet('cilium', 'kube-system', { 'k8s-app': 'cilium' }), gates)),
      ['cni'],
    );
    assert.deepEqual(
      names(gatesWaitingFor(daemonSet('cilium', 'cilium-system', { 'k8s-app': 'cilium' }), gates)),
      [],
    );
    assert.deepEqual(names(gatesWaitingFor(daemonSet('cilium-envoy', 'kube-system', {}), gates)), []);
  });

  test('by a selector on the pod template labels, in the namespace or in any', () => {
    assert.deepEqual(
      names(
        gatesWaitingFor(
          daemonSet('ebs-csi-node', 'kube-system', { app: 'ebs-csi-node', tier: 'node' }),
          gates,
        ),
      ),
      ['csi'],
    );
    assert.deepEqual(
      names(gatesWaitingFor(daemonSet('ebs-csi-node', 'storage', { app: 'ebs-csi-node' }), gates)),
      [],
    );
    assert.deepEqual(names(gatesWaitingFor(daemonSet('agent', 'monitoring', { app: 'agent' }), gates)), [
      'anyns',
    ]);
    assert.deepEqual(names(gatesWaitingFor(daemonSet('other', 'kube-system', { app: 'other' }), gates)), []);
  });

  test('a DaemonSet without template labels matches no label selector', () => {
    const bare: KubeObject = {
      apiVersion: 'apps/v1',
      kind: 'DaemonSet',
      metadata: { name: 'x', namespace: 'kube-system' },
    };
    assert.deepEqual(names(gatesWaitingFor(bare, gates)), []);
  });
});

describe('missingTolerations', () => {
  const cni = gates.filter((g) => g.name === 'cni');
  const both = gates.filter((g) => g.name === 'cni' || g.name === 'csi');

  test('the gates’ taints the template does not tolerate yet', () => {
    assert.deepEqual(missingTolerations(daemonSet('x', 'kube-system', {}), both), [
      { key: TAINT_KEY, operator: 'Exists', effect: 'NoSchedule' },
      { key: 'startup.berth.dev/csi', operator: 'Equal', value: 'ebs', effect: 'NoExecute' },
    ]);
  });

  test('an existing toleration that covers the taint is enough', () => {
    assert.deepEqual(
      missingTolerations(daemonSet('x', 'kube-system', {}, [{ operator: 'Exists' }]), both),
      [],
    );
    assert.deepEqual(
      missingTolerations(daemonSet('x', 'kube-system', {}, [{ key: TAINT_KEY, operator: 'Exists' }]), both),
      [{ key: 'startup.berth.dev/csi', operator: 'Equal', value: 'ebs', effect: 'NoExecute' }],
    );
    // The right key with the wrong effect, or the wrong value, does not cover it.
    assert.deepEqual(
      missingTolerations(
        daemonSet('x', 'kube-system', {}, [{ key: TAINT_KEY, operator: 'Exists', effect: 'NoExecute' }]),
        cni,
      ),
      [{ key: TAINT_KEY, operator: 'Exists', effect: 'NoSchedule' }],
    );
    assert.deepEqual(
      missingTolerations(
        daemonSet('x', 'kube-system', {}, [
          { key: 'startup.berth.dev/csi', operator: 'Equal', value: 'efs' },
        ]),
        gates.filter((g) => g.name === 'csi'),
      ),
      [{ key: 'startup.berth.dev/csi', operator: 'Equal', value: 'ebs', effect: 'NoExecute' }],
    );
  });

  test('no gates, nothing missing', () => {
    assert.deepEqual(missingTolerations(daemonSet('x', 'kube-system', {}), []), []);
  });
});

describe('tolerationsPatch', () => {
  const add: Toleration[] = [
    { key: TAINT_KEY, operator: 'Exists', effect: 'NoSchedule' },
    { key: 'startup.berth.dev/csi', operator: 'Equal', value: 'ebs', effect: 'NoExecute' },
  ];

  test('nothing to add: no ops', () => {
    assert.deepEqual(tolerationsPatch(daemonSet('x', 'kube-system', {}), []), []);
    assert.deepEqual(tolerationsPatch(daemonSet('x', 'kube-system', {}, [{ operator: 'Exists' }]), []), []);
  });

  test('no tolerations yet: test the resourceVersion, add the list', () => {
    const ds = daemonSet('cilium', 'kube-system', { 'k8s-app': 'cilium' });
    const ops = tolerationsPatch(ds, add);
    assert.deepEqual(ops, [
      { op: 'test', path: '/metadata/resourceVersion', value: '314' },
      { op: 'add', path: '/spec/template/spec/tolerations', value: add },
    ]);
    const after = applyPatch(ds, ops) as { spec: { template: { spec: { tolerations: Toleration[] } } } };
    assert.deepEqual(after.spec.template.spec.tolerations, add);
  });

  test('existing tolerations: test them, append each', () => {
    const have: Toleration[] = [{ key: 'CriticalAddonsOnly', operator: 'Exists' }];
    const ds = daemonSet('cilium', 'kube-system', { 'k8s-app': 'cilium' }, have);
    const ops = tolerationsPatch(ds, add);
    assert.deepEqual(ops, [
      { op: 'test', path: '/spec/template/spec/tolerations', value: have },
      { op: 'add', path: '/spec/template/spec/tolerations/-', value: add[0] },
      { op: 'add', path: '/spec/template/spec/tolerations/-', value: add[1] },
    ]);
    const after = applyPatch(ds, ops) as { spec: { template: { spec: { tolerations: Toleration[] } } } };
    assert.deepEqual(after.spec.template.spec.tolerations, [...have, ...add]);
    // Applied on a DaemonSet whose tolerations changed meanwhile, it fails.
    assert.throws(() => applyPatch(daemonSet('cilium', 'kube-system', {}, []), ops), /test/);
  });

  test('end to end: after the patch nothing is missing', () => {
    const ds = daemonSet('ebs-csi-node', 'kube-system', { app: 'ebs-csi-node' }, [
      { key: 'CriticalAddonsOnly', operator: 'Exists' },
    ]);
    const waiting = gatesWaitingFor(ds, gates);
    const patched = applyPatch(ds, tolerationsPatch(ds, missingTolerations(ds, waiting)));
    assert.deepEqual(missingTolerations(patched, waiting), []);
  });
});

describe('two gates with the same taint (one Conflicting) waiting for one DaemonSet', () => {
  const pair = parseGates([gateObj('a-cni'), gateObj('b-cni')]).gates;
  const ds = daemonSet('cilium', 'kube-system', { 'k8s-app': 'cilium' });

  test('both wait for it', () => {
    assert.deepEqual(names(gatesWaitingFor(ds, pair)), ['a-cni', 'b-cni']);
  });

  test('one toleration is enough for one taint', () => {
    assert.deepEqual(missingTolerations(ds, gatesWaitingFor(ds, pair)), [
      { key: TAINT_KEY, operator: 'Exists', effect: 'NoSchedule' },
    ]);
  });
});
