// Every cluster capability on at once, at scale: `npm run bench:scale -- --nodes 1000 --pods 20000`.
// One private sandbox of kwok nodes carrying an input label, one policy of each cluster kind (a
// NodeLabelRule deriving a label from the input, a NodeStartupGate for a pool no node is in, an
// AgentPlacement whose workload is one pod in ten, an ArchPlacement for a namespace no pod is in)
// and `--pods` pods bound round-robin. Berth runs as its image runs it (compiled, the Dockerfile's
// Node flags and environment, its default controllers) with leader election, two replicas:
//   1. the floors: bench/listfloor, a Go program listing the nodes and pods in pages (plain net/http)
//      just before Berth starts: the apiserver's pace for what Berth's caches must hold; then its
//      node.mjs, the same in the simplest Node program with the image's flags: the runtime's pace;
//   2. start: replica A from its spawn to its caches synced (/readyz), to its first action (a node
//      labelled) and to converged (every node labelled);
//   3. replica B started and warm (ready), then quiet: A's writes in `--idle-seconds` (target 0);
//   4. probes on the quiet cluster, one at a time, from the change to Berth's write seen by a watch:
//      a node's input label taken off or put back (the derived label follows), and a new workload pod
//      bound to a node (the node's agent claim); p50/p99/max (target p99 ≤ 1 s);
//   5. hand-over: A stopped (SIGTERM: it releases the Lease), then `--changes` nodes lose their input
//      label; from the stop to B's first action and to every change acted on;
//   6. RSS of both replicas (target ≤ 300 MB at 5,000 nodes).
// The last line is one JSON object; every figure names the load of the machine before the run.
import { spawnSync } from 'node:child_process';
import { loadavg } from 'node:os';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { parseArgs } from 'node:util';
import { AgentPlacement } from '../src/agents/crd.ts';
import { ArchPlacement } from '../src/arch/crd.ts';
import { installCrds } from '../src/cli/install.ts';
import { NodeLabelRule } from '../src/labels/crd.ts';
import { podReady } from '../src/gates/decide/requirements.ts';
import { slimNode, slimPod, type SlimNode, type SlimPod } from '../src/policy/slim.ts';
import { nodeManifests } from '../src/sandbox/nodes.ts';
import { Resources } from '../src/runtime/api/meta.ts';
import { Informer } from '../src/runtime/cache/informer.ts';
import { imageEnv, imageNodeFlags, startBerth, type BerthProcess } from '../test/helpers/berth.ts';
import {
  benchSandbox,
  berthWrites,
  buildGoProgram,
  createBoundPods,
  createWarmupGate,
  goClientArgs,
  percentile,
  report,
  round,
  sumWrites,
  waitForPodsRunning,
  waitForValue,
  writesPer,
} from './lib.ts';

const { values } = parseArgs({
  options: {
    nodes: { type: 'string', default: '1000' },
    pods: { type: 'string', default: '20000' },
    probes: { type: 'string', default: '20' },
    changes: { type: 'string', default: '20' },
    'idle-seconds': { type: 'string', default: '60' },
  },
});
const nodeCount = Number(values.nodes);
const podCount = Number(values.pods);
const probes = Number(values.probes);
const changes = Number(values.changes);
const idleSeconds = Number(values['idle-seconds']);
const INPUT = 'bench.berth.dev/usb-edgetpu';
const DERIVED = 'bench.berth.dev/edgetpu';
const POOL = 'bench.berth.dev/pool-uid';
const GATED = 'bench.berth.dev/pool';
const TAINT = 'bench.berth.dev/warming';
const CLAIM = 'bench.berth.dev/claim.';
const NS = 'bench-scale';
const NODE_FLOOR = `${import.meta.dirname}/listfloor/node.mjs`;
const STALLS_BEFORE_SKIP = 3;
const load = () => loadavg().map((l) => round(l, 2));
const seconds = (from: number) => round((performance.now() - from) / 1000, 2);
console.log(`load average before the run: ${load().join(', ')}`);

