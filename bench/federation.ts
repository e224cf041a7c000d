// Federation at scale: `npm run bench:federation -- --cells 3 --workloads 100`.
// A federation as `berth sandbox up --cells` starts it (a management plane, a cell per city, each
// cell's own Berth running the workloads controllers); every workload has one placement in two of
// the cities, `--replicas` instances in each (100 workloads × 2 cities × 5 = 1,000 instances).
// 1. The floor: the same WorkloadDeployments the federation would write (Berth's own manifest),
//    applied straight to the cells at `--concurrency`, in a namespace of their own; seconds from the
//    first apply until every one is Available in its cell (status observed for its generation).
// 2. Berth: the management plane's Berth (cells, federation) as its own process; the Workloads
//    created at the same concurrency; seconds from the first create until every Workload is
//    Available upstream with every instance Ready, for its generation (convergeSeconds); and for each
//    Workload, from its WorkloadDeployments Available in both cells to it Available upstream (the
//    management plane's own hop). Then the mirrors: how many showed their instance Ready upstream by
//    then, and when the last one did.
// 3. Status: `--samples` times, one instance's pod deleted in a cell; from the instance seen not
//    Ready in the cell to its Workload's ready count seen lower upstream (both by this process's
//    watches); each sample waits for the workload to recover first. A workload that is not back to
//    every instance Ready upstream 60 s on is a defect: printed with its cells' own counts (which
//    tell a cell that did not recover from an upstream that did not follow), counted
//    (statusUnrecovered), and left out of later samples.
// 4. Rollout: one more workload in every city, its image changed; seconds until the management
//    plane says every city runs it. Then the management Berth's resident memory.
// Everything listens on 127.0.0.1; the federation is destroyed at the end.
import { availableParallelism } from 'node:os';
import { parseArgs } from 'node:util';
import { berthFederationHooks } from '../src/cli/sandbox.ts';
import { deploymentManifest } from '../src/federation/decide/copies.ts';
import { deploymentName } from '../src/federation/decide/placement.ts';
import { rolledOut } from '../src/federation/decide/rollup.ts';
import { mirrorName } from '../src/federation/mirror-decide.ts';
import { Workload, type WorkloadObject } from '../src/federation/types.ts';
import { Cell, type CellObject } from '../src/cells/types.ts';
import { findCondition, hasCondition } from '../src/runtime/api/conditions.ts';
import { Resources, type KubeObject } from '../src/runtime/api/meta.ts';
import { Informer } from '../src/runtime/cache/informer.ts';
import { isNotFound, type KubeClient } from '../src/runtime/client/client.ts';
import { cellName, Federation } from '../src/sandbox/federation.ts';
import { templateHash, type InstanceObject } from '../src/workloads/decide.ts';
import { Instance, MIRROR_LABEL, WorkloadDeployment, type InstanceTemplate } from '../src/workloads/types.ts';
import { startBerth } from '../test/helpers/berth.ts';
import {
  apiserverWork,
  controllerMeans,
  controllerWork,
  cpuSeconds,
  describeControllerMeans,
  cpuBetween,
  describeCpu,
  sandboxCpuSeconds,
  destroyOnCrash,
  forEachLimit,
  percentile,
  processCpu,
  report,
  round,
  waitForValue,
  workDelta,
} from './lib.ts';

const { values } = parseArgs({
  options: {
    cells: { type: 'string', default: '3' },
    workloads: { type: 'string', default: '10' },
    replicas: { type: 'string', default: '5' },
    concurrency: { type: 'string', default: '16' },
    samples: { type: 'string', default: '50' },
  },
});
const CITIES = ['DFW', 'LHR', 'NRT', 'FRA', 'SYD', 'GRU', 'SIN', 'JNB'];
const cellCount = Number(values.cells);
if (!(cellCount >= 2 && cellCount <= CITIES.length))
  throw new Error(`--cells ${values.cells}: between 2 and ${CITIES.length}`);
