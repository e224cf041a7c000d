// Eviction on removal at scale: `npm run bench:evict -- --nodes 500 --pods 5000`.
// Every node has an EdgeTPU (an input label); a NodeLabelRule derives accelerators label from it,
// with evictOnRemoval. Every pod (bound round-robin) needs the derived label. The input label is
// taken off `--affected` nodes at once; Berth drops the derived label there and, after the rule's
// delay, evicts the pods on those nodes. Measured per pod: from the removal (its node's patch
// answered or seen, whichever is first) to the pod's eviction (seen terminating or gone), minus the
// delay; and the same to its Eviction request's answer. Every affected pod must be evicted, and no
// other. The floor: bench/evictfloor, a Go program asking the Eviction API for as many pods of other
// nodes at once, at the evictor's concurrency (or --floor-concurrency); the apiserver's evictions
// per second bound both. The descheduler's RemovePodsViolatingNodeAffinity runs on an interval
// (5 minutes by default): its time to evict is up to that interval, not measured here. Beside them,
// for diagnosis: the time until the derived label is gone (Berth's labels controller, part of the
// eviction time), the time from then, Berth's mean reconcile time, its API writes per eviction and
// the events it had to drop.
// Berth runs as its own process (`berth run --controllers labels`), as it would in a cluster.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { installCrds } from '../src/cli/install.ts';
import { Informer } from '../src/runtime/cache/informer.ts';
import { slimNode, slimPod, type SlimNode, type SlimPod } from '../src/policy/slim.ts';
import { Resources } from '../src/runtime/api/meta.ts';
import { EVICT_WORKERS } from '../src/labels/controllers/evict.ts';
import { NodeLabelRule } from '../src/labels/crd.ts';
import {
  benchSandbox,
  buildGoProgram,
  createBoundPods,
  goClientArgs,
  percentile,
  round,
  report,
} from './lib.ts';
import { startBerth } from '../test/helpers/berth.ts';

const { values } = parseArgs({
  options: {
    nodes: { type: 'string', default: '500' },
    pods: { type: 'string', default: '5000' },
    affected: { type: 'string', default: '100' },
    'after-seconds': { type: 'string', default: '2' },
    'floor-concurrency': { type: 'string', default: String(EVICT_WORKERS) },
  },
});
const nodeCount = Number(values.nodes);
const podCount = Number(values.pods);
const affectedCount = Math.min(Number(values.affected), nodeCount);
const afterSeconds = Number(values['after-seconds']);
const floorConcurrency = Number(values['floor-concurrency']);
if (nodeCount < 2 * affectedCount)
  throw new Error(
    '--nodes must be at least twice --affected: the floor evicts the pods of as many other nodes',
  );
const INPUT = 'bench.berth.dev/usb-edgetpu';
const DERIVED = 'bench.berth.dev/edgetpu';
const NS = 'bench-evict';

const sb = await benchSandbox('bench-evict', [
  { prefix: 'tpu', count: nodeCount, labels: { [INPUT]: 'true' } },
]);
const client = sb.client({ maxInFlight: 64 });
await installCrds(client);

// The bench's own views of nodes and pods, to see labels land and pods go.
const nodes = new Informer<SlimNode>({ client, ref: Resources.nodes, transform: slimNode });
const pods = new Informer<SlimPod>({ client, ref: Resources.pods, namespace: NS, transform: slimPod });
const gone = new Map<string, number>();
const seen = (p: SlimPod) => {
  if (p.metadata?.deletionTimestamp && !gone.has(p.metadata.name!))
    gone.set(p.metadata.name!, performance.now());
};
pods.addEventHandler({
  onUpdate: (_, p) => seen(p),
  onDelete: (p) => gone.has(p.metadata!.name!) || gone.set(p.metadata!.name!, performance.now()),
});
let onChange = () => {};
// When the input and the derived label went from each node: the input's removal at the first sign
// of it, its patch answered or the bench's watch seeing it, whichever comes first (the patch's time
// in the bench's own client queue is not the removal's); the derived label's as the bench saw it.
const removedAt = new Map<string, number>();
const unlabelled = new Map<string, number>();
const noteOnce = (m: Map<string, number>, name: string) => m.has(name) || m.set(name, performance.now());
nodes.addEventHandler({
  onUpdate: (a, b) => {
    const name = b.metadata!.name!;
    if (a.metadata?.labels?.[INPUT] && !b.metadata?.labels?.[INPUT]) noteOnce(removedAt, name);
    if (a.metadata?.labels?.[DERIVED] && !b.metadata?.labels?.[DERIVED]) noteOnce(unlabelled, name);
  },
});
const changes = { onAdd: () => onChange(), onUpdate: () => onChange(), onDelete: () => onChange() };
nodes.addEventHandler(changes);
pods.addEventHandler(changes);
nodes.start();
pods.start();
await Promise.all([nodes.waitForSync(), pods.waitForSync()]);
const until = (pred: () => boolean, timeoutMs: number) =>
  new Promise<boolean>((resolve) => {
    const timer = setTimeout(() => resolve(false), timeoutMs);
    const check = () => pred() && (clearTimeout(timer), resolve(true));
    onChange = check;
    check();
  });

