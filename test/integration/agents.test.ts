// Agent placement against the real control plane: the seed's test plan, the agent DaemonSet
// following the label, pods moving, a node deleted, and a restart midway.
import { PolicyKit } from '../../src/policy/kit.ts';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { setupAgents } from '../../src/agents/setup.ts';
import { explainNodeAgents } from '../../src/agents/explain.ts';
import { AgentPlacement } from '../../src/agents/crd.ts';
import { installCrds } from '../../src/cli/install.ts';
import { capabilities } from '../../src/capabilities.ts';
import { rbacManifests, type RbacOptions } from '../../src/manifests.ts';
import { findCondition, hasCondition, type Condition } from '../../src/runtime/api/conditions.ts';
import type { Event } from '../../src/runtime/events/event.ts';
import { deniedVerbs } from '../../src/runtime/client/restmapper.ts';
import { isNotFound, KubeClient } from '../../src/runtime/client/client.ts';
import { Manager } from '../../src/runtime/manager/manager.ts';
import { clusterRole } from '../../src/runtime/api/rbac.ts';
import { generatedCertificates, WebhookRunnable } from '../../src/runtime/webhook/registration.ts';
import { Resources, type KubeObject } from '../../src/runtime/api/meta.ts';
import {
  addNodes,
  createNamespace,
  deleteNamespace,
  deleteNodes,
  podManifest,
  refuseNodeLabel,
  schemalessCrd,
  testSandbox,
  uniqueName,
} from '../helpers/cluster.ts';
import { berthClient, removeBerthIdentity, runBerthCli } from '../helpers/berth.ts';
import { holdsFor, sleep, waitFor } from '../helpers/wait.ts';

const sandbox = testSandbox();
const client = sandbox.client();
const id = uniqueName('ag');
const D = `${id}.example.com`;
const POOL = `${D}/pool-uid`;
const LABEL = `${D}/agent`;
const CLAIM = `${D}/claim.`;
// A custom owner kind that does not exist until a test installs its CRD.
const GHOSTS = `ghosts.${D}`;
let ns: string;
const nodes: string[] = [];
const BERTH = 'berth-system';

// Berth's identity for this file: its roles with this file's webhook configuration and the owner
// kinds its placements put finalizers on (ConfigMaps, and Ghosts once their CRD exists).
const identity = {
  name: id,
  webhookConfiguration: `${id}-wait`,
  finalizerOwners: ['configmaps', GHOSTS],
};
let manager: Manager | undefined;
let controller: ReturnType<typeof setupAgents> | undefined;
async function startController(): Promise<ReturnType<typeof setupAgents>> {
  manager = new Manager({
    client: await berthClient(sandbox, identity),
    metricsBindAddress: '0',
    healthBindAddress: '0',
  });
  const c = setupAgents(new PolicyKit(manager), { workers: 4, berthNamespace: BERTH });
  controller = c;
  await manager.start();
  await manager.waitForCacheSync();
  return c;
}
async function stopController(): Promise<void> {
  await manager?.stop();
  manager = undefined;
}

before(async () => {
  await installCrds(client);
  ns = await createNamespace(client, 'agents');
  nodes.push(...(await addNodes(client, { prefix: id, count: 4 })));
  await applyPlacement(id, {
    namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': ns } },
    podSelector: { matchLabels: { app: `${id}-worker` } },
    owner: { uidLabel: POOL, apiVersion: 'v1', kind: 'ConfigMap' },
    nodeLabel: { key: LABEL, value: 'true' },
    claimAnnotationPrefix: CLAIM,
    finalizer: { name: `${D}/release-node-claims` },
  });
  await startController();
});

after(async () => {
  // The placement goes while its Berth runs, as a user removes one: its own finalizer is released
  // then, not left for whichever Berth runs next in this cluster.
  await client.delete(AgentPlacement.ref, id).catch(() => {});
  await waitFor('the placement gone', () =>
    client.get(AgentPlacement.ref, id).then(
      () => false,
      (e: unknown) => isNotFound(e),
    ),
  );
  await stopController();
  await client.delete(Resources.crds, GHOSTS).catch(() => {});
  await deleteNamespace(client, ns);
  await deleteNodes(client, nodes);
  await removeBerthIdentity(client, identity);
  client.close();
});

