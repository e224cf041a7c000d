// test-driver: alone — the uninstall hook's `berth uninstall` takes back what Berth's field managers
// own on every node and deletes the webhook configurations Berth registered, which would pull them
// from under the files beside it.
//
// The chart's lifecycle with Helm alone: the previous chart (test/fixtures/upgrade/helm-5d574d0) is
// installed, policies are written, `helm upgrade` to today's chart runs its pre-upgrade hook, and
// nothing is lost (the same CRDs, now today's, the same policies, Berth's Deployment rolled);
// `helm uninstall` runs the post-delete hook, which takes back what Berth wrote, and the CRDs stay
// (crds.keep). The sandbox's nodes are kwok's: a pod runs no container, and kwok marks a Job's pod
// Succeeded once it runs. So Helm's part is real (hook objects made in order, the Job waited for,
// everything deleted by its policy once it succeeded), and the hook's command is run here, as the
// hook's ServiceAccount with exactly the roles the chart renders for it (a token from the
// TokenRequest API), with the arguments of the rendered Job: what the hook would do, with what it may.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { capabilities } from '../../src/capabilities.ts';
import { FIELD_MANAGER as LABELS_MANAGER } from '../../src/labels/types.ts';
import { NodeLabelRule } from '../../src/labels/crd.ts';
import { crdManifests } from '../../src/manifests.ts';
import { LEADER_ELECTION_ID } from '../../src/policy/namespace.ts';
import { crdName, Resources, type KubeObject } from '../../src/runtime/api/meta.ts';
import { ensureHelm } from '../../src/sandbox/build.ts';
import { packageRoot } from '../../src/sandbox/paths.ts';
import { testSandbox, uniqueName } from '../helpers/cluster.ts';
import { chart, exec, releasePlace, render, sets, type Any } from '../helpers/helm.ts';
import { waitFor } from '../helpers/wait.ts';

const sandbox = testSandbox();
const client = sandbox.client();
const previousChart = join(packageRoot(), 'test/fixtures/upgrade/helm-5d574d0');
const ns = uniqueName('helmup');
const release = uniqueName('up');
const fullname = `${release}-berth`;
let helmPath: string;
let place: Awaited<ReturnType<typeof releasePlace>> | undefined;
const helm = (args: string[]) => exec(sandbox, helmPath, args);

/** The hook Job `name` as rendered, and the RBAC objects its ServiceAccount is bound with. */
function renderedHook(values: Record<string, string>, name: string): { args: string[]; rbac: KubeObject[] } {
  const objects = render(helm, ns, values, release);
  const job = objects.find((o: Any) => o.kind === 'Job' && o.metadata.name === `${fullname}-${name}`);
  assert.ok(job, `the hook Job ${fullname}-${name} is rendered`);
  const hooks = job.metadata.annotations['helm.sh/hook'];
  const rbac = objects.filter(
    (o: Any) => o.apiVersion.startsWith('rbac.') && o.metadata.annotations?.['helm.sh/hook'] === hooks,
  );
  return { args: job.spec.template.spec.containers[0].args, rbac };
}

/** Runs `berth` with the hook's arguments as the hook's ServiceAccount, bound as the chart binds it. */
async function runHook(values: Record<string, string>, name: string): Promise<string> {
  const { args, rbac } = renderedHook(values, name);
  const kubeconfig = await sandbox.mintServiceAccount(rbac, 600);
  try {
    const r = spawnSync(
      process.execPath,
      [join(packageRoot(), 'bin/berth.js'), ...args, '--kubeconfig', kubeconfig],
      {
        encoding: 'utf8',
        timeout: 300_000,
      },
    );
    assert.equal(r.status, 0, `berth ${args.join(' ')} as ${fullname}-hooks:\n${r.stderr}${r.stdout}`);
    return r.stdout + r.stderr;
  } finally {
    // Helm makes them itself when it runs the hook.
    for (const o of rbac)
      await client.delete(refOf(o.kind!), o.metadata!.name!, o.metadata!.namespace).catch(() => undefined);
    await client.delete(Resources.serviceAccounts, `${fullname}-hooks`, ns).catch(() => undefined);
  }
}

const refOf = (kind: string) =>
  ({
    ClusterRole: Resources.clusterRoles,
    ClusterRoleBinding: Resources.clusterRoleBindings,
    Role: Resources.roles,
    RoleBinding: Resources.roleBindings,
  })[kind]!;

before(async () => {
  helmPath = await ensureHelm();
  place = await releasePlace(client, ns);
});

after(async () => {
  await place?.remove();
  client.close();
});

