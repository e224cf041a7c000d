import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { setImmediate as tick } from 'node:timers/promises';
import { Flights, TtlCache } from '../../../src/registry/cache.ts';
import { HostPauses, Semaphore, backoffMs, parseRetryAfter } from '../../../src/registry/politeness.ts';
import { withSeed } from '../../helpers/prng.ts';

describe('parseRetryAfter', () => {
  const now = Date.parse('2026-11-03T10:00:00Z');
  test('delay-seconds and HTTP dates, capped, never negative', () => {
    assert.equal(parseRetryAfter('0', 60_000, now), 0);
    assert.equal(parseRetryAfter('7', 60_000, now), 7000);
    assert.equal(parseRetryAfter(' 12 ', 60_000, now), 12_000);
    assert.equal(parseRetryAfter('3600', 60_000, now), 60_000);
    assert.equal(parseRetryAfter('Tue, 03 Nov 2026 10:00:30 GMT', 60_000, now), 30_000);
    assert.equal(parseRetryAfter('Tuesday, 03-Nov-26 10:00:05 GMT', 60_000, now), 5000);
    assert.equal(parseRetryAfter('Tue, 03 Nov 2026 09:00:00 GMT', 60_000, now), 0);
    assert.equal(parseRetryAfter('Wed, 04 Nov 2026 10:00:00 GMT', 60_000, now), 60_000);
  });
  test('absent or unreadable is undefined', () => {
    for (const v of [undefined, '', 'soon', '-5', '1.5'])
      assert.equal(parseRetryAfter(v, 60_000, now), undefined, v);
  });
});

test('backoffMs: full jitter under an exponential bound, capped', () =>
  withSeed('backoff', (r) => {
    for (let i = 0; i < 500; i++) {
      const attempt = r.int(12);
      const ms = backoffMs(attempt, 200, 5000, () => r.next());
      assert.ok(ms >= 0 && ms < Math.min(5000, 200 * 2 ** attempt), `attempt ${attempt}: ${ms}`);
    }
    assert.equal(
      backoffMs(3, 200, 5000, () => 0.5),
      800,
    );
    assert.equal(
      backoffMs(10, 200, 5000, () => 0.5),
      2500,
    );
  }));

describe('Semaphore', () => {
  test('at most limit holders; waiters served in order; release is idempotent', async () => {
    const s = new Semaphore(2);
    const order: number[] = [];
    const a = await s.acquire();
    const b = await s.acquire();
    const waiting = [3, 4, 5].map((n) => s.acquire().then((rel) => (order.push(n), rel)));
    await tick();
    assert.equal(s.held, 2);
    assert.equal(s.waiting, 3);
    a();
    a();
    await tick();
    assert.deepEqual(order, [3]);
    b();
    await tick();
    assert.deepEqual(order, [3, 4]);
    assert.equal(s.held, 2);
    for (const w of waiting.slice(0, 2)) (await w)();
    (await waiting[2]!)();
    assert.equal(s.held, 0);
    assert.equal(s.waiting, 0);
  });

  test('a waiter that gives up leaves the queue', async () => {
    const s = new Semaphore(1);
    const hold = await s.acquire();
    const ac = new AbortController();
    const gaveUp = s.acquire(ac.signal);
    const next = s.acquire();
    ac.abort(new Error('gone'));
    await assert.rejects(gaveUp, /gone/);
    assert.equal(s.waiting, 1);
    hold();
    (await next)();
    assert.equal(s.held, 0);
  });

  test('weights: a waiter takes its weight at once, in order; one above the limit takes all of it', async () => {
    const s = new Semaphore(10);
    const order: string[] = [];
    const six = await s.acquire(undefined, 6);
    const heavy = s.acquire(undefined, 8).then((rel) => (order.push('heavy'), rel));
    // It would fit beside the six, but the heavier waiter came first: it does not overtake.
    const light = s.acquire(undefined, 2).then((rel) => (order.push('light'), rel));
    await tick();
    assert.deepEqual(order, []);
    six();
    await tick();
    assert.deepEqual(order, ['heavy', 'light']);
    assert.equal(s.held, 10);
    (await heavy)();
    (await light)();
    const huge = await s.acquire(undefined, 1e9);
    assert.equal(s.held, 10);
    huge();
    assert.equal(s.held, 0);
  });

  test('a heavy waiter that gives up lets the lighter ones behind it in', async () => {
    const s = new Semaphore(10);
    const hold = await s.acquire(undefined, 5);
    const ac = new AbortController();
    const heavy = s.acquire(ac.signal, 10);
    let light = false;
    const next = s.acquire(undefined, 5).then((rel) => ((light = true), rel));
    await tick();
    assert.equal(light, false);
    ac.abort(new Error('gone'));
    await assert.rejects(heavy, /gone/);
    await tick();
    assert.equal(light, true);
    hold();
    (await next)();
    assert.equal(s.held, 0);
  });

  test('a random schedule never exceeds the limit and never loses a slot', () =>
    withSeed('semaphore', async (r) => {
      const limit = 1 + r.int(4);
      const s = new Semaphore(limit);
      let inside = 0;
      let most = 0;
      await Promise.all(
        Array.from({ length: 40 }, async () => {
          const release = await s.acquire();
          inside++;
          most = Math.max(most, inside);
          for (let i = r.int(4); i > 0; i--) await tick();
          inside--;
          release();
        }),
      );
      assert.ok(most <= limit && most >= 1);
      assert.equal(s.held, 0);
    }));
});

