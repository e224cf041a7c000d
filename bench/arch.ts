// Architecture-aware placement at scale: `npm run bench:arch -- --pods 5000 --images 200`.
// 1. Images: `--images` repositories pushed to the sandbox registry (a quarter each: an OCI index
//    amd64+arm64, a Docker list amd64+arm64+arm/v7, a single-arch amd64 image, a single-arch arm64
//    one). Berth's registry requests are counted outside Berth, in the registry's own log, which
//    also says how long the registry took over each (a proxy in the bench's busy process would add
//    its own delay, and a TLS handshake per request, to every inspection).
// 2. Berth: `--pods` pods of two containers each are created at `--concurrency`. Berth's webhook
//    gates each pod with an image it does not know yet, and its controller reads the images, writes
//    the affinity and ungates; a pod whose images are all known is placed at admission, never gated
//    (its latency counts as 0; `gatedAtAdmission` says how many were gated, and `gatedUngateP99ms`
//    is the p99 of those alone). Measured per pod by one watcher: from the create's answer (the pod
//    exists) to the gate seen gone. The same from the create's request (`ungateFromRequestP99ms`,
//    the floor's `floorUngateFromRequestP99ms`) counts what admission itself took: a review that
//    waits for the first read of a new image (arch/webhook.ts) is inside the create.
// 3. The floor: the same number of pods created gated in another namespace at the same concurrency,
//    while a minimal client, which knows each image's platforms, sends each pod the same patch
//    (affinity, annotation, gate removed) at the same concurrency as Berth's workers.
// 4. Webhook: Pod CREATE reviews (half for pods of the policy's namespace, whose images Berth now
//    knows: it answers them with its placing patch from its caches; half for pods it leaves alone)
//    at `--webhook-rate`, open-loop, from bench/webhookload (Go, outside this process and Berth's)
//    to Berth's webhook and to a floor, bench/webhookfloor -webhook=arch (a minimal Go net/http TLS
//    server answering the same patch from the images' platforms), the two taking turns of a
//    second; p99 of each and their ratio.
// `--always-every N`: every N-th pod's main container pulls Always (its tag revalidated for each
// pod, at admission or once gated), in both runs: those pods' own figures, and Berth's HEADs per
// such pod (`alwaysFromRequestP99ms`, `registryHeadsPerAlwaysPod`); the floor sends no HEAD.
// Berth runs as its own process (`berth run --controllers arch`), as it would in a cluster, with the
// image's Node flags and environment (its young generation's size shows in the webhook's tail).
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { installCrds } from '../src/cli/install.ts';
import { SCHEDULING_GATE } from '../src/arch/types.ts';
import { ArchPlacement } from '../src/arch/crd.ts';
import { mergePlatforms } from '../src/registry/manifest.ts';
import { Informer } from '../src/runtime/cache/informer.ts';
import { Resources, type KubeObject } from '../src/runtime/api/meta.ts';
import {
  benchSandbox,
  buildGoProgram,
  controllerMeans,
  controllerWork,
  describeControllerMeans,
  forEachLimit,
  percentile,
  round,
  report,
  waitForValue,
  webhookAgainstFloor,
  registeredWebhook,
} from './lib.ts';
import { startBerth } from '../test/helpers/berth.ts';
import { platform, platformString, RegistryPusher, type PlatformSpec } from '../test/helpers/registry.ts';
import { admissionReview } from '../test/helpers/admission.ts';

/**
 * Berth's requests as the registry logged them: every answer as "response completed" with its
 * duration, except a 401 challenge, which it logs as a warning only. Berth's client says `berth`.
 */
function registryLog(path: string): { requests: number; heads: number; durationsMs: number[] } {
  const unitMs: Record<string, number> = { ns: 1e-6, µs: 1e-3, us: 1e-3, ms: 1, s: 1000 };
  let requests = 0;
  let heads = 0;
  const durationsMs: number[] = [];
  for (const line of readFileSync(path, 'utf8').split('\n')) {
    if (!/ http\.request\.useragent=berth /.test(line)) continue;
    if (line.includes('msg="error authorizing context')) requests++;
    if (!line.includes('msg="response completed"')) continue;
    requests++;
    if (line.includes(' http.request.method=HEAD ')) heads++;
    const d = / http\.response\.duration=([\d.]+)(ns|µs|us|ms|s) /.exec(line);
    if (d) durationsMs.push(Number(d[1]) * unitMs[d[2]!]!);
  }
  return { requests, heads, durationsMs };
}

