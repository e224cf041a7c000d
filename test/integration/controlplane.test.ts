// Proves that the sandbox is a real control plane: the controller-manager runs DaemonSets, the
// scheduler honours taints, the apiserver enforces server-side apply ownership, calls admission
// webhooks and enforces RBAC.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { hasCondition } from '../../src/runtime/api/conditions.ts';
import { ApiError, KubeClient } from '../../src/runtime/client/client.ts';
import { Resources, type KubeObject } from '../../src/runtime/api/meta.ts';
import { WebhookServer } from '../../src/runtime/webhook/admission.ts';
import {
  mutatingWebhookConfiguration,
  webhookClientConfig,
} from '../../src/runtime/webhook/configuration.ts';
import { mutate } from '../../src/runtime/api/jsonpatch.ts';
import { nodeManifests } from '../../src/sandbox/nodes.ts';
import {
  addNodes,
  createNamespace,
  deleteNamespace,
  deleteNodes,
  podManifest,
  testSandbox,
  uniqueName,
} from '../helpers/cluster.ts';
import { holdsFor, waitFor } from '../helpers/wait.ts';

const sandbox = testSandbox();
const client = sandbox.client();
let ns: string;
const nodes: string[] = [];

before(async () => {
  ns = await createNamespace(client, 'cp');
});

after(async () => {
  await deleteNamespace(client, ns);
  await deleteNodes(client, nodes);
  client.close();
});