const work = mkdtempSync(`${tmpdir()}/bench-scale-`);
const floorBin = buildGoProgram('listfloor', work);
const sb = await benchSandbox('bench-scale', [
  { prefix: 'n', count: nodeCount, labels: { [INPUT]: 'true' } },
]);
const client = sb.client({ maxInFlight: 64 });
const replicas: BerthProcess[] = [];
const gone = new Set<BerthProcess>();
const track = (r: BerthProcess) => (void r.exited.then(() => gone.add(r)), r);
// The bench's own view of the nodes: when Berth's writes land, seen by a watch.
const nodes = new Informer<SlimNode>({ client, ref: Resources.nodes, transform: slimNode });
const waiters = new Set<() => void>();
const wake = () => waiters.forEach((w) => w());
nodes.addEventHandler({ onAdd: wake, onUpdate: wake });
/** When `pred` first holds, as the bench's watch sees the nodes. */
const until = (pred: () => boolean) =>
  new Promise<number>((resolve) => {
    const check = () => {
      if (!pred()) return;
      waiters.delete(check);
      resolve(performance.now());
    };
    waiters.add(check);
    check();
  });
const labelled = () => nodes.list().filter((n) => n.metadata?.labels?.[DERIVED] === 'true').length;
let result: object | undefined;
try {
  await installCrds(client);
  await createPolicies();
  const t = performance.now();
  await createBoundPods(client, {
    namespace: NS,
    from: 0,
    to: podCount,
    nodeOf: (i) => `n-${i % nodeCount}`,
    labelsOf: (i) => (i % 10 === 0 ? { app: 'bench-worker', [POOL]: `pool-${i % 50}` } : undefined),
  });
  console.log(`${podCount} pods created in ${seconds(t)} s`);
  // Berth starts on a quiet cluster, as the targets ask: kwok has played every pod to Running
  // (at 100,000 pods it is minutes behind the creates, and a warm pod would queue behind them).
  const quiet = performance.now();
  await waitForPodsRunning(client, [NS], Math.max(600_000, podCount * 20));
  console.log(`kwok played them to Running ${seconds(quiet)} s later`);

  nodes.start();
  await nodes.waitForSync();
  const floorArgs = await goClientArgs(client, work);
  const floor = listFloor(floorBin, floorArgs);
  console.log(`floor: nodes listed in ${floor.nodesSeconds} s, pods in ${floor.podsSeconds} s`);
  const nodeFloor = listFloor(process.execPath, [...imageNodeFlags(), NODE_FLOOR, ...floorArgs], imageEnv());
  console.log(
    `Node.js floor: nodes listed in ${nodeFloor.nodesSeconds} s, pods in ${nodeFloor.podsSeconds} s`,
  );

  const start = await startReplica();
  const standby = await startBerth(sb, ['--leader-elect', '--log-level=info'], { compiled: true });
  replicas.push(track(standby));
  const idleWrites = await writesWhileIdle(replicas[0]!);
  const latency = await probeLatencies();
  // A replica that lost its Lease exits, as controller-runtime's do (nothing restarts it here).
  const exited = replicas.filter((r) => gone.has(r)).length;
  const rss = replicas.map((r) => (gone.has(r) ? null : round(r.rssMB())));
  if (exited) console.log(`${exited} replica(s) exited during the run (their logs say why): no hand-over`);
  const handover = exited ? null : await handOver();
  result = {
    nodes: nodeCount,
    pods: podCount,
    loadBefore: load(),
    floor,
    nodeFloor,
    start,
    handover,
    idleWrites,
    idleSeconds,
    ...latency,
    rssMB: rss,
    replicasExited: exited,
  };
  console.log(JSON.stringify(result, null, 2));
} finally {
  await nodes.stop();
  for (const r of replicas) await r.stop();
  client.close();
  await sb.destroy();
  rmSync(work, { recursive: true, force: true });
}
report(result);

async function createPolicies(): Promise<void> {
  await client.create(Resources.namespaces, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS } });
  await createWarmupGate(client, { name: 'bench', namespace: NS, nodeLabel: GATED, taint: TAINT });
  const make = (ref: typeof NodeLabelRule.ref, kind: string, apiVersion: string, spec: object) =>
    client.create(ref, { apiVersion, kind, metadata: { name: 'bench' }, spec });
  await make(NodeLabelRule.ref, 'NodeLabelRule', NodeLabelRule.apiVersion, {
    match: { allOf: [{ label: INPUT, operator: 'Exists' }] },
    labels: { [DERIVED]: 'true' },
  });
  await make(AgentPlacement.ref, AgentPlacement.kind, AgentPlacement.apiVersion, {
    podSelector: { matchLabels: { app: 'bench-worker' } },
    owner: { uidLabel: POOL },
    nodeLabel: { key: 'bench.berth.dev/agent' },
    claimAnnotationPrefix: CLAIM,
  });
  await make(ArchPlacement.ref, ArchPlacement.kind, ArchPlacement.apiVersion, {
    namespaceSelector: { matchLabels: { 'bench.berth.dev/arch': 'true' } },
  });
}

