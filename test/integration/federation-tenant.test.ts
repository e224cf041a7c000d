// test-driver: alone — the management plane's Berth acts on every Workload and Cell it sees.
//
// Federation as a tenant sees it: a user with `edit` in one namespace of the management plane (and
// Berth's Workloads there) controls what a Workload says, and nothing more. A cell takes only the
// namespaces its Cell lists, a namespace is made in a cell only where the Cell allows it (and goes
// once emptied), system namespaces are refused, instance Pods carry no ServiceAccount token, and
// labels written in a cell cannot send mirrors to another management namespace.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Cell } from '../../src/cells/crd.ts';
import {
  NAMESPACE_CREATED_LABEL,
  WORKLOAD_NAME_LABEL,
  WORKLOAD_NAMESPACE_LABEL,
  WORKLOAD_UID_LABEL,
  type WorkloadObject,
} from '../../src/federation/types.ts';
import { Workload } from '../../src/federation/crd.ts';
import { findCondition } from '../../src/runtime/api/conditions.ts';
import { Resources, type KubeObject } from '../../src/runtime/api/meta.ts';
import { isNotFound, KubeClient } from '../../src/runtime/client/client.ts';
import type { InstanceObject } from '../../src/workloads/decide/instances.ts';
import { MIRROR_LABEL } from '../../src/workloads/types.ts';
import { Instance, WorkloadDeployment } from '../../src/workloads/crd.ts';
import { MIRROR_MANAGER } from '../../src/federation/decide/mirror.ts';
import { createNamespace, untilWarning, uniqueName, untilAllowed } from '../helpers/cluster.ts';
import { serveNamespace, startFederation, type City, type Federation } from '../helpers/federation.ts';
import { waitFor } from '../helpers/wait.ts';

let fed: Federation;
let client: KubeClient;
/** The tenant: `edit` and Berth's Workloads in the namespaces it is given, nothing else. */
let tenant: KubeClient;
const user = uniqueName('tenant');
const namespaces: string[] = [];
const wl = 'web';

before(async () => {
  fed = await startFederation({
    cellArgs: ['--controllers=workloads'],
    managementArgs: ['--controllers=cells,federation', '--cell-probe-period=1'],
  });
  client = fed.client;
  tenant = KubeClient.fromFile(await fed.sandbox.mintUser(user));
});

after(async () => {
  tenant?.close();
  await fed?.down(namespaces);
});

/** A namespace of the management plane the tenant may edit; served by every cell when `served`. */
async function tenantNamespace(prefix: string, served: boolean): Promise<string> {
  const ns = served ? await fed.namespace(prefix) : await createNamespace(client, prefix);
  namespaces.push(ns);
  const rbac = 'rbac.authorization.k8s.io';
  await client.create(Resources.roles, {
    apiVersion: `${rbac}/v1`,
    kind: 'Role',
    metadata: { name: 'berth-workloads', namespace: ns },
    rules: [
      {
        apiGroups: ['berth.dev'],
        resources: ['workloads', 'instances'],
        verbs: ['get', 'list', 'watch', 'create', 'update', 'patch', 'delete'],
      },
    ],
  });
  for (const [name, kind] of [
    ['edit', 'ClusterRole'],
    ['berth-workloads', 'Role'],
  ] as const)
    await client.create(Resources.roleBindings, {
      apiVersion: `${rbac}/v1`,
      kind: 'RoleBinding',
      metadata: { name: `${user}-${name}`, namespace: ns },
      roleRef: { apiGroup: rbac, kind, name },
      subjects: [{ apiGroup: rbac, kind: 'User', name: user }],
    });
  await untilAllowed(tenant, ns, 'patch', 'workloads', 'berth.dev');
  await untilAllowed(tenant, ns, 'patch', 'pods');
  return ns;
}

const applyWorkload = (as: KubeClient, namespace: string, cities: City[], template: object = {}) =>
  as.apply(
    Workload.ref,
    {
      apiVersion: Workload.apiVersion,
      kind: Workload.kind,
      metadata: { name: wl, namespace },
      spec: {
        template: { containers: [{ name: 'app', image: 'registry.example/web:1' }], ...template },
        placements: [{ name: 'p', cityCodes: cities, scaleSettings: { minReplicas: 1 } }],
      },
    },
    { fieldManager: 'tenant', force: true },
  );

const workload = (ns: string) => client.get<WorkloadObject>(Workload.ref, wl, ns);
const available = async (ns: string) => findCondition((await workload(ns)).status?.conditions, 'Available');

