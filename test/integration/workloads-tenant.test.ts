// test-driver: alone — Berth's workloads controllers act on every WorkloadDeployment and Instance in
// the cluster, so a file beside it that makes Instances would have two Berths on them.
//
// Workloads as a tenant writes them (issue 59): a user with `edit` in its namespaces, and Berth's
// aggregated roles as the install ships them (deploy/kustomize/base/aggregated-roles.yaml), against
// a Berth whose roles let it run workloads in one namespace only. A WorkloadDeployment elsewhere
// gets no Instance (a condition and a Warning say why); replicas and template strings past the
// CRD's bounds are refused; replicas × template bytes past the budget run as many as fit, said by a
// ReplicasBounded condition; the tenant reads its Quota and cannot write it, its admin can.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { parseAllDocuments } from 'yaml';
import { installCrds } from '../../src/cli/install.ts';
import { findCondition } from '../../src/runtime/api/conditions.ts';
import { Resources, type KubeObject } from '../../src/runtime/api/meta.ts';
import { ApiError, isForbidden, KubeClient } from '../../src/runtime/client/client.ts';
import { workloadsCapability } from '../../src/workloads/index.ts';
import { MAX_DEPLOYMENT_BYTES } from '../../src/workloads/decide/revisions.ts';
import { type InstanceObject } from '../../src/workloads/decide/instances.ts';
import {
  DEPLOYMENT_LABEL,
  MAX_REPLICAS,
  MAX_TEMPLATE_STRINGS,
  type WorkloadDeploymentStatus,
} from '../../src/workloads/types.ts';
import { Instance, Quota, WorkloadDeployment } from '../../src/workloads/crd.ts';
import {
  berthKubeconfig,
  removeBerthIdentity,
  runBerthCli,
  startBerth,
  type BerthProcess,
} from '../helpers/berth.ts';
import {
  createNamespace,
  deleteNamespace,
  testSandbox,
  uniqueName,
  untilAllowed,
  untilWarning,
} from '../helpers/cluster.ts';
import { holdsFor, waitFor } from '../helpers/wait.ts';

const sandbox = testSandbox();
const client = sandbox.client();
const user = uniqueName('tenant');
const owner = uniqueName('ns-admin');
const identity = { name: uniqueName('berth-wl') };
const rbac = 'rbac.authorization.k8s.io';
/** Berth's aggregated roles as shipped, named apart so that nothing else's are touched. */
const aggregated = (
  parseAllDocuments(readFileSync('deploy/kustomize/base/aggregated-roles.yaml', 'utf8')).map((d) =>
    d.toJS(),
  ) as KubeObject[]
).map((r) => ({ ...r, metadata: { ...r.metadata, name: `${identity.name}-${r.metadata!.name}` } }));

let served = '';
let elsewhere = '';
let tenant: KubeClient;
let admin: KubeClient;
let berth: BerthProcess | undefined;

type WD = KubeObject & { status?: WorkloadDeploymentStatus };

/** `as` binds `role` (a ClusterRole) to `who` in `ns`. */
const bind = (ns: string, role: string, who: string) =>
  client.create(Resources.roleBindings, {
    apiVersion: `${rbac}/v1`,
    kind: 'RoleBinding',
    metadata: { name: `${who}-${role}`, namespace: ns },
    roleRef: { apiGroup: rbac, kind: 'ClusterRole', name: role },
    subjects: [{ apiGroup: rbac, kind: 'User', name: who }],
  });

