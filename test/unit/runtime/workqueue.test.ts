import { spawnSync } from 'node:child_process';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { setImmediate, setTimeout as sleep } from 'node:timers/promises';
import { registry } from '../../../src/runtime/observability/metrics.ts';
import { WorkQueue, type GetResult } from '../../../src/runtime/workqueue/queue.ts';
import {
  BucketRateLimiter,
  ItemExponentialFailureRateLimiter,
  MaxOfRateLimiter,
  defaultControllerRateLimiter,
  type RateLimiter,
} from '../../../src/runtime/workqueue/ratelimiter.ts';

// A broken queue tends to leave a get() pending forever; fail fast instead.
const timeout = { timeout: 10_000 };

function fakeClock(start = 1000) {
  return {
    t: start,
    now() {
      return this.t;
    },
  };
}

/** Whether the promise settles within a turn of the event loop. */
async function settles(p: Promise<unknown>): Promise<boolean> {
  let settled = false;
  void p.then(() => (settled = true));
  await setImmediate();
  return settled;
}

async function getKey<K>(q: WorkQueue<K>): Promise<K> {
  const item = await q.get();
  assert.equal(item.shutdown, false, 'expected a key, got shutdown');
  return (item as { key: K }).key;
}

/** Every key the queue still hands out, then asserts it reports shutdown. */
async function drainAfterShutDown<K>(q: WorkQueue<K>): Promise<K[]> {
  q.shutDown();
  const keys: K[] = [];
  for (let item: GetResult<K> = await q.get(); !item.shutdown; item = await q.get()) {
    keys.push(item.key);
    q.done(item.key);
  }
  return keys;
}

test('a key added several times before get is handed out once', timeout, async () => {
  const q = new WorkQueue();
  q.add('ns/a');
  q.add('ns/a');
  q.add('ns/a');
  assert.equal(q.len(), 1);
  assert.equal(await getKey(q), 'ns/a');
  q.done('ns/a');
  assert.deepEqual(await drainAfterShutDown(q), []);
});

test('distinct keys are handed out in FIFO order', timeout, async () => {
  const q = new WorkQueue();
  for (const key of ['c', 'a', 'd', 'b']) q.add(key);
  assert.deepEqual(await drainAfterShutDown(q), ['c', 'a', 'd', 'b']);
});

test('FIFO order holds across the ring buffer growing, wrapping and shrinking', timeout, async () => {
  const q = new WorkQueue<number>();
  const expected: number[] = [];
  let next = 0;
  // Interleave adds and gets so the head wraps around several capacities.
  for (let round = 0; round < 5; round++) {
    for (let i = 0; i < 3000; i++) q.add(next++);
    for (let i = 0; i < 2000; i++) {
      const key = await getKey(q);
      expected.push(key);
      q.done(key);
    }
  }
  expected.push(...(await drainAfterShutDown(q)));
  assert.deepEqual(
    expected,
    Array.from({ length: next }, (_, i) => i),
  );
});

test('a key being processed is not handed to a second worker until done', timeout, async () => {
  const q = new WorkQueue();
  q.add('ns/a');
  assert.equal(await getKey(q), 'ns/a');
  q.add('ns/a');
  q.add('ns/a');
  assert.equal(q.len(), 0, 'a key being processed waits outside the queue');
  const second = q.get();
  assert.equal(await settles(second), false, 'second worker received the key while it was processing');
  q.done('ns/a');
  assert.deepEqual(await second, { key: 'ns/a', shutdown: false });
  q.done('ns/a');
  assert.deepEqual(await drainAfterShutDown(q), [], 'the key was delivered more than once after done');
});

