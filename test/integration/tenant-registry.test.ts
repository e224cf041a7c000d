// test-driver: alone — its `berth run` registers the webhook configuration named berth.
// test-driver: registry
//
// Issue 47, as tenants: namespace users minted with `berth sandbox user`, each given only the `edit`
// ClusterRole in a namespace of their own, write the pull secrets and pods that Berth reads with
// cluster-wide rights, against the real control plane and the sandbox registry. A pull-secret key
// must not stop Berth (its probes, its other capabilities), and a private image one tenant's secret
// read must not place another tenant's pod that has no such secret. Issue 59: a tenant's pods naming
// many registries that never answer must not hold every registry read Berth makes, and an image
// index (or the digest itself) must not tell a tenant what another tenant's secret read.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { parse as parseYaml, stringify as toYaml } from 'yaml';
import { gated as hasGate } from '../../src/arch/decide/patches.ts';
import { MAX_POD_IMAGES } from '../../src/arch/decide/images.ts';
import { type ArchPod } from '../../src/arch/decide/pods.ts';
import { FAILURE_ANNOTATION, RESULT_ANNOTATION, STATE_LABEL } from '../../src/arch/types.ts';
import { ArchPlacement } from '../../src/arch/crd.ts';
import { installCrds } from '../../src/cli/install.ts';
import { NodeLabelRule } from '../../src/labels/crd.ts';
import { KubeClient } from '../../src/runtime/client/client.ts';
import { Resources, type KubeObject } from '../../src/runtime/api/meta.ts';
import type { Event } from '../../src/runtime/events/event.ts';
import type { SandboxRegistry } from '../../src/sandbox/registry.ts';
import { berthKubeconfig, startBerth, type BerthProcess } from '../helpers/berth.ts';
import {
  addNodes,
  createNamespace,
  deleteNamespace,
  deleteNodes,
  testSandbox,
  uniqueName,
  untilAllowed,
} from '../helpers/cluster.ts';
import {
  addTokenPolicy,
  dockerConfigSecret,
  MediaType,
  platform,
  RegistryPusher,
  startSilentRegistries,
  type SilentRegistries,
} from '../helpers/registry.ts';
import { waitFor } from '../helpers/wait.ts';

const sandbox = testSandbox();
const client = sandbox.client();
const id = uniqueName('tenant');
const POOL = 'tenantit.berth.dev/pool';
const berthNs = `${id}-berth`;
let reg: SandboxRegistry;
let pusher: RegistryPusher;
let berth: BerthProcess | undefined;
const nodes: string[] = [];
const namespaces: string[] = [];
const users = new Map<string, { ns: string; client: KubeClient }>();
const work = mkdtempSync(join(tmpdir(), 'berth-tenant-registry-'));
/** Three pods' worth of registries that never answer: more than all of Berth's registry requests in flight. */
const SILENT = 3 * MAX_POD_IMAGES;
let silent: SilentRegistries;

/** A namespace user: a client certificate of the sandbox CA, bound to `edit` in a namespace of its own. */
async function tenant(name: string): Promise<{ ns: string; client: KubeClient }> {
  const ns = await createNamespace(client, `${id}-${name}`);
  namespaces.push(ns);
  const user = `${id}-${name}`;
  await client.create(Resources.roleBindings, {
    apiVersion: 'rbac.authorization.k8s.io/v1',
    kind: 'RoleBinding',
    metadata: { name: `${user}-edit`, namespace: ns },
    roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'edit' },
    subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: user }],
  });
  const t = { ns, client: KubeClient.fromFile(await sandbox.mintUser(user)) };
  await untilAllowed(t.client, ns, 'create', 'pods');
  users.set(name, t);
  return t;
}

const podObject = (
  namespace: string,
  name: string,
  images: string[],
  pullSecrets: string[] = [],
): KubeObject => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { name, namespace },
  spec: {
    nodeSelector: { [POOL]: id },
    containers: images.map((image, i) => ({ name: `c${i}`, image })),
    ...(pullSecrets.length ? { imagePullSecrets: pullSecrets.map((s) => ({ name: s })) } : {}),
  },
});

const podSettled = (c: KubeClient, ns: string, name: string) =>
  waitFor(
    `pod ${ns}/${name} ungated`,
    async () => {
      const p = await c.get<ArchPod>(Resources.pods, name, ns);
      return p.metadata?.labels?.[STATE_LABEL] !== undefined && !hasGate(p) && p;
    },
    { timeoutMs: 45_000, observe: () => c.get(Resources.pods, name, ns) },
  );

