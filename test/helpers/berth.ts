// `berth run` as its own process against a sandbox, as it runs in a cluster: for integration tests
// and benchmarks that drive Berth the way a user does.
import { PolicyKit } from '../../src/policy/kit.ts';
import { spawn, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { AgentsController } from '../../src/agents/controller.ts';
import { GatesController } from '../../src/gates/controller.ts';
import { NodeStartupGate } from '../../src/gates/types.ts';
import { LabelsController } from '../../src/labels/controller.ts';
import { NAMESPACE } from '../../src/policy/namespace.ts';
import type { KubeClient } from '../../src/runtime/client/client.ts';
import type { ResourceRef } from '../../src/runtime/api/meta.ts';
import { Manager } from '../../src/runtime/manager/manager.ts';
import { packageRoot } from '../../src/sandbox/paths.ts';
import { freePorts, type Sandbox } from '../../src/sandbox/sandbox.ts';
import { deleteNodes } from './cluster.ts';
import { waitFor } from './wait.ts';

export interface BerthProcess {
  pid: number;
  healthPort: number;
  metricsPort: number;
  /** The sum of a metric's samples whose label text passes `filter`. */
  metric(name: string, filter?: (labels: string) => boolean): Promise<number>;
  /** What Berth printed so far (only with `capture`). */
  output(): string;
  rssMB(): number;
  stop(): Promise<void>;
}

export interface StartOptions {
  /** Keep Berth's stdout and stderr for output() instead of passing them through. */
  capture?: boolean;
  /** Return once /readyz answers 200 (default); otherwise as soon as /healthz does. */
  waitReady?: boolean;
}

export async function startBerth(
  sb: Sandbox,
  args: string[],
  opts: StartOptions = {},
): Promise<BerthProcess> {
  const [metricsPort, healthPort] = (await freePorts(2)) as [number, number];
  const child = spawn(
    process.execPath,
    [
      // BERTH_BENCH_CPU_PROF=DIR writes a V8 CPU profile of Berth to DIR when it stops.
      ...(process.env['BERTH_BENCH_CPU_PROF']
        ? ['--cpu-prof', `--cpu-prof-dir=${process.env['BERTH_BENCH_CPU_PROF']}`]
        : []),
      `${packageRoot()}/src/cli/main.ts`,
      'run',
      `--kubeconfig=${sb.kubeconfigPath}`,
      `--metrics-bind-address=127.0.0.1:${metricsPort}`,
      `--health-probe-bind-address=127.0.0.1:${healthPort}`,
      // A free port, so that several Berths (tests in parallel) never collide on the default one.
      '--webhook-bind-address=127.0.0.1:0',
      // The page is off unless a test asks for it (with its own free port, after these).
      '--ui-bind-address=0',
      '--log-level=warn',
      ...args,
    ],
    { stdio: ['ignore', opts.capture ? 'pipe' : 'inherit', opts.capture ? 'pipe' : 'inherit'] },
  );
  // A test or benchmark that dies (its sandbox torn down by its crash handler) takes Berth along:
  // left running, it would retry a gone apiserver and load every later run on the machine.
  const orphaned = () => child.kill('SIGTERM');
  process.once('exit', orphaned);
  child.once('exit', () => process.off('exit', orphaned));
  let out = '';
  child.stdout?.on('data', (d: Buffer) => (out += d));
  child.stderr?.on('data', (d: Buffer) => (out += d));
  const stop = async () => {
    if (child.exitCode !== null) return;
    child.kill('SIGTERM');
    await new Promise((r) => child.once('exit', r));
  };
  const probe = opts.waitReady === false ? 'healthz' : 'readyz';
  try {
    while (
      !(await fetch(`http://127.0.0.1:${healthPort}/${probe}`).then(
        (r) => r.ok,
        () => false,
      ))
    ) {
      if (child.exitCode !== null) throw new Error(`berth exited with ${child.exitCode}\n${out}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  } catch (e) {
    await stop();
    throw e;
  }
  return {
    pid: child.pid!,
    healthPort,
    metricsPort,
    async metric(name, filter = () => true) {
      const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
      return text
        .split('\n')
        .filter((l) => l.startsWith(`${name}{`) && filter(l))
        .reduce((a, l) => a + Number(l.split(' ').pop()), 0);
    },
    output: () => out,
    rssMB: () =>
      Math.round(
        Number(readFileSync(`/proc/${child.pid}/status`, 'utf8').match(/VmRSS:\s+(\d+)/)![1]) / 102.4,
      ) / 10,
    stop,
  };
}

/** A berth command as a user runs it, to its end; `env` adds to this process's environment. */
export function runBerthCli(
  args: string[],
  env: NodeJS.ProcessEnv = {},
): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [`${packageRoot()}/src/cli/main.ts`, ...args], {
    encoding: 'utf8',
    timeout: 120_000,
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
  new LabelsController(kit, { workers: 4 });
  new GatesController(kit, { workers: 4 });
  new AgentsController(kit, { workers: 4, berthNamespace: NAMESPACE });
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
