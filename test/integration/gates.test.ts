// Startup gates against the real control plane (controller-manager, scheduler, kwok): tainted at
// admission, released when the init DaemonSet's pod is Ready, the annotation shortcut, timeouts,
// continuous mode, the webhook down (fallback, and failurePolicy Fail), backfill, deletion, bad specs;
// ordered gates (after), annotation-only readiness, pods created with spec.nodeName on a held node,
// and the pods that started on a node before its release.
import { PolicyKit } from '../../src/policy/kit.ts';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { inspect, promisify } from 'node:util';
import { after, before, describe, test } from 'node:test';
import { installCrds } from '../../src/cli/install.ts';
import { setupGates } from '../../src/gates/setup.ts';
import { explainNodeGates } from '../../src/gates/explain.ts';
import { GATE_FINALIZER, type NodeStartupGateStatus } from '../../src/gates/types.ts';
import { NodeStartupGate } from '../../src/gates/crd.ts';
import type { Event } from '../../src/runtime/events/event.ts';
import { ApiError } from '../../src/runtime/client/client.ts';
import { Manager } from '../../src/runtime/manager/manager.ts';
import { Resources, type KubeObject } from '../../src/runtime/api/meta.ts';
import { generatedCertificates, WebhookRunnable } from '../../src/runtime/webhook/registration.ts';
import type { WebhookSpec } from '../../src/runtime/webhook/registration.ts';
import { KWOK_ANNOTATION, nodeManifests } from '../../src/sandbox/nodes.ts';
import {
  createNamespace,
  deleteNamespace,
  deleteNodes,
  podManifest,
  testSandbox,
  uniqueName,
} from '../helpers/cluster.ts';
import { berthClient, removeBerthIdentity } from '../helpers/berth.ts';
import { TEST_WEBHOOK_TIMEOUT_SECONDS } from '../helpers/admission.ts';
import { holdsFor, sleep, waitFor } from '../helpers/wait.ts';

const sandbox = testSandbox();
const client = sandbox.client();
const id = uniqueName('gt');
const D = `${id}.example.com`;
const POOL = `${D}/pool`;
let ns: string;
const nodes: string[] = [];
const gates: string[] = [];
/** A gate for the dry-run nodes that tell when the webhook is live (startWebhooks). */
const PROBE_GATE = `${id}-probe`;

// Berth's identity for this file, with this file's webhook configurations; the strict one (a
// failurePolicy Fail registration) has its own.
const identity = { name: id, webhookConfiguration: id };
const strictIdentity = { name: `${id}-strict`, webhookConfiguration: `${id}-strict` };
let manager: Manager | undefined;
let controller: ReturnType<typeof setupGates> | undefined;
let hooks: WebhookRunnable | undefined;
const registration = { mode: 'url' as const, url: 'https://127.0.0.1:{port}' };

/** The gates webhook, narrowed to this file's nodes: other test files create nodes in the same sandbox. */
function ourWebhook(overrides: Partial<WebhookSpec> = {}): WebhookSpec {
  const spec = controller!.nodeWebhook;
  return {
    ...spec,
    objectSelector: {
      matchExpressions: [...(spec.objectSelector?.matchExpressions ?? []), { key: POOL, operator: 'Exists' }],
    },
    timeoutSeconds: TEST_WEBHOOK_TIMEOUT_SECONDS,
    ...overrides,
  };
}

/** The gates' Pod webhook, narrowed to this file's namespace. */
const ourPodWebhook = (): WebhookSpec => ({
  ...controller!.podWebhook,
  namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': ns } },
  timeoutSeconds: TEST_WEBHOOK_TIMEOUT_SECONDS,
});

async function startWebhooks(): Promise<void> {
  hooks = new WebhookRunnable({
    client: manager!.client(),
    server: { port: 0, certificates: generatedCertificates(registration) },
    registration,
    specs: [ourWebhook(), ourPodWebhook()],
    berthNamespace: 'berth-system',
    configName: identity.webhookConfiguration,
  });
  await hooks.start(new AbortController().signal);
  await hooks.ready();
  // The apiserver's webhook configuration cache lags the registration (and may still hold a
  // stopped server's URL, which Ignore skips).
  await webhookTaints('probe', PROBE_GATE);
}

/**
 * Until a dry-run node of `pool` comes back with `gate`'s taint: this webhook admits such nodes, and
 * its thread has been sent the gate (which follows the controller's cache, so a node created the
 * moment the cache has a gate can still reach a thread that does not).
 */
const webhookTaints = (pool: string, gate: string) =>
  waitFor(`the gates webhook tainting ${pool} nodes for ${gate}`, async () => {
    const [manifest] = nodeManifests({ prefix: uniqueName(pool), count: 1, labels: { [POOL]: pool } });
    const n = await client.create(Resources.nodes, manifest!, { dryRun: true });
    return taintsOf(n).includes(taintKey(gate));
  });

before(async () => {
  await installCrds(client);
  ns = await createNamespace(client, 'gates');
  manager = new Manager({
    client: await berthClient(sandbox, identity),
    metricsBindAddress: '0',
    healthBindAddress: '0',
  });
  controller = setupGates(new PolicyKit(manager), { workers: 4 });
  await manager.start();
  await manager.waitForCacheSync();
  await applyGate(PROBE_GATE, {
    taint: { key: taintKey(PROBE_GATE), effect: 'NoSchedule' },
    nodeSelector: { matchLabels: { [POOL]: 'probe' } },
    requirements: { pods: [{ namespace: ns, selector: { matchLabels: { app: 'never' } } }] },
  });
  await startWebhooks();
});

