// What Berth's webhooks cost pod admission: `npm run bench:admission -- --nodes 100 --runs 3`.
// Berth runs as `berth run` with its default controllers on a private sandbox of kwok nodes, with
// an AgentPlacement (waitForAgent) and an ArchPlacement that both select one labelled namespace
// (its image known to Berth, read from the sandbox registry, so the arch webhook places the pods at
// admission). Each run creates `--pods` pods with `--clients` concurrent clients (left to the
// scheduler: the agents and arch webhooks are the pod webhooks they can reach), four times:
//   1. pods no policy selects (another namespace), Berth's webhook configurations in place;
//   2. the same with Berth's configurations removed (Berth still running): the floor;
//   3. pods every policy selects, configurations in place;
//   4. the same with the configurations removed;
//   5. the same with Berth's configurations removed and its two pod webhooks' entries (the same
//      selectors, order and reinvocation) pointed at bench/webhookfloor, one Go process per webhook
//      answering as Berth does (checked: a pod of phase 3 and one of phase 5 come out the same).
// Targets: unselected ≤ 1.05× the floor (1 against 2); selected ≤ 1.5× the Go floor (3 against 5);
// 3 against 4 is reported too. Per phase: the reviews Berth's webhooks answered
// (controller_runtime_webhook_requests_total), and the CPU of its webhook thread per review. The
// configurations are removed by deleting them and restored by creating them again as they were:
// Berth applies them only when a policy changes.
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { tmpdir } from 'node:os';
import { parseArgs } from 'node:util';
import { AgentPlacement } from '../src/agents/crd.ts';
import { waitForAgentContainer } from '../src/agents/admit.ts';
import { createCertificateAuthority } from '../src/runtime/webhook/certificates.ts';
import { isDeepStrictEqual } from 'node:util';
import { ArchPlacement } from '../src/arch/crd.ts';
import { installCrds } from '../src/cli/install.ts';
import { Resources, type KubeObject } from '../src/runtime/api/meta.ts';
import type { KubeClient } from '../src/runtime/client/client.ts';
import { startBerth, type BerthProcess } from '../test/helpers/berth.ts';
import { platform, RegistryPusher } from '../test/helpers/registry.ts';
import {
  benchSandbox,
  buildGoProgram,
  forEachLimit,
  percentile,
  registeredWebhook,
  report,
  round,
  schedstat,
  WEBHOOK_THREAD,
  waitForValue,
} from './lib.ts';

const { values } = parseArgs({
  options: {
    nodes: { type: 'string', default: '100' },
    pods: { type: 'string', default: '1000' },
    clients: { type: 'string', default: '48' },
    runs: { type: 'string', default: '3' },
  },
});
const nodeCount = Number(values.nodes);
const podCount = Number(values.pods);
const clients = Number(values.clients);
const runs = Number(values.runs);
const SELECTED = 'bench.berth.dev/admission';
const POOL = 'bench.berth.dev/pool';
const NS = { selected: 'selected', unselected: 'unselected' } as const;
const CONFIG_REFS = [Resources.mutatingWebhookConfigurations, Resources.validatingWebhookConfigurations];