test('HostPauses: a pause only lengthens, ends by itself, and is per host', () => {
  let now = 1000;
  const p = new HostPauses(() => now);
  p.pause('a', 500);
  p.pause('a', 100);
  assert.equal(p.remaining('a'), 500);
  assert.equal(p.remaining('b'), 0);
  now += 400;
  assert.equal(p.remaining('a'), 100);
  now += 100;
  assert.equal(p.remaining('a'), 0);
});

describe('TtlCache', () => {
  test('fresh until the TTL, stale after, evicted least recently used', () => {
    let now = 0;
    const c = new TtlCache<string>(2, () => now);
    c.set('a', 'A', 100);
    c.set('b', 'B', 300);
    now = 150;
    assert.equal(c.get('a'), undefined);
    assert.equal(c.stale('a'), 'A');
    assert.equal(c.get('b'), 'B');
    c.set('c', 'C', 100); // evicts a: b and (by stale) a were used, a before b
    assert.equal(c.stale('a'), undefined);
    assert.equal(c.get('b'), 'B');
    assert.equal(c.get('c'), 'C');
    assert.equal(c.size, 2);
    c.delete('b');
    assert.equal(c.stale('b'), undefined);
  });
});

describe('Flights', () => {
  test('one run per key while it runs; a new run after it ends', async () => {
    const f = new Flights<number>();
    let runs = 0;
    let finish!: (n: number) => void;
    const work = () => (runs++, new Promise<number>((res) => (finish = res)));
    const a = f.run('k', undefined, work);
    const b = f.run('k', undefined, work);
    const other = f.run('other', undefined, () => Promise.resolve(7));
    assert.equal(runs, 1);
    finish(42);
    assert.deepEqual(await Promise.all([a, b, other]), [42, 42, 7]);
    assert.equal(f.size, 0);
    const c = f.run('k', undefined, work);
    assert.equal(runs, 2);
    finish(43);
    assert.equal(await c, 43);
  });

  test('a caller that aborts leaves the others their answer; failures reach every caller', async () => {
    const f = new Flights<number>();
    let finish!: (n: number) => void;
    const ac = new AbortController();
    const quitter = f.run('k', ac.signal, () => new Promise<number>((res) => (finish = res)));
    const stayer = f.run('k', undefined, () => Promise.resolve(0));
    ac.abort(new Error('quit'));
    await assert.rejects(quitter, /quit/);
    finish(5);
    assert.equal(await stayer, 5);
    const boom = () => Promise.reject(new Error('boom'));
    await Promise.all([
      assert.rejects(f.run('x', undefined, boom), /boom/),
      assert.rejects(f.run('x', undefined, boom), /boom/),
    ]);
  });

  test('once every caller has given up, the work is aborted and the next caller starts it anew', async () => {
    const f = new Flights<number>();
    const signals: AbortSignal[] = [];
    const work = (signal: AbortSignal) => {
      signals.push(signal);
      return new Promise<number>((resolve, reject) => {
        signal.addEventListener('abort', () => reject(signal.reason));
        setTimeout(() => resolve(1), 50);
      });
    };
    const [a, b] = [new AbortController(), new AbortController()];
    const first = f.run('k', a.signal, work);
    const second = f.run('k', b.signal, work);
    a.abort(new Error('a quit'));
    await assert.rejects(first, /a quit/);
    await tick();
    assert.equal(signals[0]!.aborted, false, 'one caller still waits');
    b.abort(new Error('b quit'));
    await assert.rejects(second, /b quit/);
    await tick();
    assert.equal(signals[0]!.aborted, true, 'nobody waits: its requests end');
    assert.equal(f.size, 0);
    assert.equal(await f.run('k', new AbortController().signal, work), 1);
    assert.equal(signals.length, 2);
    // A caller without a signal never gives up: the work runs to its end.
    const c = new AbortController();
    const kept = f.run('z', undefined, work);
    void f.run('z', c.signal, work).catch(() => {});
    c.abort();
    assert.equal(await kept, 1);
    assert.equal(signals[2]!.aborted, false);
  });
});
