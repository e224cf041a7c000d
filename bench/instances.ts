// Workloads in a cell at scale: `npm run bench:instances -- --deployments 200 --replicas 5`.
// 1. The floors, each by a minimal client at `--concurrency` in the order OrderedReady makes them:
//    ordinal 0 of every deployment first, each next ordinal once the one before is Ready.
//    - The bare floor (`bareFloorSeconds`): the Pods Berth's instances would run (same names,
//      labels, resources, no gate), created directly. Seconds from the first create to every pod
//      Ready. Then one rollout step done by hand, several times: a pod deleted, seen gone, created
//      again under its name, seen Ready (the recreate a rollout must do).
//    - The fair floor (`floorSeconds`, what `ratio` is against): the work an instance needs, in
//      Berth's order, as plain writes: the Instance created (Berth's manifest); its claim in the
//      namespace Quota's ledger (a PUT of the ledger with the resourceVersion read, one at a time,
//      each carrying every claim that came meanwhile: quota never over-grants under concurrency);
//      once claimed, its Pod created ungated; once the Pod is seen Ready, the Instance's status
//      (Ready, Available, Programmed, QuotaGranted, its Pod) applied once; the next ordinal once
//      that is answered. No WorkloadDeployment and no status of one: writes per object say those.
//    - The status floor (`statusFloorSeconds`, `statusRatio`): the fair floor's work plus what a
//      WorkloadDeployment needs, which a user reads READY and AVAILABLE on: the deployments created
//      by the benchmark's user as for Berth (at `--concurrency`), each one's first ordinal once it
//      exists, and its status (counts, Available, Progressing) applied when they change: at once on
//      a condition change (created, every instance Ready), else RAMP_BATCH_MS after its last write,
//      Berth's status controller's spacing (the one-second bound); one write at a time per deployment.
//    The two fair floors' writes go with Berth's identity (its ServiceAccount), under the same API
//    Priority and Fairness level as Berth's (the user's deployment creates with the admin's, as in
//    Berth's run); the bare floor's with the admin's, exempt from it. This process watches the two
//    fair floors' Pods, Instances and Quota as it watches Berth's, so the measuring costs alike.
//    All three start once the kube-controller-manager's garbage collector watches the Berth kinds
//    (it takes up new CRDs at its 30 s discovery resync), so its watch events land in every run alike.
// 2. Berth: `--deployments` WorkloadDeployments of `--replicas` (OrderedReady) in a namespace whose
//    Quota has room, created at `--concurrency`, Berth's workers at the same number. Seconds from the
//    first create to every Instance Ready; quota grant latency per instance (first seen → seen with
//    QuotaGranted=True, by one watcher; and first seen → its claim seen in the Quota's ledger, where
//    the grant is decided); Berth's API writes by resource, counted by its own
//    berth_api_writes_total: per instance (its create, status, Pod, and the ledger's writes shared
//    out), per WorkloadDeployment (its status), and all of them per instance; the fair floor's the
//    same way; the apiserver's CPU seconds in each run. And where an instance's time goes, step by
//    step (each seen by this process's watches): claimed in the Quota's ledger, its Pod created, bound, Ready,
//    the instance Ready, the next ordinal created; the floor's pods by the same steps.
// 3. Rollout: one deployment of `--rollout-replicas`, its template changed once; seconds until every
//    instance runs the new template and is Ready, against the floor's step times the replicas.
// Berth runs as its own process (`berth run --controllers workloads`), as it would in a cluster.
// `--profile-apiserver DIR`: the sandbox's kube-apiserver serves /debug/pprof, and each phase's CPU
// profile (fair floor, status floor, Berth) is saved in DIR as 2 s pieces (profileApiserver).
import { parseArgs } from 'node:util';
import { installCrds } from '../src/cli/install.ts';
import { Informer } from '../src/runtime/cache/informer.ts';
import { isNotFound, resourcePath } from '../src/runtime/client/client.ts';
import { applyStatus } from '../src/runtime/client/apply.ts';
import { findCondition } from '../src/runtime/api/conditions.ts';
import { apiTime, Resources, type KubeObject } from '../src/runtime/api/meta.ts';
import { slimPod, type SlimPod } from '../src/policy/slim.ts';
import { deploymentSelector, templateHash } from '../src/workloads/decide/revisions.ts';
import { instanceManifest, podManifest, type InstanceObject } from '../src/workloads/decide/instances.ts';
import { RAMP_BATCH_MS, STATUS_WORKERS } from '../src/workloads/controllers/deployment-status.ts';
import { instanceSize } from '../src/workloads/resources.ts';
import {
  DEPLOYMENT_MANAGER,
  type InstanceTemplate,
  type QuotaClaim,
  type QuotaStatus,
  type WorkloadDeploymentStatus,
} from '../src/workloads/types.ts';
import { Quota, WorkloadDeployment, Instance } from '../src/workloads/crd.ts';
import {
  apiserverWork,
  benchSandbox,
  berthCounts,
  berthWrites,
  sumWrites,
  writesPer,
  controllerMeans,
  controllerWork,
  cpuBetween,
  cpuSeconds,
  describeControllerMeans,
  describeCpu,
  forEachLimit,
  percentile,
  processCpu,
  profileApiserver,
  round,
  report,
  waitForCollectorWatches,
  waitForValue,
  workDelta,
} from './lib.ts';
import { berthClient, startBerth } from '../test/helpers/berth.ts';