const work = mkdtempSync(`${tmpdir()}/bench-admission-`);
const floorBin = buildGoProgram('webhookfloor', work);
const floors: ChildProcess[] = [];
process.once('exit', () => floors.forEach((f) => f.kill()));
const sb = await benchSandbox('bench-admission', [{ prefix: 'n', count: nodeCount }], { registry: true });
const client = sb.client({ maxInFlight: clients * 2 });
let berth: BerthProcess | undefined;
let result: object | undefined;
try {
  await installCrds(client);
  for (const [key, name] of Object.entries(NS)) {
    const labels: Record<string, string> = key === 'selected' ? { [SELECTED]: 'true' } : {};
    await client.create(Resources.namespaces, {
      apiVersion: 'v1',
      kind: 'Namespace',
      metadata: { name, labels },
    });
  }
  const image = `${sb.registry!.host}/bench/app:v1`;
  const { digest } = await new RegistryPusher(sb.registry!).pushImage(
    'bench/app',
    'v1',
    platform('linux/amd64'),
  );
  const namespaceSelector = { matchLabels: { [SELECTED]: 'true' } };
  await client.create(AgentPlacement.ref, {
    apiVersion: AgentPlacement.apiVersion,
    kind: AgentPlacement.kind,
    metadata: { name: 'bench' },
    spec: {
      namespaceSelector,
      podSelector: { matchLabels: { app: 'bench' } },
      owner: { uidLabel: POOL },
      nodeLabel: { key: 'bench.berth.dev/agent' },
      claimAnnotationPrefix: 'bench.berth.dev/claim.',
      // The init container's image too: the arch webhook places the pod on all of its images.
      waitForAgent: { port: 8085, image },
    },
  });
  await client.create(ArchPlacement.ref, {
    apiVersion: ArchPlacement.apiVersion,
    kind: ArchPlacement.kind,
    metadata: { name: 'bench' },
    spec: { namespaceSelector },
  });
  berth = await startBerth(sb, [`--arch-registries=${sb.registry!.registriesPath}`], { imageRuntime: true });
  await registeredWebhook(client, (n) => n === 'pods.arch.berth.dev');
  // One selected pod first, so that Berth knows the image (the rest are placed at admission).
  await createPods(client, NS.selected, 'warm', 1, image);
  await waitForValue('the image known', async () =>
    (await berth!.metric('berth_arch_admissions_total', (l) => l.includes('placed'))) > 0 ? true : undefined,
  );

  const floorHooks = await startFloors(image, digest);

  const phases: Record<string, { seconds: number; reviews: number; cpuPerReviewMs: number | null }[]> = {};
  const outcomes = new Map<Webhooks, KubeObject>();
  for (let run = 1; run <= runs; run++) {
    for (const selected of [false, true]) {
      // Which goes first alternates between runs, so that a drift over time (a cache warming, a
      // neighbour's load) is not always charged to the same side.
      const order: Webhooks[] = selected ? ['berth', 'none', 'floor'] : ['berth', 'none'];
      for (const webhooks of run % 2 ? order : order.toReversed()) {
        const name = `${selected ? 'selected' : 'unselected'}${{ berth: 'With', none: 'Without', floor: 'Floor' }[webhooks]}`;
        const p = await phase(berth, client, {
          namespace: selected ? NS.selected : NS.unselected,
          prefix: `r${run}-${name.toLowerCase()}`,
          image,
          webhooks,
          floorHooks,
          outcomes: selected ? outcomes : undefined,
        });
        (phases[name] ??= []).push(p);
        console.log(
          `run ${run} ${name}: ${podCount} pods in ${p.seconds} s, ${p.reviews} reviews` +
            (p.cpuPerReviewMs === null ? '' : `, webhook thread ${p.cpuPerReviewMs} ms of CPU a review`),
        );
      }
    }
  }
  const ratios = (a: string, b: string) =>
    phases[a]!.map((p, i) => round(p.seconds / phases[b]![i]!.seconds, 3));
  const unselectedRatios = ratios('unselectedWith', 'unselectedWithout');
  const selectedRatios = ratios('selectedWith', 'selectedWithout');
  const goRatios = ratios('selectedWith', 'selectedFloor');
  const spread = (xs: number[]) => `${Math.min(...xs)}–${Math.max(...xs)}`;
  console.log(
    `unselected ÷ floor, per run: ${unselectedRatios.join(', ')} (${spread(unselectedRatios)}; target ≤ 1.05)`,
  );
  console.log(`selected ÷ Go floor, per run: ${goRatios.join(', ')} (${spread(goRatios)}; target ≤ 1.5)`);
  console.log(`selected ÷ no webhooks, per run: ${selectedRatios.join(', ')} (${spread(selectedRatios)})`);
  const reviews = phases['selectedWith']!.map((p) => p.cpuPerReviewMs).filter((c) => c !== null);
  result = {
    nodes: nodeCount,
    pods: podCount,
    clients,
    runs,
    unselectedRatio: percentile(unselectedRatios, 50),
    unselectedRatios,
    selectedRatio: percentile(goRatios, 50),
    selectedRatios: goRatios,
    selectedVsNoWebhooksRatio: percentile(selectedRatios, 50),
    selectedVsNoWebhooksRatios: selectedRatios,
    unselectedReviews: phases['unselectedWith']!.map((p) => p.reviews),
    selectedReviews: phases['selectedWith']!.map((p) => p.reviews),
    webhookCpuPerReviewMs: reviews.length ? percentile(reviews, 50) : null,
    seconds: Object.fromEntries(Object.entries(phases).map(([k, v]) => [k, v.map((p) => p.seconds)])),
    rssMB: berth.rssMB(),
  };
} finally {
  floors.forEach((f) => f.kill());
  await berth?.stop();
  client.close();
  await sb.destroy();
  rmSync(work, { recursive: true, force: true });
}
report(result);

