import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { Condition } from '../../../src/runtime/api/conditions.ts';
import {
  boundedReplicas,
  deploymentNameProblem,
  MAX_DEPLOYMENT_BYTES,
  templateRevision,
  workloadNamespaceHint,
  templateHash,
} from '../../../src/workloads/decide/revisions.ts';
import {
  slimInstance,
  instanceManifest,
  podManifest,
  type InstanceObject,
} from '../../../src/workloads/decide/instances.ts';
import { deploymentVerdict, worst, warns } from '../../../src/workloads/decide/status.ts';
import {
  instanceVerdict,
  isFormerPod,
  podCauses,
  crashWindowEndsIn,
  ungatePatch,
  type WorkloadPod,
  MAX_PULL_ERROR,
} from '../../../src/workloads/decide/pods.ts';
import { nextStep, type InstanceState, type StepInput } from '../../../src/workloads/decide/step.ts';
import {
  BLOCKING_REASONS,
  DEPLOYMENT_LABEL,
  Instance,
  INSTANCE_LABEL,
  QUOTA_GATE,
} from '../../../src/workloads/types.ts';
import { withSeed } from '../../helpers/prng.ts';

const inst = (ordinal: number, hash = 'new', more: Partial<InstanceState> = {}): InstanceState => ({
  name: `web-${ordinal}`,
  ordinal,
  hash,
  ready: true,
  available: true,
  programmed: true,
  deleting: false,
  notReadySince: 0,
  ...more,
});
const input = (
  replicas: number,
  instances: InstanceState[],
  policy: StepInput['policy'] = 'OrderedReady',
) => ({
  replicas,
  policy,
  hash: 'new',
  instances,
});

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

describe('plan', () => {
  test('OrderedReady scales up one ordinal at a time, each after the ones below are Ready', () => {
    assert.deepEqual(nextStep(input(3, [])).actions, [{ type: 'create', ordinal: 0 }]);
    assert.deepEqual(nextStep(input(3, [inst(0)])).actions, [{ type: 'create', ordinal: 1 }]);
    const waiting = nextStep(input(3, [inst(0), inst(1, 'new', { ready: false })]));
    assert.deepEqual(waiting.actions, []);
    assert.equal(waiting.waitingFor?.name, 'web-1');
    // A gap is refilled first.
    assert.deepEqual(nextStep(input(3, [inst(0), inst(2)])).actions, [{ type: 'create', ordinal: 1 }]);
  });

  test('OrderedReady scales down highest first, the next only once it is gone', () => {
    const all = [inst(0), inst(1), inst(2), inst(3)];
    assert.deepEqual(nextStep(input(2, all)).actions, [{ type: 'delete', name: 'web-3', rollout: false }]);
    const deleting = [inst(0), inst(1), inst(2), inst(3, 'new', { deleting: true })];
    assert.deepEqual(nextStep(input(2, deleting)).actions, []);
    // Gone, its Pod still going: still in flight.
    const going = [inst(0), inst(1), inst(2), inst(3, 'new', { deleting: true, gone: true })];
    assert.deepEqual(nextStep(input(2, going)).actions, []);
  });

  test('Parallel creates and deletes all at once, but never into a slot still being deleted', () => {
    assert.deepEqual(nextStep(input(3, [], 'Parallel')).actions, [
      { type: 'create', ordinal: 0 },
      { type: 'create', ordinal: 1 },
      { type: 'create', ordinal: 2 },
    ]);
    assert.deepEqual(nextStep(input(1, [inst(0), inst(1), inst(2)], 'Parallel')).actions, [
      { type: 'delete', name: 'web-2', rollout: false },
      { type: 'delete', name: 'web-1', rollout: false },
    ]);
    assert.deepEqual(nextStep(input(2, [inst(1, 'new', { deleting: true })], 'Parallel')).actions, [
      { type: 'create', ordinal: 0 },
    ]);
    // An Instance already gone holds only its Pod's name: its slot is made again at once.
    assert.deepEqual(
      nextStep(input(2, [inst(1, 'new', { deleting: true, gone: true })], 'Parallel')).actions,
      [
        { type: 'create', ordinal: 0 },
        { type: 'create', ordinal: 1 },
      ],
    );
  });

  test('a rollout deletes the highest Ready drifted instance, one at a time, after the replacement is Ready', () => {
    const old = [inst(0, 'old'), inst(1, 'old'), inst(2, 'old')];
    const p = nextStep(input(3, old));
    assert.deepEqual(p.actions, [{ type: 'delete', name: 'web-2', rollout: true }]);
    assert.equal(p.drifted, 3);
    // The replacement is not Ready yet: wait for it.
    const replacing = nextStep(input(3, [inst(0, 'old'), inst(1, 'old'), inst(2, 'new', { ready: false })]));
    assert.deepEqual(replacing.actions, []);
    assert.equal(replacing.waitingFor?.name, 'web-2');
    assert.deepEqual(nextStep(input(3, [inst(0, 'old'), inst(1, 'old'), inst(2)])).actions, [
      { type: 'delete', name: 'web-1', rollout: true },
    ]);
    assert.deepEqual(nextStep(input(3, [inst(0), inst(1), inst(2)])).actions, []);
  });

  test('OrderedReady remakes a rolled ordinal while its old Pod is still going, and nothing else', () => {
    const going = inst(2, 'old', { deleting: true, gone: true, ready: false });
    assert.deepEqual(nextStep(input(3, [inst(0, 'old'), inst(1, 'old'), going])).actions, [
      { type: 'create', ordinal: 2 },
    ]);
    // Remade: the old Pod still going holds the next step.
    const remade = [inst(0, 'old'), inst(1, 'old'), going, inst(2, 'new', { ready: false })];
    assert.deepEqual(nextStep(input(3, remade)).actions, []);
    // A predecessor not Ready, or an Instance still deleting (a finalizer of someone's), holds it too.
    assert.deepEqual(
      nextStep(input(3, [inst(0, 'old'), inst(1, 'old', { ready: false }), going])).actions,
      [],
    );
    const held = { ...going, gone: false };
    assert.deepEqual(nextStep(input(3, [inst(0, 'old'), inst(1, 'old'), held])).actions, []);
  });

  test('a drifted instance that is not Ready is replaced at once, even while another step waits', () => {
    const broken = [inst(0, 'old', { ready: false }), inst(1, 'old'), inst(2, 'new', { ready: false })];
    assert.deepEqual(nextStep(input(3, broken)).actions, [{ type: 'delete', name: 'web-0', rollout: true }]);
    // OrderedReady scale-up blocked by a broken drifted predecessor: it is replaced.
    assert.deepEqual(nextStep(input(3, [inst(0, 'old', { ready: false })])).actions, [
      { type: 'delete', name: 'web-0', rollout: true },
    ]);
  });

  // A model of the controllers: each step applies the plan, then the world moves on at random
  // (a create becomes an instance, which may become Ready; a delete finishes). The invariants the
  // design promises must hold at every step, and every run must converge.
  test('generated runs: ordered scaling and one-at-a-time rollouts converge, never two out at once', async () => {
    await withSeed('plan model', (r) => {
      for (let run = 0; run < 300; run++) {
        const policy = r.pick(['OrderedReady', 'Parallel'] as const);
        const start = r.int(6);
        let world: InstanceState[] = Array.from({ length: start }, (_, i) => inst(i, 'old'));
        const replicas = r.int(6);
        const rolling = start > 0 && replicas >= start && policy === 'OrderedReady';
        for (let step = 0; step < 500; step++) {
          const p = nextStep({ replicas, policy, hash: 'new', instances: world });
          const deleting = world.filter((i) => i.deleting).length;
          if (policy === 'OrderedReady') assert.ok(deleting <= 1, `run ${run}: two deleting`);
          if (rolling) {
            // Every instance started Ready: at most one of the first `start` is out of service.
            const out = Array.from({ length: start }, (_, k) => world.find((i) => i.ordinal === k)).filter(
              (i) => !i || !i.ready || i.deleting,
            ).length;
            assert.ok(out <= 1, `run ${run} step ${step}: ${out} out of service`);
          }
          for (const a of p.actions) {
            if (a.type === 'create') {
              assert.ok(
                !world.some((i) => i.ordinal === a.ordinal && !i.gone),
                `run ${run}: created an existing ordinal`,
              );
              world.push(inst(a.ordinal, 'new', { ready: false }));
            } else {
              // Deleted in the background, the Instance goes at once and its Pod lingers; or someone
              // else's finalizer holds the Instance itself.
              const gone = r.int(2) === 0;
              world = world.map((i) =>
                i.name === a.name && !i.gone ? { ...i, deleting: true, ...(gone ? { gone } : {}) } : i,
              );
            }
          }
          // The world moves: one random instance gets Ready or finishes deleting.
          const i = world.length ? r.int(world.length) : -1;
          if (i >= 0) {
            if (world[i]!.deleting) world.splice(i, 1);
            else world[i] = { ...world[i]!, ready: true };
          }
          const done =
            world.length === replicas &&
            world.every((x) => x.ready && !x.deleting && x.hash === 'new' && x.ordinal < replicas);
          if (done) break;
          assert.ok(step < 499, `run ${run} did not converge: ${JSON.stringify(world)}`);
        }
      }
    });
  });
});