/** Creates or updates an AgentPlacement, as its author would. */
const applyPlacement = (name: string, spec: unknown) =>
  client.apply(
    AgentPlacement.ref,
    { apiVersion: AgentPlacement.apiVersion, kind: 'AgentPlacement', metadata: { name }, spec },
    { fieldManager: 'test-author', force: true },
  );

/** A pool: a ConfigMap whose uid its pods carry, as the seed's WorkerPool UID label. */
async function pool(name: string): Promise<string> {
  const cm = await client.create(Resources.configMaps, {
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: { name, namespace: ns },
  });
  return cm.metadata!.uid!;
}

async function worker(name: string, poolUid: string, node: string, labels: Record<string, string> = {}) {
  await client.create(
    Resources.pods,
    podManifest({
      name,
      namespace: ns,
      nodeName: node,
      labels: { app: `${id}-worker`, [POOL]: poolUid, ...labels },
    }),
  );
}

const deletePod = (name: string) => client.delete(Resources.pods, name, ns, { gracePeriodSeconds: 0 });

type PlacementStatus = { claims?: number; conditions?: Condition[] };
const placementStatus = async (name: string) =>
  (await client.get<KubeObject & { status?: PlacementStatus }>(AgentPlacement.ref, name)).status;
/** Waits until the placement's condition `type` has this status and reason; returns the status. */
const placementCondition = (name: string, type: string, status: string, reason: string, timeoutMs = 30_000) =>
  waitFor(
    `${name}: ${type}=${status} (${reason})`,
    async () => {
      const s = await placementStatus(name);
      const c = findCondition(s?.conditions, type);
      return c?.status === status && c.reason === reason && s;
    },
    { timeoutMs, observe: () => placementStatus(name) },
  );
const placementEvent = (name: string, reason: string, text: string) =>
  waitFor(`a Warning ${reason} on ${name} saying ${text}`, async () =>
    (await client.list<Event>(Resources.events, { namespace: 'default' })).items.find(
      (e) =>
        e.regarding?.kind === 'AgentPlacement' &&
        e.regarding.name === name &&
        e.type === 'Warning' &&
        e.reason === reason &&
        e.note?.includes(text),
    ),
  );

async function nodeMeta(name: string) {
  const n = await client.get(Resources.nodes, name);
  const claims = Object.keys(n.metadata?.annotations ?? {})
    .filter((k) => k.startsWith(CLAIM))
    .map((k) => k.slice(CLAIM.length))
    .sort();
  return { label: n.metadata?.labels?.[LABEL], claims };
}

const expectNode = (node: string, label: string | undefined, claims: string[]) =>
  waitFor(
    `${node}: label ${label}, claims ${claims.join(',')}`,
    async () => {
      const m = await nodeMeta(node);
      return m.label === label && JSON.stringify(m.claims) === JSON.stringify([...claims].sort());
    },
    { observe: () => nodeMeta(node) },
  );