async function availableFalse(ns: string, reason: string, message?: RegExp): Promise<void> {
  await waitFor(
    `the Workload Available=False ${reason}`,
    async () => {
      const a = await available(ns);
      return a?.status === 'False' && a.reason === reason && (!message || message.test(a.message));
    },
    { observe: () => available(ns), timeoutMs: 60_000 },
  );
  await untilWarning(client, ns, { reason, regarding: wl });
}

const namespaceIn = (city: City, ns: string) =>
  fed.cells[city].client.get(Resources.namespaces, ns).catch((e: unknown) => {
    if (isNotFound(e)) return undefined;
    throw e;
  });
const deploymentsIn = async (city: City, ns: string) =>
  (await fed.cells[city].client.list(WorkloadDeployment.ref, { namespace: ns })).items;

async function deleteWorkload(as: KubeClient, ns: string): Promise<void> {
  await as.delete(Workload.ref, wl, ns);
  await waitFor(
    'the Workload gone',
    async () => (await client.list(Workload.ref, { namespace: ns })).items.length === 0,
    {
      timeoutMs: 60_000,
    },
  );
}

test('a Workload in a namespace no Cell lists writes nothing into any cell and says why', async () => {
  const ns = await tenantNamespace('unmapped', false);
  await applyWorkload(tenant, ns, ['DFW', 'LHR']);
  await availableFalse(ns, 'NamespaceNotServed', new RegExp(`serves namespace ${ns}`));
  for (const city of ['DFW', 'LHR'] as const) {
    assert.equal(await namespaceIn(city, ns), undefined, `no namespace ${ns} in ${city}`);
    assert.deepEqual(await deploymentsIn(city, ns), []);
  }
  await deleteWorkload(tenant, ns);
});

test('kube-system is refused even where the Cells list it: NamespaceRefused, a Warning, nothing written', async () => {
  for (const city of ['DFW', 'LHR'] as const)
    await serveNamespace(client, fed.cells[city].name, 'kube-system');
  await applyWorkload(client, 'kube-system', ['DFW', 'LHR']);
  try {
    await availableFalse('kube-system', 'NamespaceRefused', /system namespace/);
    for (const city of ['DFW', 'LHR'] as const)
      assert.deepEqual(await deploymentsIn(city, 'kube-system'), []);
  } finally {
    await deleteWorkload(client, 'kube-system');
  }
});

test('a namespace is made in a cell only where its Cell allows it, marked, and deleted once the Workload goes', async () => {
  const ns = await tenantNamespace('created', true);
  const lhr = fed.cells.LHR.name;
  await client.patch(Cell.ref, lhr, { spec: { createNamespaces: false } }, { fieldManager: 'test' });
  try {
    await applyWorkload(tenant, ns, ['DFW', 'LHR']);
    const made = await waitFor('the namespace made in DFW, with the WorkloadDeployment', async () => {
      const n = await namespaceIn('DFW', ns);
      return n && (await deploymentsIn('DFW', ns)).length === 1 && n;
    });
    assert.equal(made.metadata?.labels?.[NAMESPACE_CREATED_LABEL], 'true');
    await waitFor('LHR refused: the Cell does not let Berth create the namespace', async () => {
      const w = await workload(ns);
      const c = w.status?.placements?.[0]?.cities?.find((x) => x.city === 'LHR');
      return c?.reason === 'CellRefused' && c.message?.includes('does not let Berth create it');
    });
    assert.equal(await namespaceIn('LHR', ns), undefined, 'not made in LHR');
    await deleteWorkload(tenant, ns);
    await waitFor(
      'the namespace Berth made in DFW deleted once empty',
      async () => {
        const n = await namespaceIn('DFW', ns);
        return !n || n.metadata?.deletionTimestamp !== undefined;
      },
      { timeoutMs: 60_000 },
    );
  } finally {
    await client.patch(Cell.ref, lhr, { spec: { createNamespaces: true } }, { fieldManager: 'test' });
  }
});

test("an instance's Pod mounts no ServiceAccount token unless its template asks", async () => {
  const ns = await tenantNamespace('token', true);
  await applyWorkload(tenant, ns, ['DFW']);
  type Pod = KubeObject & { spec: { automountServiceAccountToken?: boolean; volumes?: { name: string }[] } };
  const pod = await waitFor(
    'the instance Pod in DFW',
    async () => (await fed.cells.DFW.client.list<Pod>(Resources.pods, { namespace: ns })).items[0],
    { timeoutMs: 60_000 },
  );
  assert.equal(pod.spec.automountServiceAccountToken, false);
  assert.deepEqual(
    (pod.spec.volumes ?? []).filter((v) => v.name.startsWith('kube-api-access')),
    [],
    'no token volume',
  );
  await deleteWorkload(tenant, ns);
});