const { values } = parseArgs({
  options: {
    pods: { type: 'string', default: '5000' },
    images: { type: 'string', default: '200' },
    nodes: { type: 'string', default: '100' },
    concurrency: { type: 'string', default: '32' },
    'webhook-rate': { type: 'string', default: '200' },
    'webhook-seconds': { type: 'string', default: '10' },
    // Every n-th pod's main container pulls Always (0: none), in both Berth's run and the floor's.
    'always-every': { type: 'string', default: '0' },
  },
});
const podCount = Number(values.pods);
const imageCount = Number(values.images);
const nodeCount = Number(values.nodes);
const concurrency = Number(values.concurrency);
const rate = Number(values['webhook-rate']);
const webhookSeconds = Number(values['webhook-seconds']);
const alwaysEvery = Number(values['always-every']);
const pullsAlways = (i: number) => alwaysEvery > 0 && i % alwaysEvery === 0;
const NS = 'bench-arch';
const FLOOR_NS = 'bench-arch-floor';
const POLICY = 'bench';

const work = mkdtempSync(join(tmpdir(), 'bench-arch-'));
const generator = buildGoProgram('webhookload', work);
const floorBin = buildGoProgram('webhookfloor', work);

// Mixed architectures, as in a cluster of cloud amd64 and arm64 instances.
const arm = Math.floor(nodeCount * 0.4);
const sb = await benchSandbox(
  'bench-arch',
  [
    { prefix: 'amd', count: nodeCount - arm, arch: 'amd64' },
    { prefix: 'arm', count: arm, arch: 'arm64' },
  ],
  { registry: true },
);
const registry = sb.registry!;
const client = sb.client({ maxInFlight: 64 });
await installCrds(client);
for (const name of [NS, FLOOR_NS])
  await client.create(Resources.namespaces, { apiVersion: 'v1', kind: 'Namespace', metadata: { name } });

// 1. Images.
const kinds: { platforms: PlatformSpec[]; format: 'oci' | 'docker'; index: boolean }[] = [
  { platforms: [platform('linux/amd64'), platform('linux/arm64')], format: 'oci', index: true },
  {
    platforms: [platform('linux/amd64'), platform('linux/arm64'), platform('linux/arm/v7')],
    format: 'docker',
    index: true,
  },
  { platforms: [platform('linux/amd64')], format: 'oci', index: false },
  { platforms: [platform('linux/arm64')], format: 'docker', index: false },
];
const pusher = new RegistryPusher(registry);
const images: { ref: string }[] = [];
const archesOf = new Map<string, string[]>();
// What Berth will know of each image, for the webhook's floor: its digest and platforms (merged and
// sorted, as its registry client keeps them).
const known: Record<string, { digest: string; platforms: string[] }> = {};
const pushStarted = performance.now();
await forEachLimit(
  Array.from({ length: imageCount }, (_, i) => i),
  8,
  async (i) => {
    const kind = kinds[i % kinds.length]!;
    const repo = `bench/img-${i}`;
    const { digest } = kind.index
      ? (await pusher.pushIndex(repo, 'v1', kind.platforms, { format: kind.format })).index
      : await pusher.pushImage(repo, 'v1', kind.platforms[0]!, kind.format);
    images[i] = { ref: `${registry.host}/${repo}:v1` };
    known[images[i].ref] = { digest, platforms: mergePlatforms(kind.platforms).map(platformString) };
    archesOf.set(images[i].ref, [...new Set(kind.platforms.map((p) => p.architecture))]);
  },
);
console.log(`${imageCount} images pushed in ${((performance.now() - pushStarted) / 1000).toFixed(1)} s`);

