// Agent placement at scale: `npm run bench:agents -- --nodes 1000 --pods 20000`.
// Every phase starts from bare nodes and no pods; Berth runs as its own process
// (`berth run --controllers agents`), as it would in a cluster.
// 0. The bare floor, kept for context (`bareFloorSeconds`): the burst's pods created (bound to
//    nodes, 200 pools) while a client that knows each node's final claims sends one patch per node
//    at the same concurrency. It keeps no claim fresh: a lower bound no controller can reach.
// 1. The fair floor: the least that keeps every claim within the 1 s bound. A pod informer and, per
//    node, a claim change (an owner's first pod on it bound, or its last gone) waits the same
//    coalescing window as Berth's (CLAIM_WRITE_WINDOW_MS) for the changes after it, then one patch
//    carries the node's claims as they are by then. The same burst (`floorSeconds`: until every
//    node is right; its staleness: for each pod that brings a new claim to its node, the time from
//    its creation to the claim on the node), then the churn (100 pods a second, half new, half
//    deleted: from each operation's answer to its node being right), and its patches per node.
// 2. and 3. The same burst and churn with Berth: `ratio` is the burst's time against the fair
//    floor's; staleness p99 and maximum in both; Berth's node patches per node in the burst and
//    per change of a node's claims in the churn, beside the fair floor's and their ratio.
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { AGENT_WORKERS, CLAIM_WRITE_WINDOW_MS } from '../src/agents/controllers/node.ts';
import { AgentPlacement } from '../src/agents/crd.ts';
import { installCrds } from '../src/cli/install.ts';
import { applyTarget } from '../src/runtime/client/apply.ts';
import { Informer } from '../src/runtime/cache/informer.ts';
import type { KubeClient } from '../src/runtime/client/client.ts';
import { slimNode, slimPod, type SlimNode, type SlimPod } from '../src/policy/slim.ts';
import { Resources, type KubeObject } from '../src/runtime/api/meta.ts';
import { errorText } from '../src/runtime/observability/log.ts';
import {
  benchSandbox,
  controllerMeans,
  controllerWork,
  cpuSeconds,
  describeControllerMeans,
  forEachLimit,
  percentile,
  round,
  report,
  waitForPodsRunning,
} from './lib.ts';
import { startBerth } from '../test/helpers/berth.ts';

const { values } = parseArgs({
  options: {
    nodes: { type: 'string', default: '1000' },
    pods: { type: 'string', default: '20000' },
    pools: { type: 'string', default: '200' },
    workers: { type: 'string', default: String(AGENT_WORKERS) },
    'churn-seconds': { type: 'string', default: '30' },
    // Another name lets two runs (two scales) share a machine.
    sandbox: { type: 'string', default: 'bench-agents' },
  },
});
const nodeCount = Number(values.nodes);
const podCount = Number(values.pods);
const poolCount = Number(values.pools);
const workers = Number(values.workers);
const churnSeconds = Number(values['churn-seconds']);
const POOL = 'bench.berth.dev/pool-uid';
const CLAIM = 'bench.berth.dev/claim.';
const FLOOR = 'bench.berth.dev/floor.';
const BARE = 'bench.berth.dev/bare.';
const LABEL = 'bench.berth.dev/agent';

const sb = await benchSandbox(values.sandbox, [{ prefix: 'n', count: nodeCount }]);
const client = sb.client({ maxInFlight: 64 });
await installCrds(client);
const nsOf = (i: number) => `bench-${i % 4}`;
for (let i = 0; i < 4; i++)
  await client.create(Resources.namespaces, {
    apiVersion: 'v1',
    kind: 'Namespace',
    metadata: { name: nsOf(i) },
  });

// The bench's own view of the nodes: each node's claims (under a prefix) as the API shows them.
const nodes = new Informer<SlimNode>({ client, ref: Resources.nodes, transform: slimNode });
// Waiters by node: an update of one node checks only what waits on it.
const waiters = new Map<string, Set<() => void>>();
const wake = (node: string | undefined) => {
  for (const w of waiters.get(node ?? '') ?? []) w();
  for (const w of waiters.get('*') ?? []) w();
};
nodes.addEventHandler({
  onUpdate: (_a, b) => {
    refresh(b.metadata!.name!);
    wake(b.metadata?.name);
  },
});
nodes.start();
await nodes.waitForSync();
const claimsOf = (node: string, prefix: string) =>
  Object.keys(nodes.get(node)?.metadata?.annotations ?? {})
    .filter((k) => k.startsWith(prefix))
    .map((k) => k.slice(prefix.length))
    .sort()
    .join(',');