describe('agent placement', () => {
  test('the wait-for-agent init container is injected by the Pod CREATE webhook, before existing init containers', async () => {
    const name = `${id}-wait`;
    await applyPlacement(name, {
      podSelector: { matchLabels: { app: `${id}-waiting` } },
      owner: { uidLabel: POOL },
      nodeLabel: { key: `${D}/waiting-agent` },
      claimAnnotationPrefix: `${D}/waiting.`,
      waitForAgent: { port: 8085 },
    });
    const registration = { mode: 'url' as const, url: 'https://127.0.0.1:{port}' };
    const hooks = new WebhookRunnable({
      client: manager!.client(),
      server: { port: 0, certificates: generatedCertificates(registration) },
      registration,
      specs: [controller!.webhook],
      berthNamespace: BERTH,
      configName: identity.webhookConfiguration,
    });
    await hooks.start(new AbortController().signal);
    try {
      await hooks.ready();
      await waitFor('the placement cached', () => controller!.placements().some((p) => p.name === name));
      const pod = await waitFor('a pod created through the webhook', async () => {
        const p = podManifest({
          name: uniqueName('waiting'),
          namespace: ns,
          labels: { app: `${id}-waiting`, [POOL]: 'u1' },
        });
        (p['spec'] as Record<string, unknown>)['initContainers'] = [
          { name: 'setup', image: 'registry.example/setup:1' },
        ];
        const created = await client.create(Resources.pods, p);
        const inits = ((created['spec'] as { initContainers?: { name: string }[] }).initContainers ?? []).map(
          (c) => c.name,
        );
        if (inits[0] === `berth-wait-for-agent-${name}`) return created;
        await client.delete(Resources.pods, created.metadata!.name!, ns, { gracePeriodSeconds: 0 });
        return undefined;
      });
      const spec = pod['spec'] as {
        initContainers: { name: string; env: { name: string; valueFrom?: unknown }[]; command: string[] }[];
      };
      assert.deepEqual(
        spec.initContainers.map((c) => c.name),
        [`berth-wait-for-agent-${name}`, 'setup'],
      );
      assert.deepEqual(spec.initContainers[0]!.env, [
        { name: 'HOST_IP', valueFrom: { fieldRef: { apiVersion: 'v1', fieldPath: 'status.hostIP' } } },
      ]);
      assert.match(spec.initContainers[0]!.command.join(' '), /8085/);
      // A pod the placement does not select is left alone.
      const other = await client.create(
        Resources.pods,
        podManifest({ name: uniqueName('other'), namespace: ns, labels: { app: 'unrelated' } }),
      );
      assert.equal((other['spec'] as { initContainers?: unknown[] }).initContainers, undefined);
    } finally {
      await hooks.stop();
      await client.delete(Resources.mutatingWebhookConfigurations, name).catch(() => {});
      await client.delete(AgentPlacement.ref, name).catch(() => {});
    }
  });

  test("the seed's test plan: one pod, two pools, one pool leaving, the last pod leaving", async () => {
    const [n0] = nodes;
    const a = await pool('pool-a');
    const b = await pool('pool-b');
    await worker('a-1', a, n0!);
    await expectNode(n0!, 'true', [a]);
    await worker('b-1', b, n0!);
    await expectNode(n0!, 'true', [a, b]);
    // berth explain node: the claims and the pods behind each.
    const explained = (await explainNodeAgents(client, await client.get(Resources.nodes, n0!), BERTH)).join(
      '\n',
    );
    assert.match(
      explained,
      new RegExp(`claim ${CLAIM.replaceAll('.', '\\.')}${a} \\(ConfigMap/${ns}\\): ${ns}/a-1`),
    );
    assert.match(
      explained,
      new RegExp(`claim ${CLAIM.replaceAll('.', '\\.')}${b} \\(ConfigMap/${ns}\\): ${ns}/b-1`),
    );
    await deletePod('a-1');
    await expectNode(n0!, 'true', [b]);
    await deletePod('b-1');
    await expectNode(n0!, undefined, []);
    const st = await waitFor('status counts zero', async () => {
      const s = (await client.get<KubeObject & { status?: { claims?: number } }>(AgentPlacement.ref, id))
        .status;
      return s?.claims === 0 ? s : undefined;
    });
    assert.ok(hasCondition({ status: st }, 'Ready'));
  });

  test('the finalizer holds the owner until its claims are released, then the deletion completes within a second', async () => {
    const [, n1] = nodes;
    const uid = await pool('pool-f');
    await worker('f-1', uid, n1!);
    await expectNode(n1!, 'true', [uid]);
    await waitFor('the finalizer on the owner', async () =>
      (await client.get(Resources.configMaps, 'pool-f', ns)).metadata?.finalizers?.includes(
        `${D}/release-node-claims`,
      ),
    );
    await client.delete(Resources.configMaps, 'pool-f', ns);
    await holdsFor(
      'the owner held while its claim exists',
      async () =>
        (await client.get(Resources.configMaps, 'pool-f', ns)).metadata?.deletionTimestamp !== undefined,
      1000,
    );
    await deletePod('f-1');
    await expectNode(n1!, undefined, []);
    const released = Date.now();
    await waitFor(
      'the owner gone',
      () =>
        client.get(Resources.configMaps, 'pool-f', ns).then(
          () => false,
          () => true,
        ),
      { intervalMs: 20 },
    );
    assert.ok(
      Date.now() - released < 1000,
      `owner deleted ${Date.now() - released} ms after the last claim went`,
    );
  });

  test('an agent DaemonSet with a nodeSelector on the label runs exactly on the labelled nodes', async () => {
    const [, , n2, n3] = nodes;
    const uid = await pool('pool-ds');
    await worker('ds-1', uid, n2!);
    await expectNode(n2!, 'true', [uid]);
    await client.create(Resources.daemonSets, {
      apiVersion: 'apps/v1',
      kind: 'DaemonSet',
      metadata: { name: 'agent', namespace: ns },
      spec: {
        selector: { matchLabels: { app: `${id}-agent` } },
        template: {
          metadata: { labels: { app: `${id}-agent` } },
          spec: {
            nodeSelector: { [LABEL]: 'true' },
            containers: [{ name: 'agent', image: 'registry.example/agent:1' }],
          },
        },
      },
    });
    const agentNodes = async () =>
      (
        await client.list(Resources.pods, { namespace: ns, query: { labelSelector: `app=${id}-agent` } })
      ).items
        .filter((p) => hasCondition(p, 'Ready'))
        .map((p) => (p['spec'] as { nodeName: string }).nodeName)
        .sort();
    await waitFor(
      'the agent on n2 only',
      async () => JSON.stringify(await agentNodes()) === JSON.stringify([n2]),
      { timeoutMs: 60_000, observe: agentNodes },
    );
    // The workload moves: a pod of the same pool on n3, the one on n2 goes.
    await worker('ds-2', uid, n3!);
    await deletePod('ds-1');
    await expectNode(n2!, undefined, []);
    await expectNode(n3!, 'true', [uid]);
    await waitFor(
      'the agent followed to n3',
      async () => JSON.stringify(await agentNodes()) === JSON.stringify([n3]),
      { timeoutMs: 60_000, observe: agentNodes },
    );
    await deletePod('ds-2');
    await expectNode(n3!, undefined, []);
  });

  test('a deleted node is never recreated, and a restart midway converges', async () => {
    const [gone, survivor] = await addNodes(client, { prefix: `${id}-x`, count: 2 });
    nodes.push(gone!, survivor!);
    const uid = await pool('pool-x');
    await worker('x-1', uid, gone!);
    await worker('x-2', uid, survivor!);
    await expectNode(gone!, 'true', [uid]);
    await client.delete(Resources.nodes, gone!);
    await holdsFor(
      'the deleted node stays deleted',
      () =>
        client.get(Resources.nodes, gone!).then(
          () => false,
          () => true,
        ),
      2000,
    );

    // Restart midway: while Berth is down a second pool arrives and the first pool's pod leaves.
    await stopController();
    const other = await pool('pool-y');
    await worker('y-1', other, survivor!);
    await deletePod('x-2');
    await startController();
    await expectNode(survivor!, 'true', [other]);
    await deletePod('y-1');
    await expectNode(survivor!, undefined, []);
  });

  test('deleting a placement takes its finalizer off the owners and its claims off the nodes', async () => {
    const name = `${id}-gone`;
    const [node] = await addNodes(client, { prefix: `${id}-gone`, count: 1 });
    nodes.push(node!);
    await applyPlacement(name, {
      podSelector: { matchLabels: { app: `${id}-gone` } },
      owner: { uidLabel: POOL, apiVersion: 'v1', kind: 'ConfigMap' },
      nodeLabel: { key: `${D}/gone-agent` },
      claimAnnotationPrefix: `${D}/gone.`,
      finalizer: { name: `${D}/gone-claims` },
    });
    const uid = await pool('pool-gone');
    await client.create(
      Resources.pods,
      podManifest({
        name: 'gone-1',
        namespace: ns,
        nodeName: node!,
        labels: { app: `${id}-gone`, [POOL]: uid },
      }),
    );
    await waitFor('the owner finalizer', async () =>
      (await client.get(Resources.configMaps, 'pool-gone', ns)).metadata?.finalizers?.includes(
        `${D}/gone-claims`,
      ),
    );
    await client.delete(AgentPlacement.ref, name);
    await waitFor('the placement gone', () =>
      client.get(AgentPlacement.ref, name).then(
        () => false,
        () => true,
      ),
    );
    await waitFor(
      'the owner finalizer removed',
      async () =>
        !(await client.get(Resources.configMaps, 'pool-gone', ns)).metadata?.finalizers?.includes(
          `${D}/gone-claims`,
        ),
    );
    await waitFor('the claim and label gone', async () => {
      const n = await client.get(Resources.nodes, node!);
      return (
        n.metadata?.labels?.[`${D}/gone-agent`] === undefined &&
        !Object.keys(n.metadata?.annotations ?? {}).some((k) => k.startsWith(`${D}/gone.`))
      );
    });
  });

  test('two placements on one owner keep both finalizers without rewriting it; a renamed finalizer and a deleted placement take only their own off', async () => {
    const [node] = await addNodes(client, { prefix: `${id}-two`, count: 1 });
    nodes.push(node!);
    const placement = (side: string, finalizer: string) =>
      applyPlacement(`${id}-two-${side}`, {
        podSelector: { matchLabels: { app: `${id}-two` } },
        owner: { uidLabel: POOL, apiVersion: 'v1', kind: 'ConfigMap' },
        nodeLabel: { key: `${D}/two-${side}-agent` },
        claimAnnotationPrefix: `${D}/two-${side}.`,
        finalizer: { name: finalizer },
      });
    const uid = await pool('pool-two');
    await client.create(
      Resources.pods,
      podManifest({
        name: 'two-1',
        namespace: ns,
        nodeName: node!,
        labels: { app: `${id}-two`, [POOL]: uid },
      }),
    );
    await placement('a', `${D}/two-a-claims`);
    await placement('b', `${D}/two-b-claims`);
    const finalizers = async () =>
      ((await client.get(Resources.configMaps, 'pool-two', ns)).metadata?.finalizers ?? []).sort();
    await waitFor(
      'both finalizers on the owner',
      async () =>
        JSON.stringify(await finalizers()) === JSON.stringify([`${D}/two-a-claims`, `${D}/two-b-claims`]),
      { observe: finalizers },
    );
    // Settled: neither placement takes the other's entry off and puts its own back.
    const version = async () =>
      (await client.get(Resources.configMaps, 'pool-two', ns)).metadata?.resourceVersion;
    // Held from the moment both are on: any later write is one with nothing to change.
    const settled = await version();
    await holdsFor(
      'the owner not written again with nothing to change',
      async () => (await version()) === settled,
      2000,
    );

    await placement('a', `${D}/two-a2-claims`);
    await waitFor(
      'the renamed finalizer in place of the old, the other placement untouched',
      async () =>
        JSON.stringify(await finalizers()) === JSON.stringify([`${D}/two-a2-claims`, `${D}/two-b-claims`]),
      { observe: finalizers },
    );
    await client.delete(AgentPlacement.ref, `${id}-two-b`);
    await waitFor(
      'the deleted placement took only its own finalizer off',
      async () => JSON.stringify(await finalizers()) === JSON.stringify([`${D}/two-a2-claims`]),
      { observe: finalizers },
    );
    await client.delete(AgentPlacement.ref, `${id}-two-a`);
    await waitFor('no finalizer left', async () => (await finalizers()).length === 0, {
      observe: finalizers,
    });
  });

  test('an owner kind that is not served: labels, but not Ready, with a Warning naming it; Ready within seconds of its CRD', async () => {
    const name = `${id}-ghost`;
    const [node] = await addNodes(client, { prefix: `${id}-ghost`, count: 1 });
    nodes.push(node!);
    const created = Date.now();
    await applyPlacement(name, {
      podSelector: { matchLabels: { app: `${id}-ghost` } },
      owner: { uidLabel: POOL, apiVersion: `${D}/v1`, kind: 'Ghost' },
      nodeLabel: { key: `${D}/ghost-agent` },
      claimAnnotationPrefix: `${D}/ghost.`,
      finalizer: { name: `${D}/ghost-claims` },
    });
    try {
      await client.create(
        Resources.pods,
        podManifest({
          name: 'ghost-1',
          namespace: ns,
          nodeName: node!,
          labels: { app: `${id}-ghost`, [POOL]: 'before-the-crd' },
        }),
      );
      const st = await placementCondition(name, 'Ready', 'False', 'OwnerKindUnknown');
      assert.equal(findCondition(st.conditions, 'OwnerKindResolved')?.status, 'False');
      assert.match(
        findCondition(st.conditions, 'OwnerKindResolved')!.message,
        new RegExp(`Ghost \\(${D}/v1\\)`),
      );
      await placementEvent(name, 'OwnerKindUnknown', 'Ghost');
      // The label and claim do not need the kind: they are placed, and counted.
      await waitFor(
        'the node labelled meanwhile',
        async () =>
          (await client.get(Resources.nodes, node!)).metadata?.labels?.[`${D}/ghost-agent`] === 'true',
      );
      await waitFor('the claim counted', async () => (await placementStatus(name))?.claims === 1);

      // Checks without an event come at 1, 3, 7, then 15 s: installed after 7 s, the CRD is seen
      // through its watch well before the next one.
      await sleep(Math.max(0, created + 7500 - Date.now()));
      const installed = Date.now();
      await client.create(
        Resources.crds,
        schemalessCrd({ group: D, kind: 'Ghost', plural: 'ghosts', namespaced: true }).crd,
      );
      // Timed from when discovery serves the kind: before that Berth cannot use it, whatever it
      // does, and on a loaded machine the apiserver takes seconds to get there.
      await waitFor('discovery serving Ghost', async () =>
        (await client.request<{ resources: { kind: string }[] }>('GET', `/apis/${D}/v1`)).resources.some(
          (r) => r.kind === 'Ghost',
        ),
      );
      const served = Date.now();
      await placementCondition(name, 'Ready', 'True', 'Placed', 10_000);
      const recovered = Date.now() - served;
      assert.ok(
        recovered < 4000,
        `Ready ${recovered} ms after discovery served the kind (${served - installed} ms after the CRD was created)`,
      );
      assert.equal(
        findCondition((await placementStatus(name))?.conditions, 'OwnerKindResolved')?.reason,
        'Resolved',
      );

      // And the finalizer works on the new kind: a Ghost whose pod is claimed gets it.
      const ghosts = { group: D, version: 'v1', resource: 'ghosts', kind: 'Ghost', namespaced: true };
      const ghost = await client.create(ghosts, {
        apiVersion: `${D}/v1`,
        kind: 'Ghost',
        metadata: { name: 'g1', namespace: ns },
      });
      await client.patch(
        Resources.pods,
        'ghost-1',
        { metadata: { labels: { [POOL]: ghost.metadata!.uid! } } },
        { namespace: ns },
      );
      await waitFor('the finalizer on the Ghost', async () =>
        (await client.get(ghosts, 'g1', ns)).metadata?.finalizers?.includes(`${D}/ghost-claims`),
      );
      await deletePod('ghost-1');
      await client.delete(ghosts, 'g1', ns);
      await waitFor('the Ghost gone', () =>
        client.get(ghosts, 'g1', ns).then(
          () => false,
          () => true,
        ),
      );
    } finally {
      await client.delete(AgentPlacement.ref, name).catch(() => {});
    }
  });

  test('a claim key another field manager holds is neither taken nor counted, and the placement says so', async () => {
    const name = `${id}-held`;
    const [node] = await addNodes(client, { prefix: `${id}-held`, count: 1 });
    nodes.push(node!);
    const held = `${D}/held.o1`;
    await client.apply(
      Resources.nodes,
      { apiVersion: 'v1', kind: 'Node', metadata: { name: node!, annotations: { [held]: 'someone-else' } } },
      { fieldManager: 'test-admin' },
    );
    await applyPlacement(name, {
      podSelector: { matchLabels: { app: `${id}-held` } },
      owner: { uidLabel: POOL },
      nodeLabel: { key: `${D}/held-agent` },
      claimAnnotationPrefix: `${D}/held.`,
    });
    try {
      for (const [pod, uid] of [
        ['held-1', 'o1'],
        ['held-2', 'o2'],
      ] as const) {
        await client.create(
          Resources.pods,
          podManifest({
            name: pod,
            namespace: ns,
            nodeName: node!,
            labels: { app: `${id}-held`, [POOL]: uid },
          }),
        );
      }
      const st = await placementCondition(name, 'Ready', 'False', 'Conflicting');
      await waitFor(
        'one claim counted, the one on the node',
        async () => (await placementStatus(name))?.claims === 1,
        {
          observe: () => placementStatus(name),
        },
      );
      assert.match(
        findCondition(st.conditions, 'Conflicting')!.message,
        new RegExp(`annotation ${held.replaceAll('.', '\\.')} on node`),
      );
      const n = await client.get(Resources.nodes, node!);
      assert.equal(n.metadata?.annotations?.[held], 'someone-else');
      // A uidLabel owner without a kind is described by its namespace.
      assert.equal(n.metadata?.annotations?.[`${D}/held.o2`], ns);
      await deletePod('held-1');
      await deletePod('held-2');
    } finally {
      await client.delete(AgentPlacement.ref, name).catch(() => {});
    }
  });

  test('a node Berth may not write: Ready=False WriteFailed naming it, a Warning on the node; placed once allowed', async () => {
    const name = `${id}-wf`;
    const label = `${D}/wf-agent`;
    const [node] = await addNodes(client, { prefix: `${id}-wf`, count: 1 });
    nodes.push(node!);
    const allow = await refuseNodeLabel(client, name, node!, label, 'refused by the test');
    await applyPlacement(name, {
      podSelector: { matchLabels: { app: `${id}-wf` } },
      owner: { uidLabel: POOL },
      nodeLabel: { key: label },
      claimAnnotationPrefix: `${D}/wf.`,
    });
    try {
      await client.create(
        Resources.pods,
        podManifest({
          name: 'wf-1',
          namespace: ns,
          nodeName: node!,
          labels: { app: `${id}-wf`, [POOL]: 'o1' },
        }),
      );
      const st = await placementCondition(name, 'Ready', 'False', 'WriteFailed');
      assert.match(
        findCondition(st.conditions, 'Ready')!.message,
        new RegExp(`node ${node} could not be written: .*refused by the test`),
      );
      await waitFor('a Warning WriteFailed on the node', async () =>
        (await client.list<Event>(Resources.events, { namespace: 'default' })).items.some(
          (e) => e.regarding?.name === node && e.type === 'Warning' && e.reason === 'WriteFailed',
        ),
      );
      await allow();
      await placementCondition(name, 'Ready', 'True', 'Placed', 60_000);
      await deletePod('wf-1');
    } finally {
      await allow();
      await client.delete(AgentPlacement.ref, name).catch(() => {});
    }
  });

  test('berth agents test (berth plan now) refuses what Berth would: a claim prefix overlapping a placement of the cluster, first by name', () => {
    const dir = mkdtempSync(join(tmpdir(), 'berth-agents-test-'));
    const file = join(dir, 'overlap.yaml');
    // `${id}-z…` sorts after the cluster's `${id}`, whose prefix `${CLAIM}` this one extends.
    writeFileSync(
      file,
      JSON.stringify({
        apiVersion: AgentPlacement.apiVersion,
        kind: 'AgentPlacement',
        metadata: { name: `${id}-zz` },
        spec: {
          podSelector: { matchLabels: { app: `${id}-zz` } },
          owner: { uidLabel: POOL },
          nodeLabel: { key: `${D}/zz-agent` },
          claimAnnotationPrefix: `${CLAIM}zz.`,
        },
      }),
    );
    try {
      const r = runBerthCli(['agents', 'test', file, `--kubeconfig=${sandbox.kubeconfigPath}`]);
      assert.equal(r.status, 1, r.stderr);
      // A deprecated alias of berth plan: it says so, and plans as berth plan does.
      assert.match(r.stderr, /^berth: deprecated: use berth plan -f /);
      assert.match(
        r.stdout,
        new RegExp(
          `error: AgentPlacement ${id}-zz would be Invalid and apply nothing: .*overlaps "${CLAIM.replaceAll('.', '\\.')}" of AgentPlacement ${id} \\(first by name\\)`,
        ),
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('Berth asks before it watches an owner kind; its generated ClusterRole covers what agent placement needs, owner kinds only when opted into', async () => {
    const user = `${id}-berth`;
    const asUser = KubeClient.fromFile(await sandbox.mintUser(user));
    const verbs = ['list', 'watch', 'patch'];
    const grant = async (opts: RbacOptions) => {
      const rules = (
        rbacManifests(capabilities, opts).find((o) => o.kind === 'ClusterRole') as KubeObject & {
          rules: [];
        }
      ).rules;
      await client.apply(Resources.clusterRoles, clusterRole(user, rules), {
        fieldManager: 'test',
        force: true,
      });
    };
    try {
      assert.deepEqual(await deniedVerbs(client, Resources.secrets, verbs), []);
      assert.deepEqual(await deniedVerbs(asUser, Resources.crds, ['list', 'watch']), ['list', 'watch']);
      await grant({});
      await client.create(Resources.clusterRoleBindings, {
        apiVersion: 'rbac.authorization.k8s.io/v1',
        kind: 'ClusterRoleBinding',
        metadata: { name: user },
        roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: user },
        subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: user }],
      });
      // CRDs, to check an owner kind again when it appears; no workload kind, no secrets.
      await waitFor(
        'the role in effect',
        async () => (await deniedVerbs(asUser, Resources.crds, ['list', 'watch'])).length === 0,
      );
      for (const ref of [Resources.deployments, Resources.secrets])
        assert.deepEqual(
          await deniedVerbs(asUser, ref, ['watch', 'patch']),
          ['watch', 'patch'],
          ref.resource,
        );
      // DaemonSets are read by the gates, never written (`berth gates tolerate` is the user's).
      assert.deepEqual(await deniedVerbs(asUser, Resources.daemonSets, ['watch', 'patch']), ['patch']);
      // Deployments opted in: Berth may watch and patch them, and still nothing else.
      await grant({ finalizerOwners: ['deployments.apps'] });
      await waitFor(
        'the opted-in kind in effect',
        async () => (await deniedVerbs(asUser, Resources.deployments, verbs)).length === 0,
      );
      assert.deepEqual(await deniedVerbs(asUser, Resources.daemonSets, ['patch']), ['patch']);
      assert.deepEqual(await deniedVerbs(asUser, Resources.secrets, verbs), verbs);
    } finally {
      asUser.close();
      await client.delete(Resources.clusterRoleBindings, user).catch(() => {});
      await client.delete(Resources.clusterRoles, user).catch(() => {});
    }
  });
});
