// The grant decision: examples of each rule, then generated namespaces (budgets, ledgers with gone
// and unknown claims, instances of every size, some granted before, some being deleted) on which it
// must never grant past the budget, must grant oldest first and as far as the budget goes, and must
// decide the same again from its own result.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  budgetOf,
  decideGrants,
  exceeds,
  lineOrder,
  requeueAfterMs,
  usedBy,
  type Amount,
  type Budget,
  type Candidate,
  type Decision,
} from '../../../../src/workloads/decide/grant.ts';
import type { QuotaClaim } from '../../../../src/workloads/types.ts';
import { withSeed, type Prng } from '../../../helpers/prng.ts';

const GiB = 2 ** 30;
const NOW = '2030-01-01T00:00:00Z';
const at = (s: number) =>
  new Date(Date.UTC(2030, 0, 1) - 3600_000 + s * 1000).toISOString().replace(/\.\d{3}Z$/, 'Z');

const inst = (name: string, s: number, more: Partial<Candidate> = {}): Candidate => ({
  cluster: 'local',
  name,
  uid: `uid-${name}`,
  creationTimestamp: at(s),
  size: { milliCPU: 1000, memoryBytes: 2 * GiB },
  granted: false,
  deleting: false,
  ...more,
});
const claimOf = (c: Candidate): QuotaClaim => ({
  cluster: c.cluster,
  name: c.name,
  uid: c.uid,
  milliCPU: 'error' in c.size ? 0 : c.size.milliCPU,
  memoryBytes: 'error' in c.size ? 0 : c.size.memoryBytes,
  grantedAt: at(0),
});
const decide = (budget: Budget, ledger: QuotaClaim[], cs: Candidate[], gone: string[] = []) =>
  decideGrants(budget, ledger, cs, { gone: (c) => gone.includes(c.uid), now: NOW });
const granted = (d: Decision) =>
  [...d.verdicts].filter(([, v]) => v.granted).map(([uid]) => uid.replace('uid-', ''));

test('a quota of four with six instances: the four oldest are granted, two wait and say why', () => {
  const cs = ['a', 'b', 'c', 'd', 'e', 'f'].map((n, i) => inst(n, i));
  const d = decide({ instances: 4 }, [], cs.toReversed());
  assert.deepEqual(granted(d).sort(), ['a', 'b', 'c', 'd']);
  assert.deepEqual(
    d.claims.map((c) => c.name),
    ['a', 'b', 'c', 'd'],
  );
  assert.deepEqual(d.verdicts.get('uid-e'), {
    granted: false,
    reason: 'QuotaExceeded',
    message: 'needs 1 instance (1 vCPU, 2Gi); 4 of 4 instances used',
    place: 1,
  });
  assert.deepEqual(d.verdicts.get('uid-f'), { ...d.verdicts.get('uid-e'), place: 2 });
  assert.deepEqual(d.used, { instances: 4, milliCPU: 4000, memoryBytes: 8 * GiB });
  assert.equal(d.waiting, 2);
  assert.deepEqual(d.over, []);
});

test('a claim whose instance is gone frees its room for exactly the oldest waiting instance', () => {
  const cs = ['a', 'b', 'c', 'd', 'e', 'f'].map((n, i) => inst(n, i));
  const first = decide({ instances: 4 }, [], cs);
  const after = decide(
    { instances: 4 },
    first.claims,
    cs.filter((c) => c.name !== 'b'),
    ['uid-b'],
  );
  assert.deepEqual(
    after.claims.map((c) => c.name),
    ['a', 'c', 'd', 'e'],
  );
  assert.equal(after.verdicts.get('uid-f')?.granted, false);
  // A claim of an instance that cannot be seen but is not known to be gone stays.
  const unknown = decide(
    { instances: 4 },
    first.claims,
    cs.filter((c) => c.name !== 'b'),
  );
  assert.deepEqual(
    unknown.claims.map((c) => c.name),
    ['a', 'b', 'c', 'd'],
  );
});

test('the line is strict: a younger instance never overtakes an older one that does not fit', () => {
  const big = inst('big', 1, { size: { milliCPU: 3000, memoryBytes: GiB } });
  const small = inst('small', 2, { size: { milliCPU: 500, memoryBytes: GiB } });
  const held = inst('held', 0, { size: { milliCPU: 2000, memoryBytes: GiB } });
  const d = decide({ milliCPU: 4000 }, [claimOf(held)], [held, big, small]);
  assert.deepEqual(granted(d), ['held']);
  assert.deepEqual(d.verdicts.get('uid-small'), {
    granted: false,
    reason: 'QuotaExceeded',
    message: 'needs 1 instance (500m vCPU, 1Gi); 2 of 4 vCPU used; waiting behind older instances',
    place: 2,
  });
});

