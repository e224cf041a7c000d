// `berth run` as its own process against a sandbox, as it runs in a cluster: for integration tests
// and benchmarks that drive Berth the way a user does. Berth runs with its own identity, a
// ServiceAccount bound only to the roles `berth manifests` generates, never with the admin's.
import { PolicyKit } from '../../src/policy/kit.ts';
import { spawn, spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { parse } from 'yaml';
import { setupAgents } from '../../src/agents/setup.ts';
import { setupGates } from '../../src/gates/setup.ts';
import { NodeStartupGate } from '../../src/gates/crd.ts';
import { setupLabels } from '../../src/labels/setup.ts';
import { capabilities } from '../../src/capabilities.ts';
import type { Capability } from '../../src/capability.ts';
import { installPodPatchPolicy, installWebhookConfigurations } from '../../src/cli/install.ts';
import { podPatchPolicyManifests, rbacManifests, type RbacOptions } from '../../src/manifests.ts';
import { NAMESPACE, SERVICE_ACCOUNT, WEBHOOK_CONFIGURATION } from '../../src/policy/namespace.ts';
import { KubeClient } from '../../src/runtime/client/client.ts';
import { resourceOfKind, Resources, type ResourceRef } from '../../src/runtime/api/meta.ts';
import { Manager } from '../../src/runtime/manager/manager.ts';
import { emptyWebhookConfigurations } from '../../src/runtime/webhook/registration.ts';
import { berthRunArgs, BERTH_MAIN } from '../../src/sandbox/berth.ts';
import { packageRoot } from '../../src/sandbox/paths.ts';
import { freePorts } from '../../src/sandbox/net.ts';
import type { Sandbox } from '../../src/sandbox/sandbox.ts';
import { deleteNodes } from './cluster.ts';
import { waitFor } from './wait.ts';

export interface BerthProcess {
  pid: number;
  healthPort: number;
  metricsPort: number;
  /** The page's port, with `page`. */
  uiPort?: number;
  /** The sum of a metric's samples whose label text passes `filter`. */
  metric(name: string, filter?: (labels: string) => boolean): Promise<number>;
  /** What Berth printed so far. */
  output(): string;
  rssMB(): number;
  /** Settles with the exit code once the process has exited, however it ended. */
  exited: Promise<number | null>;
  stop(): Promise<void>;
}

// Identities minted by this process, minted once each: a test that counts the requests its process
// sends (a restart that must write nothing) does not count the minting of a controller it restarts.
const identities = new Map<string, Promise<string>>();

/**
 * The roles of a test's Berth: as `opts` say, with workloads in every namespace unless they say
 * where (each test makes namespaces of its own, and a cell's come from its management plane).
 */
const testRbac = (opts: RbacOptions): RbacOptions => ({ workloadNamespaces: ['*'], ...opts });

/**
 * The kubeconfig of Berth's identity in the sandbox: the ServiceAccount of the roles that manifests.ts
 * generates with `opts` for `caps`, bound exactly to them (a test that runs its own webhook
 * configuration, owner kinds or capabilities names them in `opts`, with a `name` of its own). Its
 * webhook configurations are created empty and its Pod patch policy applied, as the install does,
 * at every call: a test may have deleted them since.
 */
export async function berthKubeconfig(
  sb: Sandbox,
  opts: RbacOptions = {},
  caps: Capability[] = capabilities,
): Promise<string> {
  const key = JSON.stringify([sb.dir, opts, caps.map((c) => c.name)]);
  let minted = identities.get(key);
  if (!minted) {
    minted = sb.mintServiceAccount(rbacManifests(caps, testRbac(opts)));
    // A failed mint is not kept: the next caller tries again.
    minted.catch(() => identities.delete(key));
    identities.set(key, minted);
  }
  await installAsAdmin(sb, opts);
  return minted;
}

/**
 * What the install creates beside the roles: the empty webhook configurations Berth patches its
 * webhooks into, and the policy that bounds its Pod patches. Read first, written only when one is
 * missing: this process's writes count in the tests that assert a restarted controller writes nothing.
 */
async function installAsAdmin(sb: Sandbox, opts: RbacOptions): Promise<void> {
  const admin = sb.client();
  try {
    const objects = [
      ...emptyWebhookConfigurations(opts.webhookConfiguration ?? WEBHOOK_CONFIGURATION),
      ...podPatchPolicyManifests(opts),
    ];
    const present = await Promise.all(
      objects.map((o) =>
        admin.get(resourceOfKind(o.kind!), o.metadata!.name!).then(
          () => true,
          () => false,
        ),
      ),
    );
    if (present.every(Boolean)) return;
    await installWebhookConfigurations(admin, undefined, opts.webhookConfiguration);
    await installPodPatchPolicy(admin, undefined, opts);
  } finally {
    admin.close();
  }
}

/** A client with Berth's identity: what Berth's controllers run with in a test of this process. */
export async function berthClient(sb: Sandbox, opts: RbacOptions = {}): Promise<KubeClient> {
  return KubeClient.fromFile(await berthKubeconfig(sb, opts));
}

/** Removes an identity minted with a `name` of its own: its roles, their bindings, its Pod patch policy and its ServiceAccount. */
export async function removeBerthIdentity(admin: KubeClient, opts: RbacOptions): Promise<void> {
  for (const key of identities.keys())
    if ((JSON.parse(key) as [string, RbacOptions])[1].name === opts.name) identities.delete(key);
  const name = opts.name ?? SERVICE_ACCOUNT;
  const namespace = opts.namespace ?? NAMESPACE;
  for (const o of [...rbacManifests(capabilities, testRbac(opts)), ...podPatchPolicyManifests(opts)]) {
    await admin.delete(resourceOfKind(o.kind!), o.metadata!.name!, o.metadata!.namespace).catch(() => {});
  }
  await admin.delete(Resources.serviceAccounts, name, namespace).catch(() => {});
}

export interface StartOptions {
  /** The kubeconfig Berth runs with (default: its own identity, berthKubeconfig with the default roles). */
  kubeconfig?: string;
  /** Keep Berth's stdout and stderr for output() instead of passing them through. */
  capture?: boolean;
  /** Return once /readyz answers 200 (default); otherwise as soon as /healthz does. */
  waitReady?: boolean;
  /**
   * Run Berth as its image does: the compiled dist/ (npm run build first) with the Node flags of the
   * Dockerfile's ENTRYPOINT and the environment of its ENV lines. Otherwise the TypeScript sources,
   * as a checkout runs them.
   */
  compiled?: boolean;
  /**
   * The Node flags and environment of the image, on the TypeScript sources (implied by
   * `compiled`): for a benchmark of latency, where what the flags do to garbage collection shows,
   * without a build first.
   */
  imageRuntime?: boolean;
  /** Stop Berth and fail if it is not ready (or healthy, without waitReady) within this many ms. */
  readyWithinMs?: number;
  /** Serve the page, on a free port of its own (BerthProcess.uiPort). */
  page?: boolean;
}

interface Ports {
  metrics: number;
  health: number;
  ui?: number;
}

/** Whether Berth failed to bind one of the ports picked for it (not one a caller named). */
const portTaken = (e: unknown, p: Ports) =>
  e instanceof Error &&
  [p.metrics, p.health, p.ui].some(
    (n) => n && new RegExp(`EADDRINUSE.*127\\.0\\.0\\.1:${n}\\b`).test(e.message),
  );

/**
 * Berth on ports picked free: started again on others (up to three times) when one was taken
 * between the pick and Berth's bind, a race every process on the machine can win.
 */
export async function startBerth(
  sb: Sandbox,
  args: string[],
  opts: StartOptions = {},
): Promise<BerthProcess> {
  for (let attempt = 1; ; attempt++) {
    const [metrics, health, ui] = (await freePorts(opts.page ? 3 : 2)) as [number, number, number?];
    const ports: Ports = { metrics, health, ...(ui ? { ui } : {}) };
    try {
      return await startOn(ports, sb, args, opts);
    } catch (e) {
      if (attempt >= 3 || !portTaken(e, ports)) throw e;
    }
  }
}

const dockerfile = () => readFileSync(`${packageRoot()}/Dockerfile`, 'utf8');

/** The Node flags of the image: what the Dockerfile's ENTRYPOINT puts between `node` and Berth's main. */
export function imageNodeFlags(): string[] {
  const line = dockerfile().match(/^ENTRYPOINT (\[.*\])$/m);
  if (!line) throw new Error('the Dockerfile has no ENTRYPOINT in exec form');
  const argv = JSON.parse(line[1]!) as string[];
  return argv.slice(1, argv.indexOf('dist/cli/main.js'));
}

/** The environment the image sets: the Dockerfile's `ENV NAME=value` lines. */
export function imageEnv(): Record<string, string> {
  return Object.fromEntries([...dockerfile().matchAll(/^ENV (\w+)=(\S+)$/gm)].map((m) => [m[1]!, m[2]!]));
}

/**
 * The kubeconfig as JSON, beside it. In a pod Berth reads its service account and no YAML; a Berth
 * run as the image is given a kubeconfig it reads without the YAML library (decision 0021).
 */
function jsonKubeconfig(file: string): string {
  const json = `${file}.json`;
  writeFileSync(json, JSON.stringify(parse(readFileSync(file, 'utf8'))), { mode: 0o600 });
  return json;
}

async function startOn(ports: Ports, sb: Sandbox, args: string[], opts: StartOptions): Promise<BerthProcess> {
  const image = opts.compiled || opts.imageRuntime;
  const given = opts.kubeconfig ?? (await berthKubeconfig(sb));
  const kubeconfig = image ? jsonKubeconfig(given) : given;
  const { metrics: metricsPort, health: healthPort, ui: uiPort } = ports;
  const page = uiPort ? [`--ui-bind-address=127.0.0.1:${uiPort}`] : [];
  const child = spawn(
    process.execPath,
    [
      // BERTH_BENCH_CPU_PROF=DIR writes a V8 CPU profile of Berth to DIR when it stops.
      ...(process.env['BERTH_BENCH_CPU_PROF']
        ? ['--cpu-prof', `--cpu-prof-dir=${process.env['BERTH_BENCH_CPU_PROF']}`]
        : []),
      ...(image ? imageNodeFlags() : []),
      // The page is off unless a test asks for it (with its own free port, in `args`).
      ...berthRunArgs(
        kubeconfig,
        { metrics: metricsPort, health: healthPort },
        ['--log-level=warn', ...page, ...args],
        {
          ...(opts.compiled ? { main: `${packageRoot()}/dist/cli/main.js` } : {}),
          webhookClientCa: sb.webhookClientCa,
        },
      ),
    ],
    {
      // Read always (a bind that failed is told by its output), passed through unless captured.
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, ...(image ? imageEnv() : {}) },
    },
  );
  // A test or benchmark that dies (its sandbox torn down by its crash handler) takes Berth along:
  // left running, it would retry a gone apiserver and load every later run on the machine.
  const orphaned = () => child.kill('SIGTERM');
  process.once('exit', orphaned);
  const exited = new Promise<number | null>((resolve) =>
    child.once('exit', (code) => {
      process.off('exit', orphaned);
      resolve(code);
    }),
  );
  let out = '';
  const keep = (to: NodeJS.WriteStream) => (d: Buffer) => {
    out += d;
    if (!opts.capture) to.write(d);
  };
  child.stdout.on('data', keep(process.stdout));
  child.stderr.on('data', keep(process.stderr));
  const stop = async () => {
    if (child.exitCode !== null) return;
    child.kill('SIGTERM');
    await exited;
  };
  const probe = opts.waitReady === false ? 'healthz' : 'readyz';
  const deadline = performance.now() + (opts.readyWithinMs ?? Infinity);
  try {
    while (
      !(await fetch(`http://127.0.0.1:${healthPort}/${probe}`).then(
        (r) => r.ok,
        () => false,
      ))
    ) {
      if (child.exitCode !== null) throw new Error(`berth exited with ${child.exitCode}\n${out}`);
      if (performance.now() > deadline)
        throw new Error(`berth neither ${probe} nor exited within ${opts.readyWithinMs} ms\n${out}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  } catch (e) {
    await stop();
    throw e;
  }
  // One scrape at a time, each begun after its reading asked (so never stale), on one connection as
  // Prometheus scrapes: a benchmark's burst of readings at once would open more connections than
  // Berth allows one address.
  let last: Promise<unknown> = Promise.resolve();
  const scrape = () => {
    const text = last.then(() => fetch(`http://127.0.0.1:${metricsPort}/metrics`).then((r) => r.text()));
    last = text.catch(() => undefined);
    return text;
  };
  return {
    pid: child.pid!,
    healthPort,
    metricsPort,
    ...(uiPort ? { uiPort } : {}),
    async metric(name, filter = () => true) {
      const text = await scrape();
      return text
        .split('\n')
        .filter((l) => (l.startsWith(`${name}{`) || l.startsWith(`${name} `)) && filter(l))
        .reduce((a, l) => a + Number(l.split(' ').pop()), 0);
    },
    output: () => out,
    exited,
    rssMB: () =>
      Math.round(
        Number(readFileSync(`/proc/${child.pid}/status`, 'utf8').match(/VmRSS:\s+(\d+)/)![1]) / 102.4,
      ) / 10,
    stop,
  };
}

/**
 * A berth command as a user runs it, to its end (killed past `timeoutMs`); `env` adds to this
 * process's environment.
 */
export function runBerthCli(
  args: string[],
  env: NodeJS.ProcessEnv = {},
  timeoutMs = 120_000,
): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [BERTH_MAIN, ...args], {
    encoding: 'utf8',
    timeout: timeoutMs,
    env: { ...process.env, ...env },
  });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

/**
 * Every capability's controllers in one manager of this test process, started and synced: for tests
 * of how the capabilities behave together (ownership, the loop breaker). Such a file runs alone
 * (`test-driver: alone`), since its controllers act on every policy in the cluster.
 */
export async function everyCapability(client: KubeClient): Promise<PolicyKit> {
  const manager = new Manager({
    client,
    metricsBindAddress: '0',
    healthBindAddress: '0',
  });
  const kit = new PolicyKit(manager);
  setupLabels(kit, { workers: 4 });
  setupGates(kit, { workers: 4 });
  setupAgents(kit, { workers: 4, berthNamespace: NAMESPACE });
  await manager.start();
  await manager.waitForCacheSync();
  return kit;
}

/**
 * Removes what a test of every capability created: nodes first, so that deleted gates have nothing
 * left to give back (whatever the loop breaker holds), then the policies, waiting for the gates'
 * finalizers; then the manager stops.
 */
export async function removeEverything(
  client: KubeClient,
  manager: Manager | undefined,
  nodes: string[],
  created: { ref: ResourceRef; name: string }[],
): Promise<void> {
  await deleteNodes(client, nodes);
  for (const o of created) await client.delete(o.ref, o.name).catch(() => {});
  await waitFor('the gates gone', async () => {
    const left = (await client.list(NodeStartupGate.ref)).items.filter((g) =>
      created.some((o) => o.name === g.metadata!.name),
    );
    return left.length === 0;
  }).catch(() => {});
  await manager?.stop();
}