before(async () => {
  await installCrds(client);
  for (const r of aggregated) await client.create(Resources.clusterRoles, r);
  served = await createNamespace(client, 'served');
  elsewhere = await createNamespace(client, 'elsewhere');
  for (const ns of [served, elsewhere]) {
    await bind(ns, 'edit', user);
    await bind(ns, 'admin', owner);
  }
  tenant = KubeClient.fromFile(await sandbox.mintUser(user));
  admin = KubeClient.fromFile(await sandbox.mintUser(owner));
  // Kubernetes aggregates Berth's roles into edit and admin (its controller, a moment after).
  for (const ns of [served, elsewhere]) {
    await untilAllowed(tenant, ns, 'create', 'workloaddeployments', 'berth.dev');
    await untilAllowed(admin, ns, 'create', 'quotas', 'berth.dev');
  }
  // Berth as installed with `--workload-namespace <served>`: workloads run there only.
  berth = await startBerth(sandbox, ['--controllers=workloads', '--webhook-bind-address=0'], {
    kubeconfig: await berthKubeconfig(sandbox, { ...identity, workloadNamespaces: [served] }, [
      workloadsCapability,
    ]),
  });
});

after(async () => {
  await berth?.stop();
  tenant?.close();
  admin?.close();
  for (const ns of [served, elsewhere]) if (ns) await deleteNamespace(client, ns);
  await removeBerthIdentity(client, identity);
  for (const r of aggregated) await client.delete(Resources.clusterRoles, r.metadata!.name!).catch(() => {});
  client.close();
});

const applyWD = (ns: string, name: string, spec: Record<string, unknown>) =>
  tenant.apply(
    WorkloadDeployment.ref,
    {
      apiVersion: WorkloadDeployment.apiVersion,
      kind: WorkloadDeployment.kind,
      metadata: { name, namespace: ns },
      spec,
    },
    { fieldManager: 'tenant', force: true },
  );
const instancesOf = async (ns: string, wd: string) =>
  (
    await client.list<InstanceObject>(Instance.ref, {
      namespace: ns,
      query: { labelSelector: `${DEPLOYMENT_LABEL}=${wd}` },
    })
  ).items;
const failureOf = async (ns: string, wd: string) =>
  findCondition((await client.get<WD>(WorkloadDeployment.ref, wd, ns)).status?.conditions, 'ReplicaFailure');
/** Refused by the CRD's validation. */
const isInvalid = (e: unknown): boolean => e instanceof ApiError && e.status === 422;
const app = (more: Record<string, unknown> = {}) => ({
  containers: [{ name: 'app', image: 'registry.example/web:1', ...more }],
});

describe('Instances only where Berth runs workloads', () => {
  test('a WorkloadDeployment in a namespace not served gets no Instance: ReplicaFailure and a Warning name the opt-in', async () => {
    await applyWD(elsewhere, 'web', { replicas: 3, instanceManagementPolicy: 'Parallel', template: app() });
    const failure = await waitFor('ReplicaFailure on the deployment', () => failureOf(elsewhere, 'web'));
    assert.equal(failure.status, 'True');
    assert.equal(failure.reason, 'FailedCreate');
    assert.match(failure.message ?? '', /cannot create resource "instances"/);
    assert.match(failure.message ?? '', /--workload-namespace, Helm workloads.namespaces/);
    await untilWarning(client, elsewhere, { reason: 'FailedCreate', regarding: 'web' });
    await holdsFor(
      'no Instance in the namespace',
      async () => (await instancesOf(elsewhere, 'web')).length === 0,
      2000,
    );
    // berth explain says it, from the condition.
    const r = runBerthCli(['explain', 'workloaddeployment', `${elsewhere}/web`], {
      KUBECONFIG: sandbox.kubeconfigPath,
    });
    assert.match(r.stdout, /ReplicaFailure.*FailedCreate.*--workload-namespace/s, r.stdout + r.stderr);
  });

  test('in the namespace served, the same deployment runs: its Instance, and its Pod made from the whole template', async () => {
    const env = [{ name: 'GREETING', value: 'x'.repeat(4096) }];
    await applyWD(served, 'web', { replicas: 1, template: app({ env }) });
    await waitFor('the Instance', async () => (await instancesOf(served, 'web')).length === 1);
    // The instance cache keeps no env: the Pod has it from the Instance as stored.
    const pod = await waitFor('its Pod', () =>
      client.get(Resources.pods, 'web-0', served).catch(() => undefined),
    );
    assert.deepEqual((pod as { spec: { containers: { env?: unknown }[] } }).spec.containers[0]!.env, env);
    assert.equal(await failureOf(served, 'web'), undefined);
  });
});