// The floor, built from its Go module like the control plane: it evicts the given pods and says
// when it started and how many the apiserver took.
const work = mkdtempSync(path.join(tmpdir(), 'bench-evict-'));
const floorBin = buildGoProgram('evictfloor', work);
const floorArgs = [...(await goClientArgs(client, work)), `-concurrency=${floorConcurrency}`];
async function runFloor(
  list: SlimPod[],
): Promise<{ start: number; answered: Map<string, number>; refused: number }> {
  const child = spawn(floorBin, floorArgs, { stdio: ['pipe', 'pipe', 'inherit'] });
  child.stdin.end(
    list.map((p) => `${p.metadata!.namespace} ${p.metadata!.name} ${p.metadata!.uid}\n`).join(''),
  );
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  const [code] = (await once(child, 'exit')) as [number | null];
  const start = out.match(/^start (\d+)$/m);
  const done = out.match(/^done (\d+)$/m);
  if (code !== 0 || !start || !done) throw new Error(`the eviction floor failed (exit ${code}): ${out}`);
  const answered = new Map([...out.matchAll(/^evicted (\S+) (\d+)$/gm)].map((m) => [m[1]!, Number(m[2])]));
  return { start: Number(start[1]), answered, refused: Number(done[1]) };
}

/** When Berth's Eviction requests were answered (wall clock ms), by pod name: its log line of each. */
function berthAnswered(output: string): Map<string, number> {
  const at = new Map<string, number>();
  for (const line of output.split('\n')) {
    if (!line.includes('"evicted pod ')) continue;
    const l = JSON.parse(line) as { time: string; pod: string };
    at.set(l.pod.split('/')[1]!, Date.parse(l.time));
  }
  return at;
}

