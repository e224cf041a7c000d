import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  conflictingPod,
  ENDED_REPLACE_MS,
  FIRST_STATUS_WAIT_MS,
  podActions,
  REJECTED_RETRY_MS,
  statusActions,
  VERDICT_WAIT_MS,
  type InstanceSeen,
} from '../../../../src/workloads/decide/instance-actions.ts';
import type { CachedInstance } from '../../../../src/workloads/decide/instances.ts';
import { workloadPod, type QuotaView, type WorkloadPod } from '../../../../src/workloads/decide/pods.ts';
import { INSTANCE_LABEL, QUOTA_GATE } from '../../../../src/workloads/types.ts';
import { Instance } from '../../../../src/workloads/crd.ts';

const T0 = Date.parse('2026-11-28T00:00:00Z');
const iso = (ms: number) => new Date(ms).toISOString();
const GRANTED: QuotaView = { status: 'True', reason: 'Granted', message: 'granted' };
const WAITING: QuotaView = { status: 'False', reason: 'QuotaNoBudget', message: 'no budget' };

const instance = (): CachedInstance => ({
  metadata: { name: 'web-0', namespace: 'ns', uid: 'u1', creationTimestamp: iso(T0) },
  spec: { template: { containers: [{ name: 'app' }] }, templateHash: 'h1', ordinal: 0 },
});

const pod = (
  o: { owner?: string; gated?: boolean; phase?: string; created?: number; ready?: boolean } = {},
) =>
  workloadPod({
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name: 'web-0',
      namespace: 'ns',
      creationTimestamp: iso(o.created ?? T0),
      labels: { [INSTANCE_LABEL]: 'web-0' },
      ...(o.owner
        ? {
            ownerReferences: [
              {
                apiVersion: Instance.apiVersion,
                kind: Instance.kind,
                name: 'web-0',
                uid: o.owner,
                controller: true,
              },
            ],
          }
        : {}),
    },
    spec: {
      nodeName: 'n1',
      containers: [{ name: 'app' }],
      ...(o.gated ? { schedulingGates: [{ name: QUOTA_GATE }] } : {}),
    },
    status: {
      phase: o.phase ?? 'Running',
      conditions: [{ type: 'Ready', status: o.ready ? 'True' : 'False' }],
    },
  });

const seen = (more: Partial<InstanceSeen> = {}): InstanceSeen => ({
  now: T0 + 60_000,
  inst: instance(),
  cached: undefined,
  quota: GRANTED,
  sizeError: undefined,
  refused: undefined,
  podSent: false,
  ...more,
});

describe('the Pod step of an instance pass', () => {
  test('a new instance waits for the quota verdict, then its Pod is made gated', () => {
    assert.deepEqual(podActions(seen({ now: T0 + 1000, quota: undefined })), {
      wait: 'verdict',
      ms: VERDICT_WAIT_MS - 1000,
    });
    const late = podActions(seen({ now: T0 + VERDICT_WAIT_MS, quota: undefined }));
    assert.equal(late.wait, undefined);
    assert.ok(!late.wait && late.write === 'create' && !late.granted);
    // A verdict that came in time: made at once, ungated when granted.
    const granted = podActions(seen({ now: T0 + 1000 }));
    assert.ok(!granted.wait && granted.write === 'create' && granted.granted);
  });

  test('a Pod sent and not cached yet is waited for, never made twice', () => {
    assert.deepEqual(podActions(seen({ podSent: true })), { wait: 'pod' });
  });

  test('a granted gated Pod is ungated; one being deleted, or not granted, is left', () => {
    const a = podActions(seen({ cached: pod({ owner: 'u1', gated: true }) }));
    assert.ok(!a.wait && a.write === 'ungate' && !a.foreign);
    const waiting = podActions(seen({ quota: WAITING, cached: pod({ owner: 'u1', gated: true }) }));
    assert.ok(!waiting.wait && waiting.write === undefined);
  });

  test("an earlier instance's Pod is foreign (it goes first); an orphan is a ConfigurationError, retried", () => {
    const former = podActions(seen({ cached: pod({ owner: 'u0' }) }));
    assert.ok(!former.wait && former.foreign && former.pod === undefined && former.write === undefined);
    assert.equal(former.configError, undefined);
    const orphan = podActions(seen({ cached: pod() }));
    assert.ok(!orphan.wait && orphan.foreign);
    assert.match(orphan.configError ?? '', /does not own/);
    assert.equal(orphan.retryAfterMs, REJECTED_RETRY_MS);
  });

  test('a refusal stands (no create) until REJECTED_RETRY_MS, or until the instance is another', () => {
    const now = T0 + 60_000;
    const refused = { uid: 'u1', message: 'denied', at: now - 1000 };
    const standing = podActions(seen({ refused }));
    assert.ok(!standing.wait && standing.write === undefined && !standing.forgetRefusal);
    assert.equal(standing.configError, 'denied');
    assert.equal(standing.retryAfterMs, REJECTED_RETRY_MS - 1000);
    const old = podActions(seen({ refused: { ...refused, at: now - REJECTED_RETRY_MS } }));
    assert.ok(!old.wait && old.write === 'create' && old.forgetRefusal);
    const other = podActions(seen({ refused: { ...refused, uid: 'u0' } }));
    assert.ok(!other.wait && other.write === 'create' && other.forgetRefusal);
  });

  test('a size error makes no Pod', () => {
    const a = podActions(seen({ sizeError: 'InstanceType big not found' }));
    assert.ok(!a.wait && a.write === undefined && a.configError === 'InstanceType big not found');
  });

  test('an ended Pod may be replaced once ENDED_REPLACE_MS old; one being deleted is not', () => {
    const now = T0 + 60_000;
    const young = podActions(seen({ cached: pod({ owner: 'u1', phase: 'Failed', created: now - 1000 }) }));
    assert.ok(!young.wait && young.replaceIn === ENDED_REPLACE_MS - 1000);
    const old = podActions(
      seen({ cached: pod({ owner: 'u1', phase: 'Failed', created: now - ENDED_REPLACE_MS }) }),
    );
    assert.ok(!old.wait && old.replaceIn === 0);
    const running = podActions(seen({ cached: pod({ owner: 'u1' }) }));
    assert.ok(!running.wait && running.replaceIn === undefined);
  });
});

