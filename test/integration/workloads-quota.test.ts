// test-driver: alone — its quota controllers grant the Instances of every namespace, which would
// write to the Instances of other files running at the same time.
//
// The quota gate against the real control plane: Instances created by the test (no deployment
// controller), the quota controller on a manager of this process, restarted, and twice at once.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { findCondition, hasCondition, type Condition } from '../../src/runtime/api/conditions.ts';
import { Resources, type KubeObject } from '../../src/runtime/api/meta.ts';
import { Manager } from '../../src/runtime/manager/manager.ts';
import { restMetrics } from '../../src/runtime/observability/metrics.ts';
import { explainInstance } from '../../src/workloads/explain.ts';
import { QuotaReconciler, setupQuotaReconciler } from '../../src/workloads/controllers/quota.ts';
import { type QuotaObject } from '../../src/workloads/decide/quota.ts';
import { INSTANCE_CACHE, type CachedInstance } from '../../src/workloads/decide/instances.ts';
import { QUOTA_MANAGER } from '../../src/workloads/types.ts';
import { Instance, InstanceType, Quota } from '../../src/workloads/crd.ts';
import {
  createNamespace,
  deleteNamespace,
  testSandbox,
  uniqueName,
  untilWarning,
} from '../helpers/cluster.ts';
import { berthClient } from '../helpers/berth.ts';
import { holdsFor, sleep, waitFor } from '../helpers/wait.ts';

const sandbox = testSandbox();
const client = sandbox.client();
const namespaces: string[] = [];
const instanceTypes: string[] = [];

before(async () => {
  // The workloads CRDs as `berth install` applies them (the capability is listed once it is whole).
  for (const r of [Instance, Quota, InstanceType]) {
    await client.apply(Resources.crds, r.crd, { fieldManager: 'berth-install', force: true });
    await waitFor(`CRD ${r.crd.metadata.name} established`, async () =>
      hasCondition(await client.get(Resources.crds, r.crd.metadata.name), 'Established'),
    );
  }
});

after(async () => {
  for (const ns of namespaces) await deleteNamespace(client, ns);
  for (const t of instanceTypes) await client.delete(InstanceType.ref, t).catch(() => {});
  client.close();
});

/** A manager of this process running only the quota controller, started and synced. */
async function startQuota(): Promise<{ controller: QuotaReconciler; stop: () => Promise<void> }> {
  const manager = new Manager({
    client: await berthClient(sandbox),
    metricsBindAddress: '0',
    healthBindAddress: '0',
  });
  const controller = new QuotaReconciler(manager);
  setupQuotaReconciler(manager, controller, { workers: 2 });
  await manager.start();
  await manager.waitForCacheSync();
  return { controller, stop: () => manager.stop() };
}

async function namespace(): Promise<string> {
  const ns = await createNamespace(client, 'quota');
  namespaces.push(ns);
  return ns;
}

const SIZED = { requests: { cpu: '1', memory: '2Gi' } };

function createInstance(ns: string, name: string, template: Record<string, unknown> = {}) {
  return client.create<CachedInstance>(Instance.ref, {
    apiVersion: Instance.apiVersion,
    kind: 'Instance',
    metadata: { name, namespace: ns },
    spec: {
      template: {
        containers: [{ name: 'main', image: 'registry.example/app:1', resources: SIZED }],
        ...template,
      },
      templateHash: 'h1',
      ordinal: 0,
    },
  });
}

const deleteInstance = (ns: string, name: string) => client.delete(Instance.ref, name, ns);

function createQuota(ns: string, spec: Record<string, unknown>, name = 'budget') {
  return client.create<QuotaObject>(Quota.ref, {
    apiVersion: Quota.apiVersion,
    kind: 'Quota',
    metadata: { name, namespace: ns },
    spec,
  });
}

const instances = async (ns: string) =>
  (await client.list<CachedInstance>(Instance.ref, { namespace: ns })).items;
const quotaOf = (ns: string, name = 'budget') => client.get<QuotaObject>(Quota.ref, name, ns);
const granted = (i: CachedInstance) => findCondition(i.status?.conditions, 'QuotaGranted');
/** name → "Status/Reason" of QuotaGranted ("-" when it has none). */
async function verdicts(ns: string): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  for (const i of await instances(ns)) {
    const c = granted(i);
    out[i.metadata!.name!] = c ? `${c.status}/${c.reason}` : '-';
  }
  return out;
}
const grantedNames = async (ns: string) =>
  Object.entries(await verdicts(ns))
    .filter(([, v]) => v.startsWith('True/'))
    .map(([n]) => n)
    .sort();