const cities = CITIES.slice(0, cellCount);
const workloads = Number(values.workloads);
const replicas = Number(values.replicas);
const concurrency = Number(values.concurrency);
const samples = Number(values.samples);
const instances = workloads * 2 * replicas;
/** Workload i runs in two neighbouring cities of the ring, so every city gets as many workloads. */
const citiesOf = (i: number) => [cities[i % cellCount]!, cities[(i + 1) % cellCount]!];
// Each cell holds the floor's instances, then the federation's and the rollout's (the floor's are
// deleted first, so that both run on cells equally loaded); kwok nodes take 110 pods each: room
// for either with a node to spare.
const perCell = 2 * Math.ceil((2 * workloads) / cellCount) * replicas + replicas;
const cellNodes = Math.ceil(perCell / 100) + 1;
const NS = 'bench-federation';
const FLOOR_NS = 'bench-federation-floor';
const PLACEMENT = 'p';

const template = (image: string): InstanceTemplate => ({
  containers: [{ name: 'app', image, resources: { requests: { cpu: '100m', memory: '128Mi' } } }],
});
const workload = (name: string, codes: string[], image = 'registry.example/app:1'): WorkloadObject => ({
  apiVersion: Workload.apiVersion,
  kind: Workload.kind,
  metadata: { name, namespace: NS },
  spec: {
    template: template(image),
    placements: [{ name: PLACEMENT, cityCodes: codes, scaleSettings: { minReplicas: replicas } }],
  },
});
const wlName = (i: number) => `w-${i}`;

const federation = new Federation('bench-federation');
await federation.down(true);
destroyOnCrash(() => federation.down(true));
const started = performance.now();
const cells = await federation.up(berthFederationHooks, {
  cities,
  cellNodes,
  namespaces: [NS],
  timeoutMs: 900_000,
  log: (s) => console.log(`  ${s}`),
});
console.log(
  `federation of ${cellCount} cells (${cellNodes} nodes each) ready in ${((performance.now() - started) / 1000).toFixed(1)} s`,
);
const mgmt = federation.management.client({ maxInFlight: 64 });
const cellClients = new Map<string, KubeClient>(
  cells.map((c) => [c.city, c.sandbox.client({ maxInFlight: 64 })]),
);
const namespace = (name: string): KubeObject => ({ apiVersion: 'v1', kind: 'Namespace', metadata: { name } });
await mgmt.create(Resources.namespaces, namespace(NS));
for (const c of cellClients.values()) await c.create(Resources.namespaces, namespace(FLOOR_NS));

const available = (o: { status?: { conditions?: { type: string; status: string }[] } }) =>
  findCondition(o.status?.conditions, 'Available')?.status === 'True';

// 1. The floor.
type WD = KubeObject & {
  spec: { replicas: number };
  status?: {
    observedGeneration?: number;
    readyReplicas?: number;
    conditions?: { type: string; status: string }[];
  };
};
/** Watches every cell's WorkloadDeployments of a namespace; `done` gets when each (`city/name`) was first Available. */
const deploymentWatches = (namespace: string, done: Map<string, number>) =>
  [...cellClients].map(([city, client]) => {
    const inf = new Informer<WD>({ client, ref: WorkloadDeployment.ref, namespace });
    const seen = (d: WD) => {
      const key = `${city}/${d.metadata!.name}`;
      if (
        !done.has(key) &&
        d.status?.observedGeneration === d.metadata!.generation &&
        d.status?.readyReplicas === d.spec.replicas &&
        available(d)
      )
        done.set(key, performance.now());
    };
    inf.addEventHandler({ onAdd: seen, onUpdate: (_a, b) => seen(b) });
    inf.start();
    return inf;
  });
