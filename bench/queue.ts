// Work queue throughput: adds of distinct keys into a named queue (metrics on), then get+done.
// Three rounds, each reported; the JSON gives the median and the slowest (not the best) of them.
// Last output line: {"addsPerSec": n, "getDonePerSec": n, "minAddsPerSec": n, "minGetDonePerSec": n}.
import { parseArgs } from 'node:util';
import { WorkQueue } from '../src/runtime/workqueue/queue.ts';

const { values } = parseArgs({ options: { keys: { type: 'string', default: '1000000' } } });
const N = Number(values.keys);
const ROUNDS = 3;
const keys = Array.from({ length: N }, (_, i) => `namespace-${i % 100}/object-${i}`);

function rate(count: number, ms: number): number {
  return Math.round((count / ms) * 1000);
}

const adds: number[] = [];
const getDones: number[] = [];
for (let round = 1; round <= ROUNDS; round++) {
  const queue = new WorkQueue({ name: `bench-queue-${round}` });

  let start = performance.now();
  for (const key of keys) queue.add(key);
  const addMs = performance.now() - start;

  start = performance.now();
  for (let i = 0; i < N; i++) {
    const item = await queue.get();
    if (item.shutdown) throw new Error('queue shut down early');
    queue.done(item.key);
  }
  const getDoneMs = performance.now() - start;
  queue.shutDown();

  adds.push(rate(N, addMs));
  getDones.push(rate(N, getDoneMs));
  console.log(
    `round ${round}: ${N.toLocaleString('en')} adds in ${addMs.toFixed(1)} ms (${adds.at(-1)!.toLocaleString('en')}/s), ` +
      `get+done in ${getDoneMs.toFixed(1)} ms (${getDones.at(-1)!.toLocaleString('en')}/s)`,
  );
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
console.log(
  `median of ${ROUNDS}: ${median(adds).toLocaleString('en')} adds/s, ${median(getDones).toLocaleString('en')} get+done/s ` +
    `(slowest ${Math.min(...adds).toLocaleString('en')} and ${Math.min(...getDones).toLocaleString('en')})`,
);
console.log(
  JSON.stringify({
    addsPerSec: median(adds),
    getDonePerSec: median(getDones),
    minAddsPerSec: Math.min(...adds),
    minGetDonePerSec: Math.min(...getDones),
  }),
);