const ledgerNames = async (ns: string) =>
  ((await quotaOf(ns)).status?.claims ?? []).map((c) => c.name).sort();

/** Waits until every named instance has QuotaGranted with this status and reason. */
const waitVerdicts = (ns: string, want: Record<string, string>, timeoutMs = 30_000) =>
  waitFor(
    `verdicts ${JSON.stringify(want)}`,
    async () => {
      const got = await verdicts(ns);
      return Object.entries(want).every(([n, v]) => got[n] === v) && got;
    },
    { timeoutMs, observe: () => verdicts(ns) },
  );

/** Writes sent by this process (the test sends none while it counts). */
async function writesSent(): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const v of (await restMetrics.requests.get()).values) {
    const method = String(v.labels['method']);
    if (method !== 'GET') out[method] = (out[method] ?? 0) + v.value;
  }
  return out;
}
const writesSince = async (before: Record<string, number>) => {
  const now = await writesSent();
  return Object.fromEntries(
    Object.entries(now)
      .map(([m, n]) => [m, n - (before[m] ?? 0)] as const)
      .filter(([, n]) => n > 0),
  );
};
const versions = async (ns: string) =>
  Object.fromEntries([
    ...(await instances(ns)).map((i) => [i.metadata!.name!, i.metadata!.resourceVersion!]),
    ['quota', (await quotaOf(ns)).metadata!.resourceVersion!],
  ]);

test('a quota of four with six instances: four granted, two wait with QuotaExceeded; a freed slot goes to exactly the oldest waiting one', async () => {
  const ns = await namespace();
  const quota = await startQuota();
  try {
    await createQuota(ns, { instances: 4 });
    for (const n of ['g0', 'g1', 'g2', 'g3']) await createInstance(ns, n);
    await waitVerdicts(
      ns,
      Object.fromEntries(['g0', 'g1', 'g2', 'g3'].map((n) => [n, 'True/QuotaAvailable'])),
    );
    // Created in this order, a second apart, with names in the other order: age decides, not the name.
    await createInstance(ns, 'w-older');
    await sleep(1100);
    await createInstance(ns, 'v-younger');
    await waitVerdicts(ns, { 'w-older': 'False/QuotaExceeded', 'v-younger': 'False/QuotaExceeded' });
    const waiting = (await instances(ns)).find((i) => i.metadata!.name === 'v-younger')!;
    assert.equal(granted(waiting)!.message, 'needs 1 instance (1 vCPU, 2Gi); 4 of 4 instances used');
    const q = await quotaOf(ns);
    assert.deepEqual(q.status?.used, { instances: 4, cpu: '4', memory: '8Gi' });
    assert.equal(q.status?.waiting, 2);
    assert.deepEqual(await ledgerNames(ns), ['g0', 'g1', 'g2', 'g3']);
    assert.equal(findCondition(q.status?.conditions, 'Ready')?.reason, 'WithinBudget');
    assert.equal(q.status?.claims?.[0]?.cluster, 'local');

    await deleteInstance(ns, 'g1');
    await waitVerdicts(ns, { 'w-older': 'True/QuotaAvailable' });
    await holdsFor(
      'exactly four granted, v-younger still waiting, the ledger the same four',
      async () => {
        const g = await grantedNames(ns);
        return (
          g.join() === 'g0,g2,g3,w-older' &&
          (await ledgerNames(ns)).join() === g.join() &&
          (await verdicts(ns))['v-younger'] === 'False/QuotaExceeded'
        );
      },
      2500,
    );
    assert.equal((await quotaOf(ns)).status?.waiting, 1);
  } finally {
    await quota.stop();
  }
});

const ROUNDS = 6;