const { values } = parseArgs({
  options: {
    deployments: { type: 'string', default: '200' },
    replicas: { type: 'string', default: '5' },
    'rollout-replicas': { type: 'string', default: '20' },
    concurrency: { type: 'string', default: '16' },
    nodes: { type: 'string' },
    sandbox: { type: 'string', default: 'bench-instances' },
    'profile-apiserver': { type: 'string' },
  },
});
const deployments = Number(values.deployments);
const replicas = Number(values.replicas);
const rolloutReplicas = Number(values['rollout-replicas']);
const concurrency = Number(values.concurrency);
const instances = deployments * replicas;
// kwok nodes take 110 pods each: room for every pod with a node to spare.
const nodeCount = Number(values.nodes ?? Math.ceil((instances + rolloutReplicas) / 100) + 1);
const NS = 'bench-instances';
const FLOOR_NS = 'bench-instances-floor';
const FAIR_NS = 'bench-instances-fair';
const STATUS_NS = 'bench-instances-status';
/** Rollout steps the floor times by hand (the median counts). */
const FLOOR_STEPS = 5;

const template: InstanceTemplate = {
  metadata: { labels: { app: 'bench' } },
  containers: [
    {
      name: 'app',
      image: 'registry.example/app:1',
      resources: { requests: { cpu: '100m', memory: '128Mi' } },
    },
  ],
};
const wdName = (d: number) => `wd-${d}`;

const sb = await benchSandbox(values.sandbox, [{ prefix: 'cell', count: nodeCount }], {
  profiling: values['profile-apiserver'] !== undefined,
});
const client = sb.client({ maxInFlight: 64 });
await installCrds(client);
await waitForCollectorWatches(client, 'berth.dev', ['instances', 'workloaddeployments', 'quotas']);
for (const name of [NS, FLOOR_NS, FAIR_NS, STATUS_NS])
  await client.create(Resources.namespaces, { apiVersion: 'v1', kind: 'Namespace', metadata: { name } });

const ready = (o: { status?: { conditions?: readonly { type: string; status: string }[] } }) =>
  findCondition(o.status?.conditions, 'Ready')?.status === 'True';

/** Waiters on pods of one namespace, by name: seen Ready, seen gone. */
class PodWatch {
  readonly informer: Informer<SlimPod>;
  private readonly onReady = new Map<string, () => void>();
  private readonly onGone = new Map<string, () => void>();
  readyHandler: (name: string) => void = () => {};
  /** When each pod was first seen, seen bound to a node (and ungated, if it was gated), seen Ready. */
  readonly seenAt = new Map<string, number>();
  readonly boundAt = new Map<string, number>();
  readonly readyAt = new Map<string, number>();
  readonly gated = new Set<string>();
  constructor(namespace: string) {
    this.informer = new Informer<SlimPod>({ client, ref: Resources.pods, namespace, transform: slimPod });
    const seen = (p: SlimPod) => {
      const name = p.metadata!.name!;
      const now = performance.now();
      if (!this.seenAt.has(name)) this.seenAt.set(name, now);
      if (p.spec.schedulingGates?.length) this.gated.add(name);
      if (!this.boundAt.has(name) && p.spec.nodeName) this.boundAt.set(name, now);
      if (!ready(p)) return;
      if (!this.readyAt.has(name)) this.readyAt.set(name, now);
      this.readyHandler(name);
      this.onReady.get(name)?.();
      this.onReady.delete(name);
    };
    this.informer.addEventHandler({
      onAdd: seen,
      onUpdate: (_a, b) => seen(b),
      onDelete: (p) => {
        this.onGone.get(p.metadata!.name!)?.();
        this.onGone.delete(p.metadata!.name!);
      },
    });
  }
  async start() {
    this.informer.start();
    await this.informer.waitForSync();
  }
  /** Resolves once the pod is seen Ready (register before the write that leads there). */
  untilReady(name: string) {
    return new Promise<void>((r) => this.onReady.set(name, r));
  }
  untilGone(name: string) {
    return new Promise<void>((r) => this.onGone.set(name, r));
  }
}