/** Pods per pool per node. */
type PoolCounts = Map<string, Map<string, number>>;
/** Counts `delta` pods of `pool` on `node`; true when the node's set of pools changed. */
const countPool = (counts: PoolCounts, node: string, pool: string, delta: number): boolean => {
  const m = counts.get(node) ?? new Map<string, number>();
  counts.set(node, m);
  const had = m.has(pool);
  const n = (m.get(pool) ?? 0) + delta;
  if (n > 0) m.set(pool, n);
  else m.delete(pool);
  return had !== n > 0;
};
/** Expected claims per node, kept as pods are added and removed. */
const placed: PoolCounts = new Map();
const expected = (node: string) => [...(placed.get(node) ?? new Map()).keys()].sort().join(',');
/** Counts a pod added or removed; true when its node's expected claims changed. */
const track = (node: string, pool: string, delta: number): boolean => {
  const changed = countPool(placed, node, pool, delta);
  refresh(node);
  // A later operation can make a node's claims right again with no write (a pool's last pod goes
  // and a new one comes before anyone wrote): its waiters look now, not at the node's next event.
  wake(node);
  return changed;
};
// Which nodes carry exactly their expected claims, per prefix: kept per node as nodes change,
// so that "every node is right" costs nothing to ask (the bench must not eat the CPU it measures).
const right = new Map<string, Set<string>>([
  [CLAIM, new Set()],
  [FLOOR, new Set()],
  [BARE, new Set()],
]);
function refresh(node: string) {
  for (const [prefix, set] of right) {
    if (claimsOf(node, prefix) === expected(node)) set.add(node);
    else set.delete(node);
  }
}
const allRight = (prefix: string) => right.get(prefix)!.size === nodeCount;
/** Resolves with the time `pred` first holds, checked whenever `node` ('*': any node) changes. */
const until = (pred: () => boolean, node = '*', timeoutMs = 600_000) =>
  new Promise<number>((resolve, reject) => {
    const set = waiters.get(node) ?? new Set<() => void>();
    waiters.set(node, set);
    const timer = setTimeout(() => {
      set.delete(check);
      reject(new Error('timed out'));
    }, timeoutMs);
    function check() {
      if (!pred()) return;
      clearTimeout(timer);
      set.delete(check);
      resolve(performance.now());
    }
    set.add(check);
    check();
  });

const pools = Array.from({ length: poolCount }, (_, i) => `pool-${i.toString().padStart(4, '0')}`);
// A hash of i (mulberry32's step), so that the bench's choices are the same in every run.
const hash32 = (i: number) => {
  let t = (i + 0x6d2b79f5) | 0;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return (t ^ (t >>> 14)) >>> 0;
};
// The same pools land on the same nodes in the floor and in Berth's run, and a node hosts pods of
// many pools (so that churn adds and removes claims, as in a real cluster).
const poolOf = (i: number) => pools[hash32(i) % poolCount]!;
/** A generator of numbers in [0, 1), the same sequence for the same seed. */
const seeded = (seed: number) => {
  let k = seed * 0x9e3779b9;
  return () => hash32(k++) / 2 ** 32;
};
// Each phase names its pods anew: a collection DELETE of the last phase's pods that the apiserver
// still carries out after its answer was cut off must not take this phase's pods of the same name.
let phase = 0;
const podSpec = (i: number) => ({
  name: `w${phase}-${i}`,
  ns: nsOf(i),
  node: `n-${i % nodeCount}`,
  pool: poolOf(i),
});
const createPod = (c: KubeClient, p: ReturnType<typeof podSpec>) =>
  c.create(Resources.pods, {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name: p.name, namespace: p.ns, labels: { app: 'bench-worker', [POOL]: p.pool } },
    spec: { nodeName: p.node, containers: [{ name: 'w', image: 'registry.example/w:1' }] },
  });