test('a name whose instances cannot label their Pods (<name>-9999 over 63) plans nothing and says ConfigurationError', () => {
  const ok = 'w'.repeat(58);
  const long = 'w'.repeat(59);
  assert.equal(deploymentNameProblem(ok), undefined);
  assert.equal(`${ok}-9999`.length, 63);
  assert.equal(
    deploymentNameProblem(long),
    `the WorkloadDeployment name ${long} is longer than 58 characters: its instances (${long}-0 and on) ` +
      `label their Pods ${INSTANCE_LABEL}=<instance>, a value of at most 63`,
  );
  assert.deepEqual(nextStep({ ...input(3, []), name: ok }).actions, [{ type: 'create', ordinal: 0 }]);
  // No instance is made, so none claims quota for a Pod the apiserver would refuse.
  const p = nextStep({ ...input(3, []), name: long });
  assert.deepEqual(p.actions, []);
  const v = deploymentVerdict({ ...input(3, []), name: long, step: p, progressDeadlineSeconds: 600, now: 0 });
  const stopped = { status: false, reason: 'ConfigurationError', message: deploymentNameProblem(long) };
  assert.deepEqual([v.available, v.progressing], [stopped, stopped]);
  assert.equal(v.counts.desiredReplicas, 3);
});

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

const pod = (status: WorkloadPod['status'], spec: WorkloadPod['spec'] = { nodeName: 'n1' }): WorkloadPod => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { name: 'web-0', namespace: 'ns' },
  spec,
  status,
});
const waiting = (reason: string, restartCount = 0, message?: string) => ({
  name: 'app',
  restartCount,
  state: { waiting: { reason, ...(message ? { message } : {}) } },
});
const granted: Condition = {
  type: 'QuotaGranted',
  status: 'True',
  reason: 'NoQuota',
  message: '',
  lastTransitionTime: '2026-01-01T00:00:00Z',
};

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