before(async () => {
  assert.ok(sandbox.registry, 'the test sandbox runs a registry (this file says test-driver: registry)');
  reg = sandbox.registry;
  pusher = new RegistryPusher(reg);
  await installCrds(client);
  nodes.push(...(await addNodes(client, { prefix: `${id}-amd`, arch: 'amd64', labels: { [POOL]: id } })));
  nodes.push(...(await addNodes(client, { prefix: `${id}-arm`, arch: 'arm64', labels: { [POOL]: id } })));
  await pusher.pushImage(`${id}/amd`, 'v1', platform('linux/amd64'));
  const alice = await tenant('alice');
  const bob = await tenant('bob');
  const mallory = await tenant('mallory');
  await client.create(Resources.namespaces, {
    apiVersion: 'v1',
    kind: 'Namespace',
    metadata: { name: berthNs },
  });
  namespaces.push(berthNs);
  await client.apply(
    ArchPlacement.ref,
    {
      apiVersion: ArchPlacement.apiVersion,
      kind: ArchPlacement.kind,
      metadata: { name: id },
      spec: {
        namespaceSelector: {
          matchExpressions: [
            {
              key: 'kubernetes.io/metadata.name',
              operator: 'In',
              values: [alice.ns, bob.ns, mallory.ns],
            },
          ],
        },
        onFailure: { action: 'Release', retries: 0 },
      },
    },
    { fieldManager: 'test-author', force: true },
  );
  process.env['POD_NAMESPACE'] = berthNs;
  // The sandbox registry and the silent ones are on a loopback address: read only where its admin
  // allows it, as here.
  silent = await startSilentRegistries(SILENT);
  const registries = parseYaml(readFileSync(reg.registriesPath, 'utf8')) as {
    registries: Record<string, unknown>;
  };
  for (const host of silent.hosts)
    registries.registries[host] = { server: `http://${host}`, insecure: true, allowPrivate: true };
  const registriesPath = join(work, 'registries.yaml');
  writeFileSync(registriesPath, toYaml(registries));
  berth = await startBerth(
    sandbox,
    ['--controllers=arch,labels', `--arch-registries=${registriesPath}`, '--arch-admission-wait=1.5'],
    {
      capture: true,
      kubeconfig: await berthKubeconfig(sandbox, { pullSecretNamespaces: [alice.ns, bob.ns] }),
    },
  );
  // The apiserver's webhook configuration cache lags the registration: probe until a pod is gated.
  await waitFor(
    'the arch webhook gating new pods',
    async () => {
      const name = uniqueName('probe');
      const p = (await client.create(
        Resources.pods,
        podObject(alice.ns, name, [`${reg.host}/${id}/probe-${name}:v1`]),
      )) as ArchPod;
      await client.delete(Resources.pods, name, alice.ns, { gracePeriodSeconds: 0 });
      return hasGate(p);
    },
    { intervalMs: 500, observe: () => berth?.output().slice(-3000) },
  );
});

after(async () => {
  await berth?.stop();
  await silent?.close();
  rmSync(work, { recursive: true, force: true });
  await client
    .patch(ArchPlacement.ref, id, { metadata: { finalizers: null } }, { type: 'merge' })
    .catch(() => {});
  await client.delete(ArchPlacement.ref, id).catch(() => {});
  await client.delete(NodeLabelRule.ref, id).catch(() => {});
  await client.delete(Resources.mutatingWebhookConfigurations, 'berth').catch(() => {});
  for (const u of users.values()) u.client.close();
  for (const ns of namespaces) await deleteNamespace(client, ns);
  await deleteNodes(client, nodes);
  client.close();
});

test('attack 1: a pull-secret key of *a*a…b and a pod of a long host leave /healthz and the labels capability working', async () => {
  const alice = users.get('alice')!;
  await alice.client.create(
    Resources.secrets,
    dockerConfigSecret(alice.ns, 'evil', '*a*a*a*a*a*a*a*a*a*ab.x', 'u', 'p'),
  );
  const pod = uniqueName('evil');
  await alice.client.create(
    Resources.pods,
    podObject(alice.ns, pod, [`${'a'.repeat(120)}.x/app:v1`], ['evil']),
  );
  // Within 5 s of the pod, a RegExp held the thread for good: the probe answers all along.
  const until = Date.now() + 10_000;
  while (Date.now() < until) {
    const res = await fetch(`http://127.0.0.1:${berth!.healthPort}/healthz`, {
      signal: AbortSignal.timeout(2000),
    });
    assert.equal(res.status, 200);
    await new Promise((r) => setTimeout(r, 250));
  }
  // Another capability: a NodeLabelRule still labels this file's nodes.
  const label = `${id}.example.com/still-working`;
  await client.apply(
    NodeLabelRule.ref,
    {
      apiVersion: NodeLabelRule.apiVersion,
      kind: 'NodeLabelRule',
      metadata: { name: id },
      spec: {
        match: { allOf: [{ label: POOL, operator: 'In', values: [id] }] },
        labels: { [label]: 'true' },
      },
    },
    { fieldManager: 'test-author', force: true },
  );
  await waitFor(
    'the labels capability to label the nodes',
    async () => {
      const all = await Promise.all(nodes.map((n) => client.get(Resources.nodes, n)));
      return all.every((n) => n.metadata?.labels?.[label] === 'true');
    },
    { timeoutMs: 20_000 },
  );
  // And the pod itself is decided (its host does not resolve: released unplaced), not stuck.
  const settled = await podSettled(alice.client, alice.ns, pod);
  assert.ok(settled.metadata?.annotations?.[FAILURE_ANNOTATION], 'released with the failure named');
});

