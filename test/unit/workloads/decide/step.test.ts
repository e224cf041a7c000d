import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { deploymentNameProblem } from '../../../../src/workloads/decide/revisions.ts';
import { deploymentVerdict } from '../../../../src/workloads/decide/status.ts';
import { nextStep, type InstanceState } from '../../../../src/workloads/decide/step.ts';
import { INSTANCE_LABEL } from '../../../../src/workloads/types.ts';
import { withSeed } from '../../../helpers/prng.ts';
import { input, inst } from './fixtures.ts';

describe('nextStep', () => {
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