test(
  'a key added 10,000 times during its slow reconcile is reconciled at most twice afterwards',
  timeout,
  async () => {
    const q = new WorkQueue();
    const firstStarted = Promise.withResolvers<void>();
    const burstDone = Promise.withResolvers<void>();
    let burstStarted = false;
    let afterBurst = 0;
    let active = 0;
    let maxActive = 0;
    const worker = async () => {
      while (true) {
        const item = await q.get();
        if (item.shutdown) return;
        active++;
        maxActive = Math.max(maxActive, active);
        if (burstStarted) afterBurst++;
        firstStarted.resolve();
        // A slow reconcile that also outlasts the burst, however slow the machine.
        await Promise.all([sleep(50), burstDone.promise]);
        active--;
        q.done(item.key);
      }
    };
    const workers = [worker(), worker(), worker(), worker()];
    q.add('ns/slow');
    await firstStarted.promise;
    burstStarted = true;
    for (let i = 0; i < 10_000; i++) {
      q.add('ns/slow');
      if (i % 1000 === 999) await setImmediate();
    }
    burstDone.resolve();
    await sleep(300);
    q.shutDown();
    await Promise.all(workers);
    assert.equal(maxActive, 1, 'the key was reconciled by two workers at once');
    assert.ok(afterBurst >= 1, 'the key was not reconciled after the burst');
    assert.ok(afterBurst <= 2, `the key was reconciled ${afterBurst} times after the burst`);
  },
);

test('addAfter delivers no earlier than the delay', timeout, async () => {
  const q = new WorkQueue();
  const start = performance.now();
  q.addAfter('ns/a', 50);
  assert.equal(q.len(), 0);
  assert.equal(q.waitingLen(), 1);
  assert.equal(await getKey(q), 'ns/a');
  const elapsed = performance.now() - start;
  assert.ok(elapsed >= 50, `delivered after ${elapsed} ms`);
  assert.ok(elapsed < 5000, `delivered after ${elapsed} ms`);
  assert.equal(q.waitingLen(), 0);
  q.shutDown();
});

test('addAfter delivers delayed keys in deadline order', timeout, async () => {
  const q = new WorkQueue();
  q.addAfter('ns/late', 80);
  q.addAfter('ns/early', 30);
  q.addAfter('ns/middle', 50);
  const keys = [];
  for (let i = 0; i < 3; i++) {
    const key = await getKey(q);
    keys.push(key);
    q.done(key);
  }
  assert.deepEqual(keys, ['ns/early', 'ns/middle', 'ns/late']);
  q.shutDown();
});

test('addAfter with an earlier deadline moves a waiting key earlier', timeout, async () => {
  const q = new WorkQueue();
  const start = performance.now();
  q.addAfter('ns/a', 60_000);
  q.addAfter('ns/a', 30);
  assert.equal(q.waitingLen(), 1);
  assert.equal(await getKey(q), 'ns/a');
  const elapsed = performance.now() - start;
  assert.ok(elapsed >= 30 && elapsed < 5000, `delivered after ${elapsed} ms`);
  assert.equal(q.waitingLen(), 0);
  q.shutDown();
});

test('addAfter with a later deadline for a waiting key is ignored', timeout, async () => {
  const q = new WorkQueue();
  const start = performance.now();
  q.addAfter('ns/a', 30);
  q.addAfter('ns/a', 60_000);
  assert.equal(q.waitingLen(), 1);
  const key = await Promise.race([getKey(q), sleep(3000, 'not delivered')]);
  assert.equal(key, 'ns/a');
  const elapsed = performance.now() - start;
  assert.ok(elapsed >= 30 && elapsed < 5000, `delivered after ${elapsed} ms`);
  q.shutDown();
});

test('addAfter without a positive delay adds at once', timeout, async () => {
  const q = new WorkQueue();
  q.addAfter('ns/a', 0);
  q.addAfter('ns/b', -5);
  assert.equal(q.len(), 2);
  assert.equal(q.waitingLen(), 0);
  assert.deepEqual(await drainAfterShutDown(q), ['ns/a', 'ns/b']);
});