describe('the bounds of one WorkloadDeployment', () => {
  test(`replicas over ${MAX_REPLICAS} and template strings over ${MAX_TEMPLATE_STRINGS} are refused by the CRD`, async () => {
    await assert.rejects(applyWD(served, 'many', { replicas: MAX_REPLICAS + 1, template: app() }), (e) =>
      isInvalid(e),
    );
    const big = [
      { name: 'A', value: 'x'.repeat(30_000) },
      { name: 'B', value: 'x'.repeat(30_000) },
    ];
    await assert.rejects(
      applyWD(served, 'big', {
        replicas: 1,
        template: app({ env: big, args: ['y'.repeat(4000), 'y'.repeat(4000)] }),
      }),
      (e) => isInvalid(e) && /commands, args and env values/.test(String(e)),
    );
    // The scale subresource is bounded alike (as the admin: the aggregated edit role has no
    // workloaddeployments/scale).
    await applyWD(served, 'scaled', { replicas: 0, template: app() });
    await assert.rejects(
      client.patch(
        WorkloadDeployment.ref,
        'scaled',
        { spec: { replicas: MAX_REPLICAS + 1 } },
        {
          namespace: served,
          type: 'merge',
          subresource: 'scale',
        },
      ),
      (e) => isInvalid(e),
    );
  });

  test('replicas × template bytes past the budget: as many as fit, ReplicasBounded and a Warning', async () => {
    // ~60 KB of env: within the CRD's strings, past the budget at 300 replicas (16 MiB / 60 KB ≈ 279).
    const env = [
      { name: 'A', value: 'x'.repeat(30_000) },
      { name: 'B', value: 'y'.repeat(30_000) },
    ];
    await applyWD(served, 'wide', { replicas: 300, template: app({ env }) });
    const failure = await waitFor('ReplicaFailure on the deployment', () => failureOf(served, 'wide'));
    assert.equal(failure.reason, 'ReplicasBounded');
    const most = Math.floor(MAX_DEPLOYMENT_BYTES / 60_100);
    assert.match(
      failure.message ?? '',
      new RegExp(`^300 replicas of a 60\\d{3}-byte template exceed .*: (${most}|${most - 1}) run`),
    );
    await untilWarning(client, served, { reason: 'ReplicasBounded', regarding: 'wide' });
    // Within the budget again, the condition goes.
    await applyWD(served, 'wide', { replicas: 2, template: app({ env }) });
    await waitFor('ReplicaFailure gone', async () => (await failureOf(served, 'wide')) === undefined);
  });
});

describe("a namespace's Quota: its users read it, its admin writes it", () => {
  const quota = (ns: string, instances: number): KubeObject => ({
    apiVersion: Quota.apiVersion,
    kind: Quota.kind,
    metadata: { name: 'budget', namespace: ns },
    spec: { instances },
  });

  test('edit cannot create, patch or delete the Quota, but gets and lists it; admin writes it', async () => {
    await assert.rejects(tenant.create(Quota.ref, quota(served, 100)), (e) => isForbidden(e));
    await admin.create(Quota.ref, quota(served, 2));
    assert.equal(
      (await tenant.get<KubeObject & { spec: { instances: number } }>(Quota.ref, 'budget', served)).spec
        .instances,
      2,
    );
    assert.equal((await tenant.list(Quota.ref, { namespace: served })).items.length, 1);
    await assert.rejects(
      tenant.patch(Quota.ref, 'budget', { spec: { instances: 1000 } }, { namespace: served, type: 'merge' }),
      (e) => isForbidden(e),
    );
    await assert.rejects(tenant.delete(Quota.ref, 'budget', served), (e) => isForbidden(e));
    await admin.patch(Quota.ref, 'budget', { spec: { instances: 3 } }, { namespace: served, type: 'merge' });
    await admin.delete(Quota.ref, 'budget', served);
  });
});
