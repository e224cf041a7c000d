import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { SeriesCache, SpamFilter } from '../../../src/runtime/events/correlator.ts';
import {
  eventNamePrefix,
  objectKey,
  seriesKey,
  toReference,
  truncateNote,
  type ObjectReference,
} from '../../../src/runtime/events/event.ts';

const pod: ObjectReference = { apiVersion: 'v1', kind: 'Pod', namespace: 'ns', name: 'web-0', uid: 'u1' };
const base = {
  regarding: pod,
  type: 'Normal',
  reason: 'Placed',
  action: 'Bind',
  note: 'placed on node-1',
  reportingController: 'berth.dev/agents',
};

describe('truncateNote', () => {
  test('leaves a short note alone', () => {
    assert.equal(truncateNote('hello'), 'hello');
    assert.equal(truncateNote('x'.repeat(1024)), 'x'.repeat(1024));
  });

  test('cuts a long note to 1024 bytes', () => {
    assert.equal(truncateNote('x'.repeat(5000)), 'x'.repeat(1024));
  });

  test('never splits a multi-byte character', () => {
    for (const ch of ['é', '€', '🚢']) {
      const cut = truncateNote(ch.repeat(1000));
      const bytes = Buffer.byteLength(cut);
      assert.ok(bytes <= 1024 && bytes > 1024 - Buffer.byteLength(ch), `${ch}: ${bytes} bytes`);
      assert.equal(cut, ch.repeat(cut.length / ch.length), `${ch}: only whole characters`);
    }
    // A one-byte prefix shifts the cut into the middle of a character.
    const cut = truncateNote('a' + '€'.repeat(400));
    assert.equal(cut, 'a' + '€'.repeat(341));
  });
});

describe('seriesKey', () => {
  test('is equal for isomorphic events, whatever the object version', () => {
    assert.equal(seriesKey(base), seriesKey({ ...base, regarding: { ...pod, resourceVersion: '42' } }));
  });

  test('differs in any identifying field', () => {
    const variants = [
      { type: 'Warning' },
      { reason: 'Evicted' },
      { action: 'Evict' },
      { note: 'placed on node-2' },
      { reportingController: 'berth.dev/labels' },
      { regarding: { ...pod, uid: 'u2' } },
      { regarding: { ...pod, name: 'web-1' } },
      { regarding: { ...pod, namespace: 'other' } },
      { regarding: { ...pod, kind: 'Node' } },
      { related: { apiVersion: 'v1', kind: 'Node', name: 'node-1' } },
    ];
    const keys = new Set([seriesKey(base), ...variants.map((v) => seriesKey({ ...base, ...v }))]);
    assert.equal(keys.size, variants.length + 1);
  });

  test('fields cannot bleed into each other', () => {
    assert.notEqual(
      seriesKey({ ...base, reason: 'a', action: 'bc' }),
      seriesKey({ ...base, reason: 'ab', action: 'c' }),
    );
  });
});

test('toReference takes the reference fields of an object', () => {
  const ref = toReference({
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: { name: 'cm', namespace: 'ns', uid: 'u', resourceVersion: '7', labels: { a: 'b' } },
    data: {},
  });
  assert.deepEqual(ref, {
    apiVersion: 'v1',
    kind: 'ConfigMap',
    name: 'cm',
    namespace: 'ns',
    uid: 'u',
    resourceVersion: '7',
  });
  assert.deepEqual(toReference({ apiVersion: 'v1', kind: 'Node', name: 'n1' }), {
    apiVersion: 'v1',
    kind: 'Node',
    name: 'n1',
  });
  assert.equal(objectKey(ref), objectKey({ ...ref, resourceVersion: '8' }));
});

test('eventNamePrefix makes any object name a valid subdomain prefix', () => {
  assert.equal(eventNamePrefix('web-0'), 'web-0');
  assert.equal(eventNamePrefix('node.example.com'), 'node.example.com');
  assert.equal(eventNamePrefix('system:node-proxier'), 'system-node-proxier');
  assert.equal(eventNamePrefix('Upper_Case'), 'upper-case');
  assert.equal(eventNamePrefix('a.-b.'), 'a.b');
  assert.equal(eventNamePrefix(':::'), 'event');
  const long = eventNamePrefix('a'.repeat(300));
  assert.equal(long.length, 236);
  assert.match(long, /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/);
});

describe('SpamFilter', () => {
  test('lets a burst through, then one per refill period', () => {
    const f = new SpamFilter({ burst: 25, refillMs: 300_000 });
    const k = objectKey(pod);
    let t = 1_000_000;
    for (let i = 0; i < 25; i++) assert.equal(f.allow(k, t), true, `event ${i}`);
    assert.equal(f.allow(k, t), false);
    t += 150_000;
    assert.equal(f.allow(k, t), false, 'half a token');
    t += 150_000;
    assert.equal(f.allow(k, t), true);
    assert.equal(f.allow(k, t), false);
  });

  test('keeps one bucket per object, refilled to the burst at most', () => {
    const f = new SpamFilter({ burst: 2, refillMs: 1000 });
    assert.equal(f.allow('a', 0), true);
    assert.equal(f.allow('a', 0), true);
    assert.equal(f.allow('a', 0), false);
    assert.equal(f.allow('b', 0), true);
    // A long quiet spell refills to the burst, not beyond.
    assert.equal(f.allow('a', 1_000_000), true);
    assert.equal(f.allow('a', 1_000_000), true);
    assert.equal(f.allow('a', 1_000_000), false);
  });

  test('forgets the least recently used objects beyond maxKeys', () => {
    const f = new SpamFilter({ burst: 1, refillMs: 1000, maxKeys: 2 });
    assert.equal(f.allow('a', 0), true);
    assert.equal(f.allow('b', 0), true);
    assert.equal(f.allow('c', 0), true); // evicts a
    assert.equal(f.allow('c', 0), false);
    assert.equal(f.allow('a', 0), true, 'a starts over with a full bucket');
  });
});