/** p50/p99 of the time from one step to the next, over the instances seen at both. */
const hop = (from: Map<string, number>, to: Map<string, number>, name: (n: string) => string = (n) => n) => {
  const ms = [...to].flatMap(([n, t]) => {
    const f = from.get(name(n));
    return f === undefined || !n.startsWith('wd-') ? [] : [t - f];
  });
  return `p50 ${percentile(ms, 50).toFixed(0)} / p99 ${percentile(ms, 99).toFixed(0)} ms`;
};
/** The instance of the ordinal before (wd-3-2 → wd-3-1), whose Ready the next create waits for. */
const previous = (n: string) => n.replace(/-(\d+)$/, (_, k: string) => `-${Number(k) - 1}`);
// 1. The floor.
// Built by Berth's own functions, so the floor's pods are the ones Berth would create, less the
// owner reference (nothing owns them here: the garbage collector would take them) and the gate.
const hash = templateHash(template);
const sized = instanceSize(template, () => undefined);
if ('error' in sized) throw new Error(sized.error);
const size = sized;
const floorPod = (d: number, ordinal: number): KubeObject => {
  const owner = {
    apiVersion: WorkloadDeployment.apiVersion,
    kind: WorkloadDeployment.kind,
    name: wdName(d),
    uid: '',
  };
  const inst = instanceManifest(
    { metadata: { name: wdName(d), namespace: FLOOR_NS } },
    owner,
    template,
    hash,
    ordinal,
  ) as InstanceObject;
  const pod = podManifest(inst, owner, size, false);
  delete pod.metadata!.ownerReferences;
  return pod;
};
/**
 * The sandbox's processes' CPU seconds and this process's (`bench`): it makes the floors' writes and
 * keeps the watches every run has, so what each run gives the machine is all of them.
 */
const machineCpu = () => {
  const { user, system } = process.cpuUsage();
  return processCpu(sb).set('bench', (user + system) / 1e6);
};
const floorWatch = new PodWatch(FLOOR_NS);
await floorWatch.start();
// What the control plane does for the floor's pods, and below for Berth's instances: CPU seconds
// by process and what the apiserver served (the machine's two cores are shared by all of them).
const floorCpuBefore = machineCpu();
const floorWorkBefore = await apiserverWork(client);
const floorStarted = performance.now();
const floorSeconds = await new Promise<number>((resolve, reject) => {
  // A FIFO of pods to create, served by `concurrency` workers, as Berth's instance workers would.
  const queue: [number, number][] = Array.from({ length: deployments }, (_, d) => [d, 0]);
  let inFlight = 0;
  const done = new Set<string>();
  const pump = () => {
    while (inFlight < concurrency && queue.length) {
      const [d, ordinal] = queue.shift()!;
      inFlight++;
      client.create(Resources.pods, floorPod(d, ordinal)).then(() => {
        inFlight--;
        pump();
      }, reject);
    }
  };
  floorWatch.readyHandler = (name) => {
    if (done.has(name)) return;
    done.add(name);
    const [, d, ordinal] = /^wd-(\d+)-(\d+)$/.exec(name)!.map(Number) as [number, number, number];
    if (ordinal + 1 < replicas) queue.push([d, ordinal + 1]);
    if (done.size === instances) resolve((performance.now() - floorStarted) / 1000);
    pump();
  };
  pump();
});
floorWatch.readyHandler = () => {};
console.log(`floor: ${instances} pods Ready in ${floorSeconds.toFixed(2)} s`);
console.log(`  CPU seconds: ${describeCpu(floorCpuBefore, machineCpu())}`);
console.log(`  the apiserver served: ${workDelta(floorWorkBefore, await apiserverWork(client)).join(', ')}`);
console.log(
  `  a pod's steps: seen → bound ${hop(floorWatch.seenAt, floorWatch.boundAt)}; bound → Ready ` +
    `${hop(floorWatch.boundAt, floorWatch.readyAt)}`,
);
const steps: number[] = [];
for (let i = 0; i < FLOOR_STEPS; i++) {
  const pod = floorPod(i % deployments, 0);
  const name = pod.metadata!.name!;
  const started = performance.now();
  const gone = floorWatch.untilGone(name);
  // A late kwok delete of an earlier step (below) may have taken this pod already: nothing to wait for
  // then, once the cache no longer shows it.
  const deleted = await client.delete(Resources.pods, name, FLOOR_NS).then(
    () => true,
    (e: unknown) => {
      if (isNotFound(e)) return false;
      throw e;
    },
  );
  if (deleted || floorWatch.informer.get(`${FLOOR_NS}/${name}`)) await gone;
  // kwok deletes a terminating pod by name, not by uid, and a late second delete can take the new
  // pod of the same name: created again, as Berth's instance controller recreates a Pod deleted by
  // someone else.
  for (;;) {
    const outcome = Promise.race([
      floorWatch.untilReady(name).then(() => 'ready'),
      floorWatch.untilGone(name).then(() => 'gone'),
    ]);
    await client.create(Resources.pods, pod);
    if ((await outcome) === 'ready') break;
  }
  steps.push(performance.now() - started);
}
const floorStepMs = percentile(steps, 50);
console.log(
  `floor: a rollout step (delete, gone, create, Ready) ${floorStepMs.toFixed(0)} ms (median of ${FLOOR_STEPS})`,
);
floorWatch.informer.stop();
// Berth starts on a cluster as bare as the floor's was.
await client.request('DELETE', `/api/v1/namespaces/${FLOOR_NS}/pods`, {
  body: { apiVersion: 'v1', kind: 'DeleteOptions', gracePeriodSeconds: 0 },
});
await waitForValue('the floor pods gone', async () =>
  (await client.list(Resources.pods, { namespace: FLOOR_NS, query: { limit: 1 } })).items.length === 0
    ? true
    : undefined,
);