// Its output is kept, not printed (a warning per eviction), and searched for events it dropped.
const berth = await startBerth(sb, ['--controllers=labels', '--max-evictions-per-minute=100000'], {
  capture: true,
});
// Every request Berth sends but reads: node patches, evictions, events, statuses.
const berthWrites = () => berth.metric('rest_client_requests_total', (l) => !l.includes('method="GET"'));
let result: object | undefined;
try {
  await client.create(NodeLabelRule.ref, {
    apiVersion: NodeLabelRule.apiVersion,
    kind: 'NodeLabelRule',
    metadata: { name: 'edgetpu' },
    spec: {
      match: { allOf: [{ label: INPUT, operator: 'Exists' }] },
      labels: { [DERIVED]: 'true' },
      evictOnRemoval: { afterSeconds, maxPerMinute: 10000 },
    },
  });
  const names = Array.from({ length: nodeCount }, (_, i) => `tpu-${i}`);
  await until(() => names.every((n) => nodes.get(n)?.metadata?.labels?.[DERIVED] === 'true'), 120_000);
  console.log(`${nodeCount} nodes carry ${DERIVED}`);

  await client.create(Resources.namespaces, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS } });
  let t0 = performance.now();
  await createBoundPods(client, {
    namespace: NS,
    from: 0,
    to: podCount,
    nodeOf: (i) => names[i % nodeCount]!,
    label: DERIVED,
  });
  await until(() => pods.list().filter((p) => p.status.phase === 'Running').length === podCount, 300_000);
  console.log(`${podCount} pods running in ${((performance.now() - t0) / 1000).toFixed(1)} s`);

  // Take the input off the affected nodes at once; each pod's clock starts at its node's removal.
  const affected = names.slice(0, affectedCount);
  const writesBefore = await berthWrites();
  await Promise.all(
    affected.map(async (n) => {
      await client.patch(Resources.nodes, n, { metadata: { labels: { [INPUT]: null } } });
      noteOnce(removedAt, n);
    }),
  );
  const affectedSet = new Set(affected);
  const affectedPods = pods.list().filter((p) => affectedSet.has(p.spec.nodeName!));
  const nodeOf = new Map(pods.list().map((p) => [p.metadata!.name!, p.spec.nodeName!]));
  t0 = performance.now();
  const all = await until(
    () => affectedPods.every((p) => gone.has(p.metadata!.name!)),
    afterSeconds * 1000 + 120_000,
  );
  console.log(
    `${all ? 'every' : 'NOT every'} affected pod evicted in ${((performance.now() - t0) / 1000).toFixed(1)} s`,
  );
  // Room for a wrong eviction to show.
  await new Promise((r) => setTimeout(r, 3000));
  const writes = (await berthWrites()) - writesBefore;

  const lat: number[] = [];
  // The same time counted from when the derived label went (as the bench saw it): the evictor's share.
  const afterLabel: number[] = [];
  // To the Eviction request's answer rather than the pod seen go: the apiserver's watch delay apart.
  const answeredAt = berthAnswered(berth.output());
  const answered: number[] = [];
  let wrong = 0;
  for (const [pod, at] of gone) {
    const node = nodeOf.get(pod)!;
    if (affectedSet.has(node)) {
      lat.push(at - removedAt.get(node)! - afterSeconds * 1000);
      afterLabel.push(at - unlabelled.get(node)! - afterSeconds * 1000);
      const a = answeredAt.get(pod);
      if (a !== undefined)
        answered.push(a - performance.timeOrigin - removedAt.get(node)! - afterSeconds * 1000);
    } else wrong++;
  }
  const relabel = affected.map((n) => (unlabelled.get(n) ?? NaN) - removedAt.get(n)!);

  // The floor: a Go program that knows the affected pods asks the Eviction API for as many pods
  // of other nodes at once, at the evictor's concurrency, timed from its first request to each
  // pod seen go the same way. Berth keeps running, so the cluster carries the same watches, but its
  // event writes trailing the evictions are let finish first: they would slow the floor down.
  for (let w = -1, deadline = performance.now() + 60_000; performance.now() < deadline;) {
    const now = await berthWrites();
    if (now === w) break;
    w = now;
    await new Promise((r) => setTimeout(r, 1000));
  }
  const floorSet = new Set(names.slice(affectedCount, 2 * affectedCount));
  const floorPods = pods.list().filter((p) => floorSet.has(p.spec.nodeName!));
  const floorRun = await runFloor(floorPods);
  await until(() => floorPods.every((p) => gone.has(p.metadata!.name!)), 120_000);
  // The floor prints its start on the wall clock; the bench's times are on its monotonic one.
  const floor = floorPods.map((p) => performance.timeOrigin + gone.get(p.metadata!.name!)! - floorRun.start);
  const floorAnswered = [...floorRun.answered.values()].map((t) => t - floorRun.start);
  console.log(
    `floor: ${floorRun.answered.size} evictions (${floorRun.refused} refused) at concurrency ${floorConcurrency}, p99 ${round(percentile(floor, 99), 0)} ms (answered: ${round(percentile(floorAnswered, 99), 0)} ms)`,
  );
  const evicted = await berth.metric('berth_evictions_total', (l) => l.includes('result="evicted"'));
  // Where the time goes: Berth's reconciles of pods (an eviction's round trip to the apiserver included).
  const ofEvict = (l: string) => l.includes('controller="labels-evict"');
  const reconcileMeanMs =
    (1000 * (await berth.metric('controller_runtime_reconcile_time_seconds_sum', ofEvict))) /
    (await berth.metric('controller_runtime_reconcile_time_seconds_count', ofEvict));
  console.log(`Berth counts ${evicted} evictions; ${lat.length} affected pods seen go, ${wrong} others`);
  result = {
    nodes: nodeCount,
    pods: podCount,
    affectedNodes: affectedCount,
    afterSeconds,
    affectedPods: affectedPods.length,
    evicted: lat.length,
    berthEvictions: evicted,
    wrongEvictions: wrong,
    evictP50ms: round(percentile(lat, 50), 0),
    evictP99ms: round(percentile(lat, 99), 0),
    floorPods: floorPods.length,
    floorP50ms: round(percentile(floor, 50), 0),
    floorP99ms: round(percentile(floor, 99), 0),
    floorConcurrency,
    ratio: round(percentile(lat, 99) / percentile(floor, 99), 2),
    answeredP99ms: round(percentile(answered, 99), 0),
    floorAnsweredP99ms: round(percentile(floorAnswered, 99), 0),
    unlabelP99ms: round(percentile(relabel, 99), 0),
    afterLabelP99ms: round(percentile(afterLabel, 99), 0),
    reconcileMeanMs: round(reconcileMeanMs, 1),
    berthWritesPerEviction: round(writes / lat.length, 2),
    eventsDropped: berth.output().split('event queue full').length - 1,
    rssMB: berth.rssMB(),
  };
} finally {
  await berth.stop();
  await Promise.all([nodes.stop(), pods.stop()]);
  client.close();
  await sb.destroy();
  rmSync(work, { recursive: true, force: true });
}
report(result);