test('shutDown clears the delay timer and the waiting keys', timeout, async (t) => {
  const setTimer = t.mock.method(globalThis, 'setTimeout');
  const clearTimer = t.mock.method(globalThis, 'clearTimeout');
  const q = new WorkQueue();
  q.addAfter('ns/a', 40);
  q.addAfter('ns/b', 50);
  assert.equal(setTimer.mock.callCount(), 1, 'one timer for all delayed keys');
  const timer = setTimer.mock.calls[0]?.result;
  q.shutDown();
  assert.ok(
    clearTimer.mock.calls.some((call) => call.arguments[0] === timer),
    'the delay timer was not cleared',
  );
  assert.equal(q.waitingLen(), 0);
  await sleep(80);
  assert.equal(q.len(), 0);
  assert.deepEqual(await q.get(), { shutdown: true });
});

test('pending delays and the metrics timer do not keep the process alive', () => {
  const url = new URL('../../../src/runtime/workqueue/queue.ts', import.meta.url).href;
  const script = [
    `import { WorkQueue } from ${JSON.stringify(url)};`,
    `const q = new WorkQueue({ name: 'wq-test-exit' });`,
    `q.addAfter('ns/a', 600_000);`,
    `void q.get();`,
  ].join('\n');
  const run = spawnSync(process.execPath, ['--input-type=module', '-e', script], {
    timeout: 15_000,
    encoding: 'utf8',
  });
  assert.equal(run.signal, null, 'the process did not exit by itself');
  assert.equal(run.status, 0, run.stderr);
});

test('exponential limiter doubles from the base up to the cap, per key', () => {
  const limiter = new ItemExponentialFailureRateLimiter(5, 100);
  assert.deepEqual(
    Array.from({ length: 8 }, () => limiter.when('ns/a')),
    [5, 10, 20, 40, 80, 100, 100, 100],
  );
  assert.equal(limiter.numRequeues('ns/a'), 8);
  assert.equal(limiter.when('ns/b'), 5, 'backoff is per key');
  limiter.forget('ns/a');
  assert.equal(limiter.numRequeues('ns/a'), 0);
  assert.equal(limiter.when('ns/a'), 5);
  assert.equal(limiter.numRequeues('ns/b'), 1);
});

test('exponential limiter stays at the cap after very many failures', () => {
  const limiter = new ItemExponentialFailureRateLimiter();
  let last = 0;
  for (let i = 0; i < 2000; i++) last = limiter.when('ns/a');
  assert.equal(last, 1_000_000);
});

test('bucket limiter allows a burst, then spaces requests at 1/qps', () => {
  const clock = fakeClock();
  const limiter = new BucketRateLimiter(10, 3, clock);
  assert.deepEqual(
    ['a', 'b', 'c', 'd', 'e'].map((key) => limiter.when(key)),
    [0, 0, 0, 100, 200],
  );
  clock.t += 100;
  assert.equal(limiter.when('f'), 200, 'a reservation keeps its place in the line');
  clock.t += 10_000;
  assert.deepEqual(
    ['g', 'h', 'i', 'j'].map((key) => limiter.when(key)),
    [0, 0, 0, 100],
    'the bucket refills to the burst, no further',
  );
  assert.equal(limiter.numRequeues('a'), 0);
});

test('max-of limiter takes the longest delay and passes every call to all limiters', () => {
  const calls: string[] = [];
  const stub = (name: string, delay: number, requeues: number): RateLimiter<string> => ({
    when: (key) => (calls.push(`${name}.when(${key})`), delay),
    forget: (key) => void calls.push(`${name}.forget(${key})`),
    numRequeues: () => requeues,
  });
  const limiter = new MaxOfRateLimiter(stub('x', 30, 1), stub('y', 70, 4), stub('z', 10, 2));
  assert.equal(limiter.when('k'), 70);
  assert.equal(limiter.numRequeues('k'), 4);
  limiter.forget('k');
  assert.deepEqual(calls, [
    'x.when(k)',
    'y.when(k)',
    'z.when(k)',
    'x.forget(k)',
    'y.forget(k)',
    'z.forget(k)',
  ]);
});