// 1b. The fair floors: what an instance needs, as plain writes (the header says which); the status
// floor adds what a WorkloadDeployment needs.
const quotaOf = (namespace: string): KubeObject => ({
  apiVersion: Quota.apiVersion,
  kind: Quota.kind,
  metadata: { name: 'room', namespace },
  spec: { instances: 2 * (instances + rolloutReplicas) },
});
const wd = (name: string, n: number, namespace = NS): KubeObject => ({
  apiVersion: WorkloadDeployment.apiVersion,
  kind: WorkloadDeployment.kind,
  metadata: { name, namespace },
  spec: { template, replicas: n, instanceManagementPolicy: 'OrderedReady' },
});
/** The apiserver's CPU seconds between two processCpu readings. */
const apiserverCpu = (before: Map<string, number>, after: Map<string, number>) =>
  round((after.get('kube-apiserver') ?? 0) - (before.get('kube-apiserver') ?? 0), 1);

/** A deployment of the status floor: its object, its instances made and Ready, its status writes. */
interface FloorDeployment {
  wd: KubeObject;
  made: number;
  ready: number;
  /** When its status was last written (performance.now()), and what. */
  lastAt: number;
  written?: string;
  /** The write of the counts after the spacing, when one is due. */
  timer?: ReturnType<typeof setTimeout>;
  /** Waiting for a writer; being written (one write at a time per deployment, as per key in a workqueue). */
  queued?: boolean;
  writing?: Promise<void>;
}

/**
 * The fair floor in `namespace`; with `deploymentStatus`, the status floor: the WorkloadDeployments
 * created as the benchmark's user creates them for Berth, each instance's first ordinal once its
 * deployment exists, and each deployment's status (counts, Available, Progressing) applied with
 * Berth's identity when it changes: at once when a condition changes (created, every instance
 * Ready), else RAMP_BATCH_MS after its last write, as Berth's status controller spaces them.
 */
