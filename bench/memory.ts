// Resident memory of the labels job against the objects it caches:
// `npm run bench:memory -- --points 1000:0,1000:20000,5000:20000,5000:100000` (nodes:pods).
// One sandbox grows from point to point (nodes carry an input label; pods are bound round-robin
// and need the derived label). At each point, Berth runs as its image does (compiled, with the
// Dockerfile's Node flags, `--controllers=labels`, a NodeLabelRule deriving a label from the input)
// and, on its own, the floor: bench/labelsfloor, a Go program doing the same necessary work with no
// client library (list and watch nodes and pods, keep the fields the job reads, patch the derived
// label). Each is started fresh, so its initial list is of that point's size; once every node
// carries its label and 5 s have passed, its RSS is sampled for 5 s and the median kept.
// The seed's own Go labeller held 54 MB at 1,000 nodes (issue 17): the target is 110 MB there.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { installCrds } from '../src/cli/install.ts';
import { NodeLabelRule } from '../src/labels/types.ts';
import { slimNode, type SlimNode } from '../src/policy/slim.ts';
import { Resources } from '../src/runtime/api/meta.ts';
import { Informer } from '../src/runtime/cache/informer.ts';
import { createNodes } from '../src/sandbox/nodes.ts';
import { startBerth } from '../test/helpers/berth.ts';
import {
  benchSandbox,
  buildGoProgram,
  createBoundPods,
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
const NS = 'bench-memory';

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

async function measureFloor(count: number): Promise<number> {
  const child = spawn(floorBin, floorArgs, { stdio: ['ignore', 'pipe', 'inherit'] });
  try {
    await waitForValue(
      `the floor labels ${count} nodes`,
      () => labelled(FLOOR) === count || undefined,
      300_000,
    );
    return await settledRss(child.pid!);
  } finally {
    child.kill();
  }
}

async function measureBerth(count: number): Promise<number> {
  const berth = await startBerth(sb, ['--controllers=labels'], { compiled: true });
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

const results: { nodes: number; pods: number; berthMB: number; floorMB: number; ratio: number }[] = [];
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
    const floorMB = await measureFloor(p.nodes);
    const berthMB = await measureBerth(p.nodes);
    const r = {
      nodes: p.nodes,
      pods: p.pods,
      berthMB: round(berthMB),
      floorMB: round(floorMB),
      ratio: round(berthMB / floorMB, 2),
    };
    console.log(
      `${p.nodes} nodes, ${p.pods} pods: Berth ${r.berthMB} MB, floor ${r.floorMB} MB, ratio ${r.ratio}`,
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
  floorMB: first.floorMB,
  ratio: first.ratio,
  nodes: first.nodes,
  pods: first.pods,
  kbPerNode: growth('nodes', 'pods'),
  kbPerPod: growth('pods', 'nodes'),
});
