// Resident memory of the labels job against the objects it caches:
// `npm run bench:memory -- --points 1000:0,1000:20000,5000:20000,5000:100000` (nodes:pods).
// One sandbox grows from point to point (nodes carry an input label; pods are bound round-robin
// and need the derived label). At each point, each of these is started fresh, so its initial list
// is of that point's size, and once its work is done (every node carries its label, the floors have
// said "ready") and 5 s have passed, its RSS is sampled for 5 s and the median kept:
// - Berth as its image runs it (compiled, with the Dockerfile's Node flags and environment),
//   `--controllers=labels`, a NodeLabelRule deriving a label from the input;
// - Berth the same way with its default controllers, everything a cluster runs (`everythingMB`);
// - the Go floor, bench/labelsfloor: the same necessary work with no client library (list and
//   watch nodes and pods, keep the fields the job reads, patch the derived label);
// - the Node.js floor, bench/labelsfloor/node.mjs: that work in the simplest Node program, with the
//   image's flags (how much of Berth's memory is the runtime's: `nodeFloorMB`);
// - the stack floor, bench/labelsfloor/stack.mjs: the Node.js floor with the libraries of Berth's
//   stack each used once (commander, zod on the rules, pino, prom-client serving /metrics), with the
//   image's flags (how much is the stack's, how much Berth's own: `stackFloorMB`);
// - Berth on node-readiness-controller's job, `--controllers=gates` with one enforced
//   NodeStartupGate waiting for a DaemonSet's pods (its Node webhook starts the webhook thread),
//   once the gate says Ready (`gatesMB`; the gate is a dry run while the others run, so that they
//   need no webhook).
// The seed's own Go labeller held 54 MB at 1,000 nodes (issue 17): the target is 110 MB there.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { installCrds } from '../src/cli/install.ts';
import { NodeLabelRule } from '../src/labels/crd.ts';
import { NodeStartupGate } from '../src/gates/crd.ts';
import { slimNode, type SlimNode } from '../src/policy/slim.ts';
import { hasCondition } from '../src/runtime/api/conditions.ts';
import { Resources } from '../src/runtime/api/meta.ts';
import { Informer } from '../src/runtime/cache/informer.ts';
import { createNodes } from '../src/sandbox/nodes.ts';
import { imageEnv, imageNodeFlags, startBerth } from '../test/helpers/berth.ts';
import {
  benchSandbox,
  buildGoProgram,
  createBoundPods,
  createWarmupGate,
  goClientArgs,
  report,
  round,
  waitForValue,
} from './lib.ts';

const { values } = parseArgs({
  options: { points: { type: 'string', default: '1000:0,1000:20000,5000:20000,5000:100000' } },
});
const points = values.points.split(',').map((p) => {
  const [nodes, pods] = p.split(':').map(Number) as [number, number];
  if (!(nodes > 0) || !(pods >= 0)) throw new Error(`--points ${p}: not nodes:pods`);
  return { nodes, pods };
});
for (let i = 1; i < points.length; i++)
  if (points[i]!.nodes < points[i - 1]!.nodes || points[i]!.pods < points[i - 1]!.pods)
    throw new Error('--points must grow: the sandbox only adds nodes and pods');

const INPUT = 'bench.berth.dev/usb-edgetpu';
const DERIVED = 'bench.berth.dev/edgetpu';
const FLOOR = 'bench.berth.dev/edgetpu-floor';
const NODE_FLOOR_SCRIPT = path.join(import.meta.dirname, 'labelsfloor', 'node.mjs');
const STACK_FLOOR_SCRIPT = path.join(import.meta.dirname, 'labelsfloor', 'stack.mjs');
const NS = 'bench-memory';
const GATE = 'bench-memory';

// The floor, built from its Go module like the control plane.
const work = mkdtempSync(path.join(tmpdir(), 'bench-memory-'));
const floorBin = buildGoProgram('labelsfloor', work);