async function fairFloor(namespace: string, deploymentStatus: boolean) {
  let ledger = await client.create<KubeObject & { status?: QuotaStatus }>(Quota.ref, quotaOf(namespace));
  // Its writes go as Berth's do: with Berth's identity (a ServiceAccount), under the same API Priority
  // and Fairness level, not the admin's (exempt from it).
  const fair = await berthClient(sb);
  /** Claims waiting for the next ledger write, with what to call once it is answered. */
  const claimsWaiting: { claim: QuotaClaim; done: () => void }[] = [];
  let ledgerWriting = false;
  let ledgerWrites = 0;
  let statusWrites = 0;
  const flushLedger = async (): Promise<void> => {
    if (ledgerWriting || !claimsWaiting.length) return;
    ledgerWriting = true;
    const batch = claimsWaiting.splice(0);
    const claims = [...(ledger.status?.claims ?? []), ...batch.map((b) => b.claim)];
    ledger = await fair.request('PUT', resourcePath(Quota.ref, namespace, 'room', 'status'), {
      body: {
        ...ledger,
        status: {
          used: {
            instances: claims.length,
            cpu: `${claims.length * 100}m`,
            memory: `${claims.length * 128}Mi`,
          },
          claims,
        },
      },
      query: { fieldManager: 'bench' },
    });
    ledgerWriting = false;
    ledgerWrites++;
    for (const b of batch) b.done();
    void flushLedger();
  };
  const claim = (inst: KubeObject) =>
    new Promise<void>((done) => {
      claimsWaiting.push({
        claim: {
          cluster: 'local',
          name: inst.metadata!.name!,
          uid: inst.metadata!.uid!,
          milliCPU: 100,
          memoryBytes: 128 * 2 ** 20,
          grantedAt: apiTime(Date.now()),
        },
        done,
      });
      void flushLedger();
    });

  const floorDeployments = new Map<number, FloorDeployment>();
  const deploymentCondition = (type: string, status: boolean, reason: string, message: string) => ({
    type,
    status: status ? ('True' as const) : ('False' as const),
    reason,
    message,
    lastTransitionTime: apiTime(Date.now()),
    observedGeneration: 1,
  });
  const statusOf = (f: FloorDeployment): WorkloadDeploymentStatus => {
    const done = f.ready === replicas;
    return {
      observedGeneration: 1,
      replicas: f.made,
      currentReplicas: f.made,
      readyReplicas: f.ready,
      availableReplicas: f.ready,
      updatedReplicas: f.made,
      desiredReplicas: replicas,
      templateHash: hash,
      selector: deploymentSelector(f.wd.metadata!.name!),
      conditions: [
        deploymentCondition(
          'Available',
          done,
          done ? 'MinimumReplicasAvailable' : 'Provisioning',
          `${f.ready} of ${replicas} instances available`,
        ),
        deploymentCondition(
          'Progressing',
          true,
          done ? 'NewTemplateAvailable' : 'ScalingReplicas',
          done ? `template ${hash} is rolled out` : `${f.made} instances, ${replicas} desired`,
        ),
      ],
    };
  };
  /** Deployments whose status is due, written by STATUS_WORKERS writers with their counts then. */
  const due: FloorDeployment[] = [];
  let writers = 0;
  const writeDue = () => {
    for (let i = 0; writers < STATUS_WORKERS && i < due.length;) {
      const f = due[i]!;
      if (f.writing) {
        i++;
        continue;
      }
      due.splice(i, 1);
      f.queued = false;
      const status = statusOf(f);
      const text = JSON.stringify({ ...status, conditions: undefined });
      if (text === f.written) continue;
      f.written = text;
      f.lastAt = performance.now();
      writers++;
      f.writing = applyStatus(fair, WorkloadDeployment.ref, f.wd, status, DEPLOYMENT_MANAGER).then(() => {
        statusWrites++;
        writers--;
        f.writing = undefined;
        writeDue();
      });
    }
  };
  const writeDeployment = (f: FloorDeployment) => {
    if (!f.queued) due.push(f);
    f.queued = true;
    writeDue();
  };
  /** Its counts changed: written at once when its conditions change, else spaced. */
  const countsChanged = (f: FloorDeployment) => {
    clearTimeout(f.timer);
    f.timer = undefined;
    const wait = f.lastAt + RAMP_BATCH_MS - performance.now();
    if (f.ready === replicas || wait <= 0) writeDeployment(f);
    else f.timer = setTimeout(() => writeDeployment(f), wait);
  };

  const fairWatch = new PodWatch(namespace);
  // The watches this benchmark keeps on Berth's instances and ledger, kept here too: the apiserver
  // and this process pay for the measuring in every run alike.
  const measuring = [Instance.ref, Quota.ref].map(
    (ref) => new Informer<KubeObject>({ client, ref, namespace }),
  );
  for (const m of measuring) m.start();
  await Promise.all([fairWatch.start(), ...measuring.map((m) => m.waitForSync())]);
  const fairMade = new Map<string, InstanceObject>();
  const workBefore = await apiserverWork(client);
  const cpuBefore = machineCpu();
  const profile = profileApiserver(client, values['profile-apiserver'], deploymentStatus ? 'status' : 'fair');
  const started = performance.now();
  const seconds = await new Promise<number>((resolve, reject) => {
    const queue: [number, number][] = deploymentStatus
      ? []
      : Array.from({ length: deployments }, (_, d) => [d, 0]);
    let inFlight = 0;
    let done = 0;
    const make = async (d: number, ordinal: number) => {
      const f = floorDeployments.get(d);
      const owner = {
        apiVersion: WorkloadDeployment.apiVersion,
        kind: WorkloadDeployment.kind,
        name: wdName(d),
        uid: f?.wd.metadata!.uid ?? '',
      };
      const manifest = instanceManifest(
        { metadata: { name: wdName(d), namespace } },
        owner,
        template,
        hash,
        ordinal,
      );
      // The fair floor's instances have no deployment to own them.
      if (!f) delete manifest.metadata!.ownerReferences;
      const inst = await fair.create<InstanceObject>(Instance.ref, manifest);
      if (f) {
        f.made++;
        countsChanged(f);
      }
      await claim(inst);
      const instOwner = {
        apiVersion: Instance.apiVersion,
        kind: Instance.kind,
        name: inst.metadata.name!,
        uid: inst.metadata.uid!,
      };
      fairMade.set(inst.metadata.name!, inst);
      await fair.create(Resources.pods, podManifest(inst, instOwner, size, false));
    };
    const pump = () => {
      while (inFlight < concurrency && queue.length) {
        const [d, ordinal] = queue.shift()!;
        inFlight++;
        make(d, ordinal).then(() => {
          inFlight--;
          pump();
        }, reject);
      }
    };
    const readyStatus = (inst: InstanceObject) => {
      const at = apiTime(Date.now());
      const condition = (type: string, reason: string, message: string) => ({
        type,
        status: 'True',
        reason,
        message,
        lastTransitionTime: at,
        observedGeneration: inst.metadata.generation,
      });
      return {
        observedGeneration: inst.metadata.generation,
        observedTemplateHash: hash,
        podName: inst.metadata.name,
        conditions: [
          condition('Ready', 'Ready', 'serving'),
          condition('Available', 'PodReady', `Pod ${inst.metadata.name} is Ready`),
          condition('Programmed', 'PodCreated', `Pod ${inst.metadata.name}`),
          condition('QuotaGranted', 'Granted', 'granted'),
        ],
      };
    };
    fairWatch.readyHandler = (name) => {
      const inst = fairMade.get(name);
      if (!inst) return;
      fairMade.delete(name);
      applyStatus(fair, Instance.ref, inst, readyStatus(inst), 'bench').then(() => {
        const [, d, ordinal] = /^wd-(\d+)-(\d+)$/.exec(name)!.map(Number) as [number, number, number];
        const f = floorDeployments.get(d);
        if (f) {
          f.ready++;
          countsChanged(f);
        }
        if (ordinal + 1 < replicas) queue.push([d, ordinal + 1]);
        if (++done === instances) resolve((performance.now() - started) / 1000);
        pump();
      }, reject);
    };
    // The status floor's deployments, created by the user as for Berth; each one's first ordinal
    // and first status once it exists.
    if (deploymentStatus)
      forEachLimit(
        Array.from({ length: deployments }, (_, d) => d),
        concurrency,
        async (d) => {
          const made = await client.create(WorkloadDeployment.ref, wd(wdName(d), replicas, namespace));
          const f: FloorDeployment = { wd: made, made: 0, ready: 0, lastAt: 0 };
          floorDeployments.set(d, f);
          writeDeployment(f);
          queue.push([d, 0]);
          pump();
        },
      ).catch(reject);
    pump();
  });
  fairWatch.readyHandler = () => {};
  const work = workDelta(workBefore, await apiserverWork(client));
  const cpuAfter = machineCpu();
  await profile.stop();
  // Its writes: each instance's create, Pod and status, and the ledger's writes shared out; the
  // deployments' status writes apart.
  const writesPerInstance = round(3 + ledgerWrites / instances, 2);
  // The last status writes (every instance Ready) may still be on their way: counted once answered.
  await waitForValue('the last status writes of the status floor', () =>
    due.length || writers ? undefined : true,
  );
  const writesPerDeployment = round(statusWrites / deployments, 2);
  const allWritesPerInstance = round(3 + (ledgerWrites + statusWrites) / instances, 2);
  console.log(
    `${deploymentStatus ? 'status' : 'fair'} floor: ${instances} instances Ready in ${seconds.toFixed(2)} s; ` +
      `${writesPerInstance} writes per instance` +
      (deploymentStatus
        ? `, ${writesPerDeployment} per WorkloadDeployment, ${allWritesPerInstance} in all per instance`
        : ''),
  );
  console.log(`  CPU seconds: ${describeCpu(cpuBefore, cpuAfter)}`);
  console.log(`  the apiserver served: ${work.join(', ')}`);
  fairWatch.informer.stop();
  for (const m of measuring) m.stop();
  fair.close();
  // Berth starts on a cluster as bare as the floor's was: its deployments, instances, Pods gone.
  await client.request('DELETE', resourcePath(WorkloadDeployment.ref, namespace), {
    body: { apiVersion: 'v1', kind: 'DeleteOptions', propagationPolicy: 'Background' },
  });
  await client.request('DELETE', resourcePath(Instance.ref, namespace), {
    body: { apiVersion: 'v1', kind: 'DeleteOptions', propagationPolicy: 'Background' },
  });
  await client.request('DELETE', `/api/v1/namespaces/${namespace}/pods`, {
    body: { apiVersion: 'v1', kind: 'DeleteOptions', gracePeriodSeconds: 0 },
  });
  // Its Quota too: a ledger of 500 claims whose instances are gone would have Berth's quota controller
  // ask the apiserver for each of them (goneClaims) while Berth's own run is measured.
  await client.delete(Quota.ref, 'room', namespace);
  const none = async (ref: Parameters<typeof client.list>[0]) =>
    (await client.list(ref, { namespace, query: { limit: 1 } })).items.length === 0;
  await waitForValue('the fair floor gone', async () =>
    (await none(Resources.pods)) && (await none(Instance.ref)) && (await none(WorkloadDeployment.ref))
      ? true
      : undefined,
  );
  return {
    seconds,
    writesPerInstance,
    writesPerDeployment,
    allWritesPerInstance,
    apiserverCpuSeconds: apiserverCpu(cpuBefore, cpuAfter),
    machineCpuSeconds: round(cpuBetween(cpuBefore, cpuAfter), 1),
  };
}
const fairFloorRun = await fairFloor(FAIR_NS, false);
const fairSeconds = fairFloorRun.seconds;
const fairWritesPerInstance = fairFloorRun.writesPerInstance;
const statusFloorRun = await fairFloor(STATUS_NS, true);

