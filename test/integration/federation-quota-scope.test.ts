// test-driver: alone — the management plane's Berth and the cells' act on every Quota, Instance and
// Cell they see.
//
// Quota across cells as a cell's user would spend it: the management plane's Quota of a namespace
// counts only the instances of the cells that serve that namespace (their Cell lists it), and only
// the grants the management plane wrote itself. A user of a cell's namespace of the same name that
// the Cell does not serve, or an instance marked granted by someone else (a cell granting by
// itself), spends none of the budget: the management plane's own instance is granted. A cell whose
// apiserver (a local server standing in for a hostile one) sends a watch line past Berth's bound is
// refused, its Cell says so, and the other cells' quota keeps working.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { once } from 'node:events';
import { createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { secretName } from '../../src/cells/cli.ts';
import { CELL_LABEL, KUBECONFIG_KEY, type CellObject } from '../../src/cells/types.ts';
import { Cell } from '../../src/cells/crd.ts';
import { NAMESPACE } from '../../src/policy/namespace.ts';
import { findCondition } from '../../src/runtime/api/conditions.ts';
import { createCertificateAuthority } from '../../src/runtime/webhook/certificates.ts';
import { Resources } from '../../src/runtime/api/meta.ts';
import { KubeClient } from '../../src/runtime/client/client.ts';
import type { QuotaObject } from '../../src/workloads/decide/quota.ts';
import type { InstanceObject } from '../../src/workloads/decide/instances.ts';
import { QUOTA_MANAGER } from '../../src/workloads/types.ts';
import { Instance, Quota } from '../../src/workloads/crd.ts';
import { createNamespace, uniqueName, untilAllowed, untilWarning } from '../helpers/cluster.ts';
import { serveNamespace, startFederation, type City, type Federation } from '../helpers/federation.ts';
import { holdsFor, sleep, waitFor } from '../helpers/wait.ts';

let fed: Federation;
let client: KubeClient;
const namespaces: string[] = [];

before(async () => {
  fed = await startFederation({
    cellArgs: ['--controllers=workloads', '--quota-source=management'],
    managementArgs: ['--controllers=cells,federation,quota', '--cell-probe-period=1'],
  });
  client = fed.client;
});

after(async () => {
  await fed?.down(namespaces);
});

/** A management namespace with a Quota of one instance, served by the cell of DFW only (when `served`). */
async function budgetOfOne(prefix: string, served = true): Promise<string> {
  const ns = await createNamespace(client, prefix);
  namespaces.push(ns);
  if (served) await serveNamespace(client, fed.cells.DFW.name, ns);
  await client.create(Quota.ref, {
    apiVersion: Quota.apiVersion,
    kind: Quota.kind,
    metadata: { name: 'budget', namespace: ns },
    spec: { instances: 1 },
  });
  await cellNamespace('DFW', ns);
  return ns;
}

/** The cell's namespace of that name, made by its admin. */
async function cellNamespace(city: City, ns: string): Promise<void> {
  await fed.cells[city].client.create(Resources.namespaces, {
    apiVersion: 'v1',
    kind: 'Namespace',
    metadata: { name: ns },
  });
}

const newInstance = (as: KubeClient, ns: string, name: string) =>
  as.create<InstanceObject>(Instance.ref, {
    apiVersion: Instance.apiVersion,
    kind: Instance.kind,
    metadata: { name, namespace: ns },
    spec: {
      template: { containers: [{ name: 'main', image: 'registry.example/app:1' }] },
      templateHash: 'h1',
      ordinal: 0,
    },
  });

const verdictOf = async (city: City, ns: string, name: string) =>
  findCondition(
    (await fed.cells[city].client.get<InstanceObject>(Instance.ref, name, ns)).status?.conditions,
    'QuotaGranted',
  );

const claims = async (ns: string) =>
  ((await client.get<QuotaObject>(Quota.ref, 'budget', ns)).status?.claims ?? []).map(
    (c) => `${c.cluster}/${c.name}`,
  );

/** The management plane's own instance (in DFW, which serves `ns`) is granted, and the ledger holds it alone. */
async function grantedAlone(ns: string): Promise<void> {
  await newInstance(fed.cells.DFW.client, ns, 'mine');
  await waitFor(
    'the instance of the served namespace granted by the management plane',
    async () => {
      const v = await verdictOf('DFW', ns, 'mine');
      return v?.status === 'True' && v;
    },
    { observe: async () => ({ mine: await verdictOf('DFW', ns, 'mine'), claims: await claims(ns) }) },
  );
  assert.deepEqual(await claims(ns), [`cell-${fed.cells.DFW.name}/mine`]);
}

test("a user of a cell's namespace the Cell does not serve spends none of the management plane's Quota", async () => {
  const ns = await budgetOfOne('qscope');
  // The same name in the LHR cell, whose Cell does not list it: its user's namespace there.
  await cellNamespace('LHR', ns);
  const lhr = fed.cells.LHR;
  const user = uniqueName('celluser');
  const rbac = 'rbac.authorization.k8s.io';
  await lhr.client.create(Resources.roles, {
    apiVersion: `${rbac}/v1`,
    kind: 'Role',
    metadata: { name: 'instances', namespace: ns },
    rules: [
      { apiGroups: ['berth.dev'], resources: ['instances'], verbs: ['get', 'list', 'create', 'patch'] },
    ],
  });
  await lhr.client.create(Resources.roleBindings, {
    apiVersion: `${rbac}/v1`,
    kind: 'RoleBinding',
    metadata: { name: user, namespace: ns },
    roleRef: { apiGroup: rbac, kind: 'Role', name: 'instances' },
    subjects: [{ apiGroup: rbac, kind: 'User', name: user }],
  });
  const asUser = KubeClient.fromFile(await lhr.sandbox.mintUser(user));
  try {
    await untilAllowed(asUser, ns, 'create', 'instances', 'berth.dev');
    await newInstance(asUser, ns, 'spend');
    // Older than the management plane's own by a second and more: first in line, were it counted.
    await sleep(1500);
    await grantedAlone(ns);
    await holdsFor(
      "the cell user's instance is never granted by the management plane",
      async () => (await verdictOf('LHR', ns, 'spend'))?.status !== 'True',
      3000,
    );
  } finally {
    asUser.close();
  }
});

test('an instance marked granted by someone other than the management plane is not adopted into its Quota', async () => {
  const ns = await budgetOfOne('qforeign', false);
  // Not served yet while it is made and marked granted, as a cell granting by itself (its own Berth
  // with --quota-source=local, no Quota there) would mark it; then the Cell serves the namespace.
  const dfw = fed.cells.DFW;
  await newInstance(dfw.client, ns, 'elsewhere');
  await dfw.client.apply(
    Instance.ref,
    {
      apiVersion: Instance.apiVersion,
      kind: Instance.kind,
      metadata: { name: 'elsewhere', namespace: ns },
      status: {
        conditions: [
          {
            type: 'QuotaGranted',
            status: 'True',
            reason: 'NoQuota',
            message: `no Quota in namespace ${ns}`,
            lastTransitionTime: new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
          },
        ],
      },
    },
    { fieldManager: QUOTA_MANAGER, subresource: 'status', force: true },
  );
  await serveNamespace(client, dfw.name, ns);
  await sleep(1500);
  await grantedAlone(ns);
  await untilWarning(client, ns, { reason: 'GrantedElsewhere', regarding: 'budget' });
  const left = await verdictOf('DFW', ns, 'elsewhere');
  assert.equal(left?.message, `no Quota in namespace ${ns}`, 'the grant written elsewhere is left as it is');
});

test("a cell whose apiserver sends a watch line past Berth's bound: refused, the Cell Ready=False AnswerTooLarge with a Warning, the other cells' quota working", async (t) => {
  // A stand-in for a hostile cell's apiserver: it answers the probe and every list sanely, and each
  // watch with one line of 17 MiB, past the bound of 16 MiB.
  const ca = await createCertificateAuthority('hostile-cell');
  const serving = await ca.issue({ commonName: '127.0.0.1', ipAddresses: ['127.0.0.1'], usage: 'server' });
  let watches = 0;
  const server = createServer({ cert: serving.certPem, key: serving.keyPem }, (req, res) => {
    res.setHeader('content-type', 'application/json');
    const url = new URL(req.url!, 'https://x');
    if (url.pathname === '/version') return res.end(JSON.stringify({ gitVersion: 'v1.35.0' }));
    if (url.pathname === '/apis/berth.dev/v1alpha1')
      return res.end(
        JSON.stringify({
          kind: 'APIResourceList',
          resources: ['workloaddeployments', 'instances', 'instancetypes'].map((name) => ({ name })),
        }),
      );
    if (req.method === 'POST') return res.end(JSON.stringify({ status: { allowed: true } }));
    if (!url.searchParams.get('watch'))
      return res.end(
        JSON.stringify({ kind: 'List', apiVersion: 'v1', metadata: { resourceVersion: '1' }, items: [] }),
      );
    watches++;
    res.write(`{"type":"ADDED","object":{"pad":"${'x'.repeat(17 * 2 ** 20)}"}}\n`);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const name = uniqueName('hostile');
  t.after(async () => {
    await client.delete(Cell.ref, name).catch(() => {});
    await client.delete(Resources.secrets, secretName(name), NAMESPACE).catch(() => {});
    server.closeAllConnections();
    server.close();
  });
  const kubeconfig = {
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [
      {
        name: 'c',
        cluster: {
          server: `https://127.0.0.1:${(server.address() as AddressInfo).port}`,
          'certificate-authority-data': Buffer.from(ca.certPem).toString('base64'),
        },
      },
    ],
    users: [{ name: 'u', user: { token: 'hostile' } }],
    contexts: [{ name: 'c', context: { cluster: 'c', user: 'u' } }],
    'current-context': 'c',
  };
  await client.create(Resources.secrets, {
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: { name: secretName(name), namespace: NAMESPACE, labels: { [CELL_LABEL]: name } },
    data: { [KUBECONFIG_KEY]: Buffer.from(JSON.stringify(kubeconfig)).toString('base64') },
  });
  await client.create(Cell.ref, {
    apiVersion: Cell.apiVersion,
    kind: Cell.kind,
    metadata: { name },
    spec: {
      kubeconfigSecretRef: { namespace: NAMESPACE, name: secretName(name), key: KUBECONFIG_KEY },
      locations: ['DFW'],
    },
  });
  const ready = async () =>
    findCondition((await client.get<CellObject>(Cell.ref, name)).status?.conditions, 'Ready');
  await waitFor(
    'the hostile Cell Ready=False AnswerTooLarge',
    async () => {
      const r = await ready();
      return r?.reason === 'AnswerTooLarge' && r;
    },
    { observe: async () => ({ ready: await ready(), watches }), timeoutMs: 60_000 },
  );
  assert.match((await ready())!.message, /a line of more than 16777216 bytes, refused/);
  // A cluster-scoped object's events are in `default`.
  await untilWarning(client, 'default', { reason: 'AnswerTooLarge', regarding: name });
  // Berth keeps working: the real cells are Ready, and a grant in one of them is made.
  for (const city of ['DFW', 'LHR'] as const)
    assert.equal(
      findCondition(
        (await client.get<CellObject>(Cell.ref, fed.cells[city].name)).status?.conditions,
        'Ready',
      )?.status,
      'True',
    );
  await grantedAlone(await budgetOfOne('qhostile'));
});