/** A list floor (bench/listfloor's Go program or its node.mjs) over the nodes and pods: seconds until each list was in. */
function listFloor(cmd: string, args: string[], env: Record<string, string> = {}) {
  const run = spawnSync(cmd, args, {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
    env: { ...process.env, ...env },
  });
  if (run.status !== 0) throw new Error(`${cmd} ${args[0]} exited with ${run.status}`);
  const out = JSON.parse(run.stdout.trim()) as Record<string, { seconds: number; objects: number }>;
  return {
    nodesSeconds: round(out['/api/v1/nodes']!.seconds, 2),
    podsSeconds: round(out['/api/v1/pods']!.seconds, 2),
    pods: out['/api/v1/pods']!.objects,
  };
}

/** Replica A from its spawn: caches synced, first node labelled, every node labelled. */
async function startReplica() {
  const t0 = performance.now();
  const first = until(() => labelled() > 0);
  const all = until(() => labelled() === nodeCount);
  const a = await startBerth(sb, ['--leader-elect', '--log-level=info'], {
    compiled: true,
    waitReady: false,
  });
  replicas.push(track(a));
  const ready = waitForValue(
    'replica A ready',
    async () => ((await fetch(`http://127.0.0.1:${a.healthPort}/readyz`)).ok ? performance.now() : undefined),
    900_000,
  );
  const r = {
    cachesSyncedSeconds: round(((await ready) - t0) / 1000, 2),
    firstActionSeconds: round(((await first) - t0) / 1000, 2),
    convergedSeconds: round(((await all) - t0) / 1000, 2),
  };
  console.log(
    `start: caches ${r.cachesSyncedSeconds} s, first label ${r.firstActionSeconds} s, all ${r.convergedSeconds} s`,
  );
  return r;
}

/** The leader's API writes while nothing changes (but its Lease's), after 10 s for the standby's start to settle. */
async function writesWhileIdle(leader: BerthProcess): Promise<number> {
  await new Promise((r) => setTimeout(r, 10_000));
  const before = await berthWrites(leader.metricsPort);
  await new Promise((r) => setTimeout(r, idleSeconds * 1000));
  const by = writesPer(before, await berthWrites(leader.metricsPort), 1);
  // The Lease's renewals (every retry period) are leader election's, not a capability's writes.
  const n = sumWrites(by, (resource) => resource !== 'leases');
  console.log(`idle: ${n} writes in ${idleSeconds} s besides the Lease's renewals ${JSON.stringify(by)}`);
  return n;
}

/** One change at a time on the quiet cluster, each timed from its answer to Berth's write seen. */
async function probeLatencies() {
  const label: number[] = [];
  const claim: number[] = [];
  for (let i = 0; i < probes; i++) {
    // The input taken off a node, then put back: both directions, the node left as found.
    const node = `n-${(Math.floor(i / 2) * 37) % nodeCount}`;
    const on = i % 2 === 1;
    await client.patch(Resources.nodes, node, { metadata: { labels: { [INPUT]: on ? 'true' : null } } });
    const t = performance.now();
    label.push((await until(() => (nodes.get(node)?.metadata?.labels?.[DERIVED] === 'true') === on)) - t);
  }
  for (let i = 0; i < probes; i++) {
    const node = `n-${(i * 53 + 11) % nodeCount}`;
    const pool = `probe-${i}`;
    await client.create(Resources.pods, {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: `probe-${i}`, namespace: NS, labels: { app: 'bench-worker', [POOL]: pool } },
      spec: { nodeName: node, containers: [{ name: 'main', image: 'registry.example/worker:1' }] },
    });
    const t = performance.now();
    claim.push((await until(() => nodes.get(node)?.metadata?.annotations?.[CLAIM + pool] !== undefined)) - t);
  }
  const r = {
    nodeLabel: summary(label),
    agentClaim: summary(claim),
    gateRelease: await gateReleases(),
  };
  console.log(`latency: ${JSON.stringify(r)}`);
  return r;
}