test('two quota controllers at once, two instances racing for the last slot: never both get it', async () => {
  const ns = await namespace();
  const a = await startQuota();
  const b = await startQuota();
  let most = 0;
  let watching = true;
  // Every 50 ms: never more than four granted, on the instances or in the ledger.
  const watcher = (async () => {
    while (watching) {
      const [g, l] = await Promise.all([grantedNames(ns), ledgerNames(ns).catch(() => [])]);
      most = Math.max(most, g.length, l.length);
      await sleep(50);
    }
  })();
  try {
    await createQuota(ns, { instances: 4 });
    for (const n of ['g0', 'g1', 'g2']) await createInstance(ns, n);
    await waitVerdicts(ns, {
      g0: 'True/QuotaAvailable',
      g1: 'True/QuotaAvailable',
      g2: 'True/QuotaAvailable',
    });
    for (let round = 0; round < ROUNDS; round++) {
      const racers = [`r${round}-a`, `r${round}-b`];
      // b first, a right after: in the same second the name puts a first in line, so a writer that
      // saw only b grants b while one that saw both grants a: the ledger's resourceVersion decides.
      if (round % 2) await Promise.all(racers.map((n) => createInstance(ns, n)));
      else for (const n of racers.toReversed()) await createInstance(ns, n);
      const got = await waitFor(
        `round ${round}: one racer granted, the other waiting`,
        async () => {
          const v = await verdicts(ns);
          const states = racers.map((n) => v[n]).sort();
          return states.join() === 'False/QuotaExceeded,True/QuotaAvailable' && v;
        },
        { observe: () => verdicts(ns) },
      );
      await holdsFor(
        `round ${round}: still exactly one racer granted`,
        async () => {
          const v = await verdicts(ns);
          return racers.filter((n) => v[n] === 'True/QuotaAvailable').length === 1;
        },
        1500,
      );
      assert.equal((await ledgerNames(ns)).length, 4);
      // Both racers go; the three others are granted still.
      await Promise.all(racers.map((n) => deleteInstance(ns, n)));
      await waitFor(
        `round ${round}: the ledger back to three`,
        async () => (await ledgerNames(ns)).join() === 'g0,g1,g2',
      );
      assert.ok(Object.keys(got).length >= 5);
    }
  } finally {
    watching = false;
    await watcher;
    await Promise.all([a.stop(), b.stop()]);
  }
  assert.ok(most <= 4, `at some point ${most} instances were granted`);
});

/**
 * A quota controller whose informers run but whose workers do not: the test calls its reconcile,
 * and stops its informers to freeze what it sees.
 */
async function frozenQuota() {
  const manager = new Manager({
    client: await berthClient(sandbox),
    metricsBindAddress: '0',
    healthBindAddress: '0',
  });
  const controller = new QuotaReconciler(manager);
  setupQuotaReconciler(manager, controller, { workers: 1 });
  const local = manager.cluster();
  // The quota controller's own informer (same request), whose stop freezes what it sees.
  const instances = local.informer<CachedInstance>(Instance.ref, INSTANCE_CACHE);
  local.start();
  await local.waitForCacheSync();
  return { controller, instances, stop: () => local.stop() };
}

/** A budget of one, granted to g by `writer` itself; then w arrives. */
async function grantOneThenAddW(ns: string, writer: Awaited<ReturnType<typeof frozenQuota>>): Promise<void> {
  await createQuota(ns, { instances: 1 });
  await createInstance(ns, 'g');
  await waitFor(
    'g cached',
    () => writer.instances.get(`${ns}/g`) && writer.controller.quotas.get(`${ns}/budget`),
  );
  assert.equal(await writer.controller.reconcile(ns), undefined);
  await createInstance(ns, 'w');
}

test('a writer working from a stale view of an instance does not overwrite its grant', async () => {
  const ns = await namespace();
  const writer = await frozenQuota();
  try {
    // It grants g (the only one) itself; w arrives, and then its view of instances stops.
    await grantOneThenAddW(ns, writer);
    await waitFor('w cached', () => writer.instances.get(`${ns}/w`));
    await writer.instances.stop();
    // Another writer gave w a grant meanwhile (as the ledger of a later Quota would, by adoption).
    await client.apply(
      Instance.ref,
      {
        apiVersion: Instance.apiVersion,
        kind: 'Instance',
        metadata: { name: 'w', namespace: ns },
        status: {
          conditions: [
            {
              type: 'QuotaGranted',
              status: 'True',
              reason: 'QuotaAvailable',
              message: 'counted by Quota budget',
              lastTransitionTime: new Date().toISOString().replace(/\.\d{3}Z$/, 'Z'),
            },
          ],
        },
      },
      { fieldManager: QUOTA_MANAGER, subresource: 'status', force: true },
    );
    // Its stale view says w waits: the write of that verdict conflicts, and w keeps its grant.
    assert.deepEqual(await writer.controller.reconcile(ns), { requeue: true });
    assert.equal((await verdicts(ns))['w'], 'True/QuotaAvailable');
  } finally {
    await writer.stop();
  }
});