// 2. Berth.
await client.create(Quota.ref, quotaOf(NS));
const berth = await startBerth(sb, [
  '--controllers=workloads',
  `--workload-workers=${concurrency}`,
  `--instance-workers=${concurrency}`,
]);
const firstSeen = new Map<string, number>();
const grantedAt = new Map<string, number>();
const readyAt = new Map<string, number>();
const insts = new Informer<InstanceObject>({ client, ref: Instance.ref, namespace: NS });
const onInstance = (o: InstanceObject) => {
  const name = o.metadata!.name!;
  const now = performance.now();
  if (!firstSeen.has(name)) firstSeen.set(name, now);
  if (!grantedAt.has(name) && findCondition(o.status?.conditions, 'QuotaGranted')?.status === 'True')
    grantedAt.set(name, now);
  if (!readyAt.has(name) && ready(o)) readyAt.set(name, now);
};
insts.addEventHandler({ onAdd: onInstance, onUpdate: (_a, b) => onInstance(b) });
// The steps between (issue 13: where an instance's time goes): its claim in the Quota's ledger (the
// grant decided), its Pod created, the Pod Ready.
const claimedAt = new Map<string, number>();
const ledgerWatch = new Informer<KubeObject & { status?: QuotaStatus }>({
  client,
  ref: Quota.ref,
  namespace: NS,
});
const onLedger = (q: KubeObject & { status?: QuotaStatus }) => {
  const now = performance.now();
  for (const c of q.status?.claims ?? []) if (!claimedAt.has(c.name)) claimedAt.set(c.name, now);
};
ledgerWatch.addEventHandler({ onAdd: onLedger, onUpdate: (_a, b) => onLedger(b) });
const pods = new PodWatch(NS);
insts.start();
ledgerWatch.start();
await Promise.all([insts.waitForSync(), ledgerWatch.waitForSync(), pods.start()]);