describe('the sandbox control plane', () => {
  test('a DaemonSet gets exactly one Ready pod on each matching node', async () => {
    const key = uniqueName('ds');
    const matching = await addNodes(client, { prefix: key, count: 3, labels: { 'berth.test/ds': key } });
    const other = await addNodes(client, { prefix: `${key}-other`, count: 1 });
    nodes.push(...matching, ...other);
    await client.create(Resources.daemonSets, {
      apiVersion: 'apps/v1',
      kind: 'DaemonSet',
      metadata: { name: key, namespace: ns },
      spec: {
        selector: { matchLabels: { app: key } },
        template: {
          metadata: { labels: { app: key } },
          spec: {
            nodeSelector: { 'berth.test/ds': key },
            containers: [{ name: 'agent', image: 'registry.example/agent:1' }],
          },
        },
      },
    });
    const pods = async () =>
      (await client.list(Resources.pods, { namespace: ns, query: { labelSelector: `app=${key}` } })).items;
    await waitFor(
      'one Ready DaemonSet pod per matching node',
      async () => {
        const ps = await pods();
        return ps.length === 3 && ps.every((p) => hasCondition(p, 'Ready'));
      },
      { timeoutMs: 60_000, observe: pods },
    );
    const byNode = (await pods()).map((p) => (p['spec'] as { nodeName: string }).nodeName).sort();
    assert.deepEqual(byNode, [...matching].sort());
    const ds = await client.get<KubeObject>(Resources.daemonSets, key, ns);
    const st = ds['status'] as { numberReady: number; desiredNumberScheduled: number };
    assert.equal(st.desiredNumberScheduled, 3);
    // No pod ever lands on the node without the label, and no node gets a second pod.
    await holdsFor(
      'three DaemonSet pods on the matching nodes',
      async () => (await pods()).length === 3,
      1000,
    );
  });

  test('a pod that does not tolerate a node taint stays Pending with the scheduler reason', async () => {
    const [node] = await addNodes(client, {
      prefix: uniqueName('tainted'),
      count: 1,
      taints: [{ key: 'berth.test/dedicated', value: 'x', effect: 'NoSchedule' }],
    });
    nodes.push(node!);
    const name = uniqueName('pending');
    await client.create(
      Resources.pods,
      podManifest({ name, namespace: ns, nodeSelector: { 'kubernetes.io/hostname': node! } }),
    );
    const cond = await waitFor('PodScheduled=False', async () => {
      const pod = await client.get(Resources.pods, name, ns);
      const conds = (
        pod['status'] as { conditions?: { type: string; status: string; reason: string; message: string }[] }
      ).conditions;
      return conds?.find((c) => c.type === 'PodScheduled' && c.status === 'False');
    });
    assert.equal(cond.reason, 'Unschedulable');
    // The scheduler checks taints before the node selector, so tainted nodes of the tests running
    // beside this one are counted here too: the reason, not the count, is what this test asks.
    assert.match(cond.message, /\d+ node\(s\) had untolerated taint/);
    const pod = await client.get(Resources.pods, name, ns);
    assert.equal((pod['spec'] as { nodeName?: string }).nodeName, undefined);
    assert.equal((pod['status'] as { phase: string }).phase, 'Pending');

    // With the toleration the same kind of pod is scheduled there and becomes Ready.
    const tolerant = uniqueName('tolerant');
    await client.create(
      Resources.pods,
      podManifest({
        name: tolerant,
        namespace: ns,
        nodeSelector: { 'kubernetes.io/hostname': node! },
        tolerations: [{ key: 'berth.test/dedicated', operator: 'Exists', effect: 'NoSchedule' }],
      }),
    );
    await waitFor('the tolerating pod Ready', async () =>
      hasCondition(await client.get(Resources.pods, tolerant, ns), 'Ready'),
    );
  });

  test('two field managers applying one label conflict, and force resolves it', async () => {
    const [node] = await addNodes(client, { prefix: uniqueName('ssa'), count: 1 });
    nodes.push(node!);
    const apply = (manager: string, value: string, force = false) =>
      client.apply(
        Resources.nodes,
        { apiVersion: 'v1', kind: 'Node', metadata: { name: node!, labels: { 'berth.test/owner': value } } },
        { fieldManager: manager, force },
      );
    await apply('manager-a', 'a');
    await assert.rejects(apply('manager-b', 'b'), (e: unknown) => {
      assert.ok(e instanceof ApiError);
      assert.equal(e.status, 409);
      assert.match(e.message, /conflict with "manager-a"/);
      return true;
    });
    const forced = await apply('manager-b', 'b', true);
    assert.equal(forced.metadata?.labels?.['berth.test/owner'], 'b');
    const owners = (forced.metadata?.managedFields as { manager: string; fieldsV1?: unknown }[])
      .filter((m) => JSON.stringify(m.fieldsV1 ?? {}).includes('berth.test/owner'))
      .map((m) => m.manager);
    assert.deepEqual(owners, ['manager-b']);
  });

  test('a mutating webhook served on 127.0.0.1 is called on Node CREATE and its patch lands', async () => {
    const prefix = uniqueName('hooked');
    const seen: string[] = [];
    const server = new WebhookServer({
      certificates: { kind: 'generated', dnsNames: ['localhost'], ipAddresses: ['127.0.0.1'] },
      port: 0,
    });
    server.register('/mutate-node', (req) => {
      const node = req.object!;
      seen.push(`${req.operation} ${node.metadata?.name}`);
      const copy = structuredClone(node);
      copy.metadata!.labels = { ...copy.metadata!.labels, 'berth.test/webhook': 'called' };
      return { allowed: true, patch: mutate(node, copy) };
    });
    await server.start();
    const config = mutatingWebhookConfiguration({
      name: prefix,
      webhooks: [
        {
          name: 'nodes.test.berth.dev',
          clientConfig: webhookClientConfig({ url: server.url }, '/mutate-node', server.caBundle),
          rules: [{ operations: ['CREATE'], apiGroups: [''], apiVersions: ['v1'], resources: ['nodes'] }],
          // Only this test's nodes, so that parallel tests never depend on this server.
          objectSelector: { matchLabels: { 'berth.test/hook': prefix } },
          failurePolicy: 'Fail',
        },
      ],
    });
    await client.create(Resources.mutatingWebhookConfigurations, config);
    try {
      const [manifest] = nodeManifests({ prefix, count: 1, labels: { 'berth.test/hook': prefix } });
      // The apiserver's webhook configuration cache is eventually consistent: retry the create until the hook is live.
      const created = await waitFor('a node created through the webhook', async () => {
        const node = await client.create(Resources.nodes, structuredClone(manifest!));
        if (node.metadata?.labels?.['berth.test/webhook'] === 'called') return node;
        await client.delete(Resources.nodes, node.metadata!.name!);
        await waitFor('the node to be gone', () =>
          client.get(Resources.nodes, node.metadata!.name!).then(
            () => false,
            () => true,
          ),
        );
        return undefined;
      });
      nodes.push(created.metadata!.name!);
      assert.ok(seen.includes(`CREATE ${created.metadata!.name}`), `webhook saw ${JSON.stringify(seen)}`);
    } finally {
      await client.delete(Resources.mutatingWebhookConfigurations, prefix);
      await server.stop();
    }
  });

  test('a limited user is denied by RBAC', async () => {
    const user = uniqueName('alice');
    const limited = KubeClient.fromFile(await sandbox.mintUser(user, ['berth:testers']));
    try {
      await assert.rejects(limited.list(Resources.nodes), (e: unknown) => {
        assert.ok(e instanceof ApiError);
        assert.equal(e.status, 403);
        assert.match(e.message, new RegExp(`User "${user}" cannot list resource "nodes"`));
        return true;
      });
      // The same user is authenticated: it may do what system:basic-user allows.
      const review = await limited.create<KubeObject>(
        {
          group: 'authorization.k8s.io',
          version: 'v1',
          resource: 'selfsubjectaccessreviews',
          kind: 'SelfSubjectAccessReview',
          namespaced: false,
        },
        {
          apiVersion: 'authorization.k8s.io/v1',
          kind: 'SelfSubjectAccessReview',
          spec: { resourceAttributes: { verb: 'list', resource: 'nodes' } },
        },
      );
      assert.equal((review['status'] as { allowed: boolean }).allowed, false);
    } finally {
      limited.close();
    }
  });
});