/**
 * New gated nodes, one at a time: each tainted at admission, its warm pod made Ready (the
 * DaemonSet, kwok), then the taint released by Berth: from the pod seen Ready to the taint seen gone.
 */
async function gateReleases() {
  const warm = new Informer<SlimPod>({
    client,
    ref: Resources.pods,
    namespace: NS,
    labelSelector: 'app=warmup',
    transform: slimPod,
  });
  const readyAt = new Map<string, number>();
  const onPod = (p: SlimPod) => {
    const node = p.spec.nodeName;
    if (node && podReady(p) && !readyAt.has(node)) readyAt.set(node, performance.now());
  };
  warm.addEventHandler({ onAdd: onPod, onUpdate: (_a, b) => onPod(b) });
  warm.start();
  await warm.waitForSync();
  const release: number[] = [];
  let stalls = 0;
  try {
    for (const m of nodeManifests({ prefix: 'gated', count: probes, labels: { [GATED]: 'gated' } })) {
      const name = m.metadata!.name!;
      const created = await client.create<SlimNode>(Resources.nodes, m);
      if (!created.spec?.taints?.some((t) => t.key === TAINT)) throw new Error(`${name} joined untainted`);
      // Bounded, as the probes were: a node not released within 30 s is a stall.
      const released = await Promise.race([
        until(() => {
          const n = nodes.get(name);
          return n !== undefined && !n.spec.taints?.some((t) => t.key === TAINT);
        }),
        new Promise<undefined>((r) => setTimeout(() => r(undefined), 30_000)),
      ]);
      const ready = readyAt.get(name);
      if (released === undefined) {
        console.log(`  ${name}: not released within 30 s (its warm pod ${ready ? 'Ready' : 'not Ready'})`);
        stalls++;
        // kwok behind on its pods (a large backlog of pod stages) leaves every warm pod Pending: say
        // so once rather than wait 30 s for each of the rest.
        if (stalls === STALLS_BEFORE_SKIP && !release.length && !readyAt.size) {
          console.log(`  no warm pod Ready after ${stalls} nodes: the remaining gate probes skipped`);
          break;
        }
        continue;
      }
      // The two watches may deliver out of order: the pod's Ready may arrive after the release.
      release.push(released - (await waitForValue(`${name}'s warm pod seen Ready`, () => readyAt.get(name))));
    }
  } finally {
    await warm.stop();
  }
  return { ...summary(release), stalls, skipped: probes - release.length - stalls };
}

/**
 * The leader stopped (SIGTERM: it releases the Lease), then `changes` nodes lose their input label,
 * which only the standby can act on: from the stop to its first action and to every change done.
 */
async function handOver() {
  const t0 = performance.now();
  await replicas.shift()!.stop();
  const stoppedSeconds = seconds(t0);
  const targets = Array.from({ length: changes }, (_, i) => `n-${(i * 97 + 5) % nodeCount}`);
  const gone = (n: string) => nodes.get(n)?.metadata?.labels?.[DERIVED] === undefined;
  const first = until(() => targets.some(gone));
  const all = until(() => targets.every(gone));
  await Promise.all(
    targets.map((n) => client.patch(Resources.nodes, n, { metadata: { labels: { [INPUT]: null } } })),
  );
  const r = {
    leaderStoppedSeconds: stoppedSeconds,
    firstActionSeconds: round(((await first) - t0) / 1000, 2),
    convergedSeconds: round(((await all) - t0) / 1000, 2),
  };
  console.log(
    `hand-over: leader stopped ${r.leaderStoppedSeconds} s, first action ${r.firstActionSeconds} s, all ${r.convergedSeconds} s`,
  );
  return r;
}

function summary(ms: number[]) {
  return {
    n: ms.length,
    p50Ms: Math.round(percentile(ms, 50)),
    p99Ms: Math.round(percentile(ms, 99)),
    maxMs: Math.round(Math.max(...ms)),
  };
}