const floorDone = new Map<string, number>();
const floorWatches = deploymentWatches(FLOOR_NS, floorDone);
await Promise.all(floorWatches.map((i) => i.waitForSync()));
// The WorkloadDeployments of the federation's fan-out, from Berth's own manifest, less the labels
// that name an owner upstream: none exists, and the management Berth must not take them for its own.
const floorWork = Array.from({ length: workloads }, (_, i) => {
  const w = workload(wlName(i), citiesOf(i));
  w.metadata = { ...w.metadata, namespace: FLOOR_NS, uid: `floor-${i}` };
  return citiesOf(i).map((city) => {
    const wd = deploymentManifest(
      w,
      { placement: PLACEMENT, city, name: deploymentName(w.metadata.name!, PLACEMENT, city), replicas },
      { hash: templateHash(w.spec.template), template: w.spec.template },
      { plane: undefined, cellUid: undefined },
    );
    delete wd.metadata.labels;
    return { city, wd };
  });
}).flat();
const cellSandboxes = federation.cells.map((c) => c.sandbox);
/** Maps of counts added up key by key: one reading of every cell as one. */
const summed = (maps: Map<string, number>[]) => {
  const sum = new Map<string, number>();
  for (const m of maps) for (const [k, n] of m) sum.set(k, (sum.get(k) ?? 0) + n);
  return sum;
};
// The cells' processes by name (etcd, kube-apiserver, ..., berth), and what their apiservers served.
const cellsByProcess = () => summed(cellSandboxes.map(processCpu));
const cellsWork = async () => summed(await Promise.all([...cellClients.values()].map(apiserverWork)));
const floorCellsByProcessBefore = cellsByProcess();
const floorCellsWorkBefore = await cellsWork();
const floorManagementCpuBefore = sandboxCpuSeconds(federation.management);
const floorStarted = performance.now();
await forEachLimit(floorWork, concurrency, async ({ city, wd }) => {
  await cellClients.get(city)!.apply(WorkloadDeployment.ref, wd, { fieldManager: 'bench', force: true });
});
await waitForValue(
  'every floor WorkloadDeployment Available',
  () => (floorDone.size >= floorWork.length ? true : undefined),
  900_000,
  () => `${floorDone.size}/${floorWork.length} floor WorkloadDeployments Available`,
);
const floorSeconds = (Math.max(...floorDone.values()) - floorStarted) / 1000;
const floorCellsByProcess = cellsByProcess();
const floorCellsCpuSeconds = cpuBetween(floorCellsByProcessBefore, floorCellsByProcess);
const floorCellsSpent = describeCpu(floorCellsByProcessBefore, floorCellsByProcess);
const floorCellsWork = workDelta(floorCellsWorkBefore, await cellsWork());
const floorManagementCpuSeconds = sandboxCpuSeconds(federation.management) - floorManagementCpuBefore;
console.log(
  `floor: ${floorWork.length} WorkloadDeployments (${instances} instances) Available in ${floorSeconds.toFixed(2)} s`,
);
for (const i of floorWatches) i.stop();
// The floor's instances go before Berth starts: the federation's run on cells as empty as the floor's did.
await Promise.all([...cellClients.values()].map((c) => c.delete(Resources.namespaces, FLOOR_NS)));
await waitForValue(
  "the floor's namespace gone from every cell",
  async () => {
    const left = await Promise.all(
      [...cellClients.values()].map((c) =>
        c.get(Resources.namespaces, FLOOR_NS).then(
          () => 1,
          (e: unknown) => (isNotFound(e) ? 0 : 1),
        ),
      ),
    );
    return left.every((n) => n === 0) ? true : undefined;
  },
  600_000,
);

