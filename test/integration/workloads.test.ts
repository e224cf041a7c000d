// test-driver: alone — Berth's workloads controllers act on every WorkloadDeployment and Instance in
// the cluster, so a file beside it that makes Instances (the quota test) would have two Berths on them.
//
// Workloads in a cell against the real control plane, with Berth as its own process (its quota
// controller grants instances of a namespace without a Quota at once, NoQuota): three replicas
// as three Ready Pods, scaled by ordinal through the scale subresource; a rollout one instance at a
// time, highest ordinal first, with updatedReplicas counted right; an image that cannot be pulled
// stops the rollout (the old instances keep serving) and a crash loop, both named on the instance and
// the deployment with Warning events; Berth restarted writes nothing; a fixed template heals.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { installCrds } from '../../src/cli/install.ts';
import { CRASH_IMAGE_HOST, MISSING_IMAGE_HOST } from '../../src/sandbox/stages.ts';
import { findCondition, type Condition } from '../../src/runtime/api/conditions.ts';
import { Resources, type KubeObject } from '../../src/runtime/api/meta.ts';
import { resourcePath } from '../../src/runtime/client/client.ts';
import { Informer } from '../../src/runtime/cache/informer.ts';
import type { Event } from '../../src/runtime/events/event.ts';
import { controlledBy, type InstanceObject } from '../../src/workloads/decide/instances.ts';
import {
  DEPLOYMENT_LABEL,
  INSTANCE_LABEL,
  QUOTA_GATE,
  TEMPLATE_HASH_LABEL,
  type WorkloadDeploymentStatus,
} from '../../src/workloads/types.ts';
import { Instance, Quota, WorkloadDeployment } from '../../src/workloads/crd.ts';
import { ENDED_REPLACE_MS } from '../../src/workloads/decide/instance-actions.ts';
import { startBerth, type BerthProcess } from '../helpers/berth.ts';
import {
  addNodes,
  createNamespace,
  deleteNamespace,
  deleteNodes,
  refuseByPolicy,
  testSandbox,
  uniqueName,
} from '../helpers/cluster.ts';
import { holdsFor, settles, sleep, waitFor } from '../helpers/wait.ts';

const sandbox = testSandbox();
const client = sandbox.client();
const id = uniqueName('wl');
let ns = '';
let nodes: string[] = [];
let berth: BerthProcess | undefined;

type WD = KubeObject & { metadata: { generation?: number }; status?: WorkloadDeploymentStatus };

const template = (image: string) => ({ containers: [{ name: 'app', image }] });

async function applyWD(name: string, spec: Record<string, unknown>): Promise<void> {
  await client.apply(
    WorkloadDeployment.ref,
    {
      apiVersion: WorkloadDeployment.apiVersion,
      kind: WorkloadDeployment.kind,
      metadata: { name, namespace: ns },
      spec,
    },
    { fieldManager: 'test-author', force: true },
  );
}

const getWD = (name: string) => client.get<WD>(WorkloadDeployment.ref, name, ns);
const instancesOf = async (wd: string) =>
  (
    await client.list<InstanceObject>(Instance.ref, {
      namespace: ns,
      query: { labelSelector: `${DEPLOYMENT_LABEL}=${wd}` },
    })
  ).items.sort((a, b) => a.spec.ordinal - b.spec.ordinal);
const podsOf = async (wd: string) =>
  (
    await client.list(Resources.pods, {
      namespace: ns,
      query: { labelSelector: `${DEPLOYMENT_LABEL}=${wd}` },
    })
  ).items;
const cond = (o: KubeObject | undefined, type: string): Condition | undefined =>
  findCondition((o?.['status'] as { conditions?: Condition[] } | undefined)?.conditions, type);
const isReady = (i: InstanceObject) => cond(i, 'Ready')?.status === 'True';

interface Snapshot {
  wd: WD;
  instances: InstanceObject[];
  pods: KubeObject[];
}

/** Polls the deployment, its instances, then their Pods, until `done` holds: what a user watching would see. */
async function observe(
  name: string,
  done: (s: Snapshot) => boolean,
  timeoutMs = 90_000,
): Promise<Snapshot[]> {
  const seen: Snapshot[] = [];
  await waitFor(
    `${name} to settle`,
    async () => {
      const s = { wd: await getWD(name), instances: await instancesOf(name), pods: await podsOf(name) };
      seen.push(s);
      return done(s);
    },
    { timeoutMs, intervalMs: 50, observe: () => seen.at(-1) && summary(seen.at(-1)!) },
  );
  return seen;
}