test('default controller limiter is per-key exponential, bounded by 10 qps with a burst of 100', () => {
  const clock = fakeClock();
  const limiter = defaultControllerRateLimiter(clock);
  assert.deepEqual(
    [1, 2, 3, 4].map(() => limiter.when('ns/a')),
    [5, 10, 20, 40],
  );
  for (let i = 4; i < 100; i++) assert.equal(limiter.when(`ns/${i}`), 5);
  assert.equal(limiter.when('ns/over-1'), 100);
  assert.equal(limiter.when('ns/over-2'), 200);
  assert.equal(limiter.numRequeues('ns/a'), 4);
  limiter.forget('ns/a');
  assert.equal(limiter.numRequeues('ns/a'), 0);
});

test('addRateLimited delays by the limiter; forget and numRequeues use it', timeout, async () => {
  const q = new WorkQueue({ rateLimiter: new ItemExponentialFailureRateLimiter(30, 1000) });
  const start = performance.now();
  q.addRateLimited('ns/a');
  assert.equal(q.numRequeues('ns/a'), 1);
  assert.equal(q.waitingLen(), 1);
  assert.equal(await getKey(q), 'ns/a');
  const elapsed = performance.now() - start;
  assert.ok(elapsed >= 30 && elapsed < 5000, `delivered after ${elapsed} ms`);
  q.forget('ns/a');
  assert.equal(q.numRequeues('ns/a'), 0);
  q.shutDown();
});

test(
  'shutDown wakes waiting getters, hands out what is queued, and ignores later adds',
  timeout,
  async () => {
    const q = new WorkQueue();
    const waiting = [q.get(), q.get()];
    q.shutDown();
    assert.ok(q.isShuttingDown());
    assert.deepEqual(await Promise.all(waiting), [{ shutdown: true }, { shutdown: true }]);
    q.add('ns/a');
    q.addAfter('ns/b', 1);
    q.addRateLimited('ns/c');
    assert.equal(q.len(), 0);
    assert.equal(q.waitingLen(), 0);
    assert.deepEqual(await q.get(), { shutdown: true });

    const q2 = new WorkQueue();
    q2.add('ns/a');
    q2.add('ns/b');
    assert.deepEqual(await drainAfterShutDown(q2), ['ns/a', 'ns/b'], 'queued keys are still handed out');
  },
);

test('shutDownWithDrain waits until every key being processed is done', timeout, async () => {
  const q = new WorkQueue();
  q.add('ns/a');
  q.add('ns/b');
  const a = await getKey(q);
  const b = await getKey(q);
  const drained = q.shutDownWithDrain();
  assert.ok(q.isShuttingDown());
  q.add('ns/c');
  assert.equal(q.len(), 0, 'adds are ignored while draining');
  assert.equal(await settles(drained), false);
  q.done(a);
  assert.equal(await settles(drained), false, 'drained while a key was still processing');
  q.done(b);
  assert.equal(await settles(drained), true);
  assert.deepEqual(await q.get(), { shutdown: true });
});

test(
  'shutDownWithDrain returns at once when nothing is processing, and shutDown cuts it short',
  timeout,
  async () => {
    assert.equal(await settles(new WorkQueue().shutDownWithDrain()), true);

    const q = new WorkQueue();
    q.add('ns/a');
    await getKey(q);
    const drained = q.shutDownWithDrain();
    assert.equal(await settles(drained), false);
    q.shutDown();
    assert.equal(await settles(drained), true);
  },
);

/** The value of one sample, e.g. sample(text, 'workqueue_adds_total', 'wq-test'). */
function sample(text: string, name: string, queue: string, controller = queue): number | undefined {
  for (const line of text.split('\n')) {
    const match = /^(\w+)\{([^}]*)\} (\S+)$/.exec(line);
    if (!match || match[1] !== name) continue;
    const labels = match[2] ?? '';
    if (labels.includes(`name="${queue}"`) && labels.includes(`controller="${controller}"`)) {
      return Number(match[3]);
    }
  }
  return undefined;
}

