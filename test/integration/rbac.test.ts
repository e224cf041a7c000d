// test-driver: alone — it runs every capability's controllers, which would act on the policies of
// the files beside it, and registers the webhook configurations `berth run` registers by default.
//
// Berth as a user installs it: `berth run --leader-elect` with every capability and its webhooks,
// under a ServiceAccount bound only to the roles `berth manifests` generates. It leads (its Lease,
// by name, in its namespace), keeps its webhook certificate in its Secret, registers its webhook
// configurations, and no request of it is refused.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { parseAllDocuments } from 'yaml';
import { secretName } from '../../src/cells/cli.ts';
import { Cell } from '../../src/cells/crd.ts';
import { Instance } from '../../src/workloads/crd.ts';
import { installCrds } from '../../src/cli/install.ts';
import type { RbacOptions } from '../../src/manifests.ts';
import type { PolicyRule } from '../../src/runtime/api/rbac.ts';
import { isForbidden, KubeClient } from '../../src/runtime/client/client.ts';
import {
  LEADER_ELECTION_ID,
  NAMESPACE,
  WEBHOOK_CERT_SECRET,
  WEBHOOK_CONFIGURATION,
} from '../../src/policy/namespace.ts';
import { Resources, type KubeObject } from '../../src/runtime/api/meta.ts';
import { capabilities } from '../../src/capabilities.ts';
import { webhookFieldManager } from '../../src/runtime/webhook/registration.ts';
import { clusterControllers } from '../../src/capability.ts';
import {
  berthKubeconfig,
  removeBerthIdentity,
  runBerthCli,
  startBerth,
  type BerthProcess,
} from '../helpers/berth.ts';
import { createNamespace, deleteNamespace, testSandbox, uniqueName } from '../helpers/cluster.ts';
import { holdsFor, waitFor } from '../helpers/wait.ts';

const sandbox = testSandbox();
const client = sandbox.client();
let berth: BerthProcess | undefined;

after(async () => {
  await berth?.stop();
  await client.delete(Resources.mutatingWebhookConfigurations, WEBHOOK_CONFIGURATION).catch(() => {});
  await client.delete(Resources.validatingWebhookConfigurations, WEBHOOK_CONFIGURATION).catch(() => {});
  await client.delete(Resources.leases, LEADER_ELECTION_ID, NAMESPACE).catch(() => {});
  await client.delete(Resources.secrets, WEBHOOK_CERT_SECRET, NAMESPACE).catch(() => {});
  client.close();
});

test('every capability, leader election and webhooks run with only the generated roles: nothing is refused', async () => {
  berth = await startBerth(
    sandbox,
    // Lease renewals every second: several of them within the test. The webhook certificate in
    // the shared Secret, as behind a Service (registered by URL here).
    [
      '--leader-elect',
      '--lease-duration=4',
      '--renew-deadline=3',
      '--retry-period=1',
      `--webhook-cert-secret=${WEBHOOK_CERT_SECRET}`,
      '--log-level=info',
    ],
    { capture: true },
  );
  const pid = berth.pid;
  const lease = await waitFor('Berth to hold its Lease', async () => {
    const l = await client.get(Resources.leases, LEADER_ELECTION_ID, NAMESPACE).catch(() => undefined);
    const holder = (l?.['spec'] as { holderIdentity?: string } | undefined)?.holderIdentity;
    return holder?.endsWith(`_${pid}`) && l;
  });
  await waitFor('its webhook certificate in its Secret', () =>
    client.get(Resources.secrets, WEBHOOK_CERT_SECRET, NAMESPACE).then(
      () => true,
      () => false,
    ),
  );
  const configs = await waitFor('its webhook configurations registered', async () => {
    const got = await Promise.all(
      [Resources.mutatingWebhookConfigurations, Resources.validatingWebhookConfigurations].map((ref) =>
        client.get(ref, WEBHOOK_CONFIGURATION).catch(() => undefined),
      ),
    );
    return got.every(Boolean) && (got as KubeObject[]);
  });
  // Applied by Berth: its webhook entries are as many as its live policies need (none without one).
  assert.ok(
    configs.every((c) =>
      (c.metadata?.managedFields as { manager?: string }[] | undefined)?.some(
        (f) => f.manager === webhookFieldManager,
      ),
    ),
  );
  // Renewed since: Berth may update its Lease, not only create it.
  await waitFor(
    'the Lease renewed',
    async () =>
      (await client.get(Resources.leases, LEADER_ELECTION_ID, NAMESPACE)).metadata?.resourceVersion !==
      lease.metadata?.resourceVersion,
  );
  assert.equal(await berth.metric('leader_election_master_status'), 1);
  // RBAC's refusal names the user; a 403 for another cause (a namespace another test is deleting,
  // whose leftovers this Berth sees too) is not one of the roles'.
  assert.doesNotMatch(berth.output(), /forbidden: User .* cannot /i);
});