const writesBefore = await berthWrites(berth.metricsPort);
/** Berth's requests by method and answer's code (GETs, and conflicts of the ledger's PUTs). */
const berthRequests = () => berthCounts(berth.metricsPort, 'rest_client_requests_total', ['method', 'code']);
const requestsBefore = await berthRequests();
/** The machine's CPU seconds (machineCpu) and Berth's (its own process, not the sandbox's). */
const cpuWithBerth = () => machineCpu().set('berth', cpuSeconds(berth.pid));
const berthCpuBefore = cpuWithBerth();
const berthWorkBefore = await apiserverWork(client);
const berthProfile = profileApiserver(client, values['profile-apiserver'], 'berth');
const started = performance.now();
await forEachLimit(
  Array.from({ length: deployments }, (_, d) => d),
  concurrency,
  async (d) => void (await client.create(WorkloadDeployment.ref, wd(wdName(d), replicas))),
);
const readyOf = () => [...readyAt.keys()].filter((n) => n.startsWith('wd-')).length;
await waitForValue(
  'every instance Ready',
  () => (readyOf() >= instances ? true : undefined),
  900_000,
  () => `${readyOf()}/${instances} instances Ready, ${grantedAt.size} granted, ${firstSeen.size} exist`,
);
const berthSeconds = (Math.max(...readyAt.values()) - started) / 1000;
const writesAfter = await berthWrites(berth.metricsPort);
const requestsAfter = await berthRequests();
/** Every write of Berth's per instance, by method and resource. */
const writesBy = writesPer(writesBefore, writesAfter, instances);
const OF_DEPLOYMENT = (r: string) => r.startsWith('workloaddeployments');
// An instance's own: its create and status, its Pod, and its share of the ledger's writes.
const writesPerInstance = sumWrites(writesBy, (r) => /^(instances|pods|quotas)/.test(r));
const writesPerDeployment = round((sumWrites(writesBy, OF_DEPLOYMENT) * instances) / deployments, 2);
const allWritesPerInstance = sumWrites(writesBy);
const grants = [...grantedAt].map(([n, t]) => t - firstSeen.get(n)!);
const claims = [...claimedAt].flatMap(([n, t]) => (firstSeen.has(n) ? [t - firstSeen.get(n)!] : []));
console.log(
  `berth: ${instances} instances Ready in ${berthSeconds.toFixed(2)} s (floor ${fairSeconds.toFixed(2)} s, ` +
    `bare floor ${floorSeconds.toFixed(2)} s); quota grant (QuotaGranted seen) p50 ` +
    `${percentile(grants, 50).toFixed(0)} ms, p99 ${percentile(grants, 99).toFixed(0)} ms; claimed in the ledger ` +
    `p50 ${percentile(claims, 50).toFixed(0)} ms, p99 ${percentile(claims, 99).toFixed(0)} ms; API writes: ` +
    `${writesPerInstance} per instance, ${writesPerDeployment} per WorkloadDeployment, ${allWritesPerInstance} ` +
    `in all per instance (${Object.entries(writesBy)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ')}); the fair floor's ${fairWritesPerInstance} per instance`,
);
const firstOrdinals = new Map([...firstSeen].filter(([n]) => !n.endsWith('-0')));
console.log(
  `  an instance's steps: seen → claimed in the ledger ${hop(firstSeen, claimedAt)}; claimed → its Pod seen ` +
    `${hop(claimedAt, pods.seenAt)}; Pod seen → QuotaGranted seen ${hop(pods.seenAt, grantedAt)}; Pod seen → ` +
    `bound ${hop(pods.seenAt, pods.boundAt)} (${pods.gated.size} made gated); bound → Ready ` +
    `${hop(pods.boundAt, pods.readyAt)}; Pod Ready → instance Ready ${hop(pods.readyAt, readyAt)}; instance ` +
    `Ready → the next ordinal seen ${hop(readyAt, firstOrdinals, previous)}`,
);
const berthCpuAfter = cpuWithBerth();
await berthProfile.stop();
console.log(`  CPU seconds: ${describeCpu(berthCpuBefore, berthCpuAfter)}`);
console.log(`  Berth's requests by method and code: ${workDelta(requestsBefore, requestsAfter).join(', ')}`);
console.log(`  the apiserver served: ${workDelta(berthWorkBefore, await apiserverWork(client)).join(', ')}`);
const rss = berth.rssMB();
// Where Berth's time went: passes per controller, their mean, and the mean wait in its queue.
for (const c of [
  'workloads-deployment',
  'workloads-deployment-status',
  'workloads-instance',
  'workloads-quota',
])
  console.log(`  ${describeControllerMeans(c, controllerMeans(await controllerWork(berth, c)))}`);

