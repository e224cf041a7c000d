// test-driver: alone — its Berth runs the agents, gates and arch controllers, whose webhooks would
// be sent the pods of the files beside it (and count their reviews) if they ran at once.
//
// What reaches Berth's webhooks, against the real apiserver (decision 0043): a webhook entry
// carries what its live policies select, so a pod no policy selects is never sent; a new policy's
// pods are sent before it says Ready; the last policy gone takes the entry with it.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { AgentPlacement } from '../../src/agents/crd.ts';
import { installCrds } from '../../src/cli/install.ts';
import { findCondition, type Condition } from '../../src/runtime/api/conditions.ts';
import { isNotFound } from '../../src/runtime/client/client.ts';
import { Resources } from '../../src/runtime/api/meta.ts';
import {
  createNamespace,
  deleteNamespace,
  podManifest,
  testSandbox,
  uniqueName,
} from '../helpers/cluster.ts';
import { berthKubeconfig, removeBerthIdentity, startBerth, type BerthProcess } from '../helpers/berth.ts';
import { waitFor } from '../helpers/wait.ts';
import { webhookFieldManager } from '../../src/runtime/webhook/registration.ts';

const sandbox = testSandbox();
const client = sandbox.client();
const id = uniqueName('scope');
const D = `${id}.example.com`;
const POOL = `${D}/pool`;
const identity = { name: id, webhookConfiguration: id };
const AGENTS = 'pods.agents.berth.dev';
const ARCH = 'pods.arch.berth.dev';
let ns: string;
let berth: BerthProcess;

before(async () => {
  await installCrds(client);
  ns = await createNamespace(client, 'scope');
  berth = await startBerth(
    sandbox,
    ['--controllers=agents,gates,arch', `--webhook-configuration=${identity.webhookConfiguration}`],
    { kubeconfig: await berthKubeconfig(sandbox, identity) },
  );
});

after(async () => {
  for (const p of (await client.list(AgentPlacement.ref)).items) {
    if (p.metadata!.name!.startsWith(id))
      await client.delete(AgentPlacement.ref, p.metadata!.name!).catch(() => {});
  }
  await waitFor('the placements gone', async () =>
    (await client.list(AgentPlacement.ref)).items.every((p) => !p.metadata!.name!.startsWith(id)),
  );
  await berth?.stop();
  for (const ref of [Resources.mutatingWebhookConfigurations, Resources.validatingWebhookConfigurations]) {
    await client.delete(ref, identity.webhookConfiguration).catch((e: unknown) => {
      if (!isNotFound(e)) throw e;
    });
  }
  await deleteNamespace(client, ns);
  await removeBerthIdentity(client, identity);
  client.close();
});

const reviews = (webhook: string) =>
  berth.metric('controller_runtime_webhook_requests_total', (l) => l.includes(`webhook="${webhook}"`));

const entries = async (): Promise<string[]> => {
  const got = await Promise.all(
    [Resources.mutatingWebhookConfigurations, Resources.validatingWebhookConfigurations].map((ref) =>
      client.get(ref, identity.webhookConfiguration),
    ),
  );
  return got.flatMap((c) => ((c['webhooks'] as { name: string }[] | undefined) ?? []).map((w) => w.name));
};

const mutatingEntry = async (name: string) =>
  (
    (await client.get(Resources.mutatingWebhookConfigurations, identity.webhookConfiguration))['webhooks'] as
      | { name: string; objectSelector?: unknown; matchConditions?: { name: string; expression: string }[] }[]
      | undefined
  )?.find((w) => w.name === name);

/** A placement whose pods (by `app`, in this file's namespace) wait for an agent. */
const applyPlacement = (name: string, app: string) =>
  client.apply(
    AgentPlacement.ref,
    {
      apiVersion: AgentPlacement.apiVersion,
      kind: 'AgentPlacement',
      metadata: { name },
      spec: {
        namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': ns } },
        podSelector: { matchLabels: { app } },
        owner: { uidLabel: POOL },
        nodeLabel: { key: `${D}/${name}` },
        claimAnnotationPrefix: `${D}/${name}.`,
        waitForAgent: { port: 8085 },
      },
    },
    { fieldManager: 'test-author', force: true },
  );