after(async () => {
  await hooks?.stop();
  await client.delete(Resources.mutatingWebhookConfigurations, id).catch(() => {});
  await client.delete(Resources.validatingWebhookConfigurations, id).catch(() => {});
  for (const g of gates) await client.delete(NodeStartupGate.ref, g).catch(() => {});
  // Deleting the gates releases their finalizers while the controller still runs.
  await waitFor('the gates gone', async () => {
    const left = (await client.list(NodeStartupGate.ref)).items.filter((g) =>
      gates.includes(g.metadata!.name!),
    );
    return left.length === 0;
  }).catch(() => {});
  await manager?.stop();
  await deleteNamespace(client, ns);
  await deleteNodes(client, nodes);
  for (const i of [identity, strictIdentity]) await removeBerthIdentity(client, i);
  client.close();
});

const taintKey = (gate: string) => `${D}/${gate}`;

async function applyGate(name: string, spec: Record<string, unknown>): Promise<void> {
  gates.push(name);
  await client.apply(
    NodeStartupGate.ref,
    { apiVersion: NodeStartupGate.apiVersion, kind: NodeStartupGate.kind, metadata: { name }, spec },
    { fieldManager: 'test-author', force: true },
  );
  await waitFor(`gate ${name} cached`, () => {
    const { gates, problems } = controller!.gates();
    return gates.some((g) => g.name === name) || problems.has(name);
  });
}

/** Creates a node with the pool label (kwok-managed unless told otherwise); returns it as admitted. */
async function createNode(pool: string, opts: { kwok?: boolean; labels?: Record<string, string> } = {}) {
  const name = uniqueName(pool);
  const [manifest] = nodeManifests({ prefix: name, count: 1, labels: { [POOL]: pool, ...opts.labels } });
  if (opts.kwok === false) delete manifest!.metadata!.annotations![KWOK_ANNOTATION];
  manifest!.metadata!.name = name;
  const created = await client.create(Resources.nodes, manifest!);
  nodes.push(name);
  return created;
}

const getNode = (name: string) => client.get(Resources.nodes, name);
const taintsOf = (n: KubeObject) =>
  ((n['spec'] as { taints?: { key: string }[] }).taints ?? []).map((t) => t.key);
const annotation = (n: KubeObject, key: string) => n.metadata?.annotations?.[key];
const gatedAt = (gate: string) => `${gate}.gates.berth.dev/gated-at`;
const completedAt = (gate: string) => `${gate}.gates.berth.dev/completed-at`;
const timedOutAt = (gate: string) => `${gate}.gates.berth.dev/timed-out-at`;

const tainted = (node: string, gate: string) =>
  waitFor(
    `${node} tainted by ${gate}`,
    async () => taintsOf(await getNode(node)).includes(taintKey(gate)) && (await getNode(node)),
    {
      observe: () => getNode(node),
    },
  );
const released = (node: string, gate: string, timeoutMs = 30_000) =>
  waitFor(
    `${node} released by ${gate}`,
    async () => {
      const n = await getNode(node);
      return !taintsOf(n).includes(taintKey(gate)) && annotation(n, gatedAt(gate)) === undefined && n;
    },
    { timeoutMs, observe: () => getNode(node) },
  );

async function nodeEvents(node: string): Promise<Event[]> {
  const list = await client.list<Event>(Resources.events, { namespace: 'default' });
  return list.items.filter((e) => e.regarding?.kind === 'Node' && e.regarding?.name === node);
}
const eventWith = (node: string, reason: string, text: string) =>
  waitFor(
    `event ${reason} on ${node}`,
    async () => (await nodeEvents(node)).find((e) => e.reason === reason && e.note?.includes(text)),
    {
      observe: () => nodeEvents(node),
    },
  );

const gateStatus = async (name: string) =>
  ((await client.get(NodeStartupGate.ref, name)) as KubeObject & { status?: NodeStartupGateStatus }).status;

function daemonSet(name: string, pool: string, gate: string): KubeObject {
  return {
    apiVersion: 'apps/v1',
    kind: 'DaemonSet',
    metadata: { name, namespace: ns },
    spec: {
      selector: { matchLabels: { app: name } },
      template: {
        metadata: { labels: { app: name } },
        spec: {
          nodeSelector: { [POOL]: pool },
          tolerations: [{ key: taintKey(gate), operator: 'Exists', effect: 'NoSchedule' }],
          containers: [{ name: 'warm', image: 'registry.example/warmup:1' }],
        },
      },
    },
  };
}