// Each pod: a main image (every kind), and a multi-arch sidecar (kinds 0 and 1), so that most
// intersections are not empty and every image is named by many pods (what caches are for).
const podImages = (i: number): [string, string] => [
  images[i % imageCount]!.ref,
  images[4 * (i % Math.floor(imageCount / 4)) + (i % 2)]!.ref,
];
const intersection = (refs: string[]): string[] => {
  const sets = refs.map((r) => archesOf.get(r)!);
  return sets[0]!.filter((a) => sets.every((s) => s.includes(a))).sort();
};
const podManifest = (ns: string, i: number, gated: boolean, always = false): KubeObject => {
  const [main, sidecar] = podImages(i);
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name: `p-${i}`, namespace: ns, labels: { app: 'bench' } },
    spec: {
      ...(gated ? { schedulingGates: [{ name: SCHEDULING_GATE }] } : {}),
      containers: [
        { name: 'main', image: main, ...(always ? { imagePullPolicy: 'Always' } : {}) },
        { name: 'sidecar', image: sidecar },
      ],
    },
  };
};

// The sandbox's registries configuration: the registry's CA, and the registry allowed on 127.0.0.1.
const registriesFile = registry.registriesPath;
await client.create(ArchPlacement.ref, {
  apiVersion: ArchPlacement.apiVersion,
  kind: ArchPlacement.kind,
  metadata: { name: POLICY },
  spec: { namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': NS } } },
});
const berth = await startBerth(
  sb,
  ['--controllers=arch', `--arch-registries=${registriesFile}`, `--arch-workers=${concurrency}`],
  { imageRuntime: true },
);
const hook = await registeredWebhook(client, (n) => n.includes('arch'));
// The apiserver's webhook cache is eventually consistent: give it a moment before pods come.
await new Promise((r) => setTimeout(r, 2000));

// One watcher for both namespaces: when each pod's gate is seen gone.
const ungatedAt = new Map<string, number>();
const sentAt = new Map<string, number>();
const createdAt = new Map<string, number>();
const gatedKeys = new Set<string>();
const pods = new Informer<KubeObject>({ client, ref: Resources.pods });
const onPod = (p: KubeObject) => {
  const key = `${p.metadata!.namespace}/${p.metadata!.name}`;
  const gates = (p['spec'] as { schedulingGates?: { name: string }[] }).schedulingGates ?? [];
  // Recorded even before the create's answer is (a fast ungate can be seen first): latencies clamp at 0.
  const ours = p.metadata!.namespace === NS || p.metadata!.namespace === FLOOR_NS;
  if (ours && !ungatedAt.has(key) && !gates.some((g) => g.name === SCHEDULING_GATE))
    ungatedAt.set(key, performance.now());
};
pods.addEventHandler({ onAdd: onPod, onUpdate: (_a, b) => onPod(b) });
pods.start();
await pods.waitForSync();

/** Creates `podCount` pods in `ns` and waits until every one's gate is gone; seconds from the first create. */
async function run(ns: string, gated: boolean, onCreated?: (p: KubeObject) => void) {
  const t0 = performance.now();
  let gatedAtAdmission = 0;
  await forEachLimit(
    Array.from({ length: podCount }, (_, i) => i),
    concurrency,
    async (i) => {
      const key = `${ns}/p-${i}`;
      sentAt.set(key, performance.now());
      const created = await client.create<KubeObject>(
        Resources.pods,
        podManifest(ns, i, gated, pullsAlways(i)),
      );
      createdAt.set(key, performance.now());
      const gates = (created['spec'] as { schedulingGates?: { name: string }[] }).schedulingGates ?? [];
      if (gates.some((g) => g.name === SCHEDULING_GATE)) {
        gatedAtAdmission++;
        gatedKeys.add(key);
      } else if (!ungatedAt.has(key)) ungatedAt.set(key, createdAt.get(key)!);
      onCreated?.(created);
    },
  );
  const done = (k: string) => k.startsWith(`${ns}/`);
  await waitForValue(
    `every pod in ${ns} ungated`,
    () => ([...ungatedAt.keys()].filter(done).length >= podCount ? true : undefined),
    300_000,
    () => `${[...ungatedAt.keys()].filter(done).length}/${podCount} ungated`,
  ).catch((e: unknown) => console.log(String(e)));
  const latency = (k: string) => Math.max(0, ungatedAt.get(k)! - createdAt.get(k)!);
  const mine = [...createdAt.keys()].filter((k) => done(k) && ungatedAt.has(k));
  const latencies = mine.map(latency);
  // From the create's request to the gate seen gone (or the create's answer, for a pod never gated).
  const fromRequestOf = (k: string) => Math.max(ungatedAt.get(k)!, createdAt.get(k)!) - sentAt.get(k)!;
  const fromRequest = mine.map(fromRequestOf);
  const gatedMine = mine.filter((k) => gatedKeys.has(k));
  const alwaysMine = mine.filter((k) => pullsAlways(Number(k.slice(k.lastIndexOf('-') + 1))));
  const gatedLatencies = gatedMine.map(latency);
  const seconds = (Math.max(...[...ungatedAt].filter(([k]) => done(k)).map(([, t]) => t)) - t0) / 1000;
  // When the pods gated at admission were created and ungated, from the first create: whether their
  // tail is one wave (the first inspections) or spread over the run.
  const wave = {
    lastCreatedS: gatedMine.length ? (Math.max(...gatedMine.map((k) => createdAt.get(k)!)) - t0) / 1000 : 0,
    lastUngatedS: gatedMine.length ? (Math.max(...gatedMine.map((k) => ungatedAt.get(k)!)) - t0) / 1000 : 0,
  };
  return {
    seconds,
    latencies,
    fromRequest,
    always: {
      pods: alwaysMine.length,
      gatedAtAdmission: alwaysMine.filter((k) => gatedKeys.has(k)).length,
      fromRequest: alwaysMine.map(fromRequestOf),
    },
    gatedLatencies,
    gatedAtAdmission,
    wave,
    left: podCount - latencies.length,
  };
}

// 2. Berth.
const berthRun = await run(NS, false);
const registryServed = registryLog(join(sb.dir, 'logs', 'registry.log'));
const registryRequests = registryServed.requests;
const tokenRequests = await berth.metric('berth_registry_token_requests_total');
console.log(
  `berth: ${podCount} pods ungated in ${berthRun.seconds.toFixed(2)} s; ungate p50 ${percentile(berthRun.latencies, 50).toFixed(0)} ms, ` +
    `p99 ${percentile(berthRun.latencies, 99).toFixed(0)} ms; ${registryRequests} registry requests ` +
    `(+${tokenRequests} token requests) for ${imageCount} images; ${berthRun.left} left gated; from the ` +
    `create's request (admission included) p99 ${percentile(berthRun.fromRequest, 99).toFixed(0)} ms`,
);
const g = berthRun.gatedLatencies;
console.log(
  g.length === 0
    ? '  no pod gated at admission'
    : `  the ${g.length} pods gated at admission: ungate p50 ${percentile(g, 50).toFixed(0)} ms, p90 ` +
        `${percentile(g, 90).toFixed(0)} ms, p99 ${percentile(g, 99).toFixed(0)} ms, max ${Math.max(0, ...g).toFixed(0)} ms; ` +
        `the last created ${berthRun.wave.lastCreatedS.toFixed(2)} s and the last ungated ` +
        `${berthRun.wave.lastUngatedS.toFixed(2)} s after the first create`,
);
// How the reviews that waited for a read ended.
const waits = async (result: string) =>
  berth.metric('berth_arch_admission_inspect_waits_total', (l) => l.includes(`result="${result}"`));
const admissionWaits = {
  known: await waits('known'),
  failed: await waits('failed'),
  timeout: await waits('timeout'),
};
console.log(
  `  reviews that waited for a read: ${admissionWaits.known} answered, ${admissionWaits.failed} failed, ${admissionWaits.timeout} past the deadline`,
);
// Where Berth's time went, per pod: waiting in its queue, reconciling, inspecting images.
const inspectionMs =
  (1000 * (await berth.metric('berth_image_inspection_seconds_sum'))) /
  Math.max(1, await berth.metric('berth_image_inspection_seconds_count'));
const registryServiceP99ms = round(percentile(registryServed.durationsMs, 99), 1);
console.log(
  `berth per pod: ${describeControllerMeans('arch-pod', controllerMeans(await controllerWork(berth, 'arch-pod')))}, ` +
    `image inspection ${inspectionMs.toFixed(0)} ms; the registry's own time per request p50 ` +
    `${round(percentile(registryServed.durationsMs, 50), 1)} ms, p99 ${registryServiceP99ms} ms`,
);
// Every pod Berth ungated carries the architectures its images share.
const wrong = (await client.list<KubeObject>(Resources.pods, { namespace: NS })).items.filter((p) => {
  const spec = p['spec'] as {
    containers: { image: string }[];
    affinity?: {
      nodeAffinity?: {
        requiredDuringSchedulingIgnoredDuringExecution?: {
          nodeSelectorTerms: { matchExpressions?: { key: string; values?: string[] }[] }[];
        };
      };
    };
  };
  const want = intersection(spec.containers.map((c) => c.image)).join(',');
  const terms =
    spec.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms ?? [];
  return (
    !terms.every((t) =>
      t.matchExpressions?.some(
        (e) => e.key === 'kubernetes.io/arch' && [...(e.values ?? [])].sort().join(',') === want,
      ),
    ) || terms.length === 0
  );
}).length;
if (wrong) console.log(`WARNING: ${wrong} pods lack the architectures their images share`);

// 3. The floor: same pods, gated at creation, patched by a client that already knows the answer.
const floorQueue: KubeObject[] = [];
const sleeping: (() => void)[] = [];
const wake = () => sleeping.splice(0).forEach((w) => w());
// Berth's patch without its decision: the images and gates it was read from are tested, the
// affinity and the result added, the gate removed.
const floorPatch = (p: KubeObject) => {
  const spec = p['spec'] as { containers: { image: string }[]; schedulingGates: unknown[] };
  const arches = intersection(spec.containers.map((c) => c.image));
  return [
    ...spec.containers.map((c, i) => ({ op: 'test', path: `/spec/containers/${i}/image`, value: c.image })),
    { op: 'test', path: '/spec/schedulingGates', value: spec.schedulingGates },
    {
      op: 'add',
      path: '/spec/affinity',
      value: {
        nodeAffinity: {
          requiredDuringSchedulingIgnoredDuringExecution: {
            nodeSelectorTerms: [
              { matchExpressions: [{ key: 'kubernetes.io/arch', operator: 'In', values: arches }] },
            ],
          },
        },
      },
    },
    {
      op: 'add',
      path: '/metadata/annotations',
      value: { 'arch.berth.dev/result': JSON.stringify({ arches }) },
    },
    { op: 'remove', path: '/spec/schedulingGates' },
  ];
};
let floorCreating = true;
const floorWorkers = Promise.all(
  Array.from({ length: concurrency }, async () => {
    for (;;) {
      const p = floorQueue.shift();
      if (!p) {
        if (!floorCreating) return;
        await new Promise<void>((r) => sleeping.push(r));
        continue;
      }
      await client.patch(Resources.pods, p.metadata!.name!, floorPatch(p), {
        namespace: FLOOR_NS,
        type: 'json',
      });
    }
  }),
);
const floorRun = await run(FLOOR_NS, true, (p) => {
  floorQueue.push(p);
  wake();
});
floorCreating = false;
wake();
await floorWorkers;
console.log(
  `floor: ${podCount} pods ungated in ${floorRun.seconds.toFixed(2)} s; ungate p50 ${percentile(floorRun.latencies, 50).toFixed(0)} ms, ` +
    `p99 ${percentile(floorRun.latencies, 99).toFixed(0)} ms; from the create's request p99 ` +
    `${percentile(floorRun.fromRequest, 99).toFixed(0)} ms`,
);
// The floor knows every image and sends no HEAD: against it, Berth's revalidations count in full.
const always = berthRun.always;
if (always.pods)
  console.log(
    `the ${always.pods} pods pulling Always: ${always.gatedAtAdmission} gated at admission; from the ` +
      `create's request p99 ${percentile(always.fromRequest, 99).toFixed(0)} ms, the floor's ` +
      `${percentile(floorRun.always.fromRequest, 99).toFixed(0)} ms; ${registryServed.heads} HEADs ` +
      `(${(registryServed.heads / always.pods).toFixed(2)} per such pod)`,
  );

// 4. Webhook: Berth against the floor, with the bench's mix of reviews (every other one in the
// policy's namespace). The first 2 × images pods name every image, without thousands of bodies to
// warm up and compare; they are sent in turn.
// The bench's own watch stops first: its process has no more to do while Berth is measured.
await pods.stop();
const review = (i: number) => {
  // The other half in a namespace the policy does not select: one that exists, as the apiserver
  // sends no review for a pod of a namespace that does not.
  const pod = podManifest(i % 2 ? NS : FLOOR_NS, i, false);
  return admissionReview({
    uid: `bench-${i}`,
    namespace: pod.metadata!.namespace,
    userInfo: { username: 'system:serviceaccount:kube-system:replicaset-controller' },
    object: pod,
  });
};
// Berth's own count of reviews it took over 5 ms to answer, apart from what the network and the
// generator add.
const archHook = (l: string) => l.includes('arch');
/** Reviews Berth answered so far, and how many of them within 5 ms (its latency histogram). */
const served = async () => ({
  all: await berth.metric('controller_runtime_webhook_latency_seconds_count', archHook),
  within5ms: await berth.metric(
    'controller_runtime_webhook_latency_seconds_bucket',
    (l) => archHook(l) && l.includes('le="0.005"'),
  ),
});
const servedBefore = await served();
const imagesFile = join(work, 'images.json');
writeFileSync(imagesFile, JSON.stringify(known));
const webhook = await webhookAgainstFloor({
  generator,
  floor: floorBin,
  floorArgs: ['-webhook=arch', `-namespace=${NS}`, `-policy=${POLICY}`, `-images=${imagesFile}`],
  dir: work,
  hook,
  sandbox: sb,
  bodies: Array.from({ length: Math.min(rate * webhookSeconds, 2 * imageCount) }, (_, i) => review(i)),
  rate,
  seconds: webhookSeconds,
  berthPid: berth.pid,
});
const servedAfter = await served();
const slowInBerth = servedAfter.all - servedAfter.within5ms - (servedBefore.all - servedBefore.within5ms);
console.log(
  `  Berth's own clock: ${slowInBerth} of ${servedAfter.all - servedBefore.all} reviews (warm-up included) over 5 ms`,
);

const result = {
  pods: podCount,
  images: imageCount,
  nodes: nodeCount,
  ...webhook,
  gatedAtAdmission: berthRun.gatedAtAdmission,
  admissionWaits,
  ungateP50ms: round(percentile(berthRun.latencies, 50), 0),
  ungateP99ms: round(percentile(berthRun.latencies, 99), 0),
  ungateFromRequestP99ms: round(percentile(berthRun.fromRequest, 99), 0),
  floorUngateFromRequestP99ms: round(percentile(floorRun.fromRequest, 99), 0),
  gatedUngateP99ms: round(percentile(berthRun.gatedLatencies, 99), 0),
  ungateSeconds: round(berthRun.seconds, 2),
  floorSeconds: round(floorRun.seconds, 2),
  // The floor's own ungate latency: how near 1 s the machine lets any client come.
  floorUngateP99ms: round(percentile(floorRun.latencies, 99), 0),
  ratio: round(berthRun.seconds / floorRun.seconds, 2),
  registryRequestsPerImage: round(registryRequests / imageCount, 2),
  registryServiceP99ms,
  tokenRequests,
  podsLeftGated: berthRun.left,
  podsMisplaced: wrong,
  ...(always.pods
    ? {
        alwaysPods: always.pods,
        alwaysGatedAtAdmission: always.gatedAtAdmission,
        alwaysFromRequestP99ms: round(percentile(always.fromRequest, 99), 0),
        floorAlwaysFromRequestP99ms: round(percentile(floorRun.always.fromRequest, 99), 0),
        registryHeadsPerAlwaysPod: round(registryServed.heads / always.pods, 2),
        // The ≤ 2 per image of the reads themselves, the revalidations apart.
        registryRequestsPerImageWithoutHeads: round(
          (registryRequests - registryServed.heads) / imageCount,
          2,
        ),
      }
    : {}),
  rssMB: berth.rssMB(),
};
await berth.stop();
client.close();
await sb.down();
rmSync(work, { recursive: true, force: true });
report(result);
