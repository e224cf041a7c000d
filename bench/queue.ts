// Work queue throughput: adds of distinct keys into a named queue (metrics on), then get+done.
// Last output line: {"addsPerSec": n, "getDonePerSec": n}.
import { WorkQueue } from '../src/runtime/workqueue.ts';

const N = 1_000_000;
const ROUNDS = 3;
const keys = Array.from({ length: N }, (_, i) => `namespace-${i % 100}/object-${i}`);

function rate(count: number, ms: number): number {
  return Math.round((count / ms) * 1000);
}

let bestAdds = 0;
let bestGetDone = 0;
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

  const adds = rate(N, addMs);
  const getDone = rate(N, getDoneMs);
  console.log(
    `round ${round}: ${N.toLocaleString('en')} adds in ${addMs.toFixed(1)} ms (${adds.toLocaleString('en')}/s), ` +
      `get+done in ${getDoneMs.toFixed(1)} ms (${getDone.toLocaleString('en')}/s)`,
  );
  bestAdds = Math.max(bestAdds, adds);
  bestGetDone = Math.max(bestGetDone, getDone);
}

console.log(
  `best of ${ROUNDS}: ${bestAdds.toLocaleString('en')} adds/s, ${bestGetDone.toLocaleString('en')} get+done/s`,
);
console.log(JSON.stringify({ addsPerSec: bestAdds, getDonePerSec: bestGetDone }));