test('attack 7a: a private image read with one tenant’s pull secret does not place another tenant’s pod without one', async () => {
  const alice = users.get('alice')!;
  const bob = users.get('bob')!;
  const user = `${id}-puller`;
  const password = uniqueName('pw');
  const removePolicy = addTokenPolicy(reg, { users: { [user]: { password, pull: [`private/${id}/*`] } } });
  try {
    const repo = `private/${id}/app`;
    await pusher.pushIndex(repo, 'v1', ['linux/arm64'].map(platform));
    const ref = `${reg.host}/${repo}:v1`;
    // Bob's pod, with Bob's secret: read with it, and placed on arm64.
    await bob.client.create(Resources.secrets, dockerConfigSecret(bob.ns, 'pull', reg.host, user, password));
    const bobs = uniqueName('bob');
    await bob.client.create(Resources.pods, podObject(bob.ns, bobs, [ref], ['pull']));
    const placed = await podSettled(bob.client, bob.ns, bobs);
    assert.equal(placed.metadata?.labels?.[STATE_LABEL], 'Placed');
    // Alice's pods name the same image, one with no pull secret, one with a secret of Bob's
    // namespace's name: neither is placed from what Bob's secret read.
    const alices = uniqueName('alice');
    await alice.client.create(Resources.pods, podObject(alice.ns, alices, [ref]));
    const hers = await podSettled(alice.client, alice.ns, alices);
    assert.notEqual(hers.metadata?.labels?.[STATE_LABEL], 'Placed', JSON.stringify(hers.metadata));
    assert.match(hers.metadata?.annotations?.[FAILURE_ANNOTATION] ?? '', /^Unauthorized: /);
    assert.equal(hers.metadata?.annotations?.[RESULT_ANNOTATION], undefined);
    const named = uniqueName('alice-named');
    await alice.client.create(Resources.pods, podObject(alice.ns, named, [ref], ['pull']));
    const namedPod = await podSettled(alice.client, alice.ns, named);
    assert.notEqual(namedPod.metadata?.labels?.[STATE_LABEL], 'Placed', JSON.stringify(namedPod.metadata));
  } finally {
    removePolicy();
  }
});

test('a pod naming more images than Berth reads for one pod: a Warning, and released unplaced at once', async () => {
  const alice = users.get('alice')!;
  const name = uniqueName('many');
  const images = Array.from({ length: MAX_POD_IMAGES + 1 }, (_, i) => `${reg.host}/${id}/many${i}:v1`);
  await alice.client.create(Resources.pods, podObject(alice.ns, name, images));
  const settled = await podSettled(alice.client, alice.ns, name);
  assert.match(
    settled.metadata?.annotations?.[FAILURE_ANNOTATION] ?? '',
    /^Bounded: the pod names 33 images/,
  );
  const ev = await waitFor('a Warning on the pod', async () =>
    (await client.list<Event>(Resources.events, { namespace: alice.ns })).items.find(
      (e) => e.regarding?.name === name && e.type === 'Warning' && e.reason === 'InspectionFailed',
    ),
  );
  assert.match(ev.note, new RegExp(`Berth reads at most ${MAX_POD_IMAGES} for one pod`));
});