test('an instance larger than the whole budget, or without a size, steps out of the line', () => {
  const huge = inst('huge', 0, { size: { milliCPU: 1000, memoryBytes: 64 * GiB } });
  const broken = inst('broken', 1, { size: { error: 'InstanceType d9 does not exist' } });
  const ok = inst('ok', 2);
  const d = decide({ memoryBytes: 8 * GiB, instances: 10 }, [], [huge, broken, ok]);
  assert.deepEqual(granted(d), ['ok']);
  assert.deepEqual(d.verdicts.get('uid-huge'), {
    granted: false,
    reason: 'QuotaExceeded',
    message: 'needs 1 instance (1 vCPU, 64Gi), more than the whole budget (8Gi memory)',
  });
  assert.deepEqual(d.verdicts.get('uid-broken'), {
    granted: false,
    reason: 'ConfigurationError',
    message: 'InstanceType d9 does not exist',
  });
  assert.equal(d.waiting, 2);
});

test('instances granted before the ledger knew them are adopted, past the budget, and nothing new is granted', () => {
  const cs = ['a', 'b', 'c'].map((n, i) => inst(n, i, { granted: true }));
  const d = decide({ instances: 2 }, [], [...cs, inst('d', 5)]);
  assert.deepEqual(granted(d).sort(), ['a', 'b', 'c']);
  assert.ok(
    cs.every(
      (c) => d.verdicts.get(c.uid)?.granted && (d.verdicts.get(c.uid) as { adopted: boolean }).adopted,
    ),
  );
  assert.deepEqual(d.over, ['instances']);
  assert.equal(d.verdicts.get('uid-d')?.granted, false);
});

test('an instance being deleted keeps its claim but gets none', () => {
  const a = inst('a', 0, { deleting: true });
  const b = inst('b', 1, { deleting: true });
  const d = decide({}, [claimOf(a)], [a, b]);
  assert.deepEqual(granted(d), ['a']);
  assert.equal(d.verdicts.has('uid-b'), false);
  assert.equal(d.waiting, 0);
});

test('no budget (no Quota): every instance with a size is granted', () => {
  const d = decide({}, [], [inst('a', 0), inst('b', 0, { size: { error: 'no type' } })]);
  assert.deepEqual(granted(d), ['a']);
  assert.equal(d.verdicts.get('uid-b')?.granted, false);
});

test("a Quota's spec as a budget", () => {
  assert.deepEqual(budgetOf({ instances: 4, cpu: '1500m', memory: '2Gi' }), {
    instances: 4,
    milliCPU: 1500,
    memoryBytes: 2 * GiB,
  });
  assert.deepEqual(budgetOf({}), {});
});

test('the requeue while an instance waits backs off with its age (the seed schedule)', () => {
  const t0 = Date.parse(NOW);
  const cases: [number, number][] = [
    [0, 1000],
    [59_999, 1000],
    [60_000, 15_000],
    [299_999, 15_000],
    [300_000, 60_000],
    [599_999, 60_000],
    [600_000, 300_000],
    [86_400_000, 300_000],
  ];
  for (const [age, want] of cases) assert.equal(requeueAfterMs(t0, t0 + age), want, `age ${age}`);
});

// --- generated cases --------------------------------------------------------------------------

const CASES = 500;

function generate(r: Prng): {
  budget: Budget;
  ledger: QuotaClaim[];
  candidates: Candidate[];
  gone: string[];
} {
  const budget: Budget = {};
  if (r.chance(0.7)) budget.instances = r.int(8);
  if (r.chance(0.5)) budget.milliCPU = r.int(9) * 500;
  if (r.chance(0.5)) budget.memoryBytes = r.int(9) * GiB;
  const candidates: Candidate[] = [];
  const n = r.int(14);
  for (let i = 0; i < n; i++)
    candidates.push(
      inst(`i${i}`, r.int(6), {
        // Equal timestamps (one-second resolution) are common: the name breaks the tie.
        cluster: r.pick(['local', 'cell-a']),
        size: r.chance(0.1)
          ? { error: 'InstanceType gone does not exist' }
          : { milliCPU: r.int(5) * 250, memoryBytes: r.int(5) * (GiB / 2) },
        granted: r.chance(0.15),
        deleting: r.chance(0.1),
      }),
    );
  // The ledger: some instances hold claims, plus claims of instances that are gone or out of sight.
  const ledger = candidates.filter(() => r.chance(0.3)).map(claimOf);
  const gone: string[] = [];
  for (let i = 0; i < r.int(3); i++) {
    const c = claimOf(inst(`x${i}`, 0, { cluster: 'cell-b' }));
    ledger.push(c);
    if (r.chance(0.5)) gone.push(c.uid);
  }
  return { budget, ledger, candidates, gone };
}