// 2. Berth.
const berth = await startBerth(federation.management, ['--controllers=cells,federation']);
await waitForValue('every cell Ready upstream', async () => {
  const list = (await mgmt.list<CellObject>(Cell.ref)).items;
  return list.length === cellCount && list.every((c) => hasCondition(c, 'Ready')) ? true : undefined;
});
const convergedAt = new Map<string, number>();
/** Status samples: the workload whose ready count is awaited upstream, and when it was seen lower. */
const sample: { workload?: string; instance?: string; notReadyAt?: number; upstreamAt?: number } = {};
const upstream = new Informer<WorkloadObject>({ client: mgmt, ref: Workload.ref, namespace: NS });
const onWorkload = (w: WorkloadObject) => {
  const name = w.metadata.name!;
  const now = performance.now();
  if (!convergedAt.has(name) && rolledOut(w)) convergedAt.set(name, now);
  const s = w.status;
  if (
    sample.workload === name &&
    sample.upstreamAt === undefined &&
    (s?.readyReplicas ?? 0) < (s?.desiredReplicas ?? 0)
  )
    sample.upstreamAt = now;
};
upstream.addEventHandler({ onAdd: onWorkload, onUpdate: (_a, b) => onWorkload(b) });
upstream.start();
// Mirrors upstream: when each first showed its cell instance Ready, against when the instance first
// was Ready in its cell (issue 14: within 1 s of the cell). Both by name of the mirror.
const mirrorReadyAt = new Map<string, number>();
const cellReadyAt = new Map<string, number>();
const mirrors = new Informer<InstanceObject>({
  client: mgmt,
  ref: Instance.ref,
  namespace: NS,
  labelSelector: MIRROR_LABEL,
});
const onMirror = (m: InstanceObject) => {
  const name = m.metadata!.name!;
  if (!mirrorReadyAt.has(name) && hasCondition(m, 'Ready')) mirrorReadyAt.set(name, performance.now());
};
mirrors.addEventHandler({ onAdd: onMirror, onUpdate: (_a, b) => onMirror(b) });
mirrors.start();
const instanceWatches = [...cellClients].map(([city, client]) => {
  const inf = new Informer<InstanceObject>({ client, ref: Instance.ref, namespace: NS });
  const seen = (i: InstanceObject) => {
    const mirror = mirrorName(cellName(city), i.metadata!.name!);
    if (mirror && !cellReadyAt.has(mirror) && hasCondition(i, 'Ready'))
      cellReadyAt.set(mirror, performance.now());
    if (
      sample.instance === `${city}/${i.metadata!.name}` &&
      sample.notReadyAt === undefined &&
      findCondition(i.status?.conditions, 'Ready')?.status !== 'True'
    )
      sample.notReadyAt = performance.now();
  };
  inf.addEventHandler({ onAdd: seen, onUpdate: (_a, b) => seen(b), onDelete: seen });
  inf.start();
  return inf;
});
// Each Workload's WorkloadDeployments Available in their cells: what the management plane then has to
// see and say upstream (its own hop, against the cells' work).
const cellDone = new Map<string, number>();
const cellWatches = deploymentWatches(NS, cellDone);
await Promise.all([upstream, mirrors, ...instanceWatches, ...cellWatches].map((i) => i.waitForSync()));
const apply = (w: WorkloadObject) => mgmt.apply(Workload.ref, w, { fieldManager: 'bench', force: true });
// What converging costs the management Berth: its CPU time and its API writes (to every cluster).
const berthWrites = (also: (labels: string) => boolean = () => true) =>
  berth.metric('rest_client_requests_total', (l) => !l.includes('method="GET"') && also(l));