const sb = await benchSandbox('bench-memory', [
  { prefix: 'tpu', count: points[0]!.nodes, labels: { [INPUT]: 'true' } },
]);
const client = sb.client({ maxInFlight: 64 });
await installCrds(client);
await client.create(Resources.namespaces, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS } });
await client.create(NodeLabelRule.ref, {
  apiVersion: NodeLabelRule.apiVersion,
  kind: 'NodeLabelRule',
  metadata: { name: 'edgetpu' },
  spec: { match: { allOf: [{ label: INPUT, operator: 'Exists' }] }, labels: { [DERIVED]: 'true' } },
});

// Its nodes are none of the sandbox's: the gate holds no node, as on a cluster between scale-ups.
await createWarmupGate(client, {
  name: GATE,
  namespace: NS,
  nodeLabel: 'bench.berth.dev/pool',
  taint: 'bench.berth.dev/warming',
});
await setGateDryRun(true);

const floorArgs = [...(await goClientArgs(client, work)), `-input=${INPUT}`, `-derived=${FLOOR}`];

const nodes = new Informer<SlimNode>({ client, ref: Resources.nodes, transform: slimNode });
nodes.start();
await nodes.waitForSync();
const labelled = (label: string) => nodes.list().filter((n) => n.metadata?.labels?.[label] === 'true').length;

const rssOf = (pid: number) =>
  Number(readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+)/)![1]) / 1024;
/** The median of 5 samples a second apart, after 5 s of quiet. */
async function settledRss(pid: number): Promise<number> {
  await new Promise((r) => setTimeout(r, 5000));
  const samples: number[] = [];
  for (let i = 0; i < 5; i++) {
    samples.push(rssOf(pid));
    await new Promise((r) => setTimeout(r, 1000));
  }
  return samples.sort((a, b) => a - b)[2]!;
}

/** Every node's label `label` removed, so that the next process's work shows when it is done. */
async function clear(label: string): Promise<void> {
  const names = nodes.list().filter((n) => n.metadata?.labels?.[label] !== undefined);
  await Promise.all(
    names.map((n) =>
      client.patch(
        Resources.nodes,
        n.metadata!.name!,
        { metadata: { labels: { [label]: null } } },
        { type: 'merge' },
      ),
    ),
  );
  await waitForValue(`${label} removed`, () => labelled(label) === 0 || undefined, 60_000);
}

/** A floor's RSS once it has said "ready" and labelled every node. */
async function measureFloor(cmd: string, args: string[], env: NodeJS.ProcessEnv, count: number) {
  await clear(FLOOR);
  const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'inherit'], env });
  let ready = false;
  child.stdout.on('data', (d: Buffer) => (ready ||= d.toString().includes('ready')));
  try {
    await waitForValue(
      `${path.basename(cmd)} labels ${count} nodes`,
      () => (ready && labelled(FLOOR) === count) || undefined,
      300_000,
    );
    return await settledRss(child.pid!);
  } finally {
    child.kill();
  }
}

/** A Node.js floor's RSS, the script run as the image runs Berth (its Node flags and environment). */
const measureNodeFloor = (script: string, count: number) =>
  measureFloor(
    process.execPath,
    [...imageNodeFlags(), script, ...floorArgs],
    { ...process.env, ...imageEnv() },
    count,
  );

async function measureBerth(count: number, args: string[]): Promise<number> {
  await clear(DERIVED);
  const berth = await startBerth(sb, args, { compiled: true });
  try {
    await waitForValue(
      `Berth labels ${count} nodes`,
      () => labelled(DERIVED) === count || undefined,
      300_000,
    );
    return await settledRss(berth.pid);
  } finally {
    await berth.stop();
  }
}

async function setGateDryRun(dryRun: boolean): Promise<void> {
  await client.patch(NodeStartupGate.ref, GATE, { spec: { dryRun } }, { type: 'merge' });
}

/** True once the gate's status is of its current generation and says Ready. */
async function gateReady(): Promise<boolean> {
  const gate = await client.get(NodeStartupGate.ref, GATE);
  const status = gate['status'] as { observedGeneration?: number } | undefined;
  return status?.observedGeneration === gate.metadata?.generation && hasCondition(gate, 'Ready');
}