const deleteAllPods = async () => {
  // A DELETE of thousands of pods answers only when done, and the apiserver's request timeout (60 s)
  // can cut it off halfway on a loaded machine: it is sent again for whatever is left, until none is.
  for (;;) {
    let left = 0;
    for (let i = 0; i < 4; i++) {
      if ((await client.list(Resources.pods, { namespace: nsOf(i), query: { limit: 1 } })).items.length === 0)
        continue;
      left++;
      await client
        .request('DELETE', `/api/v1/namespaces/${nsOf(i)}/pods`, {
          query: { gracePeriodSeconds: 0 },
          idleTimeoutMs: 600_000,
        })
        .catch((e: unknown) =>
          console.log(`  deleting the pods of ${nsOf(i)} was cut off (${errorText(e)}); again`),
        );
    }
    if (left === 0) return;
  }
};

/**
 * Churn at 100 pods per second for churnSeconds (half new pods, half deletions, the same sequence
 * every time it runs): per operation, the time from its answer to its node carrying the claims
 * (under `prefix`) it must carry now.
 */
async function churn(prefix: string) {
  // The burst's pods are all Running first (kwok has caught up): the churn is timed alone.
  await waitForPodsRunning(client, [0, 1, 2, 3].map(nsOf));
  let changedNodes = 0;
  const latencies: number[] = [];
  const live = [...burst];
  let next = podCount;
  let stalls = 0;
  const random = seeded(1);
  // Kept and rethrown after the churn, so that a failure still stops Berth (finally) instead of crashing.
  const failures: unknown[] = [];
  const tick = async (i: number) => {
    // At a small size deletions can outrun the live pods: then this tick adds one instead.
    const add = i % 2 === 0 || live.length === 0;
    const p = add ? podSpec(next++) : live.splice(Math.floor(random() * live.length), 1)[0]!;
    const changed = track(p.node, p.pool, add ? 1 : -1);
    if (changed) changedNodes++;
    if (add) {
      await createPod(client, p);
      // Only now may a deletion pick it.
      live.push(p);
    } else await client.delete(Resources.pods, p.name, p.ns, { gracePeriodSeconds: 0 });
    const answered = performance.now();
    // Later operations on the same node may move its expected claims on: wait for any state at
    // least this one (the claims equal to what they must be now).
    // A node whose claims are still wrong 30 s on is a stall: counted and reported, not a crash.
    const at = await until(() => claimsOf(p.node, prefix) === expected(p.node), p.node, 30_000).catch(
      (e: unknown) => {
        if (e instanceof Error && e.message === 'timed out') return undefined;
        throw e;
      },
    );
    if (at === undefined) stalls++;
    else latencies.push(at - answered);
  };
  const ops: Promise<void>[] = [];
  const start = performance.now();
  for (let i = 0; i < churnSeconds * 100; i++) {
    const due = start + i * 10;
    const wait = due - performance.now();
    if (wait > 0) await sleep(wait);
    ops.push(tick(i).catch((e: unknown) => void failures.push(e)));
  }
  await Promise.all(ops);
  if (failures.length) throw failures[0];
  return { latencies, stalls, changedNodes };
}
type Churn = Awaited<ReturnType<typeof churn>>;
const logChurn = (what: string, c: Churn) =>
  console.log(
    `${what}: p50 ${round(percentile(c.latencies, 50))} ms, p99 ${round(percentile(c.latencies, 99))} ms, max ${round(Math.max(...c.latencies))} ms` +
      (c.stalls ? `; ${c.stalls} operations whose node's claims were still wrong after 30 s (stalled)` : ''),
  );
const churnFigures = (name: string, c: Churn) => ({
  [`${name}P99ms`]: c.stalls ? null : round(percentile(c.latencies, 99)),
  [`${name}MaxMs`]: c.stalls ? null : round(Math.max(...c.latencies)),
});

