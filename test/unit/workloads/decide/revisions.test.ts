import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  boundedReplicas,
  MAX_DEPLOYMENT_BYTES,
  templateRevision,
  workloadNamespaceHint,
  templateHash,
} from '../../../../src/workloads/decide/revisions.ts';
import { slimInstance, type InstanceObject } from '../../../../src/workloads/decide/instances.ts';
import { DEPLOYMENT_LABEL } from '../../../../src/workloads/types.ts';
import { Instance } from '../../../../src/workloads/crd.ts';

describe('templateHash', () => {
  test('equal templates hash equally whatever their key order; any change is a new revision', () => {
    const a = templateHash({ containers: [{ name: 'app', image: 'x:1' }], instanceType: 'd1' });
    const b = templateHash({ instanceType: 'd1', containers: [{ image: 'x:1', name: 'app' }] });
    assert.equal(a, b);
    assert.match(a, /^[0-9a-f]{10}$/);
    assert.notEqual(a, templateHash({ containers: [{ name: 'app', image: 'x:2' }], instanceType: 'd1' }));
    assert.notEqual(
      a,
      templateHash({
        containers: [{ name: 'app', image: 'x:1' }],
        instanceType: 'd1',
        metadata: { annotations: { restartedAt: 'now' } },
      }),
    );
  });
});

describe('the amplification bounds (issue 59)', () => {
  test("a template's bytes are its canonical JSON's, the same whatever its key order", () => {
    const t = { containers: [{ name: 'app', image: 'x:1' }] };
    const { hash, bytes } = templateRevision(t);
    assert.equal(hash, templateHash(t));
    assert.equal(bytes, '{"containers":[{"image":"x:1","name":"app"}]}'.length);
  });

  test('replicas run within MAX_DEPLOYMENT_BYTES of templates; beyond, as many as fit, and why', () => {
    assert.deepEqual(boundedReplicas(1000, 2048), { replicas: 1000 });
    assert.deepEqual(boundedReplicas(1, MAX_DEPLOYMENT_BYTES), { replicas: 1 });
    assert.equal(boundedReplicas(3, MAX_DEPLOYMENT_BYTES).replicas, 1);
    const b = boundedReplicas(1000, 64 * 1024);
    assert.equal(b.replicas, 256);
    assert.match(b.bounded!, /^1000 replicas of a 65536-byte template exceed the 16777216 bytes .*: 256 run/);
    // A template larger than the whole budget runs none.
    assert.equal(boundedReplicas(1, MAX_DEPLOYMENT_BYTES + 1).replicas, 0);
  });

  test("Berth's own refusal to create a Pod or an Instance names the opt-in; any other refusal does not", () => {
    const forbidden = (what: string) => ({
      status: 403,
      message: `${what} is forbidden: User "system:serviceaccount:berth-system:berth" cannot create resource "${what}" in API group "" in the namespace "x"`,
    });
    assert.match(
      workloadNamespaceHint(forbidden('instances')),
      /--workload-namespace, Helm workloads.namespaces/,
    );
    assert.match(workloadNamespaceHint(forbidden('pods')), /--workload-namespace/);
    assert.equal(workloadNamespaceHint({ status: 403, message: 'exceeded quota' }), '');
    assert.equal(workloadNamespaceHint({ status: 422, message: 'cannot create resource "pods"' }), '');
  });

  test('an Instance is cached without its template but for what sizes it, nor its managedFields', () => {
    const whole: InstanceObject = {
      apiVersion: Instance.apiVersion,
      kind: Instance.kind,
      metadata: {
        name: 'web-0',
        namespace: 'ns',
        uid: 'u',
        resourceVersion: '7',
        generation: 1,
        creationTimestamp: '2026-01-01T00:00:00Z',
        labels: { [DEPLOYMENT_LABEL]: 'web' },
        annotations: { big: 'x'.repeat(1000) },
        ownerReferences: [
          {
            apiVersion: 'v',
            kind: 'WorkloadDeployment',
            name: 'web',
            uid: 'd',
            controller: true,
            blockOwnerDeletion: true,
          },
        ],
        managedFields: [{ manager: 'm' }],
      },
      spec: {
        ordinal: 0,
        templateHash: 'h',
        template: {
          instanceType: 'd1',
          metadata: { annotations: { a: 'b' } },
          containers: [
            {
              name: 'app',
              image: 'x:1',
              env: [{ name: 'E', value: 'x'.repeat(30000) }],
              resources: { requests: { cpu: '1' } },
            },
          ],
        },
      },
      status: { conditions: [] },
    };
    const slim = slimInstance(whole);
    assert.deepEqual(slim, {
      apiVersion: whole.apiVersion,
      kind: whole.kind,
      metadata: {
        name: 'web-0',
        namespace: 'ns',
        uid: 'u',
        resourceVersion: '7',
        generation: 1,
        creationTimestamp: '2026-01-01T00:00:00Z',
        labels: whole.metadata.labels,
        ownerReferences: whole.metadata.ownerReferences,
      },
      spec: {
        ordinal: 0,
        templateHash: 'h',
        template: {
          instanceType: 'd1',
          containers: [{ name: 'app', resources: { requests: { cpu: '1' } } }],
        },
      },
      status: { conditions: [] },
    });
  });
});