describe('SeriesCache', () => {
  const opts = { updateIntervalMs: 1000, idleMs: 60_000 };

  test('the first occurrence creates an Event; repeats before it exists ride along with the create', () => {
    const c = new SeriesCache<string>(opts);
    const first = c.observe('k', 0, () => 'draft');
    assert.equal(first.fresh, true);
    assert.equal(first.series.data, 'draft');
    const again = c.observe('k', 10, () => assert.fail('no new draft for a repeat'));
    assert.equal(again.fresh, false);
    assert.equal(again.series, first.series);
    assert.equal(again.series.count, 2);
    assert.equal(again.series.lastObserved, 10);
    // Nothing to patch: the create (not sent yet) will carry count 2.
    assert.equal(c.due(100_000), undefined);
    c.sent(first.series, 2, 20);
    assert.deepEqual(c.pending(), []);
  });

  test('repeats after the create are patched at most once per interval, with the latest count', () => {
    const c = new SeriesCache<string>(opts);
    const { series } = c.observe('k', 0, () => 'draft');
    c.sent(series, 1, 5);
    for (let t = 10; t < 110; t++) c.observe('k', t, () => 'x');
    assert.equal(series.count, 101);
    assert.equal(c.due(500), undefined, 'skip: the interval since the create has not passed');
    assert.equal(c.nextDueAt(), 1005);
    assert.equal(c.due(1005), series, 'patch: due one interval after the last write');
    c.sent(series, series.count, 1005);
    assert.equal(c.due(5000), undefined, 'nothing new to write');
    assert.equal(c.nextDueAt(), undefined);
    c.observe('k', 1500, () => 'x');
    assert.equal(c.due(1600), undefined);
    assert.equal(c.due(2005), series);
  });

  test('an occurrence during a write stays pending, and a failed write is retried an interval later', () => {
    const c = new SeriesCache<string>(opts);
    const { series } = c.observe('k', 0, () => 'draft');
    c.observe('k', 1, () => 'x'); // count 2 when the create is sent...
    c.observe('k', 2, () => 'x'); // ...and 3 by the time it returns
    c.sent(series, 2, 3);
    assert.deepEqual(c.pending(), [series]);
    c.sent(series, 2, 1003); // a failed patch: the API still holds 2
    assert.equal(c.due(1500), undefined);
    assert.equal(c.due(2003), series);
  });

  test('a series idle past idleMs ends: the next occurrence creates a new Event', () => {
    const c = new SeriesCache<string>(opts);
    const first = c.observe('k', 0, () => 'one').series;
    c.sent(first, 1, 0);
    c.observe('k', 100, () => 'x');
    assert.equal(c.continues('k', 60_100), true);
    assert.equal(c.continues('k', 60_101), false);
    const next = c.observe('k', 60_101, () => 'two');
    assert.equal(next.fresh, true);
    assert.equal(next.series.data, 'two');
    assert.equal(next.series.count, 1);
    assert.deepEqual(c.pending(), [], "the ended series' count is dropped with it");
  });

  test('forget drops a series, so the next occurrence starts over', () => {
    const c = new SeriesCache<string>(opts);
    const { series } = c.observe('k', 0, () => 'draft');
    c.forget(series);
    assert.equal(c.size, 0);
    assert.equal(c.observe('k', 1, () => 'again').fresh, true);
    c.forget(series); // a stale series does not remove its successor
    assert.equal(c.size, 1);
  });

  test('holds at most maxSeries, evicting the least recently seen with its pending count', () => {
    const c = new SeriesCache<number>({ ...opts, maxSeries: 3 });
    const all = [0, 1, 2].map((i) => c.observe(`k${i}`, i, () => i).series);
    for (const s of all) c.sent(s, 1, 10);
    c.observe('k0', 20, () => -1); // k0 is now the most recent, and pending
    c.observe('k1', 21, () => -1);
    c.observe('k3', 22, () => 3); // evicts k2
    assert.equal(c.size, 3);
    assert.equal(c.continues('k2', 23), false);
    c.observe('k4', 23, () => 4); // evicts k0, pending count and all
    assert.equal(c.continues('k0', 24), false);
    assert.deepEqual(
      c.pending().map((s) => s.key),
      ['k1'],
    );
    for (let i = 5; i < 5000; i++) c.observe(`k${i}`, i, () => i);
    assert.equal(c.size, 3);
  });
});