/** A floor's one patch of a node: its label and `pools`' claims. */
const floorPatch = (c: KubeClient, node: string, pools: Iterable<string>, prefix = FLOOR) => {
  const body = applyTarget(Resources.nodes, nodes.get(node)!);
  body.metadata.labels = { [LABEL]: 'true' };
  body.metadata.annotations = Object.fromEntries([...pools].map((pool) => [`${prefix}${pool}`, pool]));
  return c.apply(Resources.nodes, body, { fieldManager: 'bench-floor' });
};
/** Takes every pod away and the floors' label and claims off the nodes: the next phase starts as bare. */
const reset = async () => {
  await deleteAllPods();
  placed.clear();
  phase++;
  burst = [...Array(podCount).keys()].map(podSpec);
  await forEachLimit([...Array(nodeCount).keys()], workers, async (i) => {
    const body = applyTarget(Resources.nodes, nodes.get(`n-${i}`)!);
    body.metadata.labels = {};
    body.metadata.annotations = {};
    await client.apply(Resources.nodes, body, { fieldManager: 'bench-floor' });
  });
};

/**
 * A burst under `prefix`: creates the pods (64 at a time) and resolves with the time until every
 * node's claims are right and, for each pod that brings its pool to its node, the time from its
 * creation's answer to the node carrying that claim (the burst's staleness).
 */
async function burstOf(prefix: string) {
  const firstOf = new Map<string, (typeof burst)[number]>();
  for (const p of burst) {
    const key = `${p.node}/${p.pool}`;
    if (!firstOf.has(key)) firstOf.set(key, p);
  }
  const firsts = new Set(firstOf.values());
  const staleness: Churn = { latencies: [], stalls: 0, changedNodes: firsts.size };
  const claimed: Promise<void>[] = [];
  const t0 = performance.now();
  await forEachLimit(burst, 64, async (p) => {
    track(p.node, p.pool, 1);
    await createPod(client, p);
    if (!firsts.has(p)) return;
    const answered = performance.now();
    claimed.push(
      until(
        () => nodes.get(p.node)?.metadata?.annotations?.[prefix + p.pool] !== undefined,
        p.node,
        30_000,
      ).then(
        (at) => void staleness.latencies.push(at - answered),
        () => void staleness.stalls++,
      ),
    );
  });
  const createdSeconds = (performance.now() - t0) / 1000;
  const convergeSeconds = ((await until(() => allRight(prefix))) - t0) / 1000;
  await Promise.all(claimed);
  return { createdSeconds, convergeSeconds, staleness, firsts: firsts.size };
}

// Phase 0: the bare floor (the old one, kept for context as bareFloorSeconds). The same burst while
// a minimal client, which knows each node's final claims in advance (no controller can), sends one
// patch per node at the same concurrency as Berth's workers: no watch, no cache, and no claim fresh
// before the end.
let burst = [...Array(podCount).keys()].map(podSpec);
for (const p of burst) track(p.node, p.pool, 1);
for (let i = 0; i < nodeCount; i++) refresh(`n-${i}`);
const t0 = performance.now();
await Promise.all([
  forEachLimit(burst, 64, (p) => createPod(client, p).then(() => {})),
  forEachLimit([...Array(nodeCount).keys()], workers, async (i) => {
    await floorPatch(client, `n-${i}`, placed.get(`n-${i}`)?.keys() ?? [], BARE);
  }),
]);
const bareFloorSeconds = ((await until(() => allRight(BARE))) - t0) / 1000;
console.log(`bare floor: ${podCount} pods and ${nodeCount} patches in ${bareFloorSeconds.toFixed(2)} s`);
await reset();