test('a management plane under only the roles of its controllers (cells, federation, quota), its page included: nothing is refused', async () => {
  const controllers = ['cells', 'federation', 'quota'];
  const mgmt = await startBerth(
    sandbox,
    [`--controllers=${controllers.join(',')}`, '--webhook-bind-address=0', '--log-level=info'],
    {
      capture: true,
      page: true,
      kubeconfig: await berthKubeconfig(
        sandbox,
        { name: 'berth-management' },
        capabilities.filter((c) => controllers.includes(c.name)),
      ),
    },
  );
  try {
    // Ready: its caches (the page's nodes, pods and events with them) have listed; the page answers.
    assert.equal((await fetch(`http://127.0.0.1:${mgmt.uiPort}/`)).status, 200);
    await holdsFor('no request refused', () => !/forbidden: User .* cannot /i.test(mgmt.output()), 3000);
  } finally {
    await mgmt.stop();
    await removeBerthIdentity(client, { name: 'berth-management' });
  }
});

// A probe of the generated roles: a cluster's Berth's identity as `berth manifests` makes it, in a namespace of
// its own (its refusals here are the test's asking, not Berth's: the audit counts Berth's namespace
// only), with workloads in one namespace and a registry login named.
describe("Berth's identity may only what its roles name", () => {
  const home = uniqueName('berth-probe');
  const login = 'registry-login';
  let work = '';
  let elsewhere = '';
  let identity: RbacOptions;
  let berthAs: KubeClient;

  before(async () => {
    await installCrds(client);
    work = await createNamespace(client, 'work');
    elsewhere = await createNamespace(client, 'elsewhere');
    identity = {
      name: home,
      namespace: home,
      workloadNamespaces: [work],
      archPullSecret: `${home}/${login}`,
    };
    // A cluster's Berth (a management plane's reads the cells' kubeconfigs, which no name limits).
    const cluster = capabilities.filter((c) => clusterControllers(capabilities).includes(c.name));
    berthAs = KubeClient.fromFile(await berthKubeconfig(sandbox, identity, cluster));
    for (const name of [login, 'not-named', WEBHOOK_CERT_SECRET])
      await client.create(Resources.secrets, {
        apiVersion: 'v1',
        kind: 'Secret',
        metadata: { name, namespace: home },
        stringData: { what: name },
      });
  });

  after(async () => {
    berthAs?.close();
    await removeBerthIdentity(client, identity);
    for (const ns of [home, work, elsewhere]) await deleteNamespace(client, ns);
  });

  const pod = (namespace: string): KubeObject => ({
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name: 'probe', namespace },
    spec: { containers: [{ name: 'c', image: 'registry.invalid/probe' }] },
  });
  const refused = (p: Promise<unknown>) => assert.rejects(p, (e) => isForbidden(e));

  test('Pods and Instances are created only in the namespaces that run workloads: never in kube-system', async () => {
    await refused(berthAs.create(Resources.pods, pod('kube-system'), { dryRun: true }));
    await refused(berthAs.create(Resources.pods, pod(elsewhere), { dryRun: true }));
    await berthAs.create(Resources.pods, pod(work), { dryRun: true });
    const instance = (namespace: string): KubeObject => ({
      apiVersion: Instance.apiVersion,
      kind: Instance.kind,
      metadata: { name: 'probe-0', namespace },
      spec: {
        ordinal: 0,
        templateHash: 'h',
        template: { containers: [{ name: 'c', image: 'registry.invalid/probe' }] },
      },
    });
    await refused(berthAs.create(Instance.ref, instance('kube-system'), { dryRun: true }));
    await refused(berthAs.create(Instance.ref, instance(elsewhere), { dryRun: true }));
    await berthAs.create(Instance.ref, instance(work), { dryRun: true });
  });

  test("a kube-system Pod's image is never patched (the Pod patch policy); its own label is", async () => {
    const target = {
      ...pod('kube-system'),
      metadata: { name: uniqueName('patched'), namespace: 'kube-system' },
    };
    await client.create(Resources.pods, target);
    try {
      const patch = (ops: unknown) =>
        berthAs.patch(Resources.pods, target.metadata!.name!, ops, {
          namespace: 'kube-system',
          type: 'json',
          fieldManager: 'probe',
        });
      // The policy takes effect once the apiserver has loaded it: refused by it, not by RBAC. Each
      // try names another image, as a patch that changes nothing is allowed.
      let tries = 0;
      await waitFor('the image patch refused by the policy', () =>
        patch([
          { op: 'replace', path: '/spec/containers/0/image', value: `registry.invalid/${tries++}` },
        ]).then(
          () => false,
          (e: unknown) => String(e).includes('ValidatingAdmissionPolicy'),
        ),
      );
      await assert.rejects(
        patch([{ op: 'add', path: '/metadata/labels', value: { app: 'other' } }]),
        /may change only its own/,
      );
      await patch([{ op: 'add', path: '/metadata/labels', value: { 'arch.berth.dev/state': 'Released' } }]);
    } finally {
      await client.delete(Resources.pods, target.metadata!.name!, 'kube-system');
    }
  });

  test('no webhook configuration is created, nor one patched that is not its own', async () => {
    const other = uniqueName('not-berths');
    const config = (name: string): KubeObject => ({
      apiVersion: 'admissionregistration.k8s.io/v1',
      kind: 'ValidatingWebhookConfiguration',
      metadata: { name },
    });
    await refused(berthAs.create(Resources.validatingWebhookConfigurations, config(other), { dryRun: true }));
    await client.create(Resources.validatingWebhookConfigurations, config(other));
    try {
      await refused(
        berthAs.apply(Resources.validatingWebhookConfigurations, config(other), {
          fieldManager: 'probe',
          dryRun: true,
        }),
      );
      // Its own, created by the install, it may.
      await berthAs.apply(Resources.validatingWebhookConfigurations, config(WEBHOOK_CONFIGURATION), {
        fieldManager: 'probe',
        dryRun: true,
      });
    } finally {
      await client.delete(Resources.validatingWebhookConfigurations, other);
    }
  });

  test('Secrets in its namespace are read only by the names it was given', async () => {
    await refused(berthAs.get(Resources.secrets, 'not-named', home));
    await refused(berthAs.list(Resources.secrets, { namespace: home }));
    await berthAs.get(Resources.secrets, login, home);
    await berthAs.get(Resources.secrets, WEBHOOK_CERT_SECRET, home);
  });
});