test('a writer working from a stale ledger does not overwrite it', async () => {
  const ns = await namespace();
  const writer = await frozenQuota();
  try {
    await grantOneThenAddW(ns, writer);
    await sleep(1100);
    await createInstance(ns, 'x');
    await waitFor('w and x cached', () => writer.instances.get(`${ns}/w`) && writer.instances.get(`${ns}/x`));
    assert.ok('requeueAfterMs' in ((await writer.controller.reconcile(ns)) ?? {}));
    await waitVerdicts(ns, { g: 'True/QuotaAvailable', w: 'False/QuotaExceeded', x: 'False/QuotaExceeded' });
    // Its view of the Quota stops; g goes, and another writer's ledger gives the room to x.
    await writer.controller.quotas.stop();
    await deleteInstance(ns, 'g');
    await waitFor('g gone from its cache', () => !writer.instances.get(`${ns}/g`));
    const q = await quotaOf(ns);
    const x = (await instances(ns)).find((i) => i.metadata!.name === 'x')!;
    await client.request('PUT', `/apis/${Quota.apiVersion}/namespaces/${ns}/quotas/budget/status`, {
      body: {
        ...q,
        status: { ...q.status, claims: [{ ...q.status!.claims![0]!, name: 'x', uid: x.metadata!.uid! }] },
      },
      query: { fieldManager: QUOTA_MANAGER },
    });
    // Its view: g's room is free and w is first in line; the ledger moved since, so the write
    // conflicts and it grants nothing.
    assert.deepEqual(await writer.controller.reconcile(ns), { requeue: true });
    assert.deepEqual(await ledgerNames(ns), ['x']);
    assert.equal((await verdicts(ns))['w'], 'False/QuotaExceeded');
  } finally {
    await writer.stop();
  }
});

test('restarted, the quota controller loses no grant and writes nothing it need not', async () => {
  const ns = await namespace();
  let quota = await startQuota();
  try {
    await createQuota(ns, { instances: 4, cpu: '8' });
    for (const n of ['g0', 'g1', 'g2', 'g3']) await createInstance(ns, n);
    await waitVerdicts(
      ns,
      Object.fromEntries(['g0', 'g1', 'g2', 'g3'].map((n) => [n, 'True/QuotaAvailable'])),
    );
    await createInstance(ns, 'w1');
    await sleep(1100);
    await createInstance(ns, 'w2');
    await waitVerdicts(ns, { w1: 'False/QuotaExceeded', w2: 'False/QuotaExceeded' });
    await waitFor('two waiting on the Quota', async () => (await quotaOf(ns)).status?.waiting === 2);

    // A plain restart: passes over everything (and the waiting instances' requeues), no write.
    await quota.stop();
    let rv = await versions(ns);
    let sent = await writesSent();
    quota = await startQuota();
    await sleep(3000);
    assert.deepEqual(await writesSince(sent), {});
    assert.deepEqual(await versions(ns), rv);

    // Stopped midway: the ledger gave g3's room to w1 (g3 is gone), but w1 never heard of it.
    await quota.stop();
    await deleteInstance(ns, 'g3');
    const q = await quotaOf(ns);
    const w1 = (await instances(ns)).find((i) => i.metadata!.name === 'w1')!;
    const claims = q.status!.claims!.filter((c) => c.name !== 'g3');
    claims.push({
      ...q.status!.claims![0]!,
      name: 'w1',
      uid: w1.metadata!.uid!,
      grantedAt: new Date().toISOString(),
    });
    await client.request('PUT', `/apis/${Quota.apiVersion}/namespaces/${ns}/quotas/budget/status`, {
      body: { ...q, status: { ...q.status, claims, waiting: 1 } },
      query: { fieldManager: QUOTA_MANAGER },
    });
    rv = await versions(ns);
    sent = await writesSent();
    quota = await startQuota();
    await waitVerdicts(ns, { w1: 'True/QuotaAvailable' });
    await sleep(2000);
    // One write: w1's condition. The ledger was right, so the Quota is not written again.
    assert.deepEqual(await writesSince(sent), { PATCH: 1 });
    const now = await versions(ns);
    for (const n of ['quota', 'g0', 'g1', 'g2', 'w2']) assert.equal(now[n], rv[n], `${n} was written`);
    assert.equal((await verdicts(ns))['w2'], 'False/QuotaExceeded');

    // Stopped while an instance goes: on restart the ledger drops it and w2 moves in (two writes).
    await quota.stop();
    await deleteInstance(ns, 'g0');
    sent = await writesSent();
    quota = await startQuota();
    await waitVerdicts(ns, { w2: 'True/QuotaAvailable' });
    await sleep(2000);
    assert.deepEqual(await writesSince(sent), { PATCH: 1, PUT: 1 });
    assert.deepEqual(await ledgerNames(ns), ['g1', 'g2', 'w1', 'w2']);
    assert.deepEqual((await quotaOf(ns)).status?.used, { instances: 4, cpu: '4', memory: '8Gi' });
  } finally {
    await quota.stop();
  }
});

