// A seeded pseudo-random generator for fuzz tests: a failure names its seed, and
// BERTH_FUZZ_SEED=<seed> replays exactly the same cases.
import { randomInt } from 'node:crypto';

export interface Prng {
  readonly seed: number;
  /** A float in [0, 1). */
  next(): number;
  /** An integer in [0, n). */
  int(n: number): number;
  pick<T>(items: readonly T[]): T;
  /** True with probability p. */
  chance(p: number): boolean;
}

/** mulberry32: small, fast and good enough to spread test cases. */
export function prng(seed: number = Number(process.env['BERTH_FUZZ_SEED'] ?? randomInt(2 ** 31))): Prng {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const int = (n: number) => Math.floor(next() * n);
  return { seed, next, int, pick: (items) => items[int(items.length)]!, chance: (p) => next() < p };
}

/** Runs fn with a fresh generator; a failure is rethrown with the seed that replays it. */
export async function withSeed<T>(what: string, fn: (r: Prng) => T | Promise<T>): Promise<T> {
  const r = prng();
  try {
    return await fn(r);
  } catch (e) {
    if (e instanceof Error) e.message = `${what} (replay with BERTH_FUZZ_SEED=${r.seed}): ${e.message}`;
    throw e;
  }
}