/** Creates `count` pods named `<prefix>-<i>` in `namespace`, `clients` at a time. */
async function createPods(c: KubeClient, namespace: string, prefix: string, count: number, image: string) {
  await forEachLimit(
    Array.from({ length: count }, (_, i) => i),
    clients,
    async (i) => {
      await c.create(Resources.pods, {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name: `${prefix}-${i}`, namespace, labels: { app: 'bench', [POOL]: 'u1' } },
        spec: { terminationGracePeriodSeconds: 0, containers: [{ name: 'main', image }] },
      });
    },
  );
}

type Webhooks = 'berth' | 'none' | 'floor';

/**
 * One phase: the pods created (timed), with Berth's webhook configurations in place, removed, or
 * replaced by the floor's for the while; then deleted, and gone before the next phase starts.
 * With `outcomes`, its first pod is kept by kind of webhooks, and Berth's and the floor's compared.
 */
async function phase(
  b: BerthProcess,
  c: KubeClient,
  o: {
    namespace: string;
    prefix: string;
    image: string;
    webhooks: Webhooks;
    floorHooks: Map<string, string>;
    outcomes: Map<Webhooks, KubeObject> | undefined;
  },
) {
  const saved = o.webhooks === 'berth' ? [] : await removeConfigurations(c);
  const floor =
    o.webhooks === 'floor'
      ? await c.create(configRef(saved[0]!), floorConfig(saved[0]!, o.floorHooks))
      : undefined;
  if (floor) await new Promise((r) => setTimeout(r, 2000)); // the apiserver's webhook cache
  const reviewsBefore = await b.metric('controller_runtime_webhook_requests_total');
  const cpuBefore = schedstat(b.pid, (n) => n === WEBHOOK_THREAD).runMs;
  const started = performance.now();
  await createPods(c, o.namespace, o.prefix, podCount, o.image);
  const seconds = round((performance.now() - started) / 1000, 2);
  const cpuMs = schedstat(b.pid, (n) => n === WEBHOOK_THREAD).runMs - cpuBefore;
  const reviews = (await b.metric('controller_runtime_webhook_requests_total')) - reviewsBefore;
  if (o.outcomes && o.webhooks !== 'none') {
    o.outcomes.set(o.webhooks, await c.get(Resources.pods, `${o.prefix}-0`, o.namespace));
    sameOutcome(o.outcomes);
  }
  if (floor) await c.delete(configRef(floor), floor.metadata!.name!);
  for (const config of saved) await c.create(configRef(config), config);
  await c.request('DELETE', `/api/v1/namespaces/${o.namespace}/pods`, { query: { gracePeriodSeconds: 0 } });
  await waitForValue(
    'the pods gone',
    async () =>
      (await c.list(Resources.pods, { namespace: o.namespace })).items.length === 0 ? true : undefined,
    120_000,
  );
  if (saved.length) await new Promise((r) => setTimeout(r, 2000)); // the apiserver's webhook cache
  return { seconds, reviews, cpuPerReviewMs: reviews ? round(cpuMs / reviews, 3) : null };
}

