import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { Condition } from '../../../../src/runtime/api/conditions.ts';
import { worst } from '../../../../src/workloads/decide/status.ts';
import {
  instanceVerdict,
  isFormerPod,
  podCauses,
  crashWindowEndsIn,
  MAX_PULL_ERROR,
} from '../../../../src/workloads/decide/pods.ts';
import { BLOCKING_REASONS, INSTANCE_LABEL, QUOTA_GATE } from '../../../../src/workloads/types.ts';
import { Instance } from '../../../../src/workloads/crd.ts';
import { pod, waiting } from './fixtures.ts';

const granted: Condition = {
  type: 'QuotaGranted',
  status: 'True',
  reason: 'NoQuota',
  message: '',
  lastTransitionTime: '2026-01-01T00:00:00Z',
};

test('a former Pod: made for an Instance that no longer stands under its name', () => {
  const pod = (owner?: { kind: string; uid: string }) => ({
    metadata: {
      name: 'web-1',
      labels: { [INSTANCE_LABEL]: 'web-1' },
      ...(owner
        ? {
            ownerReferences: [{ apiVersion: Instance.apiVersion, name: 'web-1', controller: true, ...owner }],
          }
        : {}),
    },
  });
  const standing = (uid: string | undefined) => (name: string) => (name === 'web-1' ? uid : undefined);
  const ours = pod({ kind: Instance.kind, uid: 'u1' });
  assert.equal(isFormerPod(ours, standing('u1')), false, 'its Instance stands');
  assert.equal(isFormerPod(ours, standing('u2')), true, 'another Instance of its name stands');
  assert.equal(isFormerPod(ours, standing(undefined)), true, 'no Instance of its name');
  assert.equal(isFormerPod(pod(), standing(undefined)), false, 'not made for an Instance');
  assert.equal(isFormerPod(pod({ kind: 'ReplicaSet', uid: 'u1' }), standing(undefined)), false);
});

