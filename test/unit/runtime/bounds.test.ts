// The client's bounds on what an apiserver sends, against a local HTTPS server standing in for a
// hostile cell's apiserver: a watch line or an answer past the bound is refused unread, the informer
// says so and starts its watch again, and the client and informer keep working.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { pino } from 'pino';
import { Resources } from '../../../src/runtime/api/meta.ts';
import { Informer } from '../../../src/runtime/cache/informer.ts';
import { ResponseTooLarge, type AnswerBounds } from '../../../src/runtime/client/client.ts';
import { localApiserver } from '../../helpers/apiserver.ts';

const bounds: AnswerBounds = { lineBytes: 4096, answerBytes: 16_384 };
const ns = (name: string, pad = '') => ({
  apiVersion: 'v1',
  kind: 'Namespace',
  metadata: { name, resourceVersion: '2', annotations: pad ? { pad } : {} },
});
const line = (o: unknown) => `${JSON.stringify(o)}\n`;

test('a watch line past the bound is refused, split over reads or not; the lines before it are delivered', async (t) => {
  const client = await localApiserver(t, { bounds }, (_req, res) => {
    res.setHeader('content-type', 'application/json');
    res.write(line({ type: 'ADDED', object: ns('a') }));
    // The oversized line arrives in small pieces and never ends: refused once past the bound.
    const piece = 'x'.repeat(1000);
    res.write(`{"type":"ADDED","object":{"pad":"${piece}`);
    const more = setInterval(() => res.write(piece), 5);
    res.on('close', () => clearInterval(more));
  });
  const seen: string[] = [];
  await assert.rejects(
    (async () => {
      for await (const ev of client.stream<{ object: { metadata: { name: string } } }>('/api/v1/namespaces'))
        seen.push(ev.object.metadata.name);
    })(),
    (e: unknown) =>
      e instanceof ResponseTooLarge && /a line of more than 4096 bytes, refused/.test(e.message),
  );
  assert.deepEqual(seen, ['a']);
});

test('an answer past the bound is refused, its listener told, and the client answers the next request', async (t) => {
  let big = true;
  const told: string[] = [];
  const onRefused = (e: ResponseTooLarge) => void told.push(e.message);
  const client = await localApiserver(t, { bounds, onRefused }, (_req, res) => {
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify(ns('a', big ? 'x'.repeat(20_000) : '')));
  });
  await assert.rejects(client.get(Resources.namespaces, 'a'), (e: unknown) => {
    return e instanceof ResponseTooLarge && /an answer of more than 16384 bytes, refused/.test(e.message);
  });
  assert.equal(told.length, 1);
  assert.match(
    told[0]!,
    /^GET \/api\/v1\/namespaces\/a from 127\.0\.0\.1:\d+: an answer of more than 16384 bytes/,
  );
  big = false;
  assert.equal((await client.get(Resources.namespaces, 'a')).metadata?.name, 'a');
  assert.equal(told.length, 1);
});

test('an informer whose watch brings a line past the bound logs it, watches again, and keeps its cache current', async (t) => {
  let watches = 0;
  const client = await localApiserver(t, { bounds }, (req, res) => {
    res.setHeader('content-type', 'application/json');
    if (!new URL(req.url!, 'https://x').searchParams.get('watch')) {
      res.end(JSON.stringify({ kind: 'NamespaceList', metadata: { resourceVersion: '1' }, items: [] }));
      return;
    }
    // The first watch sends one event of 5,000 bytes (past the bound); the next ones are sane.
    watches++;
    res.write(line({ type: 'ADDED', object: watches === 1 ? ns('huge', 'x'.repeat(5000)) : ns('sane') }));
  });
  const logged: string[] = [];
  const informer = new Informer({
    client,
    ref: Resources.namespaces,
    // This apiserver lists, as one without WatchList.
    watchList: false,
    backoff: { initialMs: 20, maxMs: 100 },
    logger: pino({ level: 'info' }, { write: (s: string) => void logged.push(s) }),
  });
  informer.start();
  t.after(() => informer.stop());
  await informer.waitForSync();
  for (let i = 0; i < 100 && !informer.get('sane'); i++) await sleep(20);
  assert.ok(informer.get('sane'), 'the informer watched again and cached what came next');
  assert.equal(informer.get('huge'), undefined);
  assert.ok(watches >= 2);
  assert.ok(
    logged.some((l) => /list\/watch failed; retrying/.test(l) && /a line of more than 4096 bytes/.test(l)),
    logged.join(''),
  );
});

test('a list page past the bound is asked again with fewer objects a page, and the informer syncs every object', async (t) => {
  const limits: string[] = [];
  const names = ['a', 'b', 'c'];
  const client = await localApiserver(t, { bounds }, (req, res) => {
    res.setHeader('content-type', 'application/json');
    const q = new URL(req.url!, 'https://x').searchParams;
    if (q.get('watch')) return; // held open, silent
    const limit = Number(q.get('limit'));
    limits.push(`${limit}@${q.get('continue') ?? ''}`);
    // Each object is 6,000 bytes: three (or more) to a page exceed the answer bound of 16,384.
    const from = Number(q.get('continue') ?? 0);
    const items = names.slice(from, from + limit).map((n) => ns(n, 'x'.repeat(6000)));
    const next = from + limit < names.length ? String(from + limit) : undefined;
    res.end(
      JSON.stringify({
        kind: 'NamespaceList',
        apiVersion: 'v1',
        metadata: { resourceVersion: '1', ...(next ? { continue: next } : {}) },
        items,
      }),
    );
  });
  const informer = new Informer({ client, ref: Resources.namespaces, pageSize: 500, watchList: false });
  informer.start();
  t.after(() => informer.stop());
  await informer.waitForSync();
  assert.deepEqual(
    informer
      .list()
      .map((n) => n.metadata?.name)
      .sort(),
    names,
  );
  assert.deepEqual(limits, ['500@', '50@', '5@', '1@', '1@1', '1@2']);
});