// Phase 1: the fair floor, in the same burst and then the same churn. The least a controller must
// write to keep every claim within the bound: a pod informer (any controller sees a pod through its
// watch first) and, per node, a claim change waits CLAIM_WRITE_WINDOW_MS for the changes after it,
// then one patch carries the node's claims as they are by then (none if they are back to what it
// last wrote). No queue, no worker limit, no controller runtime; its own client, as Berth has.
const floorClient = sb.client({ maxInFlight: 64 });
const floorPools: PoolCounts = new Map();
const floorWrites = new Map<string, Promise<void>>();
const floorTimers = new Map<string, NodeJS.Timeout>();
const floorWritten = new Map<string, string>();
let floorPatches = 0;
// How long the floor's patches took to answer: beside Berth's, it tells a slow write from a slow controller.
const floorPatchSeconds = { total: 0, count: 0 };
const floorWrite = (node: string) => {
  floorTimers.delete(node);
  const next = (floorWrites.get(node) ?? Promise.resolve()).then(async () => {
    const claims = [...(floorPools.get(node)?.keys() ?? [])].sort();
    if (floorWritten.get(node) === claims.join(',')) return;
    const sent = performance.now();
    floorPatches++;
    await floorPatch(floorClient, node, claims);
    floorWritten.set(node, claims.join(','));
    floorPatchSeconds.total += (performance.now() - sent) / 1000;
    floorPatchSeconds.count++;
  });
  // A failed write does not stop the node's later ones; the churn sees its claims stay wrong.
  floorWrites.set(
    node,
    next.catch(() => {}),
  );
};
const floorMove = (p: SlimPod, delta: number) => {
  const node = p.spec.nodeName;
  const pool = p.metadata?.labels?.[POOL];
  if (!node || !pool) return;
  if (!countPool(floorPools, node, pool, delta) || floorTimers.has(node)) return;
  floorTimers.set(
    node,
    setTimeout(() => floorWrite(node), CLAIM_WRITE_WINDOW_MS),
  );
};
const floorPods = new Informer<SlimPod>({ client: floorClient, ref: Resources.pods, transform: slimPod });
floorPods.addEventHandler({ onAdd: (p) => floorMove(p, 1), onDelete: (p) => floorMove(p, -1) });
floorPods.start();
await floorPods.waitForSync();
const floorBurst = await burstOf(FLOOR);
const floorBurstPatches = floorPatches;
console.log(
  `floor burst: ${podCount} pods created in ${floorBurst.createdSeconds.toFixed(2)} s, claims right in ${floorBurst.convergeSeconds.toFixed(2)} s, ${floorBurstPatches} node patches`,
);
logChurn(`floor burst staleness (${floorBurst.firsts} new claims)`, floorBurst.staleness);
await sleep(2000);
const floorChurnPatchesBefore = floorPatches;
const floorChurn = await churn(FLOOR);
await sleep(2000);
const floorChurnPatches = floorPatches - floorChurnPatchesBefore;
await floorPods.stop();
logChurn('floor churn latency', floorChurn);
console.log(`  ${floorChurnPatches} node patches for ${floorChurn.changedNodes} changes of a node's claims`);
const floorPatchMs = round((floorPatchSeconds.total / Math.max(1, floorPatchSeconds.count)) * 1000, 1);
console.log(`  the floor's ${floorPatchSeconds.count} patches answered in ${floorPatchMs} ms on average`);
floorClient.close();
await reset();

// Berth, as a separate process.
const berth = await startBerth(sb, [
  '--controllers=agents',
  `--agent-workers=${workers}`,
  '--webhook-bind-address=0',
]);
const nodeWrites = () =>
  berth.metric('berth_node_writes_total', (l) => l.includes('field_manager="berth-agents"'));
