// Shared pieces of the benchmarks: a private sandbox, percentiles, memory, bounded concurrency.
// Berth runs as its own process through test/helpers/berth.ts, which the tests share.
import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import type { IncomingMessage } from 'node:http';
import https from 'node:https';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { isDeepStrictEqual } from 'node:util';
import { NodeStartupGate } from '../src/gates/crd.ts';
import { checkGo } from '../src/sandbox/build.ts';
import { packageRoot } from '../src/sandbox/paths.ts';
import { Sandbox, type UpOptions } from '../src/sandbox/sandbox.ts';
import { abortOnSignals } from '../src/sandbox/wait.ts';
import { nodeManifests, type NodeGroupInput } from '../src/sandbox/nodes.ts';
import { Resources } from '../src/runtime/api/meta.ts';
import type { KubeClient } from '../src/runtime/client/client.ts';
import { createCertificateAuthority } from '../src/runtime/webhook/certificates.ts';
import { admissionReview } from '../test/helpers/admission.ts';

/** A fresh sandbox of its own, so a benchmark never disturbs (or is disturbed by) another cluster. */
export async function benchSandbox(
  name: string,
  nodes: NodeGroupInput[] = [],
  extra: Pick<UpOptions, 'registry' | 'profiling'> = {},
): Promise<Sandbox> {
  const sb = new Sandbox(name);
  const started = performance.now();
  // Ctrl-C while the sandbox builds or starts stops whatever the start-up launched.
  const interrupt = abortOnSignals();
  await sb
    .up({
      fresh: true,
      nodes,
      ...extra,
      timeoutMs: 900_000,
      log: (s) => console.log(`  ${s}`),
      signal: interrupt.signal,
    })
    .finally(interrupt.release);
  console.log(`sandbox ${name} ready in ${((performance.now() - started) / 1000).toFixed(1)} s`);
  destroyOnCrash(() => sb.destroy());
  return sb;
}

/**
 * A benchmark that fails unexpectedly still takes its clusters down (`destroy`): a thousand kwok
 * nodes left running would load every later run on the machine.
 */
export function destroyOnCrash(destroy: () => Promise<void>): void {
  const crash = (e: unknown) => {
    console.error(e);
    void destroy().finally(() => process.exit(1));
  };
  process.once('uncaughtException', crash).once('unhandledRejection', crash);
}

export function percentile(values: number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

export const rssMB = (): number => process.memoryUsage().rss / 1024 / 1024;

/** Runs `fn` over `items` with at most `concurrency` in flight. */
export async function forEachLimit<T>(
  items: T[],
  concurrency: number,
  fn: (item: T, i: number) => Promise<void>,
) {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(concurrency, items.length) }, async () => {
      while (next < items.length) {
        const i = next++;
        await fn(items[i]!, i);
      }
    }),
  );
}

export const round = (n: number, digits = 1): number => Number(n.toFixed(digits));

/** CPU seconds (user and system) a process of this machine has used so far, from /proc. */
export function cpuSeconds(pid: number): number {
  // Fields 14 and 15 of /proc/PID/stat, counted after the command's closing parenthesis.
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS;
}
/** USER_HZ: 100 on every Linux that Node runs on. */
const CLOCK_TICKS = 100;

/** What the scheduler says of a process's threads (those `which` picks, by name): time on a core, time
 *  runnable but waiting for one, and how many times they were put on one (/proc/PID/task/TID/schedstat). */
export interface Schedstat {
  runMs: number;
  waitMs: number;
  slices: number;
}
export function schedstat(pid: number, which: (name: string) => boolean = () => true): Schedstat {
  const sum: Schedstat = { runMs: 0, waitMs: 0, slices: 0 };
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      if (!which(readFileSync(`/proc/${pid}/task/${tid}/comm`, 'utf8').trim())) continue;
      const [run, wait, slices] = readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8')
        .split(' ')
        .map(Number);
      sum.runMs += run! / 1e6;
      sum.waitMs += wait! / 1e6;
      sum.slices += slices!;
    } catch {
      // a thread that ended between the listing and the read
    }
  }
  return sum;
}

/** CPU seconds each running process of a sandbox has used, by name (etcd, kube-apiserver, ..., berth). */
export const processCpu = (sb: Sandbox): Map<string, number> =>
  new Map(
    sb
      .status()
      .filter((p) => p.running && p.pid !== undefined)
      .map((p) => [p.name, cpuSeconds(p.pid!)]),
  );

