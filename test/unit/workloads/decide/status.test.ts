import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { deploymentVerdict, warns } from '../../../../src/workloads/decide/status.ts';
import { nextStep, type InstanceState } from '../../../../src/workloads/decide/step.ts';
import { input, inst } from './fixtures.ts';

describe('deploymentVerdict', () => {
  const verdict = (replicas: number, instances: InstanceState[], now = 1000, deadline = 600) =>
    deploymentVerdict({
      ...input(replicas, instances),
      step: nextStep(input(replicas, instances)),
      progressDeadlineSeconds: deadline,
      now,
    });

  test('counts: updated is the new template, ready or not; current is programmed', () => {
    const v = verdict(3, [
      inst(0, 'old'),
      inst(1, 'old'),
      inst(2, 'new', { ready: false, available: false, programmed: false }),
    ]);
    assert.deepEqual(v.counts, {
      replicas: 3,
      currentReplicas: 2,
      readyReplicas: 2,
      availableReplicas: 2,
      updatedReplicas: 1,
      desiredReplicas: 3,
    });
    assert.deepEqual(
      { status: v.progressing.status, reason: v.progressing.reason },
      { status: true, reason: 'NewTemplateRolling' },
    );
    assert.equal(v.deadlineInMs, 600_000 - 1000);
  });

  test('a user-fixable cause stops the rollout and rolls up as the worst reason', () => {
    const v = verdict(3, [
      inst(0, 'old', { ready: false, available: false, reason: 'QuotaExceeded', message: 'no room' }),
      inst(1, 'old'),
      inst(2, 'new', { ready: false, available: false, reason: 'ImageUnavailable', message: 'cannot pull' }),
    ]);
    assert.equal(v.available.status, false);
    assert.equal(v.available.reason, 'ImageUnavailable');
    assert.match(v.available.message, /1 of 3 instances available; ImageUnavailable: web-2: cannot pull/);
    // web-0 is drifted and not Ready: replaced at once, so the plan waits on nothing.
    assert.equal(v.progressing.status, true);
    const stuck = verdict(3, [
      inst(0, 'old'),
      inst(1, 'old'),
      inst(2, 'new', { ready: false, available: false, reason: 'ImageUnavailable', message: 'cannot pull' }),
    ]);
    assert.deepEqual(
      { status: stuck.progressing.status, reason: stuck.progressing.reason },
      { status: false, reason: 'ImageUnavailable' },
    );
    assert.equal(stuck.deadlineInMs, undefined);
  });

  test('a step not Ready within the deadline is ProgressDeadlineExceeded; a transient cause is not a stall', () => {
    const slow = [
      inst(0),
      inst(1, 'new', { ready: false, available: false, reason: 'Unschedulable', notReadySince: 0 }),
    ];
    assert.equal(verdict(3, slow, 599_000).progressing.status, true);
    const v = verdict(3, slow, 600_000);
    assert.deepEqual(
      { status: v.progressing.status, reason: v.progressing.reason },
      {
        status: false,
        reason: 'ProgressDeadlineExceeded',
      },
    );
  });

  test('a deletion that lingers (a Pod stuck Terminating) stops the step at the deadline, counted from the deletion', () => {
    const going = inst(2, 'old', {
      deleting: true,
      gone: true,
      ready: false,
      notReadySince: 10_000,
      message: 'its Pod web-2 is still going',
    });
    const remade = [
      inst(0, 'old'),
      inst(1, 'old'),
      going,
      inst(2, 'new', { ready: false, notReadySince: 0 }),
    ];
    const before = verdict(3, remade, 609_000);
    assert.equal(before.progressing.status, true);
    assert.equal(before.deadlineInMs, 1000, 'looked at again when the deadline comes');
    const v = verdict(3, remade, 610_000);
    assert.deepEqual(
      { status: v.progressing.status, reason: v.progressing.reason, message: v.progressing.message },
      {
        status: false,
        reason: 'ProgressDeadlineExceeded',
        message: 'web-2 not gone after 600s: its Pod web-2 is still going',
      },
    );
    // Parallel waits the same way on an Instance still deleting (someone's finalizer holds its name).
    const held = [inst(0), inst(1), { ...going, gone: false }];
    const parallel = deploymentVerdict({
      ...input(3, held, 'Parallel'),
      step: nextStep(input(3, held, 'Parallel')),
      progressDeadlineSeconds: 600,
      now: 610_000,
    });
    assert.equal(parallel.progressing.reason, 'ProgressDeadlineExceeded');
  });

  test('a broken instance being deleted to be replaced does not stop the rollout with its cause', () => {
    const broken = inst(2, 'old', {
      deleting: true,
      ready: false,
      reason: 'InstanceCrashing',
      notReadySince: 0,
    });
    const v = verdict(3, [inst(0, 'old'), inst(1, 'old'), broken], 1000);
    assert.equal(v.progressing.status, true);
    assert.equal(v.progressing.reason, 'NewTemplateRolling');
  });

  test('settled: Available with every instance, Progressing NewTemplateAvailable', () => {
    const v = verdict(2, [inst(0), inst(1)]);
    assert.equal(v.available.status, true);
    assert.equal(v.progressing.reason, 'NewTemplateAvailable');
    assert.equal(verdict(0, []).progressing.reason, 'NewTemplateAvailable');
  });
});

test('a Warning when a blocking cause starts to hold, quota included; none for a wait or a cause already shown', () => {
  const no = (reason: string) => ({ status: false, reason, message: '' });
  for (const reason of [
    'QuotaExceeded',
    'ImageUnavailable',
    'InstanceCrashing',
    'ConfigurationError',
    'Unschedulable',
  ])
    assert.ok(warns({ status: 'True', reason: 'Ready' }, no(reason)), reason);
  assert.ok(warns(undefined, no('QuotaBackendUnavailable')));
  assert.ok(warns({ status: 'False', reason: 'QuotaExceeded' }, no('ImageUnavailable')));
  assert.ok(!warns({ status: 'False', reason: 'QuotaExceeded' }, no('QuotaExceeded')));
  assert.ok(!warns(undefined, no('Provisioning')));
  assert.ok(!warns(undefined, no('PendingEvaluation')));
  assert.ok(!warns(undefined, { status: true, reason: 'Ready', message: 'serving' }));
});