test('no Quota: granted at once (NoQuota); a Quota created later adopts them, OverBudget, and the next waits', async () => {
  const ns = await namespace();
  const quota = await startQuota();
  try {
    await createInstance(ns, 'a');
    await createInstance(ns, 'b');
    await waitVerdicts(ns, { a: 'True/NoQuota', b: 'True/NoQuota' });
    assert.equal(granted((await instances(ns))[0]!)!.message, `no Quota in namespace ${ns}`);

    await createQuota(ns, { instances: 1 });
    await waitVerdicts(ns, { a: 'True/QuotaAvailable', b: 'True/QuotaAvailable' });
    const ready = await waitFor('the Quota OverBudget', async () => {
      const c = findCondition<Condition>((await quotaOf(ns)).status?.conditions, 'Ready');
      return c?.reason === 'OverBudget' && c;
    });
    assert.equal(ready.status, 'False');
    assert.match(ready.message, /^2 of 1 instances used, over the budget in instances/);
    assert.deepEqual(await ledgerNames(ns), ['a', 'b']);
    await untilWarning(client, ns, { reason: 'OverBudget', regarding: 'budget' });
    await createInstance(ns, 'c');
    await waitVerdicts(ns, { c: 'False/QuotaExceeded' });

    // Back within the budget once both go: the next one still waits for room (1 of 1 used by c).
    await deleteInstance(ns, 'a');
    await deleteInstance(ns, 'b');
    await waitVerdicts(ns, { c: 'True/QuotaAvailable' });
    await waitFor(
      'the Quota back within budget',
      async () => findCondition((await quotaOf(ns)).status?.conditions, 'Ready')?.status === 'True',
    );
  } finally {
    await quota.stop();
  }
});

test('an instance without a size is not granted and says why; its InstanceType appearing grants it', async () => {
  const ns = await namespace();
  const type = uniqueName('d1-test');
  instanceTypes.push(type);
  const quota = await startQuota();
  try {
    await createQuota(ns, { instances: 4, cpu: '4', memory: '8Gi' });
    await client.create<KubeObject>(Instance.ref, {
      apiVersion: Instance.apiVersion,
      kind: 'Instance',
      metadata: { name: 'typed', namespace: ns },
      spec: {
        template: { instanceType: type, containers: [{ name: 'main', image: 'registry.example/app:1' }] },
        templateHash: 'h1',
        ordinal: 0,
      },
    });
    await waitVerdicts(ns, { typed: 'False/ConfigurationError' });
    assert.equal(granted((await instances(ns))[0]!)!.message, `InstanceType ${type} does not exist`);

    await client.create(InstanceType.ref, {
      apiVersion: InstanceType.apiVersion,
      kind: 'InstanceType',
      metadata: { name: type },
      spec: { cpu: '2', memory: '4Gi' },
    });
    await waitVerdicts(ns, { typed: 'True/QuotaAvailable' });
    assert.deepEqual((await quotaOf(ns)).status?.used, { instances: 1, cpu: '2', memory: '4Gi' });

    // berth explain instance: what a waiting instance waits for, its place in line and since when.
    await createInstance(ns, 'big', {
      containers: [{ name: 'main', image: 'registry.example/app:1', resources: { requests: { cpu: '3' } } }],
    });
    await waitVerdicts(ns, { big: 'False/QuotaExceeded' });
    const big = (await instances(ns)).find((i) => i.metadata!.name === 'big')!;
    const text = (await explainInstance(client, big)).join('\n');
    assert.match(
      text,
      /quota: waiting, 1st in line for Quota budget \(1 of 4 instances, 2 of 4 vCPU, 4Gi of 8Gi memory used\)/,
    );
    assert.match(text, /needs 1 instance \(3 vCPU\)/);
    assert.match(text, /since \d{4}-\d\d-\d\dT/);
  } finally {
    await quota.stop();
  }
});