/** Throws unless a pod admitted through Berth's webhooks and one through the floor's came out the same. */
function sameOutcome(outcomes: Map<Webhooks, KubeObject>): void {
  const berthPod = outcomes.get('berth');
  const floorPod = outcomes.get('floor');
  if (!berthPod || !floorPod) return;
  const what = (p: KubeObject) => {
    const spec = p['spec'] as { initContainers?: { volumeMounts?: unknown }[]; affinity?: unknown };
    // The service account token's volume is named anew for each pod.
    const init = spec.initContainers?.map(({ volumeMounts: _, ...c }) => c);
    const { [POOL]: _, ...labels } = p.metadata?.labels ?? {};
    return {
      labels,
      annotations: p.metadata?.annotations,
      init,
      affinity: spec.affinity,
    };
  };
  if (!isDeepStrictEqual(what(berthPod), what(floorPod)))
    throw new Error(
      `the floor's pod ${JSON.stringify(what(floorPod))} is not Berth's ${JSON.stringify(what(berthPod))}`,
    );
}

/**
 * bench/webhookfloor as Berth's agents and arch pod webhooks, one process each, on a certificate of
 * a CA of its own: the URL of each, by webhook name, and that CA (base64) under the key 'ca'.
 */
async function startFloors(image: string, digest: string): Promise<Map<string, string>> {
  const ca = await createCertificateAuthority('bench-admission-floor');
  const serving = await ca.issue({ commonName: '127.0.0.1', ipAddresses: ['127.0.0.1'], usage: 'server' });
  const file = (name: string, data: string) => {
    writeFileSync(`${work}/${name}`, data);
    return `${work}/${name}`;
  };
  const tls = [`-cert=${file('floor.crt', serving.certPem)}`, `-key=${file('floor.key', serving.keyPem)}`];
  const container = waitForAgentContainer('bench', { port: 8085, image, timeoutSeconds: 0 });
  const hooks = new Map([['ca', Buffer.from(ca.certPem).toString('base64')]]);
  for (const [name, args] of [
    [
      'pods.agents.berth.dev',
      [
        '-webhook=agents',
        '-select=app=bench',
        `-container=${file('container.json', JSON.stringify(container))}`,
      ],
    ],
    [
      'pods.arch.berth.dev',
      [
        '-webhook=arch',
        `-images=${file('images.json', JSON.stringify({ [image]: { digest, platforms: ['linux/amd64'] } }))}`,
      ],
    ],
  ] as const) {
    const floor = spawn(floorBin, [...tls, `-namespace=${NS.selected}`, '-policy=bench', ...args], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    floors.push(floor);
    const [url] = (await once(createInterface({ input: floor.stdout! }), 'line')) as [string];
    hooks.set(name, url);
  }
  return hooks;
}

/** Berth's mutating configuration with its pod webhooks pointed at the floors, under a name of its own. */
function floorConfig(berthConfig: KubeObject, hooks: Map<string, string>): KubeObject {
  const webhooks = (berthConfig['webhooks'] as { name: string; clientConfig: unknown }[]).flatMap((w) =>
    hooks.has(w.name) ? [{ ...w, clientConfig: { url: hooks.get(w.name), caBundle: hooks.get('ca') } }] : [],
  );
  return { ...berthConfig, metadata: { name: 'bench-admission-floor' }, webhooks };
}

function configRef(o: KubeObject) {
  return CONFIG_REFS.find((r) => r.kind === o.kind)!;
}

/** Deletes Berth's webhook configurations; what they held, to create them again. */
async function removeConfigurations(c: KubeClient): Promise<KubeObject[]> {
  const saved: KubeObject[] = [];
  for (const ref of CONFIG_REFS) {
    const o = await c.get(ref, 'berth');
    const { name, labels } = o.metadata!;
    saved.push({ ...o, metadata: { name, ...(labels ? { labels } : {}) } });
    await c.delete(ref, 'berth');
  }
  // The apiserver's webhook cache learns of the deletion a moment later.
  await new Promise((r) => setTimeout(r, 2000));
  return saved;
}