test('issue 59: an index of a registry a tenant controls, or the digest alone, does not tell it what another tenant’s secret read', async () => {
  const alice = users.get('alice')!;
  const bob = users.get('bob')!;
  const user = `${id}-reader`;
  const password = uniqueName('pw');
  const removePolicy = addTokenPolicy(reg, { users: { [user]: { password, pull: [`private/${id}/*`] } } });
  try {
    const repo = `private/${id}/secret`;
    const { index } = await pusher.pushIndex(repo, 'v1', ['linux/arm64'].map(platform));
    // Bob's pod reads it with Bob's secret: placed on arm64, and its platforms cached.
    await bob.client.create(
      Resources.secrets,
      dockerConfigSecret(bob.ns, 'reader', reg.host, user, password),
    );
    const bobs = uniqueName('bob');
    await bob.client.create(Resources.pods, podObject(bob.ns, bobs, [`${reg.host}/${repo}:v1`], ['reader']));
    assert.equal((await podSettled(bob.client, bob.ns, bobs)).metadata?.labels?.[STATE_LABEL], 'Placed');

    // Alice's index, in a repository anyone reads, names Bob's digest without its platform: Berth
    // follows it in Alice's repository, which does not hold it.
    const mine = `${id}/alice-index`;
    await pusher.pushManifest(
      mine,
      'v1',
      {
        schemaVersion: 2,
        mediaType: MediaType.ociIndex,
        manifests: [{ mediaType: MediaType.ociIndex, digest: index.digest, size: index.size }],
      },
      MediaType.ociIndex,
    );
    const viaIndex = uniqueName('alice-index');
    await alice.client.create(Resources.pods, podObject(alice.ns, viaIndex, [`${reg.host}/${mine}:v1`]));
    const hers = await podSettled(alice.client, alice.ns, viaIndex);
    assert.notEqual(hers.metadata?.labels?.[STATE_LABEL], 'Placed', JSON.stringify(hers.metadata));
    assert.match(hers.metadata?.annotations?.[FAILURE_ANNOTATION] ?? '', /^NotFound: /);
    assert.equal(hers.metadata?.annotations?.[RESULT_ANNOTATION], undefined);

    // Nor did that make the digest anyone's: by digest, without a secret, it is asked of the registry.
    const byDigest = uniqueName('alice-digest');
    await alice.client.create(
      Resources.pods,
      podObject(alice.ns, byDigest, [`${reg.host}/${repo}@${index.digest}`]),
    );
    const direct = await podSettled(alice.client, alice.ns, byDigest);
    assert.notEqual(direct.metadata?.labels?.[STATE_LABEL], 'Placed', JSON.stringify(direct.metadata));
    assert.match(direct.metadata?.annotations?.[FAILURE_ANNOTATION] ?? '', /^Unauthorized: /);
    assert.equal(direct.metadata?.annotations?.[RESULT_ANNOTATION], undefined);
  } finally {
    removePolicy();
  }
});

// Last: Mallory's reads go on until each pod's reads give up (30 s).
test('issue 59: a tenant’s pods naming many registries that never answer do not hold another namespace’s pod', async (t) => {
  const mallory = users.get('mallory')!;
  const bob = users.get('bob')!;
  await pusher.pushImage(`${id}/fair`, 'v1', platform('linux/arm64'));
  for (let p = 0; p * MAX_POD_IMAGES < SILENT; p++) {
    const hosts = silent.hosts.slice(p * MAX_POD_IMAGES, (p + 1) * MAX_POD_IMAGES);
    await mallory.client.create(
      Resources.pods,
      podObject(
        mallory.ns,
        uniqueName('silent'),
        hosts.map((h) => `${h}/app:v1`),
      ),
    );
  }
  // Mallory's reads hold what Berth lets them: all of its registry requests in flight before.
  await waitFor('Mallory’s reads to wait on the silent registries', () => silent.connections() >= 16, {
    timeoutMs: 20_000,
  });
  await new Promise((r) => setTimeout(r, 1000));
  const started = Date.now();
  const name = uniqueName('bob-fair');
  await bob.client.create(Resources.pods, podObject(bob.ns, name, [`${reg.host}/${id}/fair:v1`]));
  // A silent registry's request holds its place for the request timeout (10 s): Bob's pod is
  // decided well before any of Mallory's gives one back.
  const decided = await waitFor(
    `pod ${bob.ns}/${name} decided while Mallory's reads wait`,
    async () => {
      const p = await bob.client.get<ArchPod>(Resources.pods, name, bob.ns);
      return p.metadata?.labels?.[STATE_LABEL] !== undefined && !hasGate(p) && p;
    },
    { timeoutMs: 8_000, observe: () => bob.client.get(Resources.pods, name, bob.ns) },
  );
  assert.equal(decided.metadata?.labels?.[STATE_LABEL], 'Placed', JSON.stringify(decided.metadata));
  const took = Date.now() - started;
  assert.ok(took < 8_000);
  t.diagnostic(
    `Bob's pod decided ${took} ms after it was created; ${silent.connections()} connections to the silent registries`,
  );
});