test('a named queue reports the workqueue metrics', timeout, async () => {
  const clock = fakeClock();
  const q = new WorkQueue({ name: 'wq-test-metrics', controller: 'wq-test-controller', clock });
  const metric = async (metricName: string, name = metricName) =>
    sample(await registry.getSingleMetricAsString(metricName), name, 'wq-test-metrics', 'wq-test-controller');

  q.add('ns/a');
  q.add('ns/b');
  q.add('ns/a');
  assert.equal(await metric('workqueue_adds_total'), 2);
  assert.equal(await metric('workqueue_depth'), 2);

  clock.t += 250;
  assert.equal(await getKey(q), 'ns/a');
  assert.equal(await metric('workqueue_depth'), 1);
  const queued = 'workqueue_queue_duration_seconds';
  assert.equal(await metric(queued, `${queued}_count`), 1);
  assert.equal(await metric(queued, `${queued}_sum`), 0.25);

  clock.t += 1500;
  q.updateUnfinishedWork();
  assert.equal(await metric('workqueue_unfinished_work_seconds'), 1.5);
  assert.equal(await metric('workqueue_longest_running_processor_seconds'), 1.5);

  q.done('ns/a');
  const work = 'workqueue_work_duration_seconds';
  assert.equal(await metric(work, `${work}_count`), 1);
  assert.equal(await metric(work, `${work}_sum`), 1.5);
  q.updateUnfinishedWork();
  assert.equal(await metric('workqueue_unfinished_work_seconds'), 0);

  q.addRateLimited('ns/c');
  assert.equal(await metric('workqueue_retries_total'), 1);
  q.shutDown();
});

test('the controller label defaults to the queue name', timeout, async () => {
  const q = new WorkQueue({ name: 'wq-test-default-controller' });
  q.add('ns/a');
  const text = await registry.getSingleMetricAsString('workqueue_adds_total');
  assert.equal(sample(text, 'workqueue_adds_total', 'wq-test-default-controller'), 1);
  q.shutDown();
});

test(
  'removeWhere drops selected keys, queued or delayed, with their backoff; the rest keep their order',
  timeout,
  async () => {
    const q = new WorkQueue<string>({ name: 'wq-test-remove' });
    const depth = async () =>
      sample(await registry.getSingleMetricAsString('workqueue_depth'), 'workqueue_depth', 'wq-test-remove');
    q.add('x/busy');
    assert.equal(await getKey(q), 'x/busy');
    // Added again while processing: once removed, done() must not queue it again.
    q.add('x/busy');
    for (const k of ['a', 'x/1', 'b', 'x/2', 'c']) q.add(k);
    q.addRateLimited('x/3');
    q.addRateLimited('x/3');
    q.addAfter('d', 30);
    q.addAfter('x/4', 20);
    assert.equal(await depth(), 6);

    q.removeWhere((k) => k.startsWith('x/'));
    assert.equal(q.len(), 3);
    assert.equal(q.waitingLen(), 1);
    assert.equal(q.numRequeues('x/3'), 0);
    assert.equal(await depth(), 3);
    q.done('x/busy');
    assert.equal(q.len(), 3);
    assert.deepEqual([await getKey(q), await getKey(q), await getKey(q)], ['a', 'b', 'c']);
    // Only the delayed key that was kept comes due.
    assert.equal(await getKey(q), 'd');
    await sleep(50);
    assert.equal(await settles(q.get()), false);
    q.shutDown();
  },
);

// The low lane (controller-runtime's priority queue): a first pass's keys wait behind real changes.

const low = { priority: 'low' } as const;

/** Every key queued now, in the order get() hands them out (each done at once). */
async function takeAll<K>(q: WorkQueue<K>): Promise<K[]> {
  const keys: K[] = [];
  while (q.len() > 0) {
    const key = await getKey(q);
    keys.push(key);
    q.done(key);
  }
  return keys;
}