const fitsAlone = (c: Candidate, budget: Budget) =>
  !('error' in c.size) && exceeds({ instances: 1, ...c.size }, budget).length === 0;

test(`${CASES} generated namespaces: never over budget, oldest first, as far as it goes, idempotent`, async (t) => {
  await withSeed('grant fuzz', (r) => {
    t.diagnostic(`seed ${r.seed} (BERTH_FUZZ_SEED replays it)`);
    let grants = 0;
    // Cases where a new grant and a wait meet: where the line's rules bite.
    let contested = 0;
    for (let i = 0; i < CASES; i++) {
      const { budget, ledger, candidates, gone } = generate(r);
      const where = `case ${i}: ${JSON.stringify({ budget, ledger, candidates, gone })}`;
      const d = decide(budget, ledger, candidates, gone);
      const uids = d.claims.map((c) => c.uid);
      assert.equal(new Set(uids).size, uids.length, `${where}: one claim per instance`);
      // Claims: every one kept unless gone, none of a gone instance.
      for (const c of ledger)
        assert.equal(uids.includes(c.uid), !gone.includes(c.uid), `${where}: claim ${c.uid}`);
      // Verdicts agree with the ledger.
      for (const c of candidates) {
        const v = d.verdicts.get(c.uid);
        assert.equal(v?.granted ?? false, uids.includes(c.uid), `${where}: ${c.name} granted iff claimed`);
        if (c.granted) assert.equal(v?.granted, true, `${where}: ${c.name} was granted: never revoked`);
        if (!v) assert.ok(c.deleting, `${where}: ${c.name} has a verdict`);
      }
      assert.equal(d.waiting, [...d.verdicts.values()].filter((v) => !v.granted).length, where);
      assert.deepEqual(d.used, usedBy(d.claims), where);
      // Never over budget: what was held before (kept and adopted) may exceed it, a new grant never.
      const before = d.claims.filter(
        (c) => ledger.some((l) => l.uid === c.uid) || candidates.find((x) => x.uid === c.uid)?.granted,
      );
      const fresh = d.claims.length - before.length;
      grants += fresh;
      if (fresh > 0 && d.waiting > 0) contested++;
      if (fresh > 0) assert.deepEqual(exceeds(d.used, budget), [], `${where}: granted past the budget`);
      const held: Amount = usedBy(before);
      for (const dim of ['instances', 'milliCPU', 'memoryBytes'] as const)
        if (budget[dim] !== undefined)
          assert.ok(d.used[dim] <= Math.max(budget[dim], held[dim]), `${where}: ${dim}`);
      // Oldest first and as far as it goes: in line order, the granted ones that fit at all are a
      // prefix, and the first that waits does not fit.
      const line = candidates
        .filter(
          (c) => !c.deleting && !c.granted && !ledger.some((l) => l.uid === c.uid) && fitsAlone(c, budget),
        )
        .sort(lineOrder);
      const firstWaiting = line.findIndex((c) => !d.verdicts.get(c.uid)!.granted);
      if (firstWaiting >= 0) {
        assert.ok(
          line.slice(firstWaiting).every((c) => !d.verdicts.get(c.uid)!.granted),
          `${where}: a younger instance overtook ${line[firstWaiting]!.name}`,
        );
        const c = line[firstWaiting]!;
        const size = c.size as { milliCPU: number; memoryBytes: number };
        assert.notDeepEqual(
          exceeds(
            {
              instances: d.used.instances + 1,
              milliCPU: d.used.milliCPU + size.milliCPU,
              memoryBytes: d.used.memoryBytes + size.memoryBytes,
            },
            budget,
          ),
          [],
          `${where}: ${c.name} fits but waits`,
        );
      }
      // Idempotent: from its own ledger, whether or not the instances learnt their verdicts (a
      // restart between the ledger write and the conditions), the same ledger and verdicts.
      const live = candidates.filter((c) => !gone.includes(c.uid));
      const learnt = live.map((c) => ({ ...c, granted: d.verdicts.get(c.uid)?.granted ?? c.granted }));
      for (const cs of [live, learnt]) {
        const again = decide(budget, d.claims, cs, gone);
        assert.deepEqual(again.claims, d.claims, `${where}: the ledger moved on a second pass`);
        assert.deepEqual(
          new Map([...again.verdicts].map(([k, v]) => [k, v.granted ? v.claim : v])),
          new Map([...d.verdicts].map(([k, v]) => [k, v.granted ? v.claim : v])),
          `${where}: verdicts moved on a second pass`,
        );
      }
    }
    t.diagnostic(`${grants} grants decided, ${contested} cases with grants and waits`);
    assert.ok(grants > CASES / 2 && contested > CASES / 10, 'the generator exercises granting and waiting');
  });
});
