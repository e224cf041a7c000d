// Waiting in the sandbox: for a condition until a deadline, and for Ctrl-C while a long step runs.

export class WaitTimeout extends Error {
  override name = 'WaitTimeout';
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Polls `check` every 100 ms until it holds; `WaitTimeout` past the deadline, the signal's reason once aborted. */
export async function waitFor(
  what: string,
  deadline: number,
  signal: AbortSignal | undefined,
  check: () => Promise<boolean>,
): Promise<void> {
  while (!(await check())) {
    signal?.throwIfAborted();
    if (Date.now() > deadline) throw new WaitTimeout(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

/**
 * An AbortSignal that SIGINT or SIGTERM aborts while a long step runs (a build, a start-up), so
 * that Ctrl-C stops what the step launched instead of leaving it running; `release` restores the
 * default handling.
 */
export function abortOnSignals(): { signal: AbortSignal; release(): void } {
  const ac = new AbortController();
  const signals = ['SIGINT', 'SIGTERM'] as const;
  // A second Ctrl-C while the first one's clean-up runs must not cut that clean-up short.
  const onSignal = (sig: NodeJS.Signals) => ac.abort(new Error(`interrupted by ${sig}`));
  for (const s of signals) process.on(s, onSignal);
  return { signal: ac.signal, release: () => signals.forEach((s) => process.off(s, onSignal)) };
}