describe('berth cells join: a kubeconfig that may do more in the cell than the management plane needs', () => {
  // The sandbox joins itself: its management plane is the cell.
  const joined: string[] = [];
  const join = (kubeconfig: string, ...flags: string[]) => {
    const name = uniqueName('self');
    joined.push(name);
    return runBerthCli([
      'cells',
      'join',
      name,
      `--kubeconfig=${kubeconfig}`,
      '--location=DFW',
      `--management-kubeconfig=${sandbox.kubeconfigPath}`,
      ...flags,
    ]);
  };
  const cellRole = 'berth-management-plane';
  const users: string[] = [];
  /** The rules `berth manifests --cell` prints. */
  const cellRules = (): PolicyRule[] => {
    const [role] = parseAllDocuments(runBerthCli(['manifests', '--cell']).stdout).map(
      (d) => d.toJS() as KubeObject & { rules: PolicyRule[] },
    );
    assert.ok(role?.rules.length);
    return role.rules;
  };
  /** A user of its own bound cluster-wide to `rules` (removed after the tests), and its name. */
  const userWith = async (rules: PolicyRule[]): Promise<string> => {
    const name = uniqueName('cell-user');
    users.push(name);
    await client.create(Resources.clusterRoles, {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRole',
      metadata: { name },
      rules,
    });
    await client.create(Resources.clusterRoleBindings, {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRoleBinding',
      metadata: { name },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name },
      subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name }],
    });
    return name;
  };

  before(() => installCrds(client));

  after(async () => {
    for (const name of joined) {
      await client.delete(Cell.ref, name).catch(() => {});
      await client.delete(Resources.secrets, secretName(name), NAMESPACE).catch(() => {});
    }
    // The users' roles, and the cell role's (`berth manifests --cell`) with its ServiceAccount.
    for (const name of [...users, cellRole]) {
      await client.delete(Resources.clusterRoleBindings, name).catch(() => {});
      await client.delete(Resources.clusterRoles, name).catch(() => {});
    }
    await client.delete(Resources.serviceAccounts, cellRole, NAMESPACE).catch(() => {});
  });

  test("an admin's: it joins, and says so, naming the grant", () => {
    const r = join(sandbox.kubeconfigPath);
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stderr, /may do more there than a management plane needs \(berth manifests --cell/);
    assert.match(r.stderr, /^ {2}\* \*\/\*$/m);
  });

  test('a user bound to the cell role and one grant more: that grant, and only it, is named', async () => {
    const user = await userWith([
      ...cellRules(),
      { apiGroups: [''], resources: ['secrets'], verbs: ['get'] },
    ]);
    const r = join(await sandbox.mintUser(user));
    assert.equal(r.status, 0, r.stderr);
    const named = r.stderr.split('\n').filter((l) => l.startsWith('  '));
    assert.deepEqual(named, ['  get core/secrets'], r.stderr);
  });

  test('a grant by a RoleBinding in a namespace the Cell serves is named, with its namespace', async () => {
    const served = await createNamespace(client, 'served');
    const user = await userWith(cellRules());
    await client.create(Resources.roleBindings, {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'RoleBinding',
      metadata: { name: user, namespace: served },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'view' },
      subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: user }],
    });
    try {
      const r = join(await sandbox.mintUser(user), `--namespaces=${served}`);
      assert.equal(r.status, 0, r.stderr);
      assert.match(
        r.stderr,
        new RegExp(`^ {2}get, list, watch core/pods \\(in ${served}\\)$`, 'm'),
        r.stderr,
      );
    } finally {
      await deleteNamespace(client, served);
    }
  });

  test('a kubeconfig that may not watch namespaces: the join says so, so the cell is not Ready', async () => {
    const user = await userWith(cellRules().filter((r) => !r.resources?.includes('namespaces')));
    const r = join(await sandbox.mintUser(user), '--create-namespaces');
    assert.equal(r.status, 0, r.stderr);
    for (const verb of ['list', 'watch'])
      assert.match(r.stdout, new RegExp(`may not .*\\b${verb} namespaces\\b.*so it is not Ready`), r.stdout);
  });

  test('a ServiceAccount bound to the cell role `berth manifests --cell` prints: it joins without a warning', async () => {
    const printed = runBerthCli(['manifests', '--cell']);
    assert.equal(printed.status, 0, printed.stderr);
    const kubeconfig = await sandbox.mintServiceAccount(
      parseAllDocuments(printed.stdout).map((d) => d.toJS() as KubeObject),
    );
    const r = join(kubeconfig);
    assert.equal(r.status, 0, r.stderr);
    assert.equal(r.stderr, '');
  });
});