let result: object | undefined;
try {
  await client.create(AgentPlacement.ref, {
    apiVersion: AgentPlacement.apiVersion,
    kind: 'AgentPlacement',
    metadata: { name: 'bench' },
    spec: {
      podSelector: { matchLabels: { app: 'bench-worker' } },
      owner: { uidLabel: POOL },
      nodeLabel: { key: LABEL },
      claimAnnotationPrefix: CLAIM,
    },
  });

  // Berth has seen the placement (it reports on it) before the burst starts: setup is not measured.
  while (!(await client.get<KubeObject & { status?: unknown }>(AgentPlacement.ref, 'bench')).status) {
    await sleep(100);
  }

  // Phase 2: the burst, with Berth.
  const burstWritesBefore = await nodeWrites();
  const burstWorkBefore = await controllerWork(berth, 'agents-node');
  const burstCpuBefore = cpuSeconds(berth.pid);
  const started = performance.now();
  const berthBurst = await burstOf(CLAIM);
  const burstPatches = (await nodeWrites()) - burstWritesBefore;
  const { createdSeconds, convergeSeconds, staleness: burstStaleness } = berthBurst;
  console.log(
    `burst: ${podCount} pods on ${nodeCount} nodes created in ${createdSeconds.toFixed(2)} s, claims right in ${convergeSeconds.toFixed(2)} s, ${burstPatches} node patches by Berth`,
  );
  logChurn(`burst staleness (${berthBurst.firsts} new claims)`, burstStaleness);
  // As for the churn: whether the staleness was Berth's queue, its writes' answers, or neither (the
  // pods' events reaching it late on a loaded apiserver).
  const burstCpuShare = round(
    (cpuSeconds(berth.pid) - burstCpuBefore) / ((performance.now() - started) / 1000),
    2,
  );
  const burstWork = controllerMeans(await controllerWork(berth, 'agents-node'), burstWorkBefore);
  console.log(
    `  ${describeControllerMeans('agents-node in the burst', burstWork)}; Berth busy ${burstCpuShare} of a core`,
  );

  // Phase 3: the same churn, with Berth.
  await sleep(2000);
  const writesBefore = await nodeWrites();
  const workBefore = await controllerWork(berth, 'agents-node');
  const cpuBefore = cpuSeconds(berth.pid);
  const churnStarted = performance.now();
  const churned = await churn(CLAIM);
  // Berth's own CPU in the churn, of one core: near 1, its event loop (answers, watch events) waits too.
  const churnCpuShare = round(
    (cpuSeconds(berth.pid) - cpuBefore) / ((performance.now() - churnStarted) / 1000),
    2,
  );
  await sleep(2000);
  const writes = (await nodeWrites()) - writesBefore;
  // Whether the churn's latency was the queue's (too few workers for the writes' round trips) or
  // the writes' own (an apiserver slower in this run): it differs from run to run.
  const churnWork = controllerMeans(await controllerWork(berth, 'agents-node'), workBefore);
  const rssMB = berth.rssMB();
  console.log(
    `churn: ${churnSeconds * 100} pod operations, ${churned.changedNodes} changed a node's claims, ${writes} node patches by Berth`,
  );
  logChurn('churn latency', churned);
  console.log(
    `  ${describeControllerMeans('agents-node in the churn', churnWork)}; Berth busy ${churnCpuShare} of a core`,
  );
  result = {
    nodes: nodeCount,
    pods: podCount,
    convergeSeconds: round(convergeSeconds, 2),
    floorSeconds: round(floorBurst.convergeSeconds, 2),
    ratio: round(convergeSeconds / floorBurst.convergeSeconds, 2),
    bareFloorSeconds: round(bareFloorSeconds, 2),
    bareFloorPatches: nodeCount,
    ...churnFigures('burst', burstStaleness),
    ...churnFigures('burstFloor', floorBurst.staleness),
    burstStalled: burstStaleness.stalls,
    burstQueueWaitMs: burstWork.queuedMs,
    burstReconcileMs: burstWork.reconcileMs,
    burstPatchMs: burstWork.patchMs,
    burstCpuShare,
    // With a stall the p99 and maximum are not figures: the stalled operations are counted instead.
    ...churnFigures('churn', churned),
    churnStalled: churned.stalls,
    ...churnFigures('churnFloor', floorChurn),
    churnQueueWaitMs: churnWork.queuedMs,
    churnReconcileMs: churnWork.reconcileMs,
    churnPatchMs: churnWork.patchMs,
    churnFloorPatchMs: floorPatchMs,
    churnCpuShare,
    // Writes per node: in the burst per node, in the churn per change of a node's claims.
    burstWritesPerNode: round(burstPatches / nodeCount, 2),
    burstFloorWritesPerNode: round(floorBurstPatches / nodeCount, 2),
    burstWritesRatio: round(burstPatches / Math.max(1, floorBurstPatches), 2),
    writesPerChangedNode: round(writes / Math.max(1, churned.changedNodes), 2),
    floorWritesPerChangedNode: round(floorChurnPatches / Math.max(1, floorChurn.changedNodes), 2),
    churnWritesRatio: round(writes / Math.max(1, floorChurnPatches), 2),
    rssMB,
  };
} finally {
  await berth.stop();
  await nodes.stop();
  client.close();
  await sb.destroy();
}
report(result);