/** CPU seconds the running processes of a sandbox (its control plane, kwok, its Berth if any) have used. */
export const sandboxCpuSeconds = (sb: Sandbox): number =>
  [...processCpu(sb).values()].reduce((sum, s) => sum + s, 0);

/** What the processes used between two readings of processCpu, all together. */
export const cpuBetween = (before: Map<string, number>, after: Map<string, number>): number =>
  [...after].reduce((sum, [name, s]) => sum + s - (before.get(name) ?? 0), 0);

/** What each process used between two readings of processCpu: `etcd 2.6, kube-apiserver 18.5, ...`. */
export const describeCpu = (before: Map<string, number>, after: Map<string, number>): string =>
  [...after].map(([name, s]) => `${name} ${(s - (before.get(name) ?? 0)).toFixed(1)}`).join(', ');

/** Keys of apiserverWork that hold seconds spent on requests, not counts. */
const SECONDS = 'seconds ';

/**
 * What an apiserver has served so far, from its own /metrics: requests by verb and resource
 * (`apiserver_request_total`, WATCH counted when opened) with the seconds it took to answer them
 * (`apiserver_request_duration_seconds_sum`), and watch events sent by kind
 * (`apiserver_watch_events_total`, once per watcher). Two of these apart say where its CPU went.
 */
export async function apiserverWork(client: KubeClient): Promise<Map<string, number>> {
  const text = await client.request<string>('GET', '/metrics');
  const work = new Map<string, number>();
  const add = (key: string, n: number) => work.set(key, (work.get(key) ?? 0) + n);
  for (const { labels, value } of samples(text, 'apiserver_watch_events_total'))
    add(`watch event ${labels['kind'] ?? labels['resource']}`, value);
  for (const [name, prefix] of [
    ['apiserver_request_total', ''],
    ['apiserver_request_duration_seconds_sum', SECONDS],
  ] as const)
    for (const { labels, value } of samples(text, name)) {
      const what = [labels['resource'], labels['subresource']].filter(Boolean).join('/') || 'other';
      add(`${prefix}${labels['verb']} ${what}`, value);
    }
  return work;
}

