import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { DeploymentObject } from '../../../../src/federation/decide/placement.ts';
import {
  MIRRORED_CONDITION,
  isStale,
  mirrorKey,
  mirrorName,
  mirrorOf,
  sameMirror,
  sameStatus,
  sourceKeyOf,
  splitMirrorKey,
  staleStatus,
} from '../../../../src/federation/decide/mirror.ts';
import {
  CITY_LABEL,
  PLACEMENT_LABEL,
  WORKLOAD_NAME_LABEL,
  WORKLOAD_NAMESPACE_LABEL,
  WORKLOAD_UID_LABEL,
  type WorkloadObject,
} from '../../../../src/federation/types.ts';
import { findCondition, type Condition } from '../../../../src/runtime/api/conditions.ts';
import type { InstanceObject } from '../../../../src/workloads/decide/instances.ts';
import {
  DEPLOYMENT_LABEL,
  MIRROR_CELL_LABEL,
  MIRROR_LABEL,
  SOURCE_ANNOTATION,
} from '../../../../src/workloads/types.ts';
import { withSeed } from '../../../helpers/prng.ts';

const T0 = '2026-01-01T00:00:00Z';
const cond = (type: string, status: Condition['status'], reason = 'R', message = 'm'): Condition => ({
  type,
  status,
  reason,
  message,
  lastTransitionTime: T0,
});

const workload: WorkloadObject = {
  apiVersion: 'berth.dev/v1alpha1',
  kind: 'Workload',
  metadata: { name: 'web', namespace: 'shop', uid: 'w-uid' },
  spec: { template: { containers: [{ name: 'app', image: 'web:1' }] }, placements: [] },
};
const deployment = {
  metadata: {
    name: 'web-us-dfw',
    namespace: 'shop',
    labels: {
      [WORKLOAD_NAMESPACE_LABEL]: 'shop',
      [WORKLOAD_NAME_LABEL]: 'web',
      [WORKLOAD_UID_LABEL]: 'w-uid',
      [PLACEMENT_LABEL]: 'us',
      [CITY_LABEL]: 'DFW',
    },
  },
  spec: { template: workload.spec.template, replicas: 2 },
} as unknown as DeploymentObject;

function instance(conditions: Condition[] = [cond('Ready', 'True', 'Ready')]): InstanceObject {
  return {
    metadata: {
      name: 'web-us-dfw-1',
      namespace: 'shop',
      uid: 'i-uid',
      labels: { [DEPLOYMENT_LABEL]: 'web-us-dfw' },
    },
    spec: { template: workload.spec.template, templateHash: 'h1', ordinal: 1 },
    status: { observedTemplateHash: 'h1', podName: 'web-us-dfw-1', conditions },
  };
}

test('a mirror is named <cell>-<instance>, keyed by cell, namespace and name, and found back from its labels', () => {
  assert.equal(mirrorName('dfw', 'web-us-dfw-1'), 'dfw-web-us-dfw-1');
  assert.equal(mirrorName('dfw', 'x'.repeat(260)), undefined, 'longer than a name may be');
  assert.deepEqual(splitMirrorKey(mirrorKey('dfw', 'shop', 'web-1')), {
    cell: 'dfw',
    namespace: 'shop',
    name: 'web-1',
  });
  const m = mirrorOf({ cell: 'dfw', instance: instance(), deployment, workload }, undefined)!;
  assert.equal(sourceKeyOf({ ...m.object }), 'dfw/shop/web-us-dfw-1');
});

