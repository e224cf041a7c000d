// Shared pieces of the benchmarks: a private sandbox, percentiles, memory, bounded concurrency.
// Berth runs as its own process through test/helpers/berth.ts, which the tests share.
import { abortOnSignals, Sandbox } from '../src/sandbox/sandbox.ts';
import type { NodeGroupInput } from '../src/sandbox/nodes.ts';

/** A fresh sandbox of its own, so a benchmark never disturbs (or is disturbed by) another cluster. */
export async function benchSandbox(name: string, nodes: NodeGroupInput[] = []): Promise<Sandbox> {
  const sb = new Sandbox(name);
  const started = performance.now();
  // Ctrl-C while the sandbox builds or starts stops whatever the start-up launched.
  const interrupt = abortOnSignals();
  await sb
    .up({
      fresh: true,
      nodes,
      timeoutMs: 900_000,
      log: (s) => console.log(`  ${s}`),
      signal: interrupt.signal,
    })
    .finally(interrupt.release);
  console.log(`sandbox ${name} ready in ${((performance.now() - started) / 1000).toFixed(1)} s`);
  // A benchmark that fails unexpectedly still takes its sandbox down: a thousand kwok nodes left
  // running would load every later run on the machine.
  const crash = (e: unknown) => {
    console.error(e);
    void sb.destroy().finally(() => process.exit(1));
  };
  process.once('uncaughtException', crash).once('unhandledRejection', crash);
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

/**
 * Prints a benchmark's result as one JSON object: call it after the cleanup, so that the object is
 * the last line printed whatever the cleanup logs (the README promises it to scripts that read it).
 */
export function report(result: object | undefined): void {
  if (result) console.log(JSON.stringify(result));
}