describe('the chart from one version to the next, by Helm alone', () => {
  test('upgrades from the previous chart (5d574d0) by its hook, keeping everything, and uninstalls by its hook, keeping the CRDs', async () => {
    // Berth's pods and the hooks' on this file's node, where kwok runs them.
    const values = place!.onNode;
    const previous = mkdtempSync(join(tmpdir(), 'berth-chart-'));
    cpSync(previousChart, previous, { recursive: true });
    cpSync(join(chart, 'crds'), join(previous, 'crds'), { recursive: true });
    const rule = uniqueName('kept');
    try {
      helm(['install', release, previous, '--namespace', ns, '--wait=false', ...sets(values)]);
      const policy = await client.apply(
        NodeLabelRule.ref,
        {
          apiVersion: NodeLabelRule.apiVersion,
          kind: NodeLabelRule.kind,
          metadata: { name: rule },
          spec: {
            match: { anyOf: [{ label: `${rule}.example/a`, operator: 'Exists' }] },
            labels: { [`${rule}.example/b`]: 'true' },
          },
        },
        { fieldManager: 'test-author' },
      );
      const crds = capabilities.flatMap((c) => c.kinds.map(crdName));
      const uids = async () =>
        Promise.all(crds.map(async (n) => (await client.get(Resources.crds, n)).metadata!.uid));
      const before = await uids();

      // The pre-upgrade hook's command, as its ServiceAccount: today's CRDs, applied.
      const said = await runHook(values, 'crds');
      for (const n of crds) assert.match(said, new RegExp(`applied ${n.replaceAll('.', '\\.')}`));
      helm(['upgrade', release, chart, '--namespace', ns, '--wait=false', '--timeout=5m', ...sets(values)]);
      const history = JSON.parse(
        helm(['history', release, '--namespace', ns, '--output', 'json']).stdout,
      ) as {
        revision: number;
        status: string;
      }[];
      assert.deepEqual(
        history.map((h) => [h.revision, h.status]),
        [
          [1, 'superseded'],
          [2, 'deployed'],
        ],
      );
      // The hook's objects are gone once it succeeded (hook-delete-policy), the release's stay.
      for (const [ref, name, namespace] of [
        [Resources.serviceAccounts, `${fullname}-hooks`, ns],
        [Resources.clusterRoles, `${fullname}-crds`, undefined],
        [Resources.clusterRoleBindings, `${fullname}-crds`, undefined],
      ] as const)
        await waitFor(`${ref.kind} ${name} deleted after the hook`, () =>
          client.get(ref, name, namespace).then(
            () => false,
            () => true,
          ),
        );
      assert.deepEqual(await uids(), before, 'the CRDs are the same objects');
      for (const crd of await crdManifests()) {
        const live = await client.get(Resources.crds, crd.metadata!.name!);
        assert.deepEqual(
          (live['spec'] as Any).versions.map((v: Any) => v.schema),
          (crd['spec'] as Any).versions.map((v: Any) => v.schema),
          `${crd.metadata!.name} is today's`,
        );
      }
      const kept = await client.get(NodeLabelRule.ref, rule);
      assert.equal(kept.metadata?.uid, policy.metadata?.uid);
      assert.deepEqual(kept['spec'], policy['spec']);
      // Berth's Deployment is today's and its pods are Ready (kwok's: no container runs).
      const rendered = render(helm, ns, values, release).find((o: Any) => o.kind === 'Deployment');
      await waitFor('the upgraded Deployment available', async () => {
        const d = (await client.get(Resources.deployments, fullname, ns)) as Any;
        return (
          d.metadata.labels['helm.sh/chart'] === rendered.metadata.labels['helm.sh/chart'] &&
          d.status?.observedGeneration === d.metadata.generation &&
          d.status?.updatedReplicas === d.spec.replicas &&
          d.status?.availableReplicas === d.spec.replicas
        );
      });

      // What Berth writes at run time: its certificate Secret, its Lease, a derived label on a node.
      const label = `${rule}.example/derived`;
      const node = place!.node;
      await client.create(Resources.secrets, {
        apiVersion: 'v1',
        kind: 'Secret',
        metadata: { name: `${fullname}-webhook-cert`, namespace: ns },
      });
      await client.create(Resources.leases, {
        apiVersion: 'coordination.k8s.io/v1',
        kind: 'Lease',
        metadata: { name: LEADER_ELECTION_ID, namespace: ns },
      });
      await client.apply(
        Resources.nodes,
        { apiVersion: 'v1', kind: 'Node', metadata: { name: node, labels: { [label]: 'true' } } },
        { fieldManager: LABELS_MANAGER },
      );

      helm(['uninstall', release, '--namespace', ns, '--wait', '--timeout=5m']);
      assert.equal(helm(['list', '--namespace', ns, '--all', '--short']).stdout.trim(), '');
      await waitFor(`the uninstall hook's ServiceAccount deleted once it succeeded`, () =>
        client.get(Resources.serviceAccounts, `${fullname}-hooks`, ns).then(
          () => false,
          () => true,
        ),
      );
      // The post-delete hook's command, as its ServiceAccount (crds.keep: --keep-crds).
      const { args } = renderedHook(values, 'uninstall');
      assert.ok(args.includes('--keep-crds'));
      const released = await runHook(values, 'uninstall');
      assert.match(released, /kept with the CRDs: .*nodelabelrules/);
      for (const [ref, name] of [
        [Resources.secrets, `${fullname}-webhook-cert`],
        [Resources.leases, LEADER_ELECTION_ID],
      ] as const)
        await assert.rejects(client.get(ref, name, ns), `${ref.kind} ${name} deleted by the hook`);
      const labelled = await client.get(Resources.nodes, node);
      assert.equal(labelled.metadata?.labels?.[label], undefined, "Berth's label taken back");
      assert.deepEqual(await uids(), before, 'crds.keep: the CRDs stay');
      assert.equal((await client.get(NodeLabelRule.ref, rule)).metadata?.uid, policy.metadata?.uid);
    } finally {
      spawnSync(helmPath, ['uninstall', release, '--namespace', ns, '--no-hooks'], {
        env: { ...process.env, KUBECONFIG: sandbox.kubeconfigPath },
      });
      await client.delete(NodeLabelRule.ref, rule).catch(() => {});
      rmSync(previous, { recursive: true, force: true });
    }
  });

  test('with crds.keep=false the uninstall hook runs berth uninstall without --keep-crds (which deletes the CRDs)', () => {
    const { args } = renderedHook({ 'crds.keep': 'false' }, 'uninstall');
    assert.ok(!args.includes('--keep-crds'));
    assert.ok(args.includes(`--berth-namespace=${ns}`));
  });
});