describe('startup gates', () => {
  test('a node is tainted at admission, released when its init DaemonSet pod is Ready, then takes the Pending workload', async () => {
    const gate = `${id}-init`;
    await applyGate(gate, {
      taint: { key: taintKey(gate), value: 'wait', effect: 'NoSchedule' },
      nodeSelector: { matchLabels: { [POOL]: 'init' } },
      requirements: { pods: [{ namespace: ns, daemonSet: 'warmup' }] },
    });
    await webhookTaints('init', gate);
    const admitted = await createNode('init');
    const node = admitted.metadata!.name!;
    assert.ok(
      taintsOf(admitted).includes(taintKey(gate)),
      `the taint is on the node from its creation; admitted with ${inspect(admitted['spec'])}, annotations ${inspect(admitted.metadata?.annotations)}`,
    );
    assert.ok(annotation(admitted, gatedAt(gate)), 'gated-at stamped at admission');
    assert.equal(annotation(admitted, `${gate}.gates.berth.dev/taint`), `${taintKey(gate)}=wait:NoSchedule`);
    // Ready, and the node lifecycle controller's not-ready taint gone: the gate's is the only taint left.
    await waitFor(
      `${node} Ready with only the gate's taint`,
      async () => {
        const n = await getNode(node);
        const ready = (n['status'] as { conditions?: { type: string; status: string }[] }).conditions?.some(
          (c) => c.type === 'Ready' && c.status === 'True',
        );
        return ready && taintsOf(n).join() === taintKey(gate);
      },
      { observe: () => getNode(node) },
    );
    // A workload that does not tolerate the gate waits, with the scheduler naming the taint.
    const workload = uniqueName('workload');
    await client.create(
      Resources.pods,
      podManifest({ name: workload, namespace: ns, nodeSelector: { [POOL]: 'init' } }),
    );
    const pod = () => client.get(Resources.pods, workload, ns);
    // The scheduler's message does not name taints; the gate's is the only one the node has.
    await waitFor(
      'the workload Unschedulable because of the gate taint',
      async () => {
        const c = (
          (await pod())['status'] as { conditions?: { type: string; reason?: string; message?: string }[] }
        ).conditions;
        return c?.some(
          (x) =>
            x.type === 'PodScheduled' &&
            x.reason === 'Unschedulable' &&
            x.message?.includes('untolerated taint'),
        );
      },
      { observe: pod },
    );
    await holdsFor(
      'the node held while no init pod exists',
      async () => taintsOf(await getNode(node)).includes(taintKey(gate)),
      1000,
    );
    const explained = (await explainNodeGates(client, await getNode(node))).join('\n');
    assert.match(explained, new RegExp(`${gate}.*HELD`));
    assert.match(explained, /waiting for pods of DaemonSet .*\/warmup: none on the node yet/);

    // The gate says the DaemonSet it waits for is missing; then that it lacks the toleration, which
    // `berth gates tolerate` adds.
    const schedulable = (status: 'True' | 'False', reason: string, text: string) =>
      waitFor(
        `RequiredPodsSchedulable ${status} ${reason} (${text})`,
        async () =>
          (await gateStatus(gate))?.conditions?.find(
            (c) =>
              c.type === 'RequiredPodsSchedulable' &&
              c.status === status &&
              c.reason === reason &&
              c.message.includes(text),
          ),
        { observe: () => gateStatus(gate) },
      );
    await schedulable('False', 'DaemonSetNotFound', 'does not exist');
    const ds = daemonSet('warmup', 'init', gate);
    delete (ds['spec'] as { template: { spec: Record<string, unknown> } }).template.spec['tolerations'];
    await client.create(Resources.daemonSets, ds);
    await schedulable('False', 'MissingToleration', 'does not tolerate');
    await holdsFor(
      'no init pod on the gated node without the toleration',
      async () => taintsOf(await getNode(node)).includes(taintKey(gate)),
      500,
    );
    // The CLI, as a user runs it (asynchronously: this process also runs the controller).
    const cli = await promisify(execFile)(process.execPath, [
      'src/cli/main.ts',
      'gates',
      'tolerate',
      'warmup',
      '-n',
      ns,
      `--kubeconfig=${sandbox.kubeconfigPath}`,
    ]);
    assert.match(cli.stdout, new RegExp(`added toleration ${taintKey(gate)}=wait:NoSchedule`));
    await schedulable('True', 'Schedulable', '');
    const n = await released(node, gate);
    assert.ok(annotation(n, completedAt(gate)), 'completion annotation stamped');
    assert.ok(Date.parse(annotation(n, completedAt(gate))!) > 0, 'completion annotation is a timestamp');
    await waitFor(
      'the workload scheduled on the released node',
      async () => ((await pod())['spec'] as { nodeName?: string }).nodeName === node,
      {
        observe: pod,
      },
    );
    await eventWith(node, 'Gated', gate);
    await eventWith(node, 'Released', 'every requirement holds');
    await waitFor(
      'status counts one released node',
      async () => {
        const s = await gateStatus(gate);
        return s?.nodes === 1 && s.released === 1 && s.gated === 0 && s;
      },
      { observe: () => gateStatus(gate) },
    );
  });

  test('the ready annotation on the init pod releases the node (the shortcut)', async () => {
    const gate = `${id}-shortcut`;
    await applyGate(gate, {
      taint: { key: taintKey(gate), effect: 'NoSchedule' },
      nodeSelector: { matchLabels: { [POOL]: 'shortcut' } },
      requirements: {
        pods: [
          {
            namespace: ns,
            selector: { matchLabels: { app: 'init-shortcut' } },
            readyAnnotation: `${D}/ready`,
          },
        ],
      },
    });
    // Not managed by kwok: its pods never become Ready on their own.
    const node = (await createNode('shortcut', { kwok: false })).metadata!.name!;
    await tainted(node, gate);
    const init = uniqueName('init');
    await client.create(
      Resources.pods,
      podManifest({
        name: init,
        namespace: ns,
        nodeName: node,
        labels: { app: 'init-shortcut' },
        tolerations: [{ operator: 'Exists' }],
      }),
    );
    await holdsFor(
      'held while the init pod is not Ready',
      async () => taintsOf(await getNode(node)).includes(taintKey(gate)),
      1500,
    );
    await client.patch(
      Resources.pods,
      init,
      { metadata: { annotations: { [`${D}/ready`]: 'true' } } },
      { namespace: ns },
    );
    await released(node, gate);
  });

  test('a timeout releases with a Warning, or keeps the taint with a Warning', async () => {
    const release = `${id}-to-release`;
    const keep = `${id}-to-keep`;
    const never = { pods: [{ namespace: ns, selector: { matchLabels: { app: 'never' } } }] };
    await applyGate(release, {
      taint: { key: taintKey(release), effect: 'NoSchedule' },
      nodeSelector: { matchLabels: { [POOL]: 'to-release' } },
      requirements: never,
      timeout: { seconds: 2, outcome: 'Release' },
    });
    await applyGate(keep, {
      taint: { key: taintKey(keep), effect: 'NoSchedule' },
      nodeSelector: { matchLabels: { [POOL]: 'to-keep' } },
      requirements: never,
      timeout: { seconds: 2, outcome: 'KeepTainted' },
    });
    const a = (await createNode('to-release')).metadata!.name!;
    const b = (await createNode('to-keep')).metadata!.name!;
    const started = Date.now();
    const n = await released(a, release);
    assert.ok(Date.now() - started >= 1500, 'not released before the timeout');
    assert.ok(annotation(n, timedOutAt(release)), 'timed-out-at stamped');
    await eventWith(a, 'TimedOut', 'released after the 2s timeout');
    const ev = (await nodeEvents(a)).find((e) => e.reason === 'TimedOut');
    assert.equal(ev?.type, 'Warning');

    await eventWith(b, 'TimedOut', 'still held after the 2s timeout');
    const held = await getNode(b);
    assert.ok(taintsOf(held).includes(taintKey(keep)), 'KeepTainted keeps the taint');
    assert.ok(annotation(held, timedOutAt(keep)));
    await waitFor(
      'status counts the timeouts',
      async () => {
        const [s1, s2] = [await gateStatus(release), await gateStatus(keep)];
        return s1?.timedOut === 1 && s1.released === 1 && s2?.timedOut === 1 && s2.gated === 1 && [s1, s2];
      },
      { observe: async () => [await gateStatus(release), await gateStatus(keep)] },
    );

    // Deleting a gate takes its taint and annotations off every node, and the gate goes.
    await client.delete(NodeStartupGate.ref, keep);
    const after = await released(b, keep);
    assert.equal(annotation(after, timedOutAt(keep)), undefined);
    assert.equal(annotation(after, completedAt(keep)), undefined);
    await waitFor('the deleted gate gone (finalizer released)', () =>
      client.get(NodeStartupGate.ref, keep).then(
        () => false,
        (e) => e instanceof ApiError && e.status === 404,
      ),
    );
  });

  test('continuous mode taints a released node again when a requirement fails', async () => {
    const gate = `${id}-cont`;
    await applyGate(gate, {
      taint: { key: taintKey(gate), effect: 'NoSchedule' },
      nodeSelector: { matchLabels: { [POOL]: 'cont' } },
      requirements: { pods: [{ namespace: ns, selector: { matchLabels: { app: 'health' } } }] },
      mode: 'Continuous',
    });
    const node = (await createNode('cont')).metadata!.name!;
    await tainted(node, gate);
    const health = (name: string) =>
      client.create(
        Resources.pods,
        podManifest({
          name,
          namespace: ns,
          nodeName: node,
          labels: { app: 'health' },
          tolerations: [{ operator: 'Exists' }],
        }),
      );
    await health('health-1');
    await released(node, gate);
    await client.delete(Resources.pods, 'health-1', ns, { gracePeriodSeconds: 0 });
    await tainted(node, gate);
    await eventWith(node, 'Gated', 'a requirement failed after release');
    await health('health-2');
    const n = await released(node, gate);
    assert.ok(annotation(n, completedAt(gate)));
  });

  test('with the webhook down, nodes still join (Ignore) and the controller taints them while idle; Fail rejects them', async () => {
    const gate = `${id}-down`;
    await applyGate(gate, {
      taint: { key: taintKey(gate), effect: 'NoSchedule' },
      nodeSelector: { matchLabels: { [POOL]: 'down' } },
      requirements: { pods: [{ namespace: ns, selector: { matchLabels: { app: 'never' } } }] },
    });
    await hooks!.stop();
    try {
      const admitted = await createNode('down');
      const node = admitted.metadata!.name!;
      assert.ok(!taintsOf(admitted).includes(taintKey(gate)), 'the webhook was down: no taint at admission');
      await tainted(node, gate);
      await eventWith(node, 'Gated', 'the webhook missed it');

      // Strict: failurePolicy Fail refuses nodes while the webhook is down, except exempt ones.
      const strictClient = await berthClient(sandbox, strictIdentity);
      const strict = new WebhookRunnable({
        client: strictClient,
        server: { port: 0, certificates: generatedCertificates(registration) },
        registration,
        specs: [ourWebhook({ failurePolicy: 'Fail' })],
        berthNamespace: 'berth-system',
        configName: strictIdentity.webhookConfiguration,
      });
      await strict.start(new AbortController().signal);
      await strict.ready();
      await strict.stop();
      strictClient.close();
      try {
        await waitFor('a node refused by the failing webhook', async () => {
          try {
            const n = await createNode('down');
            await client.delete(Resources.nodes, n.metadata!.name!);
            return false;
          } catch (e) {
            return e instanceof ApiError && /failed calling webhook/.test(e.message) && e;
          }
        });
        const exempt = await createNode('down', { labels: { 'gates.berth.dev/exempt': 'true' } });
        assert.ok(!taintsOf(exempt).includes(taintKey(gate)), 'an exempt node joins, untouched');
        await holdsFor(
          'the exempt node never gated',
          async () => !taintsOf(await getNode(exempt.metadata!.name!)).includes(taintKey(gate)),
          1000,
        );
      } finally {
        await client.delete(Resources.mutatingWebhookConfigurations, `${id}-strict`);
      }
    } finally {
      await startWebhooks();
    }
  });

  test('backfill gates only existing idle nodes, and only when asked', async () => {
    const idle = (await createNode('backfill')).metadata!.name!;
    const busy = (await createNode('backfill')).metadata!.name!;
    await client.create(
      Resources.pods,
      podManifest({ name: uniqueName('busy'), namespace: ns, nodeName: busy }),
    );
    // Gates are newer than the nodes (creation timestamps have one-second resolution).
    await sleep(1100);
    const spec = (gate: string, backfill: boolean) => ({
      taint: { key: taintKey(gate), effect: 'NoSchedule' },
      nodeSelector: { matchLabels: { [POOL]: 'backfill' } },
      requirements: { pods: [{ namespace: ns, selector: { matchLabels: { app: 'never' } } }] },
      backfill,
    });
    const off = `${id}-nobackfill`;
    const on = `${id}-backfill`;
    await applyGate(off, spec(off, false));
    await applyGate(on, spec(on, true));
    await tainted(idle, on);
    await eventWith(idle, 'Gated', 'backfill');
    await holdsFor(
      'the busy node untouched, and the gate without backfill taints nothing',
      async () => {
        const [i, b] = [await getNode(idle), await getNode(busy)];
        return (
          !taintsOf(b).includes(taintKey(on)) &&
          !taintsOf(i).includes(taintKey(off)) &&
          !taintsOf(b).includes(taintKey(off))
        );
      },
      1500,
    );
    const explained = (await explainNodeGates(client, await getNode(busy))).join('\n');
    assert.match(explained, /already runs workload pods/);
    assert.match(explained, /existed before the gate and backfill is off|already runs workload pods/);
  });

  test("an admin's taint on an existing node stays the admin's: backfill does not take it over, deleting the gate leaves it", async () => {
    // The repro: a node tainted by hand with the key a backfill gate then uses.
    const node = (await createNode('admin')).metadata!.name!;
    const gate = `${id}-admin`;
    const admin = { key: taintKey(gate), value: 'admin', effect: 'NoSchedule' };
    await client.patch(Resources.nodes, node, { spec: { taints: [admin] } }, { type: 'strategic' });
    await sleep(1100);
    await applyGate(gate, {
      taint: { key: taintKey(gate), value: 'wait', effect: 'NoSchedule' },
      nodeSelector: { matchLabels: { [POOL]: 'admin' } },
      requirements: { pods: [{ namespace: ns, selector: { matchLabels: { app: 'never' } } }] },
      backfill: true,
    });
    const adminsOnly = async () => {
      const n = await getNode(node);
      const taints = ((n['spec'] as { taints?: { key: string }[] }).taints ?? []).filter(
        (t) => t.key === admin.key,
      );
      return annotation(n, gatedAt(gate)) === undefined && JSON.stringify(taints) === JSON.stringify([admin]);
    };
    await waitFor(
      'the gate counts the node, released',
      async () => {
        const s = await gateStatus(gate);
        return s?.nodes === 1 && s.released === 1 && s;
      },
      { observe: () => gateStatus(gate) },
    );
    await holdsFor("the taint stays the admin's, with no gated-at", adminsOnly, 1500);
    const explained = (await explainNodeGates(client, await getNode(node))).join('\n');
    assert.match(explained, /which Berth did not put on/);

    await client.delete(NodeStartupGate.ref, gate);
    await waitFor('the deleted gate gone', () =>
      client.get(NodeStartupGate.ref, gate).then(
        () => false,
        (e) => e instanceof ApiError && e.status === 404,
      ),
    );
    assert.ok(await adminsOnly(), "deleting the gate left the admin's taint");
    assert.equal((await nodeEvents(node)).filter((e) => e.note?.includes(`gate ${gate}`)).length, 0);
  });

  test("a gate whose manifest carried Berth's finalizer (a restore, a copied manifest) is not stranded when deleted", async () => {
    const gate = `${id}-carried`;
    gates.push(gate);
    await client.apply(
      NodeStartupGate.ref,
      {
        apiVersion: NodeStartupGate.apiVersion,
        kind: NodeStartupGate.kind,
        metadata: { name: gate, finalizers: [GATE_FINALIZER] },
        spec: {
          taint: { key: taintKey(gate), value: 'wait', effect: 'NoSchedule' },
          nodeSelector: { matchLabels: { [POOL]: 'carried' } },
          requirements: { pods: [{ namespace: ns, selector: { matchLabels: { app: 'never' } } }] },
        },
      },
      { fieldManager: 'test-restore', force: true },
    );
    await waitFor('the gate reconciled', async () => (await gateStatus(gate)) !== undefined);
    await client.delete(NodeStartupGate.ref, gate);
    await waitFor('the deleted gate gone, its finalizer taken off by Berth', () =>
      client.get(NodeStartupGate.ref, gate).then(
        () => false,
        (e) => e instanceof ApiError && e.status === 404,
      ),
    );
  });

  test("a node held for a gate that no longer exists (a lagging replica's webhook, a finalizer removed by hand) is released by its record; without one, a Warning says what to remove", async () => {
    // As a replica's webhook that had not yet seen the gates deleted leaves its nodes: taint,
    // gated-at and (for the first) the record of the taint.
    const ghost = (gate: string, record: boolean) => ({
      annotations: {
        [gatedAt(gate)]: new Date().toISOString(),
        ...(record ? { [`${gate}.gates.berth.dev/taint`]: `${taintKey(gate)}=wait:NoSchedule` } : {}),
        [`${D}/theirs`]: 'kept',
      },
      taints: [
        { key: taintKey(gate), value: 'wait', effect: 'NoSchedule' },
        { key: `${D}/admin`, effect: 'NoSchedule' },
      ],
    });
    const create = async (gate: string, record: boolean) => {
      const name = uniqueName('stray');
      const [manifest] = nodeManifests({ prefix: name, count: 1, labels: { [POOL]: 'stray' } });
      const { annotations, taints } = ghost(gate, record);
      manifest!.metadata!.name = name;
      manifest!.metadata!.annotations = { ...manifest!.metadata!.annotations, ...annotations };
      (manifest as { spec: { taints?: unknown[] } }).spec.taints = taints;
      await client.create(Resources.nodes, manifest!);
      nodes.push(name);
      return name;
    };
    const recorded = await create(`${id}-gone`, true);
    const unrecorded = await create(`${id}-old`, false);

    const n = await released(recorded, `${id}-gone`);
    assert.equal(annotation(n, `${id}-gone.gates.berth.dev/taint`), undefined);
    assert.equal(annotation(n, `${D}/theirs`), 'kept', 'an annotation Berth did not set stays');
    assert.ok(taintsOf(n).includes(`${D}/admin`), 'a taint Berth did not set stays');
    await eventWith(recorded, 'Released', `gate ${id}-gone: released (the gate no longer exists)`);

    await eventWith(
      unrecorded,
      'UnknownTaint',
      `remove that taint and the ${id}-old.gates.berth.dev/ annotations`,
    );
    const kept = await getNode(unrecorded);
    assert.ok(taintsOf(kept).includes(taintKey(`${id}-old`)), 'a taint Berth cannot name stays');
    assert.ok(annotation(kept, gatedAt(`${id}-old`)));
    assert.match(
      (await explainNodeGates(client, kept)).join('\n'),
      new RegExp(`gate ${id}-old no longer exists, and the node is held for it with no record of its taint`),
    );
  });

  test('bad gate specs are rejected by the apiserver or marked Invalid with a Warning event', async () => {
    // Every gate here selects only this file's nodes: other test files create nodes in the same sandbox.
    const base = {
      taint: { key: taintKey('bad'), effect: 'NoSchedule' },
      nodeSelector: { matchLabels: { [POOL]: 'bad' } },
      requirements: { pods: [{ namespace: ns, daemonSet: 'x' }] },
    };
    const reject = async (what: string, spec: unknown) => {
      await assert.rejects(
        client.create(NodeStartupGate.ref, {
          apiVersion: NodeStartupGate.apiVersion,
          kind: NodeStartupGate.kind,
          metadata: { name: uniqueName('bad') },
          spec,
        }),
        (e) => e instanceof ApiError && e.status === 422,
        what,
      );
    };
    await reject('an unknown effect', { ...base, taint: { key: 'k', effect: 'Bogus' } });
    await reject('no requirement', { ...base, requirements: {} });
    await reject('a daemonSet without namespace', { ...base, requirements: { pods: [{ daemonSet: 'x' }] } });
    const annotated = (extra: Record<string, unknown>) => ({
      ...base,
      requirements: { pods: [{ namespace: ns, daemonSet: 'x', ...extra }] },
    });
    await reject('readiness Annotation without readyAnnotation', annotated({ readiness: 'Annotation' }));
    await reject('readiness Either without readyAnnotation', annotated({ readiness: 'Either' }));
    await reject(
      'readiness Ready with a readyAnnotation it would ignore',
      annotated({ readiness: 'Ready', readyAnnotation: `${D}/ready` }),
    );
    await reject('a timeout shorter than the minimum hold', {
      ...base,
      minHoldSeconds: 10,
      timeout: { seconds: 5, outcome: 'Release' },
    });

    const name = `${id}-invalid`;
    await applyGate(name, { ...base, taint: { key: 'not a valid key!', effect: 'NoSchedule' } });
    await waitFor(
      'Invalid condition',
      async () => {
        const s = await gateStatus(name);
        return (
          s?.conditions?.find(
            (c) => c.type === 'Invalid' && c.status === 'True' && c.message.includes('taint key'),
          ) && s
        );
      },
      { observe: () => gateStatus(name) },
    );
    const gateEvents = async () =>
      (await client.list<Event>(Resources.events, { namespace: 'default' })).items.filter(
        (e) => e.regarding?.name === name,
      );
    await waitFor(
      'InvalidSpec Warning event',
      async () => (await gateEvents()).find((e) => e.reason === 'InvalidSpec' && e.type === 'Warning'),
      { observe: gateEvents },
    );

    // The taint is immutable: changing it would strand the old taint on held nodes.
    const good = `${id}-immutable`;
    await applyGate(good, { ...base, taint: { key: taintKey('immutable'), effect: 'NoSchedule' } });
    await assert.rejects(
      client.apply(
        NodeStartupGate.ref,
        {
          apiVersion: NodeStartupGate.apiVersion,
          kind: NodeStartupGate.kind,
          metadata: { name: good },
          spec: { ...base, taint: { key: taintKey('other'), effect: 'NoSchedule' } },
        },
        { fieldManager: 'test-author', force: true },
      ),
      (e) => e instanceof ApiError && e.status === 422 && /immutable/.test(e.message),
    );
  });
});