test("a tenant's own Instance under the name a mirror would take is not taken over: the instance is not mirrored, with a Warning, until the name is free", async () => {
  const ns = await tenantNamespace('held', true);
  const name = `${fed.cells.DFW.name}-${wl}-p-dfw-0`;
  const spec = {
    template: { containers: [{ name: 'app', image: 'registry.example/own:1' }] },
    templateHash: 'own',
    ordinal: 0,
  };
  const own = await tenant.create<InstanceObject>(Instance.ref, {
    apiVersion: Instance.apiVersion,
    kind: Instance.kind,
    metadata: { name, namespace: ns },
    spec,
  });
  await applyWorkload(tenant, ns, ['DFW']);
  await untilWarning(
    client,
    ns,
    {
      reason: 'MirrorNameTaken',
      regarding: wl,
      note: `an Instance named ${name} that is not a mirror holds its name`,
    },
    60_000,
  );
  const held = await client.get<InstanceObject>(Instance.ref, name, ns);
  assert.equal(held.metadata.uid, own.metadata.uid, 'the same object');
  assert.equal(held.metadata.labels?.[MIRROR_LABEL], undefined, 'not made a mirror');
  assert.deepEqual(held.spec, spec, 'its spec as the tenant wrote it');
  assert.ok(
    !held.metadata.managedFields?.some((f) => (f as { manager?: string }).manager === MIRROR_MANAGER),
    "no field of it is Berth's",
  );
  // The name freed: the instance is mirrored under it (a retry, as no watch of Berth's saw it go).
  await tenant.delete(Instance.ref, name, ns);
  await waitFor(
    'the mirror under the freed name',
    async () => {
      const m = await client.get<InstanceObject>(Instance.ref, name, ns).catch(() => undefined);
      return (
        m?.metadata.labels?.[MIRROR_LABEL] !== undefined && m.metadata.labels[WORKLOAD_NAME_LABEL] === wl
      );
    },
    { timeoutMs: 60_000 },
  );
  await deleteWorkload(tenant, ns);
});

test('a WorkloadDeployment labelled in a cell as a Workload of another namespace gets no mirror there, and is left alone', async () => {
  const ns = await tenantNamespace('mirror', true);
  await applyWorkload(tenant, ns, ['DFW']);
  const dfw = fed.cells.DFW;
  // The real instance's mirror: the mirror controller is at work.
  await waitFor(
    "the Workload's own mirror",
    async () =>
      (
        await tenant.list<InstanceObject>(Instance.ref, {
          namespace: ns,
          query: { labelSelector: `${MIRROR_LABEL},${WORKLOAD_NAME_LABEL}=${wl}` },
        })
      ).items.length === 1,
    { timeoutMs: 60_000 },
  );
  const uid = (await workload(ns)).metadata.uid!;
  // Whoever may write a namespace of the cell labels a WorkloadDeployment there as the tenant's.
  const evil = uniqueName('evil');
  await dfw.client.create(Resources.namespaces, {
    apiVersion: 'v1',
    kind: 'Namespace',
    metadata: { name: evil },
  });
  await dfw.client.create(WorkloadDeployment.ref, {
    apiVersion: WorkloadDeployment.apiVersion,
    kind: WorkloadDeployment.kind,
    metadata: {
      name: 'forged',
      namespace: evil,
      labels: { [WORKLOAD_NAMESPACE_LABEL]: ns, [WORKLOAD_NAME_LABEL]: wl, [WORKLOAD_UID_LABEL]: uid },
    },
    spec: { template: { containers: [{ name: 'app', image: 'registry.example/evil:1' }] }, replicas: 1 },
  });
  try {
    await waitFor(
      'the forged instance in the cell',
      async () => (await dfw.client.list(Instance.ref, { namespace: evil })).items.length === 1,
      { timeoutMs: 60_000 },
    );
    // Mirrors are written within a second of their instance: five are watched for.
    const deadline = Date.now() + 5_000;
    while (Date.now() < deadline) {
      const mirrors = await client.list<InstanceObject>(Instance.ref, { namespace: ns });
      assert.deepEqual(
        mirrors.items.filter((m) => m.metadata.name === `${dfw.name}-forged-0`).map((m) => m.metadata.name),
        [],
        'no mirror of the forged instance',
      );
      assert.ok(
        await dfw.client.get(WorkloadDeployment.ref, 'forged', evil).then(
          (d) => !d.metadata?.deletionTimestamp,
          () => false,
        ),
        'the forged WorkloadDeployment is not taken for a copy and deleted',
      );
      await new Promise((r) => setTimeout(r, 250));
    }
  } finally {
    await dfw.client.delete(Resources.namespaces, evil).catch(() => {});
  }
  await deleteWorkload(tenant, ns);
});