test('normal keys are handed out before low ones, FIFO within each lane', timeout, async () => {
  const q = new WorkQueue();
  q.add('l1', low);
  q.add('n1');
  q.add('l2', low);
  q.add('n2');
  assert.equal(q.len(), 4, 'len counts both lanes');
  assert.deepEqual(await takeAll(q), ['n1', 'n2', 'l1', 'l2']);
  // With nothing queued, a worker waiting gets a low key at once.
  const waiting = q.get();
  q.add('l3', low);
  assert.deepEqual(await waiting, { key: 'l3', shutdown: false });
});

test('a normal key added after 20,000 low keys is the next one handed out', timeout, async () => {
  const q = new WorkQueue({ name: 'wq-test-first-pass' });
  for (let i = 0; i < 20_000; i++) q.add(`node-${i}`, low);
  assert.equal(await getKey(q), 'node-0');
  q.add('changed');
  assert.equal(await getKey(q), 'changed');
  assert.equal(await getKey(q), 'node-1');
  assert.equal(q.len(), 19_998);
  const text = await registry.getSingleMetricAsString('workqueue_depth');
  assert.equal(sample(text, 'workqueue_depth', 'wq-test-first-pass'), 19_998, 'depth counts the low lane');
  q.shutDown();
});

test('a low key added normally is promoted and handed out once, in the normal lane', timeout, async () => {
  const q = new WorkQueue();
  q.add('a', low);
  q.add('b', low);
  q.add('n');
  q.add('b');
  q.add('b', low);
  assert.equal(q.len(), 3, 'a promoted key is counted once');
  assert.deepEqual(await takeAll(q), ['n', 'b', 'a']);
  // The promoted key's stale low entry must not stand for a later low add of the same key, nor
  // hand it out twice.
  q.add('c', low);
  q.add('a', low);
  q.add('a');
  q.add('d', low);
  assert.deepEqual(await drainAfterShutDown(q), ['a', 'c', 'd']);
});

test('a normal key stays normal when added again at low priority', timeout, async () => {
  const q = new WorkQueue();
  q.add('l', low);
  q.add('n');
  q.add('n', low);
  assert.deepEqual(await takeAll(q), ['n', 'l']);
});

test(
  'a key being processed is queued again at done() in the lane it was last added in, normal winning',
  timeout,
  async () => {
    const q = new WorkQueue();
    q.add('p');
    q.add('q');
    await getKey(q);
    await getKey(q);
    q.add('l', low);
    q.add('p', low);
    q.add('q', low);
    q.add('q');
    assert.equal(q.len(), 1, 'keys being processed wait outside the lanes');
    q.done('p');
    q.done('q');
    assert.deepEqual(await takeAll(q), ['q', 'l', 'p']);
  },
);

test(
  'a delayed add of a key waiting low promotes it: a retry is due work, not a replay',
  timeout,
  async () => {
    const q = new WorkQueue();
    q.add('l1', low);
    q.add('l2', low);
    q.addAfter('l2', 5);
    q.addRateLimited('l3');
    await sleep(30);
    assert.deepEqual(await takeAll(q), ['l2', 'l3', 'l1']);
    q.add('l4', low);
    q.addAfter('l4', 0);
    q.add('l5', low);
    assert.deepEqual(await takeAll(q), ['l4', 'l5']);
  },
);

test(
  'removeWhere drops low and promoted keys alike; the rest keep their lanes and order',
  timeout,
  async () => {
    const q = new WorkQueue();
    for (const k of ['l1', 'x/l', 'l2', 'x/p', 'l3']) q.add(k, low);
    q.add('x/p');
    q.add('l2');
    q.add('n');
    q.removeWhere((k) => k.startsWith('x/'));
    assert.equal(q.len(), 4);
    assert.deepEqual(await takeAll(q), ['l2', 'n', 'l1', 'l3']);
    // A dropped key added again comes back once, in the lane it is added in now.
    q.add('x/p', low);
    q.add('x/l');
    assert.deepEqual(await drainAfterShutDown(q), ['x/l', 'x/p']);
  },
);

