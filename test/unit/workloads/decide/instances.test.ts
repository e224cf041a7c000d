import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  instanceManifest,
  podManifest,
  type InstanceObject,
} from '../../../../src/workloads/decide/instances.ts';
import { ungatePatch, type WorkloadPod } from '../../../../src/workloads/decide/pods.ts';
import { DEPLOYMENT_LABEL, INSTANCE_LABEL, QUOTA_GATE } from '../../../../src/workloads/types.ts';
import { pod } from './fixtures.ts';

describe('the Pod and its gate', () => {
  const instance: InstanceObject = {
    metadata: { name: 'web-1', namespace: 'ns', uid: 'u1', labels: { [DEPLOYMENT_LABEL]: 'web' } },
    spec: {
      template: {
        metadata: { labels: { app: 'web', [INSTANCE_LABEL]: 'spoof' }, annotations: { a: 'b' } },
        instanceType: 'd1-standard-2',
        containers: [{ name: 'app', image: 'x:1', env: [{ name: 'K', value: 'v' }] }],
      },
      templateHash: 'h1',
      ordinal: 1,
    },
  };
  const owner = { apiVersion: 'berth.dev/v1alpha1', kind: 'Instance', name: 'web-1', uid: 'u1' };

  test('labelled, owned, sized at pod level by the instance type, gated until granted', () => {
    const size = { milliCPU: 1000, memoryBytes: 2 ** 31, pod: { cpu: '1', memory: '2Gi' } };
    const p = podManifest(instance, owner, size, true) as WorkloadPod & {
      spec: { containers: unknown[]; resources?: unknown };
    };
    assert.deepEqual(p.metadata.labels, {
      app: 'web',
      [DEPLOYMENT_LABEL]: 'web',
      'workloads.berth.dev/ordinal': '1',
      'workloads.berth.dev/template-hash': 'h1',
      [INSTANCE_LABEL]: 'web-1',
    });
    assert.deepEqual(p.metadata.annotations, { a: 'b' });
    assert.deepEqual(p.metadata.ownerReferences, [{ ...owner, controller: true, blockOwnerDeletion: true }]);
    assert.deepEqual(p.spec.resources, {
      requests: { cpu: '1', memory: '2Gi' },
      limits: { cpu: '1', memory: '2Gi' },
    });
    assert.deepEqual(p.spec.schedulingGates, [{ name: QUOTA_GATE }]);
    assert.deepEqual(p.spec.containers, [{ name: 'app', image: 'x:1', env: [{ name: 'K', value: 'v' }] }]);
    const ungated = podManifest(instance, owner, { milliCPU: 0, memoryBytes: 0 }, false) as WorkloadPod & {
      spec: { resources?: unknown };
    };
    assert.equal(ungated.spec.schedulingGates, undefined);
    assert.equal(ungated.spec.resources, undefined);
  });

  test('no ServiceAccount token is mounted unless the template asks for one', () => {
    const size = { milliCPU: 0, memoryBytes: 0 };
    const token = (t: Partial<typeof instance.spec.template>) =>
      (
        podManifest(
          { ...instance, spec: { ...instance.spec, template: { ...instance.spec.template, ...t } } },
          owner,
          size,
          false,
        ) as WorkloadPod & {
          spec: { automountServiceAccountToken?: boolean };
        }
      ).spec.automountServiceAccountToken;
    assert.equal(token({}), false);
    assert.equal(token({ automountServiceAccountToken: false }), false);
    assert.equal(token({ automountServiceAccountToken: true }), true);
  });

  test('the gate comes off by index, guarded by its name; other gates are never touched', () => {
    const p = pod({}, { schedulingGates: [{ name: 'other/gate' }, { name: QUOTA_GATE }] });
    assert.deepEqual(ungatePatch(p), [
      { op: 'test', path: '/spec/schedulingGates/1/name', value: QUOTA_GATE },
      { op: 'remove', path: '/spec/schedulingGates/1' },
    ]);
    assert.equal(ungatePatch(pod({}, { schedulingGates: [{ name: 'other/gate' }] })), undefined);
  });

  test('an instance by ordinal, owned by its deployment, labelled with its revision', () => {
    const wd = { metadata: { name: 'web', namespace: 'ns', uid: 'd1' } };
    const i = instanceManifest(
      wd,
      { apiVersion: 'berth.dev/v1alpha1', kind: 'WorkloadDeployment', name: 'web', uid: 'd1' },
      instance.spec.template,
      'h2',
      4,
    );
    assert.equal(i.metadata!.name, 'web-4');
    assert.deepEqual(i.metadata!.labels, {
      [DEPLOYMENT_LABEL]: 'web',
      'workloads.berth.dev/ordinal': '4',
      'workloads.berth.dev/template-hash': 'h2',
    });
    assert.deepEqual(i['spec'], { template: instance.spec.template, templateHash: 'h2', ordinal: 4 });
    assert.equal(i.metadata!.ownerReferences![0]!.controller, true);
  });
});