describe('instance conditions from the Pod', () => {
  test('the kubelet reasons map to blocking reasons, with messages that do not flip with retries', () => {
    // The pull error itself, the same through the kubelet's ErrImagePull and ImagePullBackOff (1.35's texts).
    const error = 'failed to pull and unpack image "r.example/app:1": r.example/app:1: not found';
    const pull = podCauses(pod({ containerStatuses: [waiting('ErrImagePull', 0, error)] }));
    const backoff = podCauses(
      pod({
        containerStatuses: [
          waiting('ImagePullBackOff', 0, `Back-off pulling image "r.example/app:1": ErrImagePull: ${error}`),
        ],
      }),
    );
    assert.deepEqual(pull, [
      { reason: 'ImageUnavailable', message: `container app: its image cannot be pulled: ${error}` },
    ]);
    assert.deepEqual(pull, backoff);
    // An older kubelet's back-off names no error; a registry's long answer is cut.
    assert.equal(
      podCauses(
        pod({ containerStatuses: [waiting('ImagePullBackOff', 0, 'Back-off pulling image "x"')] }),
      )[0]!.message,
      'container app: its image cannot be pulled',
    );
    const long = podCauses(pod({ containerStatuses: [waiting('ErrImagePull', 0, 'x'.repeat(5000))] }))[0]!;
    assert.ok(long.message.length < MAX_PULL_ERROR + 60);
    assert.equal(
      podCauses(pod({ containerStatuses: [waiting('InvalidImageName')] }))[0]!.reason,
      'ImageUnavailable',
    );
    const crash = podCauses(pod({ containerStatuses: [waiting('CrashLoopBackOff', 5)] }));
    assert.equal(crash[0]!.reason, 'InstanceCrashing');
    assert.deepEqual(
      podCauses(pod({ containerStatuses: [{ name: 'app', restartCount: 7, state: { running: {} } }] })),
      crash,
    );
    assert.deepEqual(
      podCauses(pod({ containerStatuses: [{ name: 'app', restartCount: 2, state: { running: {} } }] })),
      [],
    );
    // Restarts count for ten minutes after the last run ended, as the kubelet's back-off does.
    const now = Date.parse('2030-01-01T01:00:00Z');
    const ranUntil = (finishedAt: string) =>
      pod({
        containerStatuses: [
          { name: 'app', restartCount: 7, state: { running: {} }, lastState: { terminated: { finishedAt } } },
        ],
      });
    assert.deepEqual(podCauses(ranUntil('2030-01-01T00:59:00Z'), now), crash);
    assert.equal(crashWindowEndsIn(ranUntil('2030-01-01T00:59:00Z'), now), 9 * 60_000);
    assert.deepEqual(podCauses(ranUntil('2030-01-01T00:49:00Z'), now), [], 'eleven minutes ago');
    assert.equal(crashWindowEndsIn(ranUntil('2030-01-01T00:49:00Z'), now), undefined);
    // Once reported crashing, its first restarts keep it so (no flip to Provisioning between back-offs).
    const once = pod({
      containerStatuses: [
        {
          name: 'app',
          restartCount: 1,
          state: { running: {} },
          lastState: { terminated: { finishedAt: '2030-01-01T00:59:00Z' } },
        },
      ],
    });
    assert.deepEqual(podCauses(once, now), []);
    assert.deepEqual(podCauses(once, now, true), crash);
    assert.equal(crashWindowEndsIn(once, now, true), 9 * 60_000);
    assert.equal(
      podCauses(
        pod({ containerStatuses: [waiting('CreateContainerConfigError', 0, 'secret "x" not found')] }),
      )[0]!.message,
      'container app: CreateContainerConfigError: secret "x" not found',
    );
    const unschedulable = podCauses(
      pod(
        {
          conditions: [
            { type: 'PodScheduled', status: 'False', reason: 'Unschedulable', message: '0/3 nodes' },
          ],
        },
        {},
      ),
    );
    assert.deepEqual(unschedulable, [{ reason: 'Unschedulable', message: '0/3 nodes' }]);
  });

  test('Ready needs a Ready Pod and the grant; the worst cause is its reason', () => {
    const readyPod = pod({ conditions: [{ type: 'Ready', status: 'True' }] });
    const ok = instanceVerdict({ pod: readyPod, quota: granted });
    assert.deepEqual([ok.ready.status, ok.available.status, ok.programmed.status], [true, true, true]);
    const noGrant = instanceVerdict({ pod: readyPod });
    assert.deepEqual([noGrant.ready.status, noGrant.ready.reason], [false, 'PendingEvaluation']);
    const exceeded = instanceVerdict({
      pod: pod({}, { schedulingGates: [{ name: QUOTA_GATE }] }),
      quota: { ...granted, status: 'False', reason: 'QuotaExceeded', message: '4 of 4 instances used' },
    });
    assert.deepEqual(
      [exceeded.ready.reason, exceeded.ready.message],
      ['QuotaExceeded', '4 of 4 instances used'],
    );
    assert.equal(exceeded.available.reason, 'Provisioning');
    assert.equal(exceeded.programmed.status, true);
    const crashing = instanceVerdict({
      pod: pod({ containerStatuses: [waiting('CrashLoopBackOff', 4)] }),
      quota: granted,
    });
    assert.deepEqual(
      [crashing.ready.reason, crashing.available.reason],
      ['InstanceCrashing', 'InstanceCrashing'],
    );
    const config = instanceVerdict({ configError: 'InstanceType d9 does not exist' });
    assert.deepEqual(
      [config.ready.reason, config.programmed.reason],
      ['ConfigurationError', 'ConfigurationError'],
    );
    // A Pod that ended keeps the Ready condition it had when its node went away: it serves no more.
    for (const phase of ['Failed', 'Succeeded']) {
      const ended = instanceVerdict({ pod: pod({ ...readyPod.status, phase }), quota: granted });
      assert.deepEqual(
        [ended.ready.status, ended.available.status, ended.ready.message],
        [false, false, `the Pod ended (${phase}); a new one follows`],
      );
    }
    const foreign = instanceVerdict({ foreignPod: true, quota: granted });
    assert.deepEqual([foreign.programmed.status, foreign.ready.reason], [false, 'Provisioning']);
    assert.match(foreign.ready.message, /earlier instance/);
  });

  test('worst follows BLOCKING_REASONS, unknown reasons last', () => {
    const all = [...BLOCKING_REASONS].reverse().map((reason) => ({ reason }));
    assert.equal(worst(all)?.reason, 'ConfigurationError');
    assert.equal(worst([{ reason: 'Whatever' }, { reason: 'Provisioning' }])?.reason, 'Provisioning');
    assert.equal(worst([]), undefined);
  });
});