test(
  'shutDown hands out both lanes, normal first; shutDownWithDrain waits for low keys processing',
  timeout,
  async () => {
    const q = new WorkQueue();
    q.add('l', low);
    q.add('n');
    assert.deepEqual(await drainAfterShutDown(q), ['n', 'l']);
    const q2 = new WorkQueue();
    q2.add('l', low);
    const key = await getKey(q2);
    const drained = q2.shutDownWithDrain();
    q2.add('m', low);
    assert.equal(q2.len(), 0, 'low adds are ignored while draining');
    assert.equal(await settles(drained), false);
    q2.done(key);
    assert.equal(await settles(drained), true);
  },
);

test(
  'random adds in both lanes, gets, dones and removals agree with a plain model of the lanes',
  timeout,
  async () => {
    // The model: two arrays and the lane each waiting key is in; O(n), obviously right.
    const model = { normal: [] as string[], low: [] as string[], lane: new Map<string, 'normal' | 'low'>() };
    const processing = new Set<string>();
    const q = new WorkQueue();
    let seed = 60;
    const random = (n: number) => ((seed = (seed * 1103515245 + 12345) % 2 ** 31), seed % n);
    for (let step = 0; step < 20_000; step++) {
      const key = `k${random(8)}`;
      const op = random(10);
      if (op < 4) {
        const priority = op < 2 ? 'low' : 'normal';
        q.add(key, { priority });
        const was = model.lane.get(key);
        if (was === undefined) {
          model.lane.set(key, priority);
          if (!processing.has(key)) model[priority].push(key);
        } else if (was === 'low' && priority === 'normal') {
          model.lane.set(key, 'normal');
          if (!processing.has(key)) {
            model.low.splice(model.low.indexOf(key), 1);
            model.normal.push(key);
          }
        }
      } else if (op < 7 && model.normal.length + model.low.length > 0) {
        const expected = (model.normal.length > 0 ? model.normal : model.low).shift()!;
        model.lane.delete(expected);
        processing.add(expected);
        assert.equal(await getKey(q), expected, `step ${step}`);
      } else if (op < 9 && processing.size > 0) {
        const done = [...processing][random(processing.size)]!;
        processing.delete(done);
        q.done(done);
        const lane = model.lane.get(done);
        if (lane) model[lane].push(done);
      } else if (op === 9 && random(20) === 0) {
        q.removeWhere((k) => k === key);
        model.lane.delete(key);
        for (const lane of [model.normal, model.low])
          if (lane.includes(key)) lane.splice(lane.indexOf(key), 1);
      }
      assert.equal(q.len(), model.normal.length + model.low.length, `len at step ${step}`);
    }
    q.shutDown();
  },
);

test(
  'lower moves the normal keys changed before a time to the end of the low lane, in order; later changes stay ahead',
  timeout,
  async () => {
    const clock = fakeClock(1000);
    const q = new WorkQueue({ clock });
    q.add('first-pass', low);
    q.add('promoted', low);
    clock.t = 1001;
    q.add('a');
    q.add('b');
    q.add('promoted');
    clock.t = 1600;
    q.add('recent');
    q.add('b'); // changed again: no longer old
    assert.equal(q.lower(1500), 2);
    assert.equal(q.len(), 5, 'each key counted once');
    q.removeWhere((k) => k === 'none');
    assert.equal(q.len(), 5, "the promoted key's stale low entry is not counted again");
    assert.deepEqual(await takeAll(q), ['b', 'recent', 'first-pass', 'a', 'promoted']);
  },
);

test('a lowered key changed again goes back to the normal lane, handed out once', timeout, async () => {
  const clock = fakeClock(1000);
  const q = new WorkQueue({ clock });
  q.add('x', low);
  q.add('old');
  q.add('old2');
  clock.t = 2000;
  assert.equal(q.lower(1500), 2);
  q.add('old2');
  assert.deepEqual(await drainAfterShutDown(q), ['old2', 'x', 'old']);
});
