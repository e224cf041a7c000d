// Startup gates at scale: `npm run bench:gates -- --nodes 1000 --pods 20000`.
// 1. Join: N nodes are created within 10 seconds; Berth's webhook taints each at admission, the init
//    DaemonSet's pod (tolerating the taint) starts on each and becomes Ready, and Berth releases it.
//    Measured per node, by one watcher for both ends: from its init pod being seen Ready to the
//    taint being seen gone.
// 2. Pods: P pods bound to the nodes, Running and in Berth's cache before the webhook is measured:
//    the informers' watch events share Berth's event loop with the webhook, as in a real cluster.
// 3. Webhook: AdmissionReviews for Node CREATE (half of the nodes selected by the gate) at 200 per
//    second, open-loop, from bench/webhookload (Go, outside this process and Berth's, calling as the
//    apiserver does) to Berth's webhook server and to a floor, bench/webhookfloor (a minimal Go
//    net/http TLS server answering the same patch); p99 of each and their ratio.
// Berth runs as its own process (`berth run --controllers gates`), as it would in a cluster, with the
// image's Node flags and environment (its young generation's size shows in the webhook's tail).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { podReady } from '../src/gates/decide/requirements.ts';
import { gateAnnotations } from '../src/gates/types.ts';
import { installCrds } from '../src/cli/install.ts';
import { Informer } from '../src/runtime/cache/informer.ts';
import { slimNode, slimPod, type SlimNode, type SlimPod } from '../src/policy/slim.ts';
import { Resources, type KubeObject } from '../src/runtime/api/meta.ts';
import { nodeManifests } from '../src/sandbox/nodes.ts';
import {
  benchSandbox,
  buildGoProgram,
  createBoundPods,
  createWarmupGate,
  forEachLimit,
  nodeCreateReview,
  percentile,
  round,
  report,
  waitForPodsRunning,
  waitForValue,
  webhookAgainstFloor,
  registeredWebhook,
} from './lib.ts';
import { startBerth } from '../test/helpers/berth.ts';

const { values } = parseArgs({
  options: {
    nodes: { type: 'string', default: '500' },
    pods: { type: 'string', default: '5000' },
    'webhook-rate': { type: 'string', default: '200' },
    'webhook-seconds': { type: 'string', default: '10' },
  },
});
const nodeCount = Number(values.nodes);
const podCount = Number(values.pods);
const rate = Number(values['webhook-rate']);
const webhookSeconds = Number(values['webhook-seconds']);
const POOL = 'bench.berth.dev/pool';
const TAINT = 'startup-taint.cluster-autoscaler.kubernetes.io/warmup';
const NS = 'bench-gates';
const PODS_NS = 'bench-gates-pods';

const work = mkdtempSync(path.join(tmpdir(), 'bench-gates-'));
const generator = buildGoProgram('webhookload', work);
const floorBin = buildGoProgram('webhookfloor', work);

const sb = await benchSandbox('bench-gates');
const client = sb.client({ maxInFlight: 64 });
await installCrds(client);
await client.create(Resources.namespaces, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS } });
await createWarmupGate(client, { name: 'warmup', namespace: NS, nodeLabel: POOL, taint: TAINT });

const berth = await startBerth(sb, ['--controllers=gates'], { imageRuntime: true });
const hook = await registeredWebhook(client, (n) => n === 'nodes.gates.berth.dev');
// The apiserver's webhook cache is eventually consistent: give it a moment before nodes join.
await new Promise((r) => setTimeout(r, 2000));

// One watcher for both ends of the release time: init pods seen Ready, taints seen gone.
const readyAt = new Map<string, number>();
const releasedAt = new Map<string, number>();
const taintedAtAdmission = new Set<string>();
const pods = new Informer<SlimPod>({ client, ref: Resources.pods, namespace: NS, transform: slimPod });
const onPod = (p: SlimPod) => {
  const node = p.spec.nodeName;
  if (node && podReady(p) && !readyAt.has(node)) readyAt.set(node, performance.now());
};
pods.addEventHandler({ onAdd: onPod, onUpdate: (_a, b) => onPod(b) });
const nodes = new Informer<SlimNode>({ client, ref: Resources.nodes, transform: slimNode });
const onNode = (n: SlimNode) => {
  const name = n.metadata!.name!;
  const held = n.spec.taints?.some((t) => t.key === TAINT);
  if (!held && taintedAtAdmission.has(name) && !releasedAt.has(name)) releasedAt.set(name, performance.now());
};
nodes.addEventHandler({ onAdd: onNode, onUpdate: (_a, b) => onNode(b) });
pods.start();
nodes.start();
await Promise.all([pods.waitForSync(), nodes.waitForSync()]);

