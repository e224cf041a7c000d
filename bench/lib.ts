// Shared pieces of the benchmarks: a private sandbox, percentiles, memory, bounded concurrency.
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { packageRoot } from '../src/sandbox/paths.ts';
import { freePorts, Sandbox } from '../src/sandbox/sandbox.ts';
import type { NodeGroupInput } from '../src/sandbox/nodes.ts';

/** A fresh sandbox of its own, so a benchmark never disturbs (or is disturbed by) another cluster. */
export async function benchSandbox(name: string, nodes: NodeGroupInput[] = []): Promise<Sandbox> {
  const sb = new Sandbox(name);
  const started = performance.now();
  await sb.up({ fresh: true, nodes, timeoutMs: 900_000, log: (s) => console.log(`  ${s}`) });
  console.log(`sandbox ${name} ready in ${((performance.now() - started) / 1000).toFixed(1)} s`);
  return sb;
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

/** Berth run as its own process against a sandbox, as it would run in a cluster. */
export interface BerthProcess {
  pid: number;
  /** The sum of a metric's samples whose label text passes `filter`. */
  metric(name: string, filter?: (labels: string) => boolean): Promise<number>;
  rssMB(): number;
  stop(): Promise<void>;
}

export async function startBerth(sb: Sandbox, args: string[]): Promise<BerthProcess> {
  const [metricsPort, healthPort] = await freePorts(2);
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
      '--log-level=warn',
      ...args,
    ],
    { stdio: ['ignore', 'inherit', 'inherit'] },
  );
  const stop = async () => {
    if (child.exitCode !== null) return;
    child.kill('SIGTERM');
    await new Promise((r) => child.once('exit', r));
  };
  try {
    while (
      !(await fetch(`http://127.0.0.1:${healthPort}/readyz`).then(
        (r) => r.ok,
        () => false,
      ))
    ) {
      if (child.exitCode !== null) throw new Error(`berth exited with ${child.exitCode}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  } catch (e) {
    await stop();
    throw e;
  }
  return {
    pid: child.pid!,
    async metric(name, filter = () => true) {
      const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
      return text
        .split('\n')
        .filter((l) => l.startsWith(`${name}{`) && filter(l))
        .reduce((a, l) => a + Number(l.split(' ').pop()), 0);
    },
    rssMB: () =>
      round(Number(readFileSync(`/proc/${child.pid}/status`, 'utf8').match(/VmRSS:\s+(\d+)/)![1]) / 1024),
    stop,
  };
}