test('a mirror carries the marker, the cell, city, placement and workload, an owner reference to the Workload, and the status', () => {
  const m = mirrorOf({ cell: 'dfw', instance: instance(), deployment, workload }, undefined, new Date(T0))!;
  const labels = m.object.metadata.labels!;
  assert.equal(labels[MIRROR_LABEL], 'true');
  assert.equal(labels[MIRROR_CELL_LABEL], 'dfw');
  assert.equal(labels[CITY_LABEL], 'DFW');
  assert.equal(labels[PLACEMENT_LABEL], 'us');
  assert.equal(labels[WORKLOAD_NAME_LABEL], 'web');
  assert.equal(labels[DEPLOYMENT_LABEL], 'web-us-dfw', "the instance's own labels too");
  assert.equal(m.object.metadata.annotations![SOURCE_ANNOTATION], 'web-us-dfw-1');
  assert.deepEqual(m.object.metadata.ownerReferences, [
    { apiVersion: 'berth.dev/v1alpha1', kind: 'Workload', name: 'web', uid: 'w-uid' },
  ]);
  assert.equal(m.object.metadata.namespace, 'shop');
  assert.equal(m.status.podName, 'web-us-dfw-1');
  assert.equal(m.status.observedTemplateHash, 'h1');
  assert.equal(findCondition(m.status.conditions, 'Ready')?.status, 'True');
  assert.equal(findCondition(m.status.conditions, MIRRORED_CONDITION)?.status, 'True');
  assert.equal(isStale({ ...m.object, status: m.status }), false);
});

test('a mirror of an unreachable cell keeps its last status, stale since the cell went silent', () => {
  const m = mirrorOf({ cell: 'dfw', instance: instance(), deployment, workload }, undefined)!;
  const mirror: InstanceObject = { ...m.object, status: m.status };
  const since = '2026-02-03T04:05:06Z';
  const stale = staleStatus(mirror, 'dfw', since);
  const c = findCondition(stale.conditions, MIRRORED_CONDITION)!;
  assert.equal(c.status, 'False');
  assert.equal(c.reason, 'CellUnreachable');
  assert.equal(c.lastTransitionTime, since);
  assert.match(c.message, /cell dfw has not answered since 2026-02-03T04:05:06Z/);
  assert.equal(findCondition(stale.conditions, 'Ready')?.status, 'True', 'the last status is kept');
  assert.equal(stale.podName, 'web-us-dfw-1');
  assert.ok(isStale({ ...mirror, status: stale }));
  // Stale again (the cell still silent): the same status, nothing to write.
  assert.ok(sameStatus(stale, staleStatus({ ...mirror, status: stale }, 'dfw', since)));
  // The cell back: current again, a status to write.
  const back = mirrorOf(
    { cell: 'dfw', instance: instance(), deployment, workload },
    { ...mirror, status: stale },
  )!;
  assert.equal(findCondition(back.status.conditions, MIRRORED_CONDITION)?.status, 'True');
  assert.equal(sameStatus(stale, back.status), false);
});

test('generated: a mirror needs a write exactly when the cell instance changed in what it copies (300 cases)', async () => {
  await withSeed('mirror writes', (r) => {
    const reasons = ['Ready', 'Provisioning', 'ImageUnavailable', 'QuotaExceeded'];
    const randomInstance = () => {
      const i = instance([
        cond('Ready', r.pick(['True', 'False'] as const), r.pick(reasons)),
        cond('QuotaGranted', r.pick(['True', 'False'] as const), r.pick(['QuotaAvailable', 'QuotaExceeded'])),
      ]);
      i.spec.templateHash = r.pick(['h1', 'h2']);
      i.status!.observedTemplateHash = r.pick(['h1', 'h2']);
      if (r.chance(0.3)) i.metadata.labels = { ...i.metadata.labels, extra: r.pick(['a', 'b']) };
      return i;
    };
    for (let n = 0; n < 300; n++) {
      const a = randomInstance();
      const b = r.chance(0.3) ? structuredClone(a) : randomInstance();
      const ma = mirrorOf({ cell: 'dfw', instance: a, deployment, workload }, undefined)!;
      const have: InstanceObject = { ...ma.object, status: ma.status };
      const mb = mirrorOf({ cell: 'dfw', instance: b, deployment, workload }, have)!;
      const copied = (i: InstanceObject) => [i.spec, i.metadata.labels, i.status];
      const differs = JSON.stringify(copied(a)) !== JSON.stringify(copied(b));
      const writes = !sameMirror(have, mb.object) || !sameStatus(have.status, mb.status);
      assert.equal(writes, differs, `case ${n}: ${JSON.stringify(copied(a))} → ${JSON.stringify(copied(b))}`);
    }
  });
});