const summary = (s: Snapshot) => ({
  status: s.wd.status,
  instances: s.instances.map((i) => ({
    name: i.metadata.name,
    hash: i.spec.templateHash,
    deleting: !!i.metadata.deletionTimestamp,
    conditions: i.status?.conditions?.map((c) => `${c.type}=${c.status} ${c.reason}: ${c.message}`),
  })),
  pods: s.pods.map((p) => p.metadata!.name),
});

/** Every instance Ready and on the current template, `n` of them, and the status says so. */
const settled = (n: number) => (s: Snapshot) =>
  s.wd.status?.observedGeneration === s.wd.metadata.generation &&
  s.wd.status?.readyReplicas === n &&
  s.wd.status?.updatedReplicas === n &&
  s.wd.status?.replicas === n &&
  s.instances.length === n &&
  s.instances.every(
    (i) => isReady(i) && !i.metadata.deletionTimestamp && i.spec.templateHash === s.wd.status?.templateHash,
  );

/** OrderedReady: no snapshot shows an instance whose lower ordinals are not all there and Ready. */
function assertOrderedUp(snaps: Snapshot[]): void {
  for (const s of snaps) {
    const byOrdinal = new Map(s.instances.map((i) => [i.spec.ordinal, i]));
    for (const i of s.instances)
      for (let j = 0; j < i.spec.ordinal; j++) {
        const lower = byOrdinal.get(j);
        assert.ok(
          lower && isReady(lower),
          `${i.metadata.name} exists while ordinal ${j} is not Ready: ${JSON.stringify(summary(s))}`,
        );
      }
  }
}

async function events(name: string, kind: string): Promise<Event[]> {
  const list = await client.list<Event>(Resources.events, { namespace: ns });
  return list.items.filter((e) => e.regarding?.name === name && e.regarding?.kind === kind);
}

before(async () => {
  await installCrds(client);
  nodes = await addNodes(client, { prefix: id, count: 3 });
  ns = await createNamespace(client, id);
  berth = await startBerth(sandbox, ['--controllers=workloads'], { capture: true });
});

after(async () => {
  await berth?.stop();
  if (process.env['BERTH_TEST_VERBOSE']) process.stderr.write(berth?.output() ?? '');
  await deleteNamespace(client, ns);
  await deleteNodes(client, nodes);
});

