// Federation at scale: `npm run bench:federation -- --cells 3 --workloads 100`.
// A federation as `berth sandbox up --cells` starts it (a management plane, a cell per city, each
// cell's own Berth running the workloads controllers); every workload has one placement in two of
// the cities, `--replicas` instances in each (100 workloads × 2 cities × 5 = 1,000 instances).
// 1. The floor, in a namespace of its own, at `--concurrency` workloads at a time: what federation
//    needs done, as plain writes. Each Workload applied upstream, then its WorkloadDeployments
//    (Berth's own manifest) applied straight to their cells; each cell instance's mirror upstream
//    (Berth's own mirrorOf) applied when the instance is seen, and its status applied once, when
//    the instance is seen Ready, `--concurrency` mirror writes at a time (Berth's mirror workers); each Workload's status upstream (counts and Available) applied when
//    its WorkloadDeployments' ready counts move, at most once a second (the status bound) but at
//    once when every one is Available. Seconds from the first apply until every Workload's last
//    status is answered (`floorSeconds`, what `ratio` is against). The old bare floor, the
//    WorkloadDeployments alone, is the time until every one is Available in its cell
//    (`bareFloorSeconds`, measured in the same run). Its writes per object are counted as it makes
//    them (`floorWritesPerMirror`, `floorStatusWritesPerWorkload`, once its last mirror is written).
//    Its writes upstream go with the management Berth's identity (its ServiceAccount), under the
//    same API Priority and Fairness level; the Workloads' applies, as in Berth's phase, and the
//    WorkloadDeployments' with the admin's.
// 2. Berth: the management plane's Berth (cells, federation) as its own process; the Workloads
//    created at the same concurrency; seconds from the first create until every Workload is
//    Available upstream with every instance Ready, for its generation (convergeSeconds); and for each
//    Workload, from its WorkloadDeployments Available in both cells to it Available upstream (the
//    management plane's own hop). Then the mirrors: how many showed their instance Ready upstream by
//    then, and when the last one did. The management Berth's writes by resource from its own
//    berth_api_writes_total: per mirror (its create and status), per Workload (its status and
//    finalizer upstream, its WorkloadDeployments in the cells), in all per instance.
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
import { mirrorName, mirrorOf } from '../src/federation/decide/mirror.ts';
import type { DeploymentObject } from '../src/federation/decide/placement.ts';
import { applyStatus } from '../src/runtime/client/apply.ts';
import { type WorkloadObject } from '../src/federation/types.ts';
import { Workload } from '../src/federation/crd.ts';
import { type CellObject } from '../src/cells/types.ts';
import { Cell } from '../src/cells/crd.ts';
import { findCondition, hasCondition } from '../src/runtime/api/conditions.ts';
import { Resources, type KubeObject } from '../src/runtime/api/meta.ts';
import { Informer } from '../src/runtime/cache/informer.ts';
import { isNotFound, type KubeClient } from '../src/runtime/client/client.ts';
import { cellName, Federation } from '../src/sandbox/federation.ts';
import { templateHash } from '../src/workloads/decide/revisions.ts';
import { type InstanceObject } from '../src/workloads/decide/instances.ts';
import { DEPLOYMENT_LABEL, MIRROR_LABEL, type InstanceTemplate } from '../src/workloads/types.ts';
import { Instance, WorkloadDeployment } from '../src/workloads/crd.ts';
import { berthClient, startBerth } from '../test/helpers/berth.ts';
import {
  apiserverWork,
  berthWrites,
  sumWrites,
  writesPer,
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
  waitForCollectorWatches,
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
    sandbox: { type: 'string', default: 'bench-federation' },
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
const FAIR_NS = 'bench-federation-fair';
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

const federation = new Federation(values.sandbox);
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
// Every run alike: the garbage collectors take up the Berth kinds at their 30 s discovery resync.
await Promise.all([
  waitForCollectorWatches(mgmt, 'berth.dev', ['workloads', 'instances']),
  ...[...cellClients.values()].map((c) =>
    waitForCollectorWatches(c, 'berth.dev', ['workloaddeployments', 'instances']),
  ),
]);

const available = (o: { status?: { conditions?: { type: string; status: string }[] } }) =>
  findCondition(o.status?.conditions, 'Available')?.status === 'True';

// 1. The floors.
type WD = KubeObject & {
  spec: { replicas: number };
  status?: {
    observedGeneration?: number;
    readyReplicas?: number;
    conditions?: { type: string; status: string }[];
  };
};
/**
 * Watches every cell's WorkloadDeployments of a namespace; `done` gets when each (`city/name`) was
 * first Available; `changed` hears of every one seen.
 */
const deploymentWatches = (
  namespace: string,
  done: Map<string, number>,
  changed: (city: string, d: WD) => void = () => {},
) =>
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
      changed(city, d);
    };
    inf.addEventHandler({ onAdd: seen, onUpdate: (_a, b) => seen(b) });
    inf.start();
    return inf;
  });
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
/** Deletes a namespace from every cell (and upstream) and waits until it is gone. */
const dropNamespace = async (name: string) => {
  const clients = [mgmt, ...cellClients.values()];
  await Promise.all(clients.map((c) => c.delete(Resources.namespaces, name).catch(() => undefined)));
  await waitForValue(
    `namespace ${name} gone from every cluster`,
    async () => {
      const left = await Promise.all(
        clients.map((c) =>
          c.get(Resources.namespaces, name).then(
            () => 1,
            (e: unknown) => (isNotFound(e) ? 0 : 1),
          ),
        ),
      );
      return left.every((n) => n === 0) ? true : undefined;
    },
    600_000,
  );
};