const toManagement = (l: string) => l.includes(`host="${mgmt.server.host}"`);
const cpuBefore = cpuSeconds(berth.pid);
const managementByProcessBefore = processCpu(federation.management);
const managementWorkBefore = await apiserverWork(mgmt);
const cellsByProcessBefore = cellsByProcess();
const cellsWorkBefore = await cellsWork();
const writesBefore = await berthWrites();
const managementWritesBefore = await berthWrites(toManagement);
const convergeStarted = performance.now();
await forEachLimit(
  Array.from({ length: workloads }, (_, i) => i),
  concurrency,
  async (i) => void (await apply(workload(wlName(i), citiesOf(i)))),
);
await waitForValue(
  'every Workload Available upstream',
  () => (convergedAt.size >= workloads ? true : undefined),
  900_000,
  () => `${convergedAt.size}/${workloads} Workloads Available upstream`,
);
const convergeSeconds = (Math.max(...convergedAt.values()) - convergeStarted) / 1000;
const mirrorsReadyAtConverge = mirrorReadyAt.size;
const convergeCpuSeconds = cpuSeconds(berth.pid) - cpuBefore;
const cores = availableParallelism();
const managementByProcessAfter = processCpu(federation.management);
const managementCpuSeconds = cpuBetween(managementByProcessBefore, managementByProcessAfter);
const cellsByProcessAfter = cellsByProcess();
const cellsCpuSeconds = cpuBetween(cellsByProcessBefore, cellsByProcessAfter);
const cellsSpent = describeCpu(cellsByProcessBefore, cellsByProcessAfter);
const managementSpent = describeCpu(managementByProcessBefore, managementByProcessAfter);
const writesPerInstance = ((await berthWrites()) - writesBefore) / instances;
const managementWritesPerInstance = ((await berthWrites(toManagement)) - managementWritesBefore) / instances;
console.log(
  `berth: ${workloads} Workloads (${instances} instances in ${cellCount} cells) Available upstream in ` +
    `${convergeSeconds.toFixed(2)} s (floor ${floorSeconds.toFixed(2)} s); the management Berth used ` +
    `${convergeCpuSeconds.toFixed(1)} s of CPU and wrote ${writesPerInstance.toFixed(2)} times per instance ` +
    `(${managementWritesPerInstance.toFixed(2)} to the management plane)`,
);
console.log(
  `CPU seconds while converging: the cells ${cellsCpuSeconds.toFixed(1)} (floor ${floorCellsCpuSeconds.toFixed(1)}), ` +
    `the management plane's control plane ${managementCpuSeconds.toFixed(1)} (floor, idle: ${floorManagementCpuSeconds.toFixed(1)}), its Berth ${convergeCpuSeconds.toFixed(1)} ` +
    `(${cores} cores: ${(cores * convergeSeconds).toFixed(0)} core-seconds in the converge)`,
);
console.log(`  the management plane's processes: ${managementSpent}`);
console.log(`  the cells' processes, summed: ${cellsSpent} (floor: ${floorCellsSpent})`);
console.log(`  the cells' apiservers served: ${workDelta(cellsWorkBefore, await cellsWork()).join(', ')}`);
console.log(`  (floor: ${floorCellsWork.join(', ')})`);
const hops = Array.from({ length: workloads }, (_, i) => {
  const cellsAt = citiesOf(i).map((city) =>
    cellDone.get(`${city}/${deploymentName(wlName(i), PLACEMENT, city)}`),
  );
  const upAt = convergedAt.get(wlName(i));
  return upAt === undefined || cellsAt.includes(undefined) ? [] : [upAt - Math.max(...(cellsAt as number[]))];
}).flat();
console.log(
  `  a Workload's WorkloadDeployments Available in both cells → Available upstream: p50 ${percentile(hops, 50).toFixed(0)} ms, ` +
    `p99 ${percentile(hops, 99).toFixed(0)} ms, max ${Math.max(...hops).toFixed(0)} ms (${hops.length} Workloads); ` +
    `the last in the cells ${((Math.max(...cellDone.values()) - convergeStarted) / 1000).toFixed(2)} s after the first create`,
);
// What its apiserver served meanwhile (every client's requests, and the watch events sent).
const managementWork = workDelta(managementWorkBefore, await apiserverWork(mgmt));
console.log(`  its apiserver served: ${managementWork.join(', ')}`);
console.log(
  `  ${describeControllerMeans('federation', controllerMeans(await controllerWork(berth, 'federation')))}`,
);
// The mirrors finish after the Workloads when their writes queue behind the management apiserver.
await waitForValue(
  'every mirror upstream Ready',
  () => (mirrorReadyAt.size >= instances ? true : undefined),
  300_000,
  () => `${mirrorReadyAt.size}/${instances} mirrors Ready upstream`,
);
const mirrorsSeconds = (Math.max(...mirrorReadyAt.values()) - convergeStarted) / 1000;
// A mirror's lag is its queue's wait plus its pass (two writes to the management plane for a new one).
const mirrorWork = controllerMeans(await controllerWork(berth, 'federation-mirror'));
mirrors.stop();
const mirrorLags = [...mirrorReadyAt].flatMap(([name, at]) => {
  const from = cellReadyAt.get(name);
  return from === undefined ? [] : [Math.max(0, at - from)];
});
console.log(
  `mirrors: ${mirrorsReadyAtConverge} of ${instances} Ready upstream when the Workloads were; all ${mirrorsSeconds.toFixed(2)} s after the first create; ` +
    `instance Ready in its cell → its mirror Ready upstream p50 ${percentile(mirrorLags, 50).toFixed(0)} ms, p99 ${percentile(mirrorLags, 99).toFixed(0)} ms (${mirrorLags.length} mirrors)`,
);
console.log(`  ${describeControllerMeans('federation-mirror', mirrorWork)}`);