describe('workloads in a cell', () => {
  test('three replicas run as three Ready Pods, scaled to five and back to two by ordinal', async () => {
    await applyWD('web', { replicas: 3, template: template('registry.example/web:1') });
    assertOrderedUp(await observe('web', settled(3)));
    const pods = await podsOf('web');
    assert.deepEqual(pods.map((p) => p.metadata!.name).sort(), ['web-0', 'web-1', 'web-2']);
    for (const p of pods) {
      assert.equal(cond(p, 'Ready')?.status, 'True', p.metadata!.name);
      assert.equal(p.metadata!.labels![INSTANCE_LABEL], p.metadata!.name);
      const owner = p.metadata!.ownerReferences?.find((o) => o.controller);
      assert.equal(owner?.kind, 'Instance');
      assert.equal(owner?.name, p.metadata!.name);
    }

    // The scale subresource, as `kubectl scale wd/web --replicas=5` uses it.
    const scalePath = resourcePath(WorkloadDeployment.ref, ns, 'web', 'scale');
    await client.request('PATCH', scalePath, {
      body: { spec: { replicas: 5 } },
      contentType: 'application/merge-patch+json',
    });
    assertOrderedUp(await observe('web', settled(5)));
    const scale = await client.request<{
      spec: { replicas: number };
      status: { replicas: number; selector: string };
    }>('GET', scalePath);
    assert.deepEqual(
      { spec: scale.spec.replicas, status: scale.status.replicas, selector: scale.status.selector },
      { spec: 5, status: 5, selector: `${DEPLOYMENT_LABEL}=web` },
    );

    await client.request('PATCH', scalePath, {
      body: { spec: { replicas: 2 } },
      contentType: 'application/merge-patch+json',
    });
    const down = await observe('web', settled(2));
    // Highest ordinal first, one at a time, the next only once the one before is gone.
    for (const s of down) {
      const ordinals = s.instances.map((i) => i.spec.ordinal);
      assert.deepEqual(
        ordinals,
        ordinals.map((_, k) => k),
        `not a prefix: ${ordinals.join(',')}`,
      );
      const deleting = s.instances.filter((i) => i.metadata.deletionTimestamp);
      // Instances are deleted in the background: a deletion is in flight until its Pod is gone too.
      // The Pods are read after the instances, so a Pod without its instance is one going.
      const live = new Set(
        s.instances.filter((i) => !i.metadata.deletionTimestamp).map((i) => i.metadata.name),
      );
      const going = new Set([
        ...deleting.map((i) => i.metadata.name),
        ...s.pods.map((p) => p.metadata!.name).filter((n) => !live.has(n)),
      ]);
      assert.ok(going.size <= 1, `two deleting at once: ${JSON.stringify(summary(s))}`);
      if (deleting[0]) assert.equal(deleting[0].spec.ordinal, ordinals.length - 1);
    }
    await waitFor(
      'only web-0 and web-1 have Pods',
      async () =>
        (await podsOf('web'))
          .map((p) => p.metadata!.name)
          .sort()
          .join() === 'web-0,web-1',
    );
    // The status follows once Berth's Pod cache has seen the last Pod go.
    await waitFor(
      'web Available, its template rolled out',
      async () => {
        const wd = await getWD('web');
        return (
          cond(wd, 'Available')?.status === 'True' &&
          cond(wd, 'Progressing')?.reason === 'NewTemplateAvailable'
        );
      },
      { observe: async () => (await getWD('web'))['status'] },
    );
  });

  test('a template change rolls one instance at a time, highest ordinal first, updatedReplicas counted right', async () => {
    await applyWD('roll', { replicas: 3, template: template('registry.example/roll:1') });
    await observe('roll', settled(3));
    const old = (await getWD('roll')).status!.templateHash!;
    // The order of the replacements, from a watch: a step can be quicker than one poll of the snapshots.
    const created: InstanceObject[] = [];
    const watch = new Informer<InstanceObject>({
      client,
      ref: Instance.ref,
      namespace: ns,
      labelSelector: `${DEPLOYMENT_LABEL}=roll`,
    });
    watch.addEventHandler({ onAdd: (i) => created.push(i) });
    watch.start();
    await watch.waitForSync();
    await applyWD('roll', { replicas: 3, template: template('registry.example/roll:2') });
    const snaps = await observe('roll', (s) => s.wd.status?.templateHash !== old && settled(3)(s));
    const current = snaps.at(-1)!.wd.status!.templateHash!;
    assert.notEqual(current, old);
    const onCurrent = () => created.filter((i) => i.spec.templateHash === current);
    // The watch may be a moment behind the polls that saw the rollout end.
    await waitFor('the watch seeing the three replacements', () => onCurrent().length >= 3);
    watch.stop();
    const order = onCurrent().map((i) => i.spec.ordinal);

    let lastUpdated = -1;
    for (const s of snaps) {
      // At most one of the three is out of service at any moment.
      const serving = s.instances.filter((i) => isReady(i) && !i.metadata.deletionTimestamp).length;
      assert.ok(serving >= 2, `two out of service at once: ${JSON.stringify(summary(s))}`);
      if (s.wd.status?.templateHash !== current) continue;
      // Read before the instances, the count cannot exceed the instances on the new template then.
      const updated = s.wd.status.updatedReplicas ?? 0;
      const onNew = s.instances.filter(
        (i) => i.spec.templateHash === current && !i.metadata.deletionTimestamp,
      );
      assert.ok(
        updated <= onNew.length,
        `updatedReplicas ${updated} with ${onNew.length} instances on ${current}`,
      );
      assert.ok(updated >= lastUpdated, `updatedReplicas went back from ${lastUpdated} to ${updated}`);
      lastUpdated = updated;
    }
    assert.deepEqual(order, [2, 1, 0]);
    assert.equal(lastUpdated, 3);
    for (const p of await podsOf('roll')) assert.equal(p.metadata!.labels![TEMPLATE_HASH_LABEL], current);
  });

  test('an image that cannot be pulled stops the rollout; the old instances keep serving', async () => {
    await applyWD('pull', { replicas: 3, template: template('registry.example/pull:1') });
    await observe('pull', settled(3));
    const old = (await getWD('pull')).status!.templateHash!;
    await applyWD('pull', { replicas: 3, template: template(`${MISSING_IMAGE_HOST}/pull:2`) });
    await observe('pull', (s) => cond(s.wd, 'Progressing')?.reason === 'ImageUnavailable');
    const check = async () => {
      const [i0, i1, i2] = await instancesOf('pull');
      assert.deepEqual([i0!.spec.templateHash, i1!.spec.templateHash], [old, old]);
      assert.ok(isReady(i0!) && isReady(i1!), 'the old instances serve');
      assert.notEqual(i2!.spec.templateHash, old);
      assert.equal(cond(i2, 'Ready')?.reason, 'ImageUnavailable');
      // The pull error itself, as the kubelet reports it through ErrImagePull and ImagePullBackOff.
      assert.equal(
        cond(i2, 'Ready')?.message,
        `container app: its image cannot be pulled: failed to pull and unpack image "${MISSING_IMAGE_HOST}/pull:2": ${MISSING_IMAGE_HOST}/pull:2: not found`,
      );
      return true;
    };
    await check();
    await holdsFor('the rollout to stay stopped', check, 3000, 500);
    const wd = await getWD('pull');
    assert.equal(cond(wd, 'Progressing')?.status, 'False');
    assert.equal(cond(wd, 'Available')?.reason, 'ImageUnavailable');
    assert.match(cond(wd, 'Available')!.message, /pull-2/);
    assert.equal(wd.status?.updatedReplicas, 1);
    assert.equal(wd.status?.readyReplicas, 2);
    await waitFor('Warning events on the instance and the deployment', async () => {
      const onInstance = (await events('pull-2', 'Instance')).filter((e) => e.reason === 'ImageUnavailable');
      const onDeployment = (await events('pull', 'WorkloadDeployment')).filter(
        (e) => e.reason === 'ImageUnavailable',
      );
      return (
        onInstance.length === 1 &&
        onInstance[0]!.type === 'Warning' &&
        /not found/.test(onInstance[0]!.note ?? '') &&
        onDeployment.length >= 1
      );
    });
  });

  test('a crash loop gives InstanceCrashing on the instance and the deployment', async () => {
    await applyWD('crash', { replicas: 2, template: template(`${CRASH_IMAGE_HOST}/app:1`) });
    await observe('crash', (s) => cond(s.wd, 'Available')?.reason === 'InstanceCrashing');
    const [i0, ...rest] = await instancesOf('crash');
    assert.equal(cond(i0, 'Ready')?.reason, 'InstanceCrashing');
    assert.equal(cond(i0, 'Programmed')?.status, 'True');
    // OrderedReady: ordinal 1 waits for ordinal 0, which the user must fix.
    assert.equal(rest.length, 0);
    const wd = await getWD('crash');
    assert.equal(cond(wd, 'Progressing')?.reason, 'InstanceCrashing');
    await waitFor('a Warning event on the instance', async () =>
      (await events('crash-0', 'Instance')).some(
        (e) => e.type === 'Warning' && e.reason === 'InstanceCrashing',
      ),
    );
  });

  test('Berth restarted writes nothing it need not', async () => {
    // Let every status settle. The crash loop keeps restarting, and its status must not change with
    // it: once the kubelet (kwok) has restarted it three times it reads InstanceCrashing whatever the
    // container's state at the moment.
    await waitFor('the crash loop to have restarted three times', async () =>
      (await podsOf('crash')).some((p) =>
        ((p['status'] as { containerStatuses?: { restartCount: number }[] }).containerStatuses ?? []).some(
          (c) => c.restartCount >= 3,
        ),
      ),
    );
    // Every status written: what the old Berth still had to write, the new one would.
    const rvs = async () =>
      (
        await Promise.all(
          [WorkloadDeployment.ref, Instance.ref].map(async (ref) =>
            (await client.list(ref, { namespace: ns })).items.map(
              (o) => `${ref.resource}/${o.metadata!.name}@${o.metadata!.resourceVersion}`,
            ),
          ),
        )
      ).flat();
    await settles('the WorkloadDeployments and Instances', rvs, { quietMs: 2000 });
    await berth!.stop();
    berth = await startBerth(sandbox, ['--controllers=workloads'], { capture: true });
    await sleep(5000);
    const writes = await berth.metric('rest_client_requests_total', (l) => !l.includes('method="GET"'));
    assert.equal(writes, 0, berth.output());
    // And it still works: a scale up after the restart.
    await applyWD('web', { replicas: 3, template: template('registry.example/web:1') });
    assertOrderedUp(await observe('web', settled(3)));
  });

  test('a broken rollout heals when the template is fixed: the broken instance is replaced at once', async () => {
    const broken = (await instancesOf('pull')).find((i) => i.spec.ordinal === 2)!;
    assert.equal(cond(broken, 'Ready')?.reason, 'ImageUnavailable');
    await applyWD('pull', { replicas: 3, template: template('registry.example/pull:1') });
    await observe('pull', settled(3));
    const [i0, i1, i2] = await instancesOf('pull');
    assert.notEqual(i2!.metadata.uid, broken.metadata.uid, 'pull-2 was recreated, not updated');
    assert.equal(i2!.spec.templateHash, i0!.spec.templateHash);
    assert.equal(i1!.spec.templateHash, i0!.spec.templateHash);
    const wd = await getWD('pull');
    assert.equal(cond(wd, 'Progressing')?.reason, 'NewTemplateAvailable');
    assert.equal(cond(wd, 'Available')?.status, 'True');
  });

  test('an instance to Ready is a handful of writes; scaled away, the deployment settles only once its Pod is gone', async () => {
    const writes = () => berth!.metric('rest_client_requests_total', (l) => !l.includes('method="GET"'));
    // Writes of the tests before (a batched status, events) may still be landing: start once none do.
    const spentBefore = await waitFor('no writes for a second', async () => {
      const first = await writes();
      await sleep(1000);
      return (await writes()) === first ? first : undefined;
    });
    await applyWD('lean', { replicas: 1, template: template('registry.example/lean:1') });
    await observe('lean', settled(1));
    await sleep(1000); // a batched status write of the deployment, if one is due
    // The Instance, its Pod (made ungated: the grant is in first), the instance's status twice (the
    // grant with the Pod made; Ready) and the deployment's at most four times (its new generation;
    // counts, batched when they come close together; Available). Before: 17.
    const spent = (await writes()) - spentBefore;
    assert.ok(spent <= 8, `${spent} writes for one instance`);
    const [inst] = await instancesOf('lean');
    assert.deepEqual(inst!.metadata.finalizers ?? [], [], 'no finalizer of Berth: nothing waits for Berth');
    const [pod] = await podsOf('lean');
    assert.equal(((pod!['spec'] as { schedulingGates?: unknown[] }).schedulingGates ?? []).length, 0);

    // Deleted in the background, the instance goes at once; Berth deletes its Pod, and the deployment
    // counts the deletion in flight until the Pod is gone. The Pods are read after the status.
    await applyWD('lean', { replicas: 0, template: template('registry.example/lean:1') });
    const snaps = await observe('lean', (s) => settled(0)(s) && s.pods.length === 0);
    for (const s of snaps)
      if (
        s.wd.status?.observedGeneration === s.wd.metadata.generation &&
        cond(s.wd, 'Progressing')?.reason === 'NewTemplateAvailable'
      )
        assert.deepEqual(s.pods, [], `settled with a Pod still there: ${JSON.stringify(summary(s))}`);
  });

  test('a Quota of four with six requested: four run, two wait QuotaExceeded; deleting one lets exactly one in', async (t) => {
    // A namespace of its own: a Quota adopts the instances already running where it is created.
    const shared = ns;
    ns = await createNamespace(client, `${id}-q`);
    const own = ns;
    t.after(() => {
      ns = shared;
      return deleteNamespace(client, own);
    });
    await client.create(Quota.ref, {
      apiVersion: Quota.apiVersion,
      kind: Quota.kind,
      metadata: { name: 'budget', namespace: ns },
      spec: { instances: 4 },
    });
    await applyWD('quota', {
      replicas: 6,
      instanceManagementPolicy: 'Parallel',
      template: template('registry.example/quota:1'),
    });
    const waiting = (s: Snapshot) =>
      s.instances
        .filter((i) => cond(i, 'QuotaGranted')?.reason === 'QuotaExceeded')
        .map((i) => i.metadata.name);
    const [last] = (
      await observe(
        'quota',
        (s) => s.wd.status?.readyReplicas === 4 && s.instances.length === 6 && waiting(s).length === 2,
      )
    ).slice(-1);
    for (const i of last!.instances.filter((x) => waiting(last!).includes(x.metadata.name)))
      assert.equal(cond(i, 'Ready')?.reason, 'QuotaExceeded');
    // Each waiting instance says so with a Warning, as the seed's QuotaNoBudget does.
    await waitFor('a QuotaExceeded Warning on each waiting instance', async () => {
      for (const name of waiting(last!))
        if (
          !(await events(name!, 'Instance')).some((e) => e.type === 'Warning' && e.reason === 'QuotaExceeded')
        )
          return false;
      return true;
    });
    assert.equal(cond(last!.wd, 'Available')?.reason, 'QuotaExceeded');
    // The waiting instances' Pods exist and carry the quota gate: nothing schedules them.
    const gated = (await podsOf('quota')).filter((p) =>
      ((p['spec'] as { schedulingGates?: { name: string }[] }).schedulingGates ?? []).some(
        (g) => g.name === QUOTA_GATE,
      ),
    );
    assert.deepEqual(gated.map((p) => p.metadata!.name).sort(), waiting(last!).sort());

    // Deleting a running instance frees its claim: the oldest waiting one gets it, and the
    // replacement the deployment creates waits at the back of the line.
    const [oldest] = last!.instances
      .filter((i) => waiting(last!).includes(i.metadata.name))
      .sort(
        (a, b) =>
          Date.parse(a.metadata.creationTimestamp!) - Date.parse(b.metadata.creationTimestamp!) ||
          a.metadata.name!.localeCompare(b.metadata.name!),
      );
    await client.delete(Instance.ref, 'quota-0', ns);
    const then = (
      await observe('quota', (s) => {
        const ready = s.instances.filter(isReady).map((i) => i.metadata.name);
        // quota-0's replacement has been looked at too: it waits at the back of the line.
        return (
          s.instances.length === 6 &&
          ready.length === 4 &&
          ready.includes(oldest!.metadata.name) &&
          waiting(s).length === 2
        );
      })
    ).slice(-1)[0]!;
    assert.deepEqual(
      waiting(then).sort(),
      ['quota-0', ...waiting(last!).filter((n) => n !== oldest!.metadata.name)].sort(),
    );
    const quota = await client.get(Quota.ref, 'budget', ns);
    assert.equal((quota['status'] as { used?: { instances: number } }).used?.instances, 4);
  });

  test('a Pod deleted by someone else the moment it appears is made again within seconds, however fast the deletion', async () => {
    // Each of the instance's Pods is deleted as soon as this watch sees it, three times. A deletion
    // that reached Berth's cache before the create's answer reached Berth once left an instance
    // waiting on a Pod that was gone until the resync (bench:federation: a rollout held 8 minutes).
    const victims = new Set<string>();
    const killer = new Informer<KubeObject>({
      client,
      ref: Resources.pods,
      namespace: ns,
      labelSelector: `${DEPLOYMENT_LABEL}=gone`,
    });
    killer.addEventHandler({
      onAdd: (p) => {
        const uid = p.metadata!.uid!;
        if (victims.size >= 3 || victims.has(uid)) return;
        victims.add(uid);
        void client
          .delete(Resources.pods, p.metadata!.name!, ns, {
            apiVersion: 'v1',
            kind: 'DeleteOptions',
            gracePeriodSeconds: 0,
            preconditions: { uid },
          })
          .catch(() => {});
      },
    });
    killer.start();
    await killer.waitForSync();
    try {
      await applyWD('gone', { replicas: 1, template: template('registry.example/gone:1') });
      await waitFor('three Pods deleted', () => victims.size === 3, { timeoutMs: 30_000 });
      // Well within Berth's resync (10 minutes): the fourth Pod, made at once or a few seconds on.
      await observe('gone', settled(1), 20_000);
    } finally {
      await killer.stop();
    }
  });

  test("a Pod of the instance's name that is not its own: ConfigurationError, and healed once it is gone", async () => {
    await client.create(Resources.pods, {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'foreign-0', namespace: ns },
      spec: { containers: [{ name: 'app', image: 'registry.example/other:1' }] },
    });
    await applyWD('foreign', { replicas: 1, template: template('registry.example/foreign:1') });
    const [blocked] = (
      await observe('foreign', (s) => cond(s.instances[0], 'Ready')?.reason === 'ConfigurationError')
    ).slice(-1);
    assert.match(
      cond(blocked!.instances[0], 'Ready')!.message,
      /a Pod named foreign-0 exists that this instance does not own/,
    );
    await client.delete(Resources.pods, 'foreign-0', ns, {
      apiVersion: 'v1',
      kind: 'DeleteOptions',
      gracePeriodSeconds: 0,
    });
    await observe('foreign', settled(1), 120_000);
  });

  test('a deployment deleted with --cascade=orphan and made again adopts its instances: no Pod is made anew', async () => {
    await applyWD('orphan', { replicas: 2, template: template('registry.example/orphan:1') });
    const [up] = (await observe('orphan', settled(2))).slice(-1);
    const podUids = up!.pods.map((p) => p.metadata!.uid).sort();
    await client.delete(WorkloadDeployment.ref, 'orphan', ns, {
      apiVersion: 'v1',
      kind: 'DeleteOptions',
      propagationPolicy: 'Orphan',
    });
    await waitFor('the instances orphaned', async () => {
      const gone = await getWD('orphan').then(
        () => false,
        () => true,
      );
      const left = await instancesOf('orphan');
      return gone && left.length === 2 && left.every((i) => !i.metadata.ownerReferences?.length);
    });
    await applyWD('orphan', { replicas: 2, template: template('registry.example/orphan:1') });
    const wd = await getWD('orphan');
    const [again] = (
      await observe(
        'orphan',
        (s) => settled(2)(s) && s.instances.every((i) => controlledBy(i, wd.metadata!.uid)),
      )
    ).slice(-1);
    assert.deepEqual(again!.pods.map((p) => p.metadata!.uid).sort(), podUids);
  });

  test('an Instance the apiserver refuses: ReplicaFailure FailedCreate with a Warning, gone once it is created', async () => {
    const message = 'no refusedwd instances here';
    const allow = await refuseByPolicy(
      client,
      `${id}-instances`,
      [{ apiGroups: [Instance.ref.group], operations: ['CREATE'], resources: ['instances'] }],
      `!object.metadata.name.startsWith('refusedwd-')`,
      message,
      () =>
        client.create(
          Instance.ref,
          {
            apiVersion: Instance.apiVersion,
            kind: Instance.kind,
            metadata: { name: 'refusedwd-probe', namespace: ns },
            spec: { ordinal: 0, templateHash: 'probe', template: template('registry.example/probe:1') },
          },
          { dryRun: true },
        ),
    );
    try {
      await applyWD('refusedwd', { replicas: 1, template: template('registry.example/refusedwd:1') });
      const [failed] = (
        await observe('refusedwd', (s) => cond(s.wd, 'ReplicaFailure')?.reason === 'FailedCreate')
      ).slice(-1);
      assert.match(cond(failed!.wd, 'ReplicaFailure')!.message, new RegExp(message));
      await waitFor('the Warning', async () =>
        (await events('refusedwd', 'WorkloadDeployment')).some(
          (e) => e.type === 'Warning' && e.reason === 'FailedCreate',
        ),
      );
    } finally {
      await allow();
    }
    // Tried again within 30 s; the condition goes with the failure.
    const [healed] = (await observe('refusedwd', settled(1), 60_000)).slice(-1);
    assert.equal(cond(healed!.wd, 'ReplicaFailure'), undefined);
  });

  test('a Pod that ended (evicted: phase Failed) is made anew, as a StatefulSet does', async () => {
    await applyWD('evicted', { replicas: 1, template: template('registry.example/evicted:1') });
    const [up] = (await observe('evicted', settled(1))).slice(-1);
    const [old] = up!.pods;
    const podName = old!.metadata!.name!;
    // Someone else's finalizer holds the Pod once Berth deletes it, so its deletion is an update
    // with a resourceVersion of its own (a Failed Pod is otherwise deleted at once, unseen).
    const HOLD = 'test.berth.dev/hold';
    await client.patch(
      Resources.pods,
      podName,
      { metadata: { finalizers: [HOLD] } },
      { namespace: ns, type: 'merge' },
    );
    // The order of the writes that matter: one etcd numbers every write in one sequence, so the
    // resourceVersions of an Instance and a Pod compare (the API does not promise it; this sandbox's
    // single etcd keeps it).
    const rv = (o: KubeObject) => BigInt(o.metadata!.resourceVersion!);
    let notReadyAt: bigint | undefined;
    let deletedAt: bigint | undefined;
    const watches = [
      new Informer<InstanceObject>({
        client,
        ref: Instance.ref,
        namespace: ns,
        labelSelector: `${DEPLOYMENT_LABEL}=evicted`,
      }),
      new Informer<KubeObject>({
        client,
        ref: Resources.pods,
        namespace: ns,
        labelSelector: `${DEPLOYMENT_LABEL}=evicted`,
      }),
    ] as const;
    watches[0].addEventHandler({
      onUpdate: (_, i) => {
        if (!isReady(i)) notReadyAt ??= rv(i);
      },
    });
    watches[1].addEventHandler({
      onUpdate: (_, p) => {
        if (p.metadata!.uid === old!.metadata!.uid && p.metadata!.deletionTimestamp) deletedAt ??= rv(p);
      },
    });
    for (const w of watches) w.start();
    try {
      await Promise.all(watches.map((w) => w.waitForSync()));
      // Evicted once old enough to be replaced at once, as most evicted Pods are (a younger one is
      // held back ENDED_REPLACE_MS, and its instance says so in the meantime).
      const age = Date.now() - Date.parse(old!.metadata!.creationTimestamp!);
      await sleep(Math.max(0, ENDED_REPLACE_MS - age + 500));
      await client.patch(
        Resources.pods,
        podName,
        { status: { phase: 'Failed', reason: 'Evicted', message: 'The node was low on resource: memory.' } },
        { namespace: ns, type: 'merge', subresource: 'status' },
      );
      await waitFor('Berth to delete the ended Pod', () => deletedAt !== undefined);
      assert.ok(
        notReadyAt !== undefined && notReadyAt < deletedAt!,
        `the instance said Ready until after its ended Pod was deleted (not Ready at ${notReadyAt}, deleted at ${deletedAt})`,
      );
    } finally {
      await Promise.all(watches.map((w) => w.stop()));
      await client.patch(
        Resources.pods,
        podName,
        { metadata: { finalizers: null } },
        { namespace: ns, type: 'merge' },
      );
    }
    // Read as a user would, but Pods first: an instance (or the deployment) that says Ready, written
    // before the list that found no Pod (the list's resourceVersion, one etcd's sequence as above), is
    // one Berth wrote so. One written after it may be on a new Pod made meanwhile: not a lie.
    const lies: unknown[] = [];
    let again: Snapshot | undefined;
    await waitFor(
      'a new Pod, the instance Ready on it',
      async () => {
        const listed = await client.list(Resources.pods, {
          namespace: ns,
          query: { labelSelector: `${DEPLOYMENT_LABEL}=evicted` },
        });
        const pods = listed.items;
        const s = { pods, instances: await instancesOf('evicted'), wd: await getWD('evicted') };
        const before = (o: KubeObject) => rv(o) <= BigInt(listed.metadata.resourceVersion!);
        const readyBefore =
          s.instances.some((i) => isReady(i) && before(i)) ||
          (s.wd.status?.readyReplicas !== 0 && before(s.wd));
        if (pods.length === 0 && readyBefore) lies.push(summary(s));
        again = s;
        const [pod] = pods;
        return (
          settled(1)(s) &&
          pods.length === 1 &&
          pod!.metadata!.uid !== old!.metadata!.uid &&
          s.instances[0]!.status?.podName === pod!.metadata!.name
        );
      },
      { timeoutMs: 90_000, intervalMs: 20, observe: () => again && summary(again) },
    );
    assert.deepEqual(lies, [], 'Ready with no Pod');
    await waitFor('the PodReplaced event', async () =>
      (await events(again!.instances[0]!.metadata.name!, 'Instance')).some(
        (e) => e.reason === 'PodReplaced' && /Failed: made anew/.test(e.note),
      ),
    );
  });

  test('a Pod the apiserver forbids (Pod Security): ConfigurationError with its answer and a Warning', async () => {
    const restrict = (level: string | null) =>
      client.patch(
        Resources.namespaces,
        ns,
        { metadata: { labels: { 'pod-security.kubernetes.io/enforce': level } } },
        { type: 'merge' },
      );
    await restrict('restricted');
    try {
      await applyWD('forbidden', { replicas: 1, template: template('registry.example/forbidden:1') });
      const [blocked] = (
        await observe('forbidden', (s) => cond(s.instances[0], 'Ready')?.reason === 'ConfigurationError')
      ).slice(-1);
      const name = blocked!.instances[0]!.metadata.name!;
      assert.match(
        cond(blocked!.instances[0], 'Ready')!.message,
        /the apiserver refused the Pod: .*PodSecurity/,
      );
      await waitFor('the Warning', async () =>
        (await events(name, 'Instance')).some(
          (e) => e.type === 'Warning' && e.reason === 'ConfigurationError',
        ),
      );
    } finally {
      await restrict(null);
      await client.delete(WorkloadDeployment.ref, 'forbidden', ns).catch(() => {});
    }
  });
});