describe('the status step of an instance pass', () => {
  const base = { foreign: false, quota: GRANTED, madeAt: undefined, now: T0 + 60_000 };

  test('a first status that would only say Provisioning waits for the Pod, FIRST_STATUS_WAIT_MS at most', () => {
    const starting = pod({ owner: 'u1' });
    const now = T0 + 60_000;
    const s = statusActions(instance(), { ...base, pod: starting, madeAt: now - 1000 });
    assert.equal(s.verdict.ready.reason, 'Provisioning');
    assert.deepEqual([s.write, s.requeueAfterMs], [false, FIRST_STATUS_WAIT_MS - 1000]);
    const over = statusActions(instance(), { ...base, pod: starting, madeAt: now - FIRST_STATUS_WAIT_MS });
    assert.deepEqual([over.write, over.requeueAfterMs], [true, undefined]);
    // A Pod made by another pass (no madeAt) is written at once.
    assert.equal(statusActions(instance(), { ...base, pod: starting }).write, true);
  });

  test('Ready with a Ready Pod and the grant; the refusal and the foreign Pod are said', () => {
    const ready = statusActions(instance(), { ...base, pod: pod({ owner: 'u1', ready: true }) });
    assert.deepEqual(
      [ready.verdict.ready.status, ready.write, ready.requeueAfterMs],
      [true, true, undefined],
    );
    const refused = statusActions(instance(), {
      ...base,
      pod: undefined,
      configError: 'denied',
      retryAfterMs: 5000,
    });
    assert.deepEqual([refused.verdict.ready.reason, refused.requeueAfterMs], ['ConfigurationError', 5000]);
    const foreign = statusActions(instance(), { ...base, pod: undefined, foreign: true });
    assert.equal(foreign.verdict.ready.status, false);
  });

  test('an ended Pod goes once old enough (no requeue); younger, it is looked at again then, 100 ms at least', () => {
    const ended = pod({ owner: 'u1', phase: 'Failed' });
    const now = statusActions(instance(), { ...base, pod: ended, replaceIn: 0 });
    assert.deepEqual([now.replace, now.write, now.requeueAfterMs], [true, true, undefined]);
    const soon = statusActions(instance(), { ...base, pod: ended, replaceIn: 30 });
    assert.deepEqual([soon.replace, soon.requeueAfterMs], [false, 100]);
    const later = statusActions(instance(), { ...base, pod: ended, replaceIn: 4000, retryAfterMs: 9000 });
    assert.equal(later.requeueAfterMs, 4000);
  });
});

test('a conflicting create: gone again, our own, a former instance, or someone else', () => {
  assert.equal(conflictingPod(undefined, 'u1'), undefined);
  assert.equal(conflictingPod(pod({ owner: 'u1' }), 'u1'), 'own');
  assert.equal(conflictingPod(pod({ owner: 'u0' }), 'u1'), 'former');
  assert.equal(conflictingPod(pod(), 'u1'), 'foreign');
  const unlabelled: WorkloadPod = {
    ...pod({ owner: 'u0' }),
    metadata: { ...pod({ owner: 'u0' }).metadata, labels: {} },
  };
  assert.equal(conflictingPod(unlabelled, 'u1'), 'foreign');
});