/** Ready True for the placement's current generation, as a user (or kstatus) reads it. */
const ready = async (name: string): Promise<boolean> => {
  const p = await client.get(AgentPlacement.ref, name);
  const status = p['status'] as { observedGeneration?: number; conditions?: Condition[] } | undefined;
  return (
    status?.observedGeneration === p.metadata?.generation &&
    findCondition(status?.conditions, 'Ready')?.status === 'True'
  );
};

/** Creates a pod once, and says whether the webhook gave it the wait-for-agent init container. */
async function waited(app: string): Promise<boolean> {
  const created = await client.create(
    Resources.pods,
    podManifest({ name: uniqueName('p'), namespace: ns, labels: { app, [POOL]: 'u1' } }),
  );
  const inits = (created['spec'] as { initContainers?: { name: string }[] }).initContainers ?? [];
  return inits.some((c) => c.name.startsWith('berth-wait-for-agent-'));
}

describe('webhook scope', () => {
  test('no policy: pods reach no webhook of Berth, which has no pod webhook entry', async () => {
    const waiting = (await client.list(AgentPlacement.ref)).items.filter(
      (p) => (p['spec'] as { waitForAgent?: unknown }).waitForAgent,
    );
    assert.deepEqual(
      waiting.map((p) => p.metadata!.name),
      [],
      'no placement with waitForAgent in the sandbox',
    );
    await waitFor('the configurations applied by Berth', async () => {
      const c = await client.get(Resources.mutatingWebhookConfigurations, identity.webhookConfiguration);
      return (c.metadata?.managedFields as { manager?: string }[] | undefined)?.some(
        (f) => f.manager === webhookFieldManager,
      );
    });
    const before = (await reviews(AGENTS)) + (await reviews(ARCH));
    for (let i = 0; i < 5; i++) assert.equal(await waited('nobody'), false);
    assert.equal(
      (await reviews(AGENTS)) + (await reviews(ARCH)),
      before,
      'pods sent to a webhook with no policy',
    );
    const e = await entries();
    assert.ok(!e.includes(AGENTS) && !e.includes(ARCH), e.join(','));
  });

  test('a new placement: its pods are sent before it says Ready, others never; a second one joins by CEL', async () => {
    const a = `${id}-a`;
    await applyPlacement(a, `${id}-a`);
    // The first pod after Ready is changed: no retry, no gap.
    await waitFor('the placement Ready', () => ready(a), { intervalMs: 20 });
    assert.equal(await waited(`${id}-a`), true, 'the first pod after Ready went without the webhook');
    const sent = await reviews(AGENTS);
    for (let i = 0; i < 5; i++) assert.equal(await waited('nobody'), false);
    assert.equal(await reviews(AGENTS), sent, 'pods no placement selects were sent');
    assert.deepEqual((await mutatingEntry(AGENTS))?.objectSelector, { matchLabels: { app: `${id}-a` } });

    const b = `${id}-b`;
    await applyPlacement(b, `${id}-b`);
    await waitFor('the second placement Ready', () => ready(b), { intervalMs: 20 });
    assert.equal(await waited(`${id}-b`), true, 'the second placement’s first pod after Ready');
    assert.equal(await waited(`${id}-a`), true, 'the first placement’s pods still sent');
    const entry = await mutatingEntry(AGENTS);
    assert.equal(entry?.matchConditions?.length, 1, 'two pod selectors: one CEL condition');
    const now = await reviews(AGENTS);
    for (let i = 0; i < 3; i++) assert.equal(await waited('nobody'), false);
    assert.equal(await reviews(AGENTS), now, 'pods neither placement selects were sent');
  });

  test('the last placement gone takes the webhook entry with it', async () => {
    for (const p of (await client.list(AgentPlacement.ref)).items) {
      if (p.metadata!.name!.startsWith(id)) await client.delete(AgentPlacement.ref, p.metadata!.name!);
    }
    await waitFor('no agents webhook entry', async () => !(await entries()).includes(AGENTS), {
      observe: async () => (await entries()).join(','),
    });
  });
});