/** A pod on `node`, created directly (spec.nodeName), tolerating everything unless told. */
const boundPod = (node: string, labels: Record<string, string>, tolerate = true) =>
  podManifest({
    name: uniqueName('bound'),
    namespace: ns,
    nodeName: node,
    labels,
    ...(tolerate ? { tolerations: [{ operator: 'Exists' as const }] } : {}),
  });
const getPod = (name: string) => client.get(Resources.pods, name, ns);
const podReadyNow = async (name: string) =>
  (
    (await getPod(name))['status'] as { conditions?: { type: string; status: string }[] } | undefined
  )?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True');
const condition = async (gate: string, type: string) =>
  (await gateStatus(gate))?.conditions?.find((c) => c.type === type);
const waitCondition = (gate: string, type: string, status: 'True' | 'False', text = '') =>
  waitFor(
    `${gate}: ${type} ${status} (${text})`,
    async () => {
      const c = await condition(gate, type);
      return c?.status === status && c.message.includes(text) && c;
    },
    { observe: () => gateStatus(gate) },
  );

describe('startup gates: order, readiness, nodeName, early pods', () => {
  test('a gate with the taint of another: both say Conflicting, the winner too, until the loser goes', async () => {
    const spec = {
      taint: { key: taintKey('conflict'), effect: 'NoSchedule' },
      nodeSelector: { matchLabels: { [POOL]: 'conflict' } },
      requirements: { pods: [{ namespace: ns, daemonSet: 'x' }] },
    };
    // The first by name is enforced.
    const [winner, loser] = [`${id}-conflict-a`, `${id}-conflict-b`];
    await applyGate(winner, spec);
    await waitCondition(winner, 'Conflicting', 'False');
    await applyGate(loser, spec);
    await waitCondition(loser, 'Conflicting', 'True', `${winner} (first by name) is enforced`);
    await waitCondition(winner, 'Conflicting', 'True', `${winner} (first by name) is enforced`);
    await client.delete(NodeStartupGate.ref, loser);
    await waitCondition(winner, 'Conflicting', 'False');
  });

  test('ordered gates: both taints at admission, and the later gate releases only after the earlier one', async () => {
    const net = `${id}-net`;
    const warm = `${id}-warm`;
    const spec = (gate: string, extra: Record<string, unknown>) => ({
      taint: { key: taintKey(gate), effect: 'NoSchedule' },
      nodeSelector: { matchLabels: { [POOL]: 'order' } },
      ...extra,
    });
    // Its own requirement holds as soon as kwok reports the node Ready: only the order holds it.
    await applyGate(
      warm,
      spec(warm, { requirements: { nodeConditions: [{ type: 'Ready' }] }, after: [net] }),
    );
    // Named before it exists: a condition and a Warning, not a failure.
    await waitCondition(warm, 'AfterGatesFound', 'False', net);
    await applyGate(
      net,
      spec(net, {
        requirements: { pods: [{ namespace: ns, selector: { matchLabels: { app: 'net-init' } } }] },
      }),
    );
    await waitCondition(warm, 'AfterGatesFound', 'True');
    await webhookTaints('order', net);
    await webhookTaints('order', warm);
    const admitted = await createNode('order');
    const node = admitted.metadata!.name!;
    assert.ok(taintsOf(admitted).includes(taintKey(net)), 'the earlier taint at admission');
    assert.ok(taintsOf(admitted).includes(taintKey(warm)), 'the later taint at admission too');
    await waitFor(
      `${node} Ready`,
      async () =>
        (
          (await getNode(node))['status'] as { conditions?: { type: string; status: string }[] }
        ).conditions?.some((c) => c.type === 'Ready' && c.status === 'True'),
      { observe: () => getNode(node) },
    );
    await holdsFor(
      `${warm} holds while ${net} does, although its own requirement holds`,
      async () => taintsOf(await getNode(node)).includes(taintKey(warm)),
      1500,
    );
    const explained = (await explainNodeGates(client, await getNode(node))).join('\n');
    assert.match(explained, new RegExp(`phase 1 of 2: now ${net}; then ${warm}`));
    assert.match(explained, new RegExp(`waiting for gate ${net} to release the node first`));

    await client.create(Resources.pods, boundPod(node, { app: 'net-init' }));
    const n = await released(node, warm);
    assert.equal(taintsOf(n).includes(taintKey(net)), false);
    const [first, second] = [annotation(n, completedAt(net)), annotation(n, completedAt(warm))];
    assert.ok(first && second, 'both completion stamps');
    assert.ok(
      Date.parse(first) < Date.parse(second),
      `${net} released (${first}) before ${warm} (${second})`,
    );
  });

  test('gates waiting for each other are Invalid, with a Warning, and hold nothing', async () => {
    const a = `${id}-cyca`;
    const b = `${id}-cycb`;
    const spec = (gate: string, after: string) => ({
      taint: { key: taintKey(gate), effect: 'NoSchedule' },
      nodeSelector: { matchLabels: { [POOL]: 'cycle' } },
      requirements: { nodeConditions: [{ type: 'Ready' }] },
      after: [after],
    });
    await applyGate(a, spec(a, b));
    await applyGate(b, spec(b, a));
    for (const g of [a, b]) await waitCondition(g, 'Invalid', 'True', 'a cycle');
    const gateEvents = async () =>
      (await client.list<Event>(Resources.events, { namespace: 'default' })).items.filter(
        (e) => e.regarding?.name === a,
      );
    await waitFor(
      'InvalidSpec Warning event naming the cycle',
      async () =>
        (await gateEvents()).find(
          (e) => e.reason === 'InvalidSpec' && e.type === 'Warning' && e.note?.includes('cycle'),
        ),
      { observe: gateEvents },
    );
    const joined = await createNode('cycle');
    assert.deepEqual(
      taintsOf(joined).filter((k) => k === taintKey(a) || k === taintKey(b)),
      [],
      'neither gate of the cycle taints a joining node',
    );
  });

  test('readiness Annotation: an init pod Ready at once releases the node only once annotated', async () => {
    const gate = `${id}-annot`;
    await applyGate(gate, {
      taint: { key: taintKey(gate), effect: 'NoSchedule' },
      nodeSelector: { matchLabels: { [POOL]: 'annot' } },
      requirements: {
        pods: [
          {
            namespace: ns,
            selector: { matchLabels: { app: 'warm-annot' } },
            readyAnnotation: `${D}/warm`,
            readiness: 'Annotation',
          },
        ],
      },
    });
    const node = (await createNode('annot')).metadata!.name!;
    await tainted(node, gate);
    const init = (await client.create(Resources.pods, boundPod(node, { app: 'warm-annot' }))).metadata!.name!;
    await waitFor(`${init} Ready (kwok)`, () => podReadyNow(init), { observe: () => getPod(init) });
    await holdsFor(
      'held while the Ready init pod lacks the annotation',
      async () => taintsOf(await getNode(node)).includes(taintKey(gate)),
      1500,
    );
    const explained = (await explainNodeGates(client, await getNode(node))).join('\n');
    assert.match(explained, new RegExp(`${init} \\(Running\\) without ${D}/warm=true`));
    await client.patch(
      Resources.pods,
      init,
      { metadata: { annotations: { [`${D}/warm`]: 'true' } } },
      { namespace: ns },
    );
    await released(node, gate);
  });

  test('spec.nodeName on a held node: refused unless tolerating or required, admitted after release; Warn admits with a Warning', async () => {
    const gate = `${id}-bind`;
    await applyGate(gate, {
      taint: { key: taintKey(gate), value: 'wait', effect: 'NoSchedule' },
      nodeSelector: { matchLabels: { [POOL]: 'bind' } },
      requirements: {
        pods: [
          { namespace: ns, selector: { matchLabels: { app: 'bind-init' } }, readyAnnotation: `${D}/done` },
        ],
      },
    });
    const node = (await createNode('bind', { kwok: false })).metadata!.name!;
    await tainted(node, gate);
    // The apiserver picks a new webhook configuration up with some delay: retry until refused.
    const refused = await waitFor('a pod with nodeName on the held node refused', async () => {
      try {
        const p = await client.create(Resources.pods, boundPod(node, { app: 'web' }, false));
        await client.delete(Resources.pods, p.metadata!.name!, ns);
        return false;
      } catch (e) {
        return e instanceof ApiError && e.status === 403 && e;
      }
    });
    assert.match(refused.message, new RegExp(`NodeStartupGate ${gate} holds node ${node}`));
    assert.match(refused.message, /spec\.nodeName/);
    // Tolerating the taint, or being the pod the gate waits for, gets in.
    await client.create(Resources.pods, boundPod(node, { app: 'web' }, true));
    const init = (await client.create(Resources.pods, boundPod(node, { app: 'bind-init' }, false))).metadata!
      .name!;
    await client.patch(
      Resources.pods,
      init,
      { metadata: { annotations: { [`${D}/done`]: 'true' } } },
      { namespace: ns },
    );
    await released(node, gate);
    // The controller's node cache follows the release: retry until admitted.
    await waitFor('a pod with nodeName admitted once the node is released', async () => {
      try {
        return await client.create(Resources.pods, boundPod(node, { app: 'web' }, false));
      } catch (e) {
        if (e instanceof ApiError && e.status === 403) return false;
        throw e;
      }
    });

    const lenient = `${id}-bindwarn`;
    await applyGate(lenient, {
      taint: { key: taintKey(lenient), effect: 'NoSchedule' },
      nodeSelector: { matchLabels: { [POOL]: 'bindwarn' } },
      requirements: { pods: [{ namespace: ns, selector: { matchLabels: { app: 'never' } } }] },
      nodeNamePods: 'Warn',
    });
    const warned = (await createNode('bindwarn', { kwok: false })).metadata!.name!;
    await tainted(warned, lenient);
    // The pod webhook reads the held node from the controller's cache.
    await waitFor(`${warned} in the controller's cache`, () => controller!.nodes.get(warned));
    await client.create(Resources.pods, boundPod(warned, { app: 'web' }, false));
    await eventWith(warned, 'NodeNameBypass', `NodeStartupGate ${lenient} holds node ${warned}`);
  });

  test('pods no gate requires that run on a held node are counted and named, in status and explain', async () => {
    const gate = `${id}-early`;
    await applyGate(gate, {
      taint: { key: taintKey(gate), effect: 'NoSchedule' },
      nodeSelector: { matchLabels: { [POOL]: 'early' } },
      requirements: { pods: [{ namespace: ns, selector: { matchLabels: { app: 'never' } } }] },
    });
    const node = (await createNode('early')).metadata!.name!;
    await tainted(node, gate);
    const bird = (await client.create(Resources.pods, boundPod(node, { app: 'early-bird' }))).metadata!.name!;
    await waitFor(`${bird} Running (kwok)`, () => podReadyNow(bird), { observe: () => getPod(bird) });
    await waitCondition(gate, 'StartedEarly', 'True', `${ns}/${bird} on ${node}`);
    assert.equal((await gateStatus(gate))?.startedEarly, 1);
    const explained = (await explainNodeGates(client, await getNode(node))).join('\n');
    assert.match(explained, new RegExp(`started early \\(not required by any gate\\): ${ns}/${bird}`));
    await client.delete(Resources.pods, bird, ns, { gracePeriodSeconds: 0 });
    await waitCondition(gate, 'StartedEarly', 'False');
    assert.equal((await gateStatus(gate))?.startedEarly, 0);
  });
});