/** The samples of metric `name` in a Prometheus text exposition, each with its labels. */
function samples(text: string, name: string): { labels: Record<string, string>; value: number }[] {
  return [...text.matchAll(new RegExp(`^${name}\\{([^}]*)\\} (\\S+)$`, 'gm'))].map((m) => ({
    labels: Object.fromEntries([...m[1]!.matchAll(/(\w+)="([^"]*)"/g)].map((l) => [l[1]!, l[2]!])),
    value: Number(m[2]),
  }));
}

/**
 * Waits until the apiserver has a watch open on each of `resources` (of `group`) that this process
 * did not open: the kube-controller-manager's garbage collector, which takes up new CRDs only at its
 * discovery resync (every 30 s). A benchmark that measures floors and Berth one after another waits
 * for it before the first, or the collector's watch events and its graph of owners join whichever
 * run it starts in.
 */
export async function waitForCollectorWatches(client: KubeClient, group: string, resources: string[]) {
  const watched = async () => {
    const text = await client.request<string>('GET', '/metrics');
    const open = new Set(
      samples(text, 'apiserver_longrunning_requests')
        .filter(({ labels, value }) => value > 0 && labels['group'] === group && labels['verb'] === 'WATCH')
        .map(({ labels }) => labels['resource']),
    );
    return resources.every((r) => open.has(r)) ? true : undefined;
  };
  await waitForValue(`the garbage collector's watches on ${resources.join(', ')}`, watched, 120_000);
}

/**
 * The `top` largest growths between two apiserverWork readings, largest first: "verb resource n",
 * with the mean time to answer them but for watches (which last as long as they are open).
 */
export function workDelta(before: Map<string, number>, after: Map<string, number>, top = 12): string[] {
  const delta = (k: string) => (after.get(k) ?? 0) - (before.get(k) ?? 0);
  return [...after.keys()]
    .filter((k) => !k.startsWith(SECONDS) && delta(k) > 0)
    .sort((a, b) => delta(b) - delta(a))
    .slice(0, top)
    .map((k) => {
      const n = delta(k);
      const seconds = k.startsWith('WATCH') ? 0 : delta(SECONDS + k);
      return seconds > 0
        ? `${k} ${Math.round(n)} (mean ${((1000 * seconds) / n).toFixed(0)} ms)`
        : `${k} ${Math.round(n)}`;
    });
}

/**
 * Berth's API writes so far by resource (`instances`, `instances/status`, `pods`, ...), from its own
 * berth_api_writes_total; only those to `host` when given.
 */
export const berthWrites = (metricsPort: number, host?: string): Promise<Map<string, number>> =>
  berthCounts(metricsPort, 'berth_api_writes_total', ['method', 'resource'], host);

/**
 * A counter of Berth's own /metrics summed by `by` (their values joined by spaces, in that order):
 * only the series of `host` when given.
 */
export async function berthCounts(
  metricsPort: number,
  metric: string,
  by: string[],
  host?: string,
): Promise<Map<string, number>> {
  const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
  const counts = new Map<string, number>();
  for (const { labels, value } of samples(text, metric)) {
    if (host !== undefined && labels['host'] !== host) continue;
    const what = by.map((l) => labels[l]).join(' ');
    counts.set(what, (counts.get(what) ?? 0) + value);
  }
  return counts;
}

/** Two berthWrites readings apart, per object (`n` of them), by `method resource`, largest first. */
export function writesPer(before: Map<string, number>, after: Map<string, number>, n: number) {
  return Object.fromEntries(
    [...after]
      .map(([k, v]) => [k, round((v - (before.get(k) ?? 0)) / n, 2)] as const)
      .filter(([, v]) => v > 0)
      .sort((a, b) => b[1] - a[1]),
  );
}

/** The sum of a writesPer's entries whose resource passes `f`. */
export const sumWrites = (per: Record<string, number>, f: (resource: string) => boolean = () => true) =>
  round(
    Object.entries(per)
      .filter(([k]) => f(k.split(' ')[1]!))
      .reduce((a, [, v]) => a + v, 0),
    2,
  );

/**
 * Prints a benchmark's result as one JSON object: call it after the cleanup, so that the object is
 * the last line printed whatever the cleanup logs (the README promises it to scripts that read it).
 */
export function report(result: object | undefined): void {
  if (result) console.log(JSON.stringify(result));
}

/** Polls `probe` until it answers a value; on timeout, throws with `progress()` (also logged every 10 s). */
export async function waitForValue<T>(
  what: string,
  probe: () => Promise<T | undefined> | T | undefined,
  timeoutMs = 60_000,
  progress?: () => string,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let lastLog = Date.now();
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > deadline)
      throw new Error(`timed out waiting for ${what}${progress ? `: ${progress()}` : ''}`);
    if (progress && Date.now() - lastLog > 10_000) {
      console.log(`  ${progress()}`);
      lastLog = Date.now();
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Where the apiserver calls a webhook of Berth's: its client config, once Berth has registered it. */
export interface WebhookClientConfig {
  url: string;
  caBundle: string;
}

/**
 * The client config of the webhook of `berth`'s mutating configuration whose name passes `match`,
 * once Berth has registered it (the install creates the configuration empty, so it exists before).
 */
export const registeredWebhook = (client: KubeClient, match: (name: string) => boolean) =>
  waitForValue('the webhook registered', async () => {
    const config = await client.get(Resources.mutatingWebhookConfigurations, 'berth').catch(() => undefined);
    const hooks = config?.['webhooks'] as { name: string; clientConfig: WebhookClientConfig }[] | undefined;
    return hooks?.find((w) => match(w.name))?.clientConfig;
  });

/**
 * Creates pods `p-<from>` to `p-<to - 1>` in `namespace`, each bound to the node `nodeOf(i)` and,
 * given a `label`, needing it there (true): the workload of the derived-label benchmarks. `labelsOf`
 * labels some (say, as an AgentPlacement's workload).
 */
export async function createBoundPods(
  client: KubeClient,
  o: {
    namespace: string;
    from: number;
    to: number;
    nodeOf: (i: number) => string;
    label?: string;
    labelsOf?: (i: number) => Record<string, string> | undefined;
  },
): Promise<void> {
  await forEachLimit(
    Array.from({ length: o.to - o.from }, (_, i) => o.from + i),
    32,
    async (i) => {
      await client.create(Resources.pods, {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name: `p-${i}`, namespace: o.namespace, labels: o.labelsOf?.(i) },
        spec: {
          nodeName: o.nodeOf(i),
          ...(o.label ? { nodeSelector: { [o.label]: 'true' } } : {}),
          terminationGracePeriodSeconds: 0,
          containers: [{ name: 'main', image: 'registry.example/edgetpu-inference:1' }],
        },
      });
    },
  );
}

/**
 * Waits until kwok has played every pod of `namespaces` to Running, so that what is timed next
 * does not queue behind its backlog (at 100,000 pods it runs minutes behind the creates).
 */
export async function waitForPodsRunning(
  client: KubeClient,
  namespaces: string[],
  timeoutMs = 600_000,
): Promise<void> {
  const query = { limit: 1, fieldSelector: 'status.phase!=Running' };
  await waitForValue(
    `the pods of ${namespaces.join(', ')} Running`,
    async () => {
      for (const namespace of namespaces)
        if ((await client.list(Resources.pods, { namespace, query })).items.length) return undefined;
      return true;
    },
    timeoutMs,
  );
}

/** Builds the Go program of `bench/<name>` (a floor or a load generator) into `dir`; its path. */
export function buildGoProgram(name: string, dir: string): string {
  checkGo();
  const out = path.join(dir, name);
  const built = spawnSync('go', ['build', '-o', out, '.'], {
    cwd: path.join(packageRoot(), 'bench', name),
    env: { ...process.env, CGO_ENABLED: '0', GOTOOLCHAIN: 'local' },
    encoding: 'utf8',
  });
  if (built.status !== 0) throw new Error(`building bench/${name} failed:\n${built.stderr}`);
  return out;
}

/** The AdmissionReview the apiserver sends a Node CREATE webhook for a new node with these labels. */
export const nodeCreateReview = (uid: string, labels: Record<string, string>): string =>
  admissionReview({
    uid,
    userInfo: { username: 'system:node:bench' },
    object: nodeManifests({ prefix: `review-${uid}`, count: 1, labels })[0],
  });

/** Latencies of calls as bench/webhookload summarizes them. */
export interface LoadSummary {
  count: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
}

/** The name Berth's webhook thread carries (runtime/webhook/admission.ts), as /proc shows it. */
export const WEBHOOK_THREAD = 'berth-webhook';
const since = (a: Schedstat, b: Schedstat): Schedstat => ({
  runMs: b.runMs - a.runMs,
  waitMs: b.waitMs - a.waitMs,
  slices: b.slices - a.slices,
});

/** Runs bench/webhookload (built by buildGoProgram) with `args` to its end; its last line, parsed. */
export function webhookLoad<T>(generator: string, args: string[]): T {
  const run = spawnSync(generator, args, {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
    timeout: 300_000,
    // With -rate, its line holds each server's answer to every body.
    maxBuffer: 64 * 1024 * 1024,
  });
  if (run.status !== 0) throw new Error(`webhookload ${args.join(' ')} exited with ${run.status}`);
  return JSON.parse(run.stdout.trim().split('\n').pop()!) as T;
}

/** One server's figures from bench/webhookload -rate, and its answer to each body (warm-up). */
interface RateTarget {
  answers: string[];
  answered: LoadSummary;
  refused: LoadSummary;
  timeouts: number;
}

/**
 * The flags with which bench/webhookload presents the apiserver's webhook client certificate of
 * `sb`, and bench/webhookfloor requires it, as Berth there does (--webhook-client-ca); none where the
 * sandbox's apiserver presents none. The certificate is written into `dir`.
 */
export function webhookClientArgs(sb: Sandbox, dir: string): { load: string[]; floor: string[] } {
  const pair = sb.webhookClientCertificate;
  if (!pair || !sb.webhookClientCa) return { load: [], floor: [] };
  const cert = path.join(dir, 'apiserver-webhook-client.crt');
  const key = path.join(dir, 'apiserver-webhook-client.key');
  writeFileSync(cert, pair.cert);
  writeFileSync(key, pair.key, { mode: 0o600 });
  return { load: [`-cert=${cert}`, `-key=${key}`], floor: [`-client-ca=${sb.webhookClientCa}`] };
}

/**
 * Berth's webhook (`hook`, as registered) against its floor: bench/webhookfloor (built, `floor`)
 * started with `floorArgs` and a serving certificate like Berth's (ECDSA P-256). bench/webhookload
 * (`generator`) sends `bodies` in turn to each at `rate` per second for `seconds`. Throws unless the
 * floor answers each body as Berth does; prints both and answers Berth's p99, the floor's, their
 * ratio, and what the scheduler says of Berth's webhook thread and of the floor (the benchmarks' JSON
 * fields, by name).
 */
export async function webhookAgainstFloor(o: {
  generator: string;
  floor: string;
  floorArgs: string[];
  dir: string;
  hook: { url: string; caBundle: string };
  /** The sandbox of Berth: both are called with its apiserver's webhook client certificate. */
  sandbox: Sandbox;
  bodies: string[];
  rate: number;
  seconds: number;
  /** Berth's process: its webhook thread's scheduling is read beside the floor's. */
  berthPid: number;
}): Promise<{
  webhookP99ms: number;
  webhookFloorP99ms: number;
  webhookRatio: number;
  webhookFailed: number;
  /** Per review answered: the webhook thread's time on a core and waiting for one; the floor's threads' alike. */
  webhookCpuPerReviewMs: number;
  webhookFloorCpuPerReviewMs: number;
  webhookWaitPerReviewMs: number;
  webhookFloorWaitPerReviewMs: number;
}> {
  const ca = await createCertificateAuthority('bench-webhookfloor');
  const serving = await ca.issue({ commonName: '127.0.0.1', ipAddresses: ['127.0.0.1'], usage: 'server' });
  const file = (name: string, data: string | Buffer) => {
    writeFileSync(path.join(o.dir, name), data);
    return path.join(o.dir, name);
  };
  const apiserver = webhookClientArgs(o.sandbox, o.dir);
  const floor = spawn(
    o.floor,
    [
      `-cert=${file('floor.crt', serving.certPem)}`,
      `-key=${file('floor.key', serving.keyPem)}`,
      ...apiserver.floor,
      ...o.floorArgs,
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const kill = () => floor.kill();
  process.once('exit', kill);
  let load: { sentPerSecond: number; targets: [RateTarget, RateTarget] };
  let berthSched: Schedstat;
  let floorSched: Schedstat;
  try {
    const [floorUrl] = (await Promise.race([
      once(createInterface({ input: floor.stdout }), 'line'),
      once(floor, 'exit').then(([code]) => {
        throw new Error(`bench/webhookfloor exited with ${code}`);
      }),
    ])) as [string];
    berthSched = schedstat(o.berthPid, (name) => name === WEBHOOK_THREAD);
    floorSched = schedstat(floor.pid!);
    // Berth and the floor take turns of a second (-slice) rather than answering interleaved calls or
    // running one after the other: never loaded at once, neither's work (Berth's garbage collection,
    // its informers' events) lands in the other's latency on a 2-core machine, and noise slower than
    // a second (other processes, kwok) hits both alike.
    load = webhookLoad(o.generator, [
      `-url=${o.hook.url}`,
      `-url=${floorUrl}`,
      `-ca=${file('ca.pem', `${Buffer.from(o.hook.caBundle, 'base64').toString()}\n${ca.certPem}`)}`,
      ...apiserver.load,
      ...o.bodies.map((body, i) => `-body=${file(`review-${i}.json`, body)}`),
      `-rate=${o.rate}`,
      `-duration=${o.seconds}s`,
      '-slice=1s',
    ]);
    berthSched = since(
      berthSched,
      schedstat(o.berthPid, (name) => name === WEBHOOK_THREAD),
    );
    floorSched = since(floorSched, schedstat(floor.pid!));
  } finally {
    kill();
    process.off('exit', kill);
  }
  const [berth, floorHook] = load.targets;
  // A floor is one only if it answers what Berth does: the same patch to each review, but the time.
  const answer = (text: string) => {
    const r = (JSON.parse(text) as { response: { patch?: string } }).response;
    const patch = Buffer.from(r.patch ?? '', 'base64').toString();
    return { ...r, patch: patch && JSON.parse(patch.replace(/"\d{4}-\d\d-\d\dT[\d:.]+Z"/g, '"(time)"')) };
  };
  berth.answers.forEach((a, i) => {
    if (!isDeepStrictEqual(answer(a), answer(floorHook.answers[i]!)))
      throw new Error(`the floor answers ${floorHook.answers[i]} where Berth answers ${a}`);
  });
  const failed = (t: RateTarget) => t.refused.count + t.timeouts;
  const ms = (t: RateTarget) =>
    `${t.answered.count} answered: p50 ${t.answered.p50Ms} ms, p99 ${t.answered.p99Ms} ms, max ${t.answered.maxMs} ms; ${failed(t)} failed`;
  const ratio = round(berth.answered.p99Ms / floorHook.answered.p99Ms, 2);
  console.log(
    `webhook at ${o.rate}/s each (${load.sentPerSecond}/s sent), Berth and the floor taking turns of a second:`,
  );
  console.log(`  Berth: ${ms(berth)}`);
  console.log(`  floor: ${ms(floorHook)}`);
  console.log(`  p99 ratio ${ratio} (target ≤ 1.2), Berth's p99 ${berth.answered.p99Ms} ms (target ≤ 5 ms)`);
  // Whether a slow tail is the answer's own work or a wait for a core: the scheduler's account of
  // Berth's webhook thread and of the floor's threads over the whole load.
  const perReview = (s: Schedstat, t: RateTarget) => {
    const n = Math.max(1, t.answered.count);
    return {
      cpu: round(s.runMs / n, 3),
      wait: round(s.waitMs / n, 3),
      perWake: round(s.waitMs / Math.max(1, s.slices), 3),
    };
  };
  const b = perReview(berthSched, berth);
  const f = perReview(floorSched, floorHook);
  console.log(
    `  per review answered, on a core / waiting for one: Berth's webhook thread ${b.cpu} / ${b.wait} ms ` +
      `(${b.perWake} ms a wake-up), the floor's threads ${f.cpu} / ${f.wait} ms (${f.perWake} ms a wake-up)`,
  );
  return {
    webhookP99ms: berth.answered.p99Ms,
    webhookFloorP99ms: floorHook.answered.p99Ms,
    webhookRatio: ratio,
    webhookFailed: failed(berth),
    webhookCpuPerReviewMs: b.cpu,
    webhookFloorCpuPerReviewMs: f.cpu,
    webhookWaitPerReviewMs: b.wait,
    webhookFloorWaitPerReviewMs: f.wait,
  };
}

/** The flags a Go floor takes to reach the apiserver a client reaches: its URL and TLS material,
 *  written as files into `dir`. */
export async function goClientArgs(client: KubeClient, dir: string): Promise<string[]> {
  const { tls } = await client.access.resolve();
  const file = (name: string, data: Buffer | undefined) => {
    const p = path.join(dir, name);
    writeFileSync(p, data!);
    return p;
  };
  return [
    `-server=${client.server.origin}`,
    `-ca=${file('ca.crt', tls.ca)}`,
    `-cert=${file('client.crt', tls.cert)}`,
    `-key=${file('client.key', tls.key)}`,
  ];
}

/** A controller's work so far, read from Berth's metrics: its reconciles and its queue's waits. */
export interface ControllerWork {
  passes: number;
  reconcileSeconds: number;
  queued: number;
  queuedSeconds: number;
  /** workqueue_retries_total: as client-go counts it, every delayed add (a requeue after, a backoff). */
  retries: number;
  /** The process's PATCH requests (every controller's writes) and the seconds they took to answer. */
  patches: number;
  patchSeconds: number;
}

export async function controllerWork(
  berth: { metric(name: string, filter?: (labels: string) => boolean): Promise<number> },
  controller: string,
): Promise<ControllerWork> {
  // The closing quote: 'federation' must not count 'federation-mirror'.
  const of = (m: string) =>
    berth.metric(m, (l) => l.includes(`controller="${controller}"`) || l.includes(`name="${controller}"`));
  const patch = (m: string) => berth.metric(m, (l) => l.includes('verb="PATCH"'));
  const [passes, reconcileSeconds, queued, queuedSeconds, retries, patches, patchSeconds] = await Promise.all(
    [
      of('controller_runtime_reconcile_time_seconds_count'),
      of('controller_runtime_reconcile_time_seconds_sum'),
      of('workqueue_queue_duration_seconds_count'),
      of('workqueue_queue_duration_seconds_sum'),
      of('workqueue_retries_total'),
      patch('rest_client_request_duration_seconds_count'),
      patch('rest_client_request_duration_seconds_sum'),
    ],
  );
  return { passes, reconcileSeconds, queued, queuedSeconds, retries, patches, patchSeconds };
}

/**
 * Where a controller's time went between two readings (`before` omitted: since it started): its
 * passes, their mean, the mean wait of an item in its queue, and the mean answer to the process's
 * PATCHes (its writes), in ms. A queue that waits much longer than a pass takes has too few workers
 * for the passes' round trips; the reverse, slow passes, and slow PATCHes say the apiserver's answer.
 */
export function controllerMeans(now: ControllerWork, before?: ControllerWork) {
  const d = (k: keyof ControllerWork) => now[k] - (before?.[k] ?? 0);
  return {
    passes: d('passes'),
    reconcileMs: round((d('reconcileSeconds') / Math.max(1, d('passes'))) * 1000, 1),
    queuedMs: round((d('queuedSeconds') / Math.max(1, d('queued'))) * 1000, 1),
    retries: d('retries'),
    patches: d('patches'),
    patchMs: round((d('patchSeconds') / Math.max(1, d('patches'))) * 1000, 1),
  };
}

export const describeControllerMeans = (name: string, m: ReturnType<typeof controllerMeans>) =>
  `${name}: ${m.passes} passes, mean ${m.reconcileMs} ms, mean queue wait ${m.queuedMs} ms, ${m.retries} delayed re-adds (requeues and backoff); the process's ${m.patches} PATCHes answered in ${m.patchMs} ms on average`;

/**
 * CPU profiles of the apiserver (its /debug/pprof, served by a sandbox up with `profiling`) while a
 * phase runs: back-to-back profiles of PROFILE_SECONDS each (Go's profile handler takes its length
 * up front), saved as `DIR/<phase>-<n>.pb.gz`; `go tool pprof -top DIR/<phase>-*.pb.gz` reads them as one. `stop()`
 * waits for the one in flight, so a phase's profile runs at most PROFILE_SECONDS past its end.
 */
export function profileApiserver(client: KubeClient, dir: string | undefined, phase: string) {
  if (!dir) return { stop: async () => {} };
  mkdirSync(dir, { recursive: true });
  let running = true;
  const one = async (n: number) => {
    const { tls, headers } = await client.access.resolve();
    const url = new URL(`/debug/pprof/profile?seconds=${PROFILE_SECONDS}`, client.server);
    const res = await new Promise<IncomingMessage>((resolve, reject) =>
      https.get(url, { ...tls, headers }, resolve).on('error', reject),
    );
    const chunks: Buffer[] = [];
    for await (const c of res) chunks.push(c as Buffer);
    if (res.statusCode !== 200)
      throw new Error(`apiserver profile: ${res.statusCode} ${Buffer.concat(chunks)}`);
    writeFileSync(path.join(dir, `${phase}-${n}.pb.gz`), Buffer.concat(chunks));
  };
  const loop = (async () => {
    for (let n = 0; running; n++) await one(n);
  })();
  return {
    stop: async () => {
      running = false;
      await loop;
    },
  };
}
const PROFILE_SECONDS = 2;

/**
 * A NodeStartupGate on the nodes labelled `nodeLabel: gated`, released once the warm-up
 * DaemonSet's pod (in `namespace`, tolerating the gate's taint) is Ready on the node: the gate
 * benchmarks' workload.
 */
export async function createWarmupGate(
  client: KubeClient,
  o: { name: string; namespace: string; nodeLabel: string; taint: string },
): Promise<void> {
  await client.create(Resources.daemonSets, {
    apiVersion: 'apps/v1',
    kind: 'DaemonSet',
    metadata: { name: 'warmup', namespace: o.namespace },
    spec: {
      selector: { matchLabels: { app: 'warmup' } },
      template: {
        metadata: { labels: { app: 'warmup' } },
        spec: {
          nodeSelector: { [o.nodeLabel]: 'gated' },
          tolerations: [{ key: o.taint, operator: 'Exists', effect: 'NoSchedule' }],
          containers: [{ name: 'warm', image: 'registry.example/warmup:1' }],
        },
      },
    },
  });
  await client.create(NodeStartupGate.ref, {
    apiVersion: NodeStartupGate.apiVersion,
    kind: NodeStartupGate.kind,
    metadata: { name: o.name },
    spec: {
      taint: { key: o.taint, value: 'warmup', effect: 'NoSchedule' },
      nodeSelector: { matchLabels: { [o.nodeLabel]: 'gated' } },
      requirements: { pods: [{ namespace: o.namespace, daemonSet: 'warmup' }] },
    },
  });
}