/**
 * One floor in its own namespace: the WorkloadDeployments alone (bare) or with the Workloads, their
 * status and the mirrors upstream (fair), as the header says. What it took, and cost.
 */
async function floor(ns: string, fair: boolean) {
  for (const c of [mgmt, ...cellClients.values()]) await c.create(Resources.namespaces, namespace(ns));
  // Its writes upstream go as the management Berth's do: with its identity (a ServiceAccount), under
  // the same API Priority and Fairness level, not the admin's (exempt from it).
  const asBerth = await berthClient(federation.management);
  // Fair: each Workload's status upstream, written as the header says.
  const upstreamWorkloads = new Map<string, WorkloadObject>();
  const statusOf = new Map<
    string,
    {
      ready: Map<string, number>;
      at: number;
      written?: number;
      timer?: NodeJS.Timeout;
      final?: boolean;
      writing: Promise<unknown>;
    }
  >();
  const finalAt = new Map<string, number>();
  const writes = { mirror: 0, status: 0, workload: 0, deployment: 0 };
  let failure: unknown;
  const fail = (e: unknown) => void (failure ??= e);
  const workloadOfDeployment = new Map<string, number>();
  const sendStatus = (i: number, final: boolean) => {
    const w = upstreamWorkloads.get(wlName(i));
    const st = statusOf.get(wlName(i));
    if (!w || !st || st.final) return;
    const ready = [...st.ready.values()].reduce((a, n) => a + n, 0);
    if (!final && ready === st.written) return;
    st.final = final;
    st.written = ready;
    st.at = performance.now();
    const desired = 2 * replicas;
    const status = {
      observedGeneration: w.metadata.generation,
      replicas: desired,
      readyReplicas: ready,
      desiredReplicas: desired,
      conditions: [
        {
          type: 'Available',
          status: final ? 'True' : 'False',
          reason: final ? 'Available' : 'Provisioning',
          message: `${ready} of ${desired} instances ready`,
          lastTransitionTime: new Date().toISOString().replace(/\.\d{3}Z$/, 'Z'),
        },
      ],
    };
    st.writing = st.writing
      .then(() => applyStatus(asBerth, Workload.ref, w, status, 'bench'))
      .then(() => {
        writes.status++;
        if (final) finalAt.set(wlName(i), performance.now());
      }, fail);
  };
  const done = new Map<string, number>();
  const onDeployment = (city: string, d: WD) => {
    const i = workloadOfDeployment.get(d.metadata!.name!);
    const st = i === undefined ? undefined : statusOf.get(wlName(i));
    if (!fair || i === undefined || !st) return;
    st.ready.set(city, d.status?.readyReplicas ?? 0);
    const all = citiesOf(i).every((c) => done.has(`${c}/${deploymentName(wlName(i), PLACEMENT, c)}`));
    if (all) {
      clearTimeout(st.timer);
      sendStatus(i, true);
    } else if (!st.timer)
      st.timer = setTimeout(
        () => {
          st.timer = undefined;
          sendStatus(i, false);
        },
        Math.max(0, st.at + 1000 - performance.now()),
      );
  };
  const watches = deploymentWatches(ns, done, onDeployment);
  // Fair: each cell instance's mirror upstream, made when it is seen, its status once it is Ready;
  // `concurrency` mirror writes at a time, as Berth's mirror workers.
  let mirrorsWriting = 0;
  let mirrorsWritten = 0;
  const mirrorTurns: (() => void)[] = [];
  const mirrorWrite = async <T>(write: () => Promise<T>): Promise<T> => {
    while (mirrorsWriting >= concurrency) await new Promise<void>((r) => mirrorTurns.push(r));
    mirrorsWriting++;
    try {
      return await write();
    } finally {
      mirrorsWriting--;
      mirrorTurns.shift()?.();
    }
  };
  const mirrored = new Map<string, { made: Promise<InstanceObject | undefined>; ready?: boolean }>();
  const mirrorSource = (city: string, i: InstanceObject) => {
    const d = workloadOfDeployment.get(i.metadata!.labels?.[DEPLOYMENT_LABEL] ?? '');
    const w = d === undefined ? undefined : upstreamWorkloads.get(wlName(d));
    return (
      w && {
        cell: cellName(city),
        instance: i,
        deployment: { metadata: {} } as DeploymentObject,
        workload: w,
      }
    );
  };
  const instanceWatches = fair
    ? [...cellClients].map(([city, client]) => {
        const inf = new Informer<InstanceObject>({ client, ref: Instance.ref, namespace: ns });
        const seen = (i: InstanceObject) => {
          const src = mirrorSource(city, i);
          if (!src) return;
          const key = `${city}/${i.metadata!.name}`;
          let m = mirrored.get(key);
          if (!m) {
            const want = mirrorOf(src, undefined)!;
            m = {
              made: mirrorWrite(() =>
                asBerth.apply<InstanceObject>(Instance.ref, want.object, {
                  fieldManager: 'bench',
                  force: true,
                }),
              ).then(
                (o) => {
                  writes.mirror++;
                  return o;
                },
                (e: unknown) => void fail(e),
              ),
            };
            mirrored.set(key, m);
          }
          if (m.ready || !hasCondition(i, 'Ready')) return;
          m.ready = true;
          void m.made
            .then(async (o) => {
              if (!o) return;
              await mirrorWrite(() =>
                applyStatus(asBerth, Instance.ref, o, mirrorOf(src, o)!.status, 'bench'),
              );
              writes.mirror++;
              mirrorsWritten++;
            })
            .catch(fail);
        };
        inf.addEventHandler({ onAdd: seen, onUpdate: (_a, b) => seen(b) });
        inf.start();
        return inf;
      })
    : [];
  await Promise.all([...watches, ...instanceWatches].map((i) => i.waitForSync()));
  const cellsByProcessBefore = cellsByProcess();
  const cellsWorkBefore = await cellsWork();
  const managementCpuBefore = sandboxCpuSeconds(federation.management);
  const started = performance.now();
  await forEachLimit(
    Array.from({ length: workloads }, (_, i) => i),
    concurrency,
    async (i) => {
      const w = workload(wlName(i), citiesOf(i));
      w.metadata = { ...w.metadata, namespace: ns };
      if (fair) {
        upstreamWorkloads.set(
          wlName(i),
          await mgmt.apply<WorkloadObject>(Workload.ref, w, { fieldManager: 'bench', force: true }),
        );
        statusOf.set(wlName(i), { ready: new Map(), at: 0, writing: Promise.resolve() });
        writes.workload++;
      } else w.metadata.uid = `floor-${i}`;
      // The WorkloadDeployments of the federation's fan-out, from Berth's own manifest, less the labels
      // that name an owner upstream: the management Berth must not take them for its own.
      for (const city of citiesOf(i)) {
        const name = deploymentName(w.metadata.name!, PLACEMENT, city);
        workloadOfDeployment.set(name, i);
        const wd = deploymentManifest(
          w,
          { placement: PLACEMENT, city, name, replicas },
          { hash: templateHash(w.spec.template), template: w.spec.template },
          { plane: undefined, cellUid: undefined },
        );
        delete wd.metadata.labels;
        await cellClients
          .get(city)!
          .apply(WorkloadDeployment.ref, wd, { fieldManager: 'bench', force: true });
        writes.deployment++;
      }
    },
  );
  const deployments = 2 * workloads;
  await waitForValue(
    `every ${fair ? 'fair' : 'bare'} floor Workload done`,
    () => {
      if (failure) throw failure;
      return (fair ? finalAt.size >= workloads : done.size >= deployments) ? true : undefined;
    },
    900_000,
    () =>
      `${done.size}/${deployments} floor WorkloadDeployments Available, ${finalAt.size}/${workloads} Workloads' last status`,
  );
  const seconds = (Math.max(...(fair ? finalAt : done).values()) - started) / 1000;
  const byProcess = cellsByProcess();
  // Its mirrors may trail its Workloads: counted once every one is written.
  if (fair)
    await waitForValue(
      "every fair floor mirror's status written",
      () => {
        if (failure) throw failure;
        return mirrorsWritten >= instances ? true : undefined;
      },
      300_000,
    );
  const result = {
    seconds,
    cellsCpuSeconds: cpuBetween(cellsByProcessBefore, byProcess),
    cellsSpent: describeCpu(cellsByProcessBefore, byProcess),
    cellsWork: workDelta(cellsWorkBefore, await cellsWork()),
    managementCpuSeconds: sandboxCpuSeconds(federation.management) - managementCpuBefore,
    writesPerMirror: round(writes.mirror / Math.max(1, mirrored.size), 2),
    writesPerWorkload: round((writes.status + writes.workload + writes.deployment) / workloads, 2),
    statusWritesPerWorkload: round(writes.status / workloads, 2),
  };
  console.log(
    fair
      ? `fair floor: ${workloads} Workloads (${instances} instances) with their status and mirrors upstream in ${seconds.toFixed(2)} s; ` +
          `${result.writesPerMirror} writes per mirror, ${result.statusWritesPerWorkload} status writes per Workload`
      : `bare floor: ${deployments} WorkloadDeployments (${instances} instances) Available in ${seconds.toFixed(2)} s`,
  );
  for (const i of [...watches, ...instanceWatches]) i.stop();
  for (const st of statusOf.values()) clearTimeout(st.timer);
  asBerth.close();
  // The floor's instances go before the next starts: each runs on cells as empty as the first did.
  await dropNamespace(ns);
  return result;
}
const bare = await floor(FLOOR_NS, false);
const fairFloor = await floor(FAIR_NS, true);
const floorSeconds = fairFloor.seconds;
const floorCellsCpuSeconds = fairFloor.cellsCpuSeconds;
const floorCellsSpent = fairFloor.cellsSpent;
const floorCellsWork = fairFloor.cellsWork;
const floorManagementCpuSeconds = fairFloor.managementCpuSeconds;

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
const managementWrites = () => berthWrites(berth.metricsPort, mgmt.server.host);
const cpuBefore = cpuSeconds(berth.pid);
const managementByProcessBefore = processCpu(federation.management);
const managementWorkBefore = await apiserverWork(mgmt);
const cellsByProcessBefore = cellsByProcess();
const cellsWorkBefore = await cellsWork();
const writesBefore = await berthWrites(berth.metricsPort);
const managementWritesBefore = await managementWrites();
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
const writesPerInstance = sumWrites(writesPer(writesBefore, await berthWrites(berth.metricsPort), instances));
const managementWritesPerInstance = sumWrites(
  writesPer(managementWritesBefore, await managementWrites(), instances),
);
console.log(
  `berth: ${workloads} Workloads (${instances} instances in ${cellCount} cells) Available upstream in ` +
    `${convergeSeconds.toFixed(2)} s (floor ${floorSeconds.toFixed(2)} s, bare floor ${bare.seconds.toFixed(2)} s); the management Berth used ` +
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
// Writes per object once every mirror is Ready (a mirror is an Instance upstream: one per cell instance).
const managementPerWorkload = writesPer(managementWritesBefore, await managementWrites(), workloads);
const writesPerMirror = round(
  (sumWrites(managementPerWorkload, (r) => r.startsWith('instances')) * workloads) / instances,
  2,
);
const statusWritesPerWorkload = sumWrites(managementPerWorkload, (r) => r === 'workloads/status');
const cellsPerWorkload = writesPer(writesBefore, await berthWrites(berth.metricsPort), workloads);
console.log(
  `writes: ${writesPerMirror} per mirror (the fair floor ${fairFloor.writesPerMirror}), ${statusWritesPerWorkload} ` +
    `status writes per Workload (the fair floor ${fairFloor.statusWritesPerWorkload}); per Workload, by method and ` +
    `resource, to every cluster: ${Object.entries(cellsPerWorkload)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ')}`,
);
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
  bareFloorSeconds: round(bare.seconds, 2),
  bareRatio: round(convergeSeconds / bare.seconds, 2),
  convergeCpuSeconds: round(convergeCpuSeconds, 1),
  managementCpuSeconds: round(managementCpuSeconds, 1),
  cellsCpuSeconds: round(cellsCpuSeconds, 1),
  floorCellsCpuSeconds: round(floorCellsCpuSeconds, 1),
  floorManagementCpuSeconds: round(floorManagementCpuSeconds, 1),
  upstreamHopP50ms: round(percentile(hops, 50), 0),
  upstreamHopP99ms: round(percentile(hops, 99), 0),
  writesPerInstance,
  managementWritesPerInstance,
  writesPerMirror,
  statusWritesPerWorkload,
  writesByResourcePerWorkload: cellsPerWorkload,
  floorWritesPerMirror: fairFloor.writesPerMirror,
  floorStatusWritesPerWorkload: fairFloor.statusWritesPerWorkload,
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