// 3. Status: a cell instance's change, seen upstream.
const latencies: number[] = [];
let missed = 0;
/** Workloads not back to every instance Ready upstream 60 s on: a defect, reported. */
const unrecovered = new Set<string>();
for (let k = 0; latencies.length + missed < samples && unrecovered.size < workloads; k++) {
  const i = k % workloads;
  const name = wlName(i);
  if (unrecovered.has(name)) continue;
  const city = citiesOf(i)[0]!;
  const wd = deploymentName(name, PLACEMENT, city);
  const instance = `${wd}-0`;
  try {
    await waitForValue(`workload ${name} recovered`, () => {
      const w = upstream.get(`${NS}/${name}`);
      return w && rolledOut(w) ? true : undefined;
    });
  } catch {
    const cells = await Promise.all(
      citiesOf(i).map(async (c) => {
        const d = await cellClients
          .get(c)!
          .get<WD>(WorkloadDeployment.ref, deploymentName(name, PLACEMENT, c), NS);
        return `${c} ${d.status?.readyReplicas}/${d.spec.replicas} ready`;
      }),
    );
    const s = upstream.get(`${NS}/${name}`)?.status;
    console.log(
      `  NOT RECOVERED: ${name} upstream says ${s?.readyReplicas}/${s?.desiredReplicas} ready 60 s on; its cells say ${cells.join(', ')}`,
    );
    unrecovered.add(name);
    continue;
  }
  Object.assign(sample, {
    workload: name,
    instance: `${city}/${instance}`,
    notReadyAt: undefined,
    upstreamAt: undefined,
  });
  await cellClients.get(city)!.delete(Resources.pods, instance, NS);
  try {
    await waitForValue(
      `instance ${instance} seen not Ready in ${city} and upstream`,
      () => (sample.notReadyAt !== undefined && sample.upstreamAt !== undefined ? true : undefined),
      10_000,
    );
    latencies.push(sample.upstreamAt! - sample.notReadyAt!);
  } catch {
    // The pod came back before a status showed it gone: no change to time.
    missed++;
  }
}
Object.assign(sample, { workload: undefined, instance: undefined });
console.log(
  `status: cell instance not Ready → upstream, p50 ${percentile(latencies, 50).toFixed(0)} ms, ` +
    `p99 ${percentile(latencies, 99).toFixed(0)} ms (${latencies.length} samples, ${missed} missed, ` +
    `${unrecovered.size} not recovered)`,
);

// 4. Rollout: one workload in every city, its image changed.
const rollout = (image?: string) => workload('rollout', cities, image);
await apply(rollout());
await waitForValue(
  'the rollout workload Available',
  () => (convergedAt.has('rollout') ? true : undefined),
  300_000,
);
const rolloutStarted = performance.now();
const rolled = apply(rollout('registry.example/app:2'));
const generation = (await rolled).metadata!.generation!;
await waitForValue(
  `the rollout workload on its new image in ${cellCount} cities`,
  () => {
    const w = upstream.get(`${NS}/rollout`);
    return w && w.metadata.generation === generation && rolledOut(w) ? true : undefined;
  },
  600_000,
);
const rolloutSeconds = (performance.now() - rolloutStarted) / 1000;
console.log(
  `rollout of one workload (${replicas} instances in each of ${cellCount} cities): ${rolloutSeconds.toFixed(2)} s`,
);

const result = {
  cells: cellCount,
  workloads,
  replicas,
  instances,
  convergeSeconds: round(convergeSeconds, 2),
  floorSeconds: round(floorSeconds, 2),
  ratio: round(convergeSeconds / floorSeconds, 2),
  convergeCpuSeconds: round(convergeCpuSeconds, 1),
  managementCpuSeconds: round(managementCpuSeconds, 1),
  cellsCpuSeconds: round(cellsCpuSeconds, 1),
  floorCellsCpuSeconds: round(floorCellsCpuSeconds, 1),
  floorManagementCpuSeconds: round(floorManagementCpuSeconds, 1),
  upstreamHopP50ms: round(percentile(hops, 50), 0),
  upstreamHopP99ms: round(percentile(hops, 99), 0),
  writesPerInstance: round(writesPerInstance, 2),
  managementWritesPerInstance: round(managementWritesPerInstance, 2),
  mirrorsReadyAtConverge,
  mirrorsSeconds: round(mirrorsSeconds, 2),
  mirrorLagP50ms: round(percentile(mirrorLags, 50), 0),
  mirrorLagP99ms: round(percentile(mirrorLags, 99), 0),
  mirrorQueueWaitMs: mirrorWork.queuedMs,
  mirrorReconcileMs: mirrorWork.reconcileMs,
  managementApiserverWork: managementWork,
  statusP50ms: round(percentile(latencies, 50), 0),
  statusP99ms: round(percentile(latencies, 99), 0),
  statusSamples: latencies.length,
  statusMissed: missed,
  statusUnrecovered: unrecovered.size,
  rolloutSeconds: round(rolloutSeconds, 2),
  rssMB: berth.rssMB(),
};
for (const i of [upstream, ...instanceWatches, ...cellWatches]) i.stop();
await berth.stop();
mgmt.close();
for (const c of cellClients.values()) c.close();
await federation.down(true);
report(result);