// 3. Rollout.
await client.create(WorkloadDeployment.ref, wd('rollout', rolloutReplicas));
const statusOf = async () => {
  const o = await client.get<KubeObject & { status?: WorkloadDeploymentStatus }>(
    WorkloadDeployment.ref,
    'rollout',
    NS,
  );
  return { generation: o.metadata!.generation!, status: o.status ?? {} };
};
/** Every replica on the current template and Ready, as the deployment's status says for its generation. */
const rolledOut = async () => {
  const { generation, status: s } = await statusOf();
  return s.observedGeneration === generation &&
    s.replicas === rolloutReplicas &&
    s.updatedReplicas === rolloutReplicas &&
    s.readyReplicas === rolloutReplicas
    ? true
    : undefined;
};
await waitForValue('the rollout deployment Ready', rolledOut, 300_000);
const rolloutStarted = performance.now();
await client.patch(
  WorkloadDeployment.ref,
  'rollout',
  {
    spec: {
      template: { metadata: { annotations: { 'bench.berth.dev/restartedAt': new Date().toISOString() } } },
    },
  },
  { namespace: NS },
);
await waitForValue('the rollout done', rolledOut, 600_000, () => 'rolling');
const rolloutSeconds = (performance.now() - rolloutStarted) / 1000;
const rolloutFloorSeconds = (rolloutReplicas * floorStepMs) / 1000;
console.log(
  `rollout of ${rolloutReplicas}: ${rolloutSeconds.toFixed(2)} s (floor ${rolloutReplicas} × ${floorStepMs.toFixed(0)} ms = ${rolloutFloorSeconds.toFixed(2)} s)`,
);

const result = {
  deployments,
  replicas,
  instances,
  seconds: round(berthSeconds, 2),
  floorSeconds: round(fairSeconds, 2),
  ratio: round(berthSeconds / fairSeconds, 2),
  statusFloorSeconds: round(statusFloorRun.seconds, 2),
  statusRatio: round(berthSeconds / statusFloorRun.seconds, 2),
  bareFloorSeconds: round(floorSeconds, 2),
  bareRatio: round(berthSeconds / floorSeconds, 2),
  quotaGrantP99ms: round(percentile(grants, 99), 0),
  ledgerClaimP99ms: round(percentile(claims, 99), 0),
  rolloutReplicas,
  rolloutSeconds: round(rolloutSeconds, 2),
  rolloutFloorSeconds: round(rolloutFloorSeconds, 2),
  writesPerInstance,
  writesPerDeployment,
  allWritesPerInstance,
  writesByResourcePerInstance: writesBy,
  floorWritesPerInstance: fairWritesPerInstance,
  statusFloorWritesPerDeployment: statusFloorRun.writesPerDeployment,
  statusFloorAllWritesPerInstance: statusFloorRun.allWritesPerInstance,
  apiserverCpuSeconds: apiserverCpu(berthCpuBefore, berthCpuAfter),
  floorApiserverCpuSeconds: fairFloorRun.apiserverCpuSeconds,
  statusFloorApiserverCpuSeconds: statusFloorRun.apiserverCpuSeconds,
  machineCpuSeconds: round(cpuBetween(berthCpuBefore, berthCpuAfter), 1),
  floorMachineCpuSeconds: fairFloorRun.machineCpuSeconds,
  statusFloorMachineCpuSeconds: statusFloorRun.machineCpuSeconds,
  rssMB: rss,
};
insts.stop();
ledgerWatch.stop();
pods.informer.stop();
await berth.stop();
client.close();
await sb.down();
report(result);
