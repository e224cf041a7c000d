import { inspect } from 'node:util';

export interface WaitOptions {
  timeoutMs?: number;
  intervalMs?: number;
}

/**
 * Polls `probe` until it returns something other than undefined/false, and returns that.
 * On timeout the error shows `what` and the last value `observe` saw (or the probe's last error),
 * so a failing test says what the cluster looked like rather than only "timed out".
 */
export async function waitFor<T>(
  what: string,
  probe: () => Promise<T | undefined | false> | T | undefined | false,
  opts: WaitOptions & { observe?: () => Promise<unknown> | unknown } = {},
): Promise<T> {
  const timeoutMs = opts.timeoutMs ?? 30_000;
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    try {
      const v = await probe();
      if (v !== undefined && v !== false) return v;
      lastError = undefined;
    } catch (e) {
      lastError = e;
    }
    if (Date.now() > deadline) break;
    await sleep(opts.intervalMs ?? 100);
  }
  let observed: unknown = lastError;
  if (opts.observe) {
    try {
      observed = await opts.observe();
    } catch (e) {
      observed = e;
    }
  }
  throw new Error(
    `timed out after ${timeoutMs} ms waiting for ${what}; last observed:\n${inspect(observed, { depth: 6 })}`,
  );
}

/** Asserts that `probe` stays true for `forMs` (checks every intervalMs). */
export async function holdsFor(
  what: string,
  probe: () => Promise<boolean> | boolean,
  forMs: number,
  intervalMs = 100,
) {
  const until = Date.now() + forMs;
  while (Date.now() < until) {
    if (!(await probe())) throw new Error(`expected ${what} to hold for ${forMs} ms, but it stopped holding`);
    await sleep(intervalMs);
  }
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Waits until `read` answers the same (compared as JSON) for `quietMs`, and returns that answer: a
 * state settled, whatever write was still landing when the wait began. One that never settles
 * times out, as a loop rewriting an object would. It absorbs any finite run of writes: where the
 * awaited state alone determines the object, hold it right after the wait instead (holdsFor).
 */
export async function settles<T>(
  what: string,
  read: () => Promise<T>,
  opts: WaitOptions & { quietMs?: number } = {},
): Promise<T> {
  const quietMs = opts.quietMs ?? 1000;
  let last: { seen: string | undefined; since: number; value: T } | undefined;
  let failed: unknown;
  const settled = await waitFor(
    `${what} to settle (the same for ${quietMs} ms)`,
    async () => {
      const value = await read().catch((e: unknown) => {
        failed = e;
        throw e;
      });
      failed = undefined;
      const seen = JSON.stringify(value);
      if (last === undefined || seen !== last.seen) last = { seen, since: Date.now(), value };
      return Date.now() - last.since >= quietMs && { value: last.value };
    },
    { ...opts, observe: () => failed ?? last?.value },
  );
  return settled.value;
}

/**
 * Once `read` settles (settles), asserts it stays the same for `forMs`: nothing is rewritten while
 * nothing changes, told apart from the last write of a change that has just happened.
 */
export async function unchangedFor<T>(what: string, read: () => Promise<T>, forMs: number): Promise<void> {
  const settled = JSON.stringify(await settles(what, read));
  await holdsFor(what, async () => JSON.stringify(await read()) === settled, forMs);
}