/** Berth on the gates job: the gate enforced, its RSS once the gate is Ready; a dry run again after. */
async function measureGates(): Promise<number> {
  await setGateDryRun(false);
  const berth = await startBerth(sb, ['--controllers=gates'], { compiled: true });
  try {
    await waitForValue('the gate Ready', async () => (await gateReady()) || undefined, 120_000);
    return await settledRss(berth.pid);
  } finally {
    await berth.stop();
    await setGateDryRun(true);
  }
}

interface Point {
  nodes: number;
  pods: number;
  berthMB: number;
  everythingMB: number;
  gatesMB: number;
  floorMB: number;
  nodeFloorMB: number;
  stackFloorMB: number;
  ratio: number;
  nodeFloorRatio: number;
  stackFloorRatio: number;
}

const results: Point[] = [];
let haveNodes = points[0]!.nodes;
let havePods = 0;
try {
  for (const p of points) {
    if (p.nodes > haveNodes) {
      await createNodes(client, [
        { prefix: 'tpu', count: p.nodes - haveNodes, start: haveNodes, labels: { [INPUT]: 'true' } },
      ]);
      haveNodes = p.nodes;
    }
    const t0 = performance.now();
    await createBoundPods(client, {
      namespace: NS,
      from: havePods,
      to: p.pods,
      nodeOf: (i) => `tpu-${i % haveNodes}`,
      label: DERIVED,
    });
    if (p.pods > havePods)
      console.log(`${p.pods - havePods} pods created in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
    havePods = p.pods;
    const floorMB = await measureFloor(floorBin, floorArgs, process.env, p.nodes);
    const nodeFloorMB = await measureNodeFloor(NODE_FLOOR_SCRIPT, p.nodes);
    const stackFloorMB = await measureNodeFloor(STACK_FLOOR_SCRIPT, p.nodes);
    const berthMB = await measureBerth(p.nodes, ['--controllers=labels']);
    const everythingMB = await measureBerth(p.nodes, []);
    const gatesMB = await measureGates();
    const r: Point = {
      nodes: p.nodes,
      pods: p.pods,
      berthMB: round(berthMB),
      everythingMB: round(everythingMB),
      gatesMB: round(gatesMB),
      floorMB: round(floorMB),
      nodeFloorMB: round(nodeFloorMB),
      stackFloorMB: round(stackFloorMB),
      ratio: round(berthMB / floorMB, 2),
      nodeFloorRatio: round(berthMB / nodeFloorMB, 2),
      stackFloorRatio: round(berthMB / stackFloorMB, 2),
    };
    console.log(
      `${p.nodes} nodes, ${p.pods} pods: Berth ${r.berthMB} MB (everything on: ${r.everythingMB} MB, ` +
        `the gates job: ${r.gatesMB} MB), ` +
        `Go floor ${r.floorMB} MB, Node.js floor ${r.nodeFloorMB} MB, stack floor ${r.stackFloorMB} MB; ` +
        `ratios ${r.ratio}, ${r.nodeFloorRatio}, ${r.stackFloorRatio}`,
    );
    results.push(r);
  }
} finally {
  nodes.stop();
  client.close();
  await sb.destroy();
  rmSync(work, { recursive: true, force: true });
}

// Growth per cached object, from pairs of points that differ in one count only.
const growth = (dim: 'nodes' | 'pods', other: 'nodes' | 'pods') => {
  const per: number[] = [];
  for (const a of results)
    for (const b of results)
      if (b[dim] > a[dim] && b[other] === a[other])
        per.push(((b.berthMB - a.berthMB) * 1024) / (b[dim] - a[dim]));
  return per.length ? round(per.reduce((x, y) => x + y, 0) / per.length, 2) : null;
};
const first = results[0]!;
report({
  points: results,
  berthMB: first.berthMB,
  everythingMB: first.everythingMB,
  gatesMB: first.gatesMB,
  floorMB: first.floorMB,
  nodeFloorMB: first.nodeFloorMB,
  stackFloorMB: first.stackFloorMB,
  ratio: first.ratio,
  nodeFloorRatio: first.nodeFloorRatio,
  stackFloorRatio: first.stackFloorRatio,
  nodes: first.nodes,
  pods: first.pods,
  kbPerNode: growth('nodes', 'pods'),
  kbPerPod: growth('pods', 'nodes'),
});