// 1. Join.
const manifests = nodeManifests({ prefix: 'gated', count: nodeCount, labels: { [POOL]: 'gated' } });
const joinStarted = performance.now();
await forEachLimit(manifests, 32, async (m) => {
  const created = await client.create<KubeObject>(Resources.nodes, m);
  if (((created['spec'] as { taints?: { key: string }[] }).taints ?? []).some((t) => t.key === TAINT))
    taintedAtAdmission.add(created.metadata!.name!);
});
const joinSeconds = (performance.now() - joinStarted) / 1000;
console.log(
  `${nodeCount} nodes created in ${joinSeconds.toFixed(1)} s; ${taintedAtAdmission.size} tainted at admission`,
);
if (taintedAtAdmission.size !== nodeCount) console.log('WARNING: some nodes joined without the taint');
await waitForValue(
  'every node released',
  () => releasedAt.size >= taintedAtAdmission.size || undefined,
  600_000,
  () => `${releasedAt.size}/${taintedAtAdmission.size} released, ${readyAt.size} init pods Ready`,
);
const release = [...releasedAt].flatMap(([node, t]) => {
  const ready = readyAt.get(node);
  return ready === undefined ? [] : [t - ready];
});
const allReleasedSeconds = (Math.max(...releasedAt.values()) - joinStarted) / 1000;
console.log(
  `all released ${allReleasedSeconds.toFixed(1)} s after the join started; release after init Ready: ` +
    `p50 ${percentile(release, 50).toFixed(0)} ms, p99 ${percentile(release, 99).toFixed(0)} ms, max ${Math.max(...release).toFixed(0)} ms (${release.length} nodes)`,
);

// The bench's own watches stop: its process has no more to do while Berth is measured.
await Promise.all([pods.stop(), nodes.stop()]);

// 2. Pods.
await client.create(Resources.namespaces, {
  apiVersion: 'v1',
  kind: 'Namespace',
  metadata: { name: PODS_NS },
});
const podsStarted = performance.now();
await createBoundPods(client, {
  namespace: PODS_NS,
  from: 0,
  to: podCount,
  nodeOf: (i) => `gated-${i % nodeCount}`,
});
await waitForPodsRunning(client, [PODS_NS]);
const cached = (resource: string) =>
  berth.metric('berth_informer_objects', (l) => l.includes(`resource="${resource}"`));
// Every pod: the bench's and the init pods (one a node).
const cachedPods = await waitForValue("Berth's cache holding every pod", async () => {
  const n = await cached('pods');
  return n >= podCount + nodeCount ? n : undefined;
});
console.log(
  `${podCount} pods created and Running in ${((performance.now() - podsStarted) / 1000).toFixed(1)} s; ` +
    `Berth caches ${await cached('nodes')} nodes and ${cachedPods} pods`,
);

// 3. Webhook: Berth against the floor.
const webhook = await webhookAgainstFloor({
  generator,
  floor: floorBin,
  floorArgs: [
    '-webhook=gates',
    `-select=${POOL}=gated`,
    `-taint=${TAINT}=warmup:NoSchedule`,
    `-annotation=${gateAnnotations('warmup', {}).gatedAt}`,
    `-record=${gateAnnotations('warmup', {}).taint}`,
  ],
  dir: work,
  hook,
  sandbox: sb,
  bodies: [
    nodeCreateReview('bench-other', { [POOL]: 'other' }),
    nodeCreateReview('bench-gated', { [POOL]: 'gated' }),
  ],
  rate,
  seconds: webhookSeconds,
  berthPid: berth.pid,
});

const result = {
  nodes: nodeCount,
  pods: podCount,
  releaseP50ms: round(percentile(release, 50), 0),
  releaseP99ms: round(percentile(release, 99), 0),
  ...webhook,
  rssMB: berth.rssMB(),
};
await berth.stop();
client.close();
await sb.down();
rmSync(work, { recursive: true, force: true });
report(result);
