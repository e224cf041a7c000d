import { applyJsonPatch } from '../../helpers/jsonpatch.ts';
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rename, rm, symlink, writeFile } from 'node:fs/promises';
import type { IncomingHttpHeaders } from 'node:http';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { TLSSocket } from 'node:tls';
import { pino } from 'pino';
import { rootLogger } from '../../../src/runtime/observability/log.ts';
import { metricsText } from '../../../src/runtime/observability/metrics.ts';
import { createCertificateAuthority, type KeyPairPem } from '../../../src/runtime/webhook/certificates.ts';
import type { KubeObject } from '../../../src/runtime/api/meta.ts';
import { WebhookServer } from '../../../src/runtime/webhook/admission.ts';
import { nestedWithin } from '../../../src/runtime/webhook/serving.ts';
import {
  mutatingWebhookConfiguration,
  validatingWebhookConfiguration,
  webhookClientConfig,
} from '../../../src/runtime/webhook/configuration.ts';
import { mutate, type JsonPatchOp } from '../../../src/runtime/api/jsonpatch.ts';
import { admissionReview } from '../../helpers/admission.ts';
import { echoState, exitThread } from './threaded-fixture.ts';
import { once } from 'node:events';

const quiet = rootLogger.child({}, { level: 'silent' });

interface Reply {
  status: number;
  headers: IncomingHttpHeaders;
  body: string;
  commonName: string;
  reusedSocket: boolean;
}

interface CallOptions {
  path?: string;
  method?: string;
  body?: string | Buffer;
  contentType?: string;
  /** Sends the body in pieces without a content-length. */
  chunked?: boolean;
  agent?: https.Agent;
  /** A client certificate to present. */
  client?: KeyPairPem;
}

/** One HTTPS request trusting `ca`; a fresh connection unless an agent is given. */
function call(port: number, ca: string, opts: CallOptions): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = https.request(
      {
        host: '127.0.0.1',
        port,
        path: opts.path ?? '/mutate',
        method: opts.method ?? 'POST',
        ca,
        ...(opts.client ? { cert: opts.client.certPem, key: opts.client.keyPem } : {}),
        agent: opts.agent ?? false,
        headers: { 'content-type': opts.contentType ?? 'application/json' },
      },
      (res) => {
        const commonName = String((res.socket as TLSSocket).getPeerCertificate().subject.CN);
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () =>
          resolve({
            status: res.statusCode ?? 0,
            headers: res.headers,
            body: Buffer.concat(chunks).toString('utf8'),
            commonName,
            reusedSocket: req.reusedSocket,
          }),
        );
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    if (opts.chunked && opts.body !== undefined) {
      for (let i = 0; i < opts.body.length; i += 16 * 1024) req.write(opts.body.slice(i, i + 16 * 1024));
      req.end();
    } else req.end(opts.body);
  });
}

interface ReviewResponse {
  uid: string;
  allowed: boolean;
  patchType?: string;
  patch?: string;
  status?: { code?: number; message: string };
  warnings?: string[];
}

function responseOf(reply: Reply): ReviewResponse {
  assert.equal(reply.status, 200, reply.body);
  const body = JSON.parse(reply.body) as { apiVersion: string; kind: string; response: ReviewResponse };
  assert.equal(body.apiVersion, 'admission.k8s.io/v1');
  assert.equal(body.kind, 'AdmissionReview');
  return body.response;
}

const pod = (): KubeObject => ({ apiVersion: 'v1', kind: 'Pod', metadata: { name: 'p', namespace: 'ns' } });

describe('WebhookServer', () => {
  const server = new WebhookServer({
    certificates: { kind: 'generated', dnsNames: ['localhost'], ipAddresses: ['127.0.0.1'] },
    port: 0,
    handlerTimeoutMs: 300,
    maxRequestBytes: 64 * 1024,
    logger: quiet,
  });
  let ca = '';
  const post = (opts: CallOptions) => call(server.port, ca, opts);

  before(async () => {
    server.register(
      '/mutate',
      (req) => {
        const object = req.object!;
        const copy = structuredClone(object);
        copy.metadata = { ...copy.metadata, labels: { 'berth.dev/seen': 'true' } };
        return { allowed: true, patch: mutate(object, copy), warnings: ['labelled'] };
      },
      { name: 'label-pods' },
    );
    server.register('/validate', async () => ({
      allowed: false,
      status: { code: 403, message: 'pods are not welcome', reason: 'Forbidden' },
    }));
    server.register('/throw', () => {
      throw new Error('handler exploded');
    });
    server.register('/hang', () => new Promise(() => {}));
    await server.start();
    ca = server.caBundle!;
  });

  after(() => server.stop());

  const valid = async () => {
    const res = responseOf(await post({ path: '/validate', body: admissionReview({ uid: 'again' }) }));
    assert.equal(res.uid, 'again');
  };

  test('a mutating handler answers with a base64 JSON patch', async () => {
    const res = responseOf(
      await post({ path: '/mutate?timeout=10s', body: admissionReview({ uid: 'u-1', object: pod() }) }),
    );
    assert.equal(res.uid, 'u-1');
    assert.equal(res.allowed, true);
    assert.equal(res.patchType, 'JSONPatch');
    assert.deepEqual(JSON.parse(Buffer.from(res.patch!, 'base64').toString('utf8')), [
      { op: 'add', path: '/metadata/labels', value: { 'berth.dev/seen': 'true' } },
    ]);
    assert.deepEqual(res.warnings, ['labelled']);
  });

  test('a denying handler answers allowed=false with its status', async () => {
    const res = responseOf(await post({ path: '/validate', body: admissionReview({ uid: 'u-2' }) }));
    assert.equal(res.uid, 'u-2');
    assert.equal(res.allowed, false);
    assert.deepEqual(res.status, { code: 403, message: 'pods are not welcome', reason: 'Forbidden' });
    assert.equal(res.patch, undefined);
  });

  test('a handler that throws is answered with code 500 and the server stays up', async () => {
    const res = responseOf(await post({ path: '/throw', body: admissionReview({ uid: 'u-3' }) }));
    assert.equal(res.allowed, false);
    assert.deepEqual(res.status, { code: 500, message: 'handler exploded' });
    await valid();
  });

  test('a handler that hangs past the timeout is answered allowed=false', async () => {
    const res = responseOf(await post({ path: '/hang', body: admissionReview({ uid: 'u-4' }) }));
    assert.equal(res.uid, 'u-4');
    assert.equal(res.allowed, false);
    assert.equal(res.status?.code, 500);
    assert.match(res.status?.message ?? '', /timed out/);
    await valid();
  });

  const malformed: [string, CallOptions, number][] = [
    ['a body that is not JSON', { body: '{"apiVersion": ' }, 400],
    ['JSON that is not an AdmissionReview', { body: '{"hello":"world"}' }, 400],
    ['a request without uid', { body: admissionReview({ uid: '' }) }, 400],
    [
      'a request with an unknown operation',
      { body: admissionReview({ uid: 'x', operation: 'PATCH' as 'CREATE' }) },
      400,
    ],
    ['the wrong content type', { body: admissionReview({ uid: 'x' }), contentType: 'text/plain' }, 400],
    // Would hold the event loop for tens of milliseconds in JSON.parse; refused after one pass over the bytes.
    ['JSON nested deeper than the apiserver sends', { body: '['.repeat(20_000) + ']'.repeat(20_000) }, 400],
    ['the wrong method', { method: 'GET' }, 405],
    ['an oversized body', { body: Buffer.alloc(100 * 1024, 'a') }, 413],
    ['an oversized chunked body', { body: Buffer.alloc(100 * 1024, 'a'), chunked: true }, 413],
    ['an unknown path', { path: '/nowhere', body: admissionReview({ uid: 'x' }) }, 404],
  ];
  for (const [what, opts, status] of malformed) {
    test(`${what} gets HTTP ${status} and the server stays up`, async () => {
      const reply = await post(opts);
      assert.equal(reply.status, status, reply.body);
      assert.match(reply.headers['content-type'] ?? '', /application\/json/);
      const body = JSON.parse(reply.body) as { kind: string; code: number; message: string };
      assert.equal(body.kind, 'Status');
      assert.equal(body.code, status);
      await valid();
    });
  }

  test('GET /healthz answers ok', async () => {
    const reply = await post({ path: '/healthz', method: 'GET' });
    assert.equal(reply.status, 200);
    assert.equal(reply.body, 'ok');
  });

  test('connections are kept alive between reviews', async () => {
    const agent = new https.Agent({ keepAlive: true, maxSockets: 1 });
    try {
      const first = await post({ path: '/validate', body: admissionReview({ uid: 'k-1' }), agent });
      const second = await post({ path: '/validate', body: admissionReview({ uid: 'k-2' }), agent });
      assert.equal(responseOf(first).uid, 'k-1');
      assert.equal(responseOf(second).uid, 'k-2');
      assert.equal(second.reusedSocket, true);
    } finally {
      agent.destroy();
    }
  });

  test('requests are counted per webhook name and code', async () => {
    await post({ path: '/mutate', body: admissionReview({ uid: 'm-1', object: pod() }) });
    // Counted in the webhook thread, and served with the main thread's metrics.
    const text = await metricsText();
    assert.match(text, /controller_runtime_webhook_requests_total\{webhook="label-pods",code="200"\} \d+/);
    assert.match(text, /webhook="label-pods",code="413"/);
  });
});

describe('WebhookServer in its thread', () => {
  const server = new WebhookServer({
    certificates: { kind: 'generated', dnsNames: ['localhost'], ipAddresses: ['127.0.0.1'] },
    port: 0,
    logger: quiet,
  });
  let ca = '';
  let state = 'one';
  let changed = () => {};
  const hints: unknown[] = [];
  const warnings = async (agent?: https.Agent) =>
    responseOf(await call(server.port, ca, { path: '/threaded', body: admissionReview({ uid: 't' }), agent }))
      .warnings!;

  before(async () => {
    server.register(
      '/threaded',
      echoState.fed(
        () => state,
        (c) => (changed = c),
        (uid) => hints.push(uid),
      ),
    );
    server.register(
      '/exit',
      exitThread.fed(
        () => undefined,
        () => {},
      ),
    );
    await server.start();
    ca = server.caBundle!;
  });

  after(() => server.stop());

  test('a threaded handler answers from the state last sent, and hears of a change', async () => {
    assert.equal((await warnings())[0], 'one');
    // Its hint reaches the main thread's onHint.
    const deadline0 = Date.now() + 2000;
    while (hints.length === 0) {
      assert.ok(Date.now() < deadline0, 'the hint never reached the main thread');
      await new Promise((r) => setTimeout(r, 10));
    }
    assert.deepEqual(hints, ['t']);
    state = 'two';
    changed();
    changed();
    const deadline = Date.now() + 2000;
    while ((await warnings())[0] !== 'two')
      assert.ok(Date.now() < deadline, 'the thread never heard of the change');
  });

  test('a thread that exits is started again on the same port, with the state as it is now', async () => {
    const port = server.port;
    await assert.rejects(call(port, ca, { path: '/exit', body: admissionReview({ uid: 'x' }) }));
    state = 'three';
    const deadline = Date.now() + 5000;
    for (;;) {
      const answer = await warnings().catch(() => undefined);
      if (answer?.[0] === 'three') break;
      assert.ok(Date.now() < deadline, 'no thread answers again');
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.equal(server.port, port);
  });

  test('a threaded handler answers while the main thread is busy', async () => {
    const agent = new https.Agent({ keepAlive: true, maxSockets: 1 });
    try {
      await warnings(agent); // the TLS handshake needs this thread: done before it is blocked
      const answered = Promise.withResolvers<string[]>();
      const req = https.request(
        { host: '127.0.0.1', port: server.port, path: '/threaded', method: 'POST', ca, agent },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () =>
            answered.resolve(
              (JSON.parse(Buffer.concat(chunks).toString()) as { response: ReviewResponse }).response
                .warnings!,
            ),
          );
        },
      );
      req.setHeader('content-type', 'application/json');
      req.end(admissionReview({ uid: 'busy' }));
      await once(req, 'finish');
      const busyFrom = Date.now();
      while (Date.now() - busyFrom < 500); // an informer's burst, a long collection
      const answeredAt = Number((await answered.promise)[1]);
      assert.ok(
        answeredAt < busyFrom + 500,
        `answered ${answeredAt - busyFrom} ms after the main thread was blocked for 500`,
      );
    } finally {
      agent.destroy();
    }
  });

  // Last: it drains the server.
  test('a thread started again while the replica drains closes each connection after its answer too', async () => {
    // A client that keeps connections alive: otherwise every answer closes its connection anyway.
    const agent = new https.Agent({ keepAlive: true });
    const threaded = (uid: string) =>
      call(server.port, ca, { path: '/threaded', body: admissionReview({ uid }), agent });
    try {
      assert.equal((await threaded('kept')).headers.connection, 'keep-alive', 'kept alive before the drain');
      server.drain();
      // The thread hears of the drain by a message, which may come after the next request.
      const drained = Date.now() + 2000;
      while ((await threaded('d')).headers.connection !== 'close')
        assert.ok(Date.now() < drained, 'the thread drains');
      await assert.rejects(call(server.port, ca, { path: '/exit', body: admissionReview({ uid: 'x' }) }));
      const deadline = Date.now() + 5000;
      for (;;) {
        const reply = await threaded('again').catch(() => undefined);
        if (reply?.status === 200) {
          assert.equal(reply.headers.connection, 'close');
          break;
        }
        assert.ok(Date.now() < deadline, 'no thread answers again');
        await new Promise((r) => setTimeout(r, 100));
      }
    } finally {
      agent.destroy();
    }
  });
});

describe('mutate', () => {
  const roundTrip = (before: KubeObject, after: KubeObject): JsonPatchOp[] => {
    const ops = mutate(before, after);
    assert.deepEqual(applyJsonPatch(before, ops), JSON.parse(JSON.stringify(after)));
    return ops;
  };

  test('adds a label to an object without labels, creating the map', () => {
    const before = pod();
    const after = { ...pod(), metadata: { ...pod().metadata, labels: { app: 'web' } } };
    assert.deepEqual(roundTrip(before, after), [
      { op: 'add', path: '/metadata/labels', value: { app: 'web' } },
    ]);
  });

  test('adds metadata to an object without any', () => {
    const ops = roundTrip({ kind: 'Pod' }, { kind: 'Pod', metadata: { labels: { a: 'b' } } });
    assert.deepEqual(ops, [{ op: 'add', path: '/metadata', value: { labels: { a: 'b' } } }]);
  });

  test('escapes / and ~ in keys', () => {
    const before: KubeObject = { metadata: { annotations: { 'berth.dev/zone': 'a', 'x~y': '1' } } };
    const after: KubeObject = {
      metadata: { annotations: { 'berth.dev/zone': 'b', 'x~y': '1', 'new/~key': 'v' } },
    };
    assert.deepEqual(roundTrip(before, after), [
      { op: 'replace', path: '/metadata/annotations/berth.dev~1zone', value: 'b' },
      { op: 'add', path: '/metadata/annotations/new~1~0key', value: 'v' },
    ]);
    assert.deepEqual(roundTrip(after, before), [
      { op: 'remove', path: '/metadata/annotations/new~1~0key' },
      { op: 'replace', path: '/metadata/annotations/berth.dev~1zone', value: 'a' },
    ]);
  });

  test('removes keys, including ones set to undefined', () => {
    const before: KubeObject = { metadata: { labels: { a: '1', b: '2' } }, spec: { x: 1, y: { z: 2 } } };
    const after: KubeObject = { metadata: { labels: { a: '1' } }, spec: { x: 1, y: undefined } };
    assert.deepEqual(roundTrip(before, after), [
      { op: 'remove', path: '/metadata/labels/b' },
      { op: 'remove', path: '/spec/y' },
    ]);
  });

  test('appends items to an unchanged array with add at /-', () => {
    const before: KubeObject = { spec: { tolerations: [{ key: 'a' }] } };
    const after: KubeObject = { spec: { tolerations: [{ key: 'a' }, { key: 'b' }, { key: 'c' }] } };
    assert.deepEqual(roundTrip(before, after), [
      { op: 'add', path: '/spec/tolerations/-', value: { key: 'b' } },
      { op: 'add', path: '/spec/tolerations/-', value: { key: 'c' } },
    ]);
  });

  test('replaces an array that changed in any other way', () => {
    const before: KubeObject = { spec: { containers: [{ name: 'a', image: 'x:1' }, { name: 'b' }] } };
    for (const containers of [[{ name: 'a', image: 'x:2' }, { name: 'b' }], [{ name: 'b' }], []]) {
      assert.deepEqual(roundTrip(before, { spec: { containers } }), [
        { op: 'replace', path: '/spec/containers', value: containers },
      ]);
    }
  });

  test('replaces values that change type, and leaves equal objects alone', () => {
    const before: KubeObject = { spec: { a: 'text', b: null, c: [1], d: { e: 1 } } };
    const after: KubeObject = { spec: { a: { now: 'object' }, b: 0, c: { 0: 1 }, d: { e: 1 } } };
    assert.deepEqual(roundTrip(before, after), [
      { op: 'replace', path: '/spec/a', value: { now: 'object' } },
      { op: 'replace', path: '/spec/b', value: 0 },
      { op: 'replace', path: '/spec/c', value: { 0: 1 } },
    ]);
    assert.deepEqual(mutate(before, structuredClone(before)), []);
  });
});

describe('nestedWithin', () => {
  const within = (text: string, max: number) => nestedWithin(Buffer.from(text), max);

  test('counts the nesting of arrays and objects', () => {
    assert.equal(within('{"a":[{"b":[1]}]}', 4), true);
    assert.equal(within('{"a":[{"b":[1]}]}', 3), false);
    assert.equal(within('[[],[],[[]]]', 3), true);
    assert.equal(within('[[],[],[[[]]]]', 3), false);
  });

  test('ignores brackets inside strings, escaped quotes included', () => {
    assert.equal(within('["[[[[{{{{"]', 1), true);
    assert.equal(within('["\\"[[[", "\\\\"]', 1), true);
    assert.equal(within('["\\\\", [[["x"]]]]', 3), false);
  });

  test('a body the apiserver could send passes', () => {
    // Go's encoding/json, and so the apiserver, decodes at most 10,000 levels; the review adds two.
    const object = '{"next":'.repeat(10_000) + '"leaf"' + '}'.repeat(10_000);
    assert.equal(within(`{"kind":"AdmissionReview","request":{"uid":"u","object":${object}}}`, 10_100), true);
    assert.equal(
      within(`{"kind":"AdmissionReview","request":{"uid":"u","object":[${object}]}}`, 10_002),
      false,
    );
  });
});

describe('WebhookServer limits', () => {
  const waiting: (() => void)[] = [];
  const server = new WebhookServer({
    certificates: { kind: 'generated', dnsNames: ['localhost'], ipAddresses: ['127.0.0.1'] },
    port: 0,
    maxRequestBytes: 64 * 1024,
    maxInFlightBytes: 48 * 1024,
    limits: { maxInFlight: 2 },
    logger: quiet,
  });
  let ca = '';
  const post = (opts: CallOptions) => call(server.port, ca, opts);
  const releaseAll = () => waiting.splice(0).forEach((release) => release());
  /** A review of about `bytes` bytes. */
  const sized = (uid: string, bytes: number) =>
    admissionReview({
      uid,
      object: { ...pod(), metadata: { name: 'p', annotations: { pad: 'x'.repeat(bytes) } } },
    });

  before(async () => {
    server.register('/wait', () => new Promise((resolve) => waiting.push(() => resolve({ allowed: true }))));
    server.register('/ok', () => ({ allowed: true }));
    await server.start();
    ca = server.caBundle!;
  });

  after(async () => {
    releaseAll();
    await server.stop();
  });

  test('a review beyond maxInFlight is answered 429 at once, without Retry-After, keeping the connection', async () => {
    const held = [1, 2].map((i) => post({ path: '/wait', body: admissionReview({ uid: `w-${i}` }) }));
    while (waiting.length < 2) await new Promise((r) => setTimeout(r, 5));
    const agent = new https.Agent({ keepAlive: true, maxSockets: 1 });
    try {
      const started = performance.now();
      const refused = await post({ path: '/ok', body: admissionReview({ uid: 'over' }), agent });
      assert.ok(performance.now() - started < 1000, 'answered at once');
      assert.equal(refused.status, 429, refused.body);
      // client-go retries only when told Retry-After; without it the apiserver applies failurePolicy now.
      assert.equal(refused.headers['retry-after'], undefined);
      assert.notEqual(refused.headers.connection, 'close');
      const status = JSON.parse(refused.body) as { kind: string; code: number; message: string };
      assert.equal(status.kind, 'Status');
      assert.equal(status.code, 429);
      assert.match(status.message, /over 2 admission requests in flight/);
      releaseAll();
      for (const reply of await Promise.all(held)) assert.equal(responseOf(reply).allowed, true);
      const again = await post({ path: '/ok', body: admissionReview({ uid: 'again' }), agent });
      assert.equal(responseOf(again).uid, 'again');
      assert.equal(again.reusedSocket, true);
    } finally {
      agent.destroy();
    }
  });

  test('bodies held together beyond maxInFlightBytes are answered 429 until the holder is answered', async () => {
    const holder = post({ path: '/wait', body: sized('big', 40 * 1024) });
    while (waiting.length < 1) await new Promise((r) => setTimeout(r, 5));
    const refused = await post({ path: '/ok', body: sized('more', 16 * 1024) });
    assert.equal(refused.status, 429, refused.body);
    assert.match(refused.body, /over 49152 bytes of admission requests in flight/);
    assert.equal(responseOf(await post({ path: '/ok', body: sized('small', 1024) })).uid, 'small');
    releaseAll();
    assert.equal(responseOf(await holder).uid, 'big');
    assert.equal(responseOf(await post({ path: '/ok', body: sized('more', 16 * 1024) })).uid, 'more');
  });

  test('bad limits are refused when the server is created', () => {
    assert.throws(
      () =>
        new WebhookServer({
          certificates: { kind: 'generated', dnsNames: ['localhost'] },
          limits: { headersTimeoutMs: 20_000 },
        }),
      /headers timeout \(20000 ms\) must not exceed the request timeout \(10000 ms\)/,
    );
  });
});

describe('WebhookServer with certificate files', () => {
  let dir = '';
  let ca: KeyPairPem & { issue: (cn: string) => Promise<KeyPairPem> };

  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'berth-webhook-'));
    const authority = await createCertificateAuthority('test-ca');
    ca = {
      ...authority,
      issue: (commonName) => authority.issue({ commonName, ipAddresses: ['127.0.0.1'], usage: 'server' }),
    };
  });

  after(() => rm(dir, { recursive: true, force: true }));

  const writePair = async (at: string, pair: KeyPairPem) => {
    await writeFile(path.join(at, 'tls.key'), pair.keyPem);
    await writeFile(path.join(at, 'tls.crt'), pair.certPem);
    await writeFile(path.join(at, 'ca.crt'), ca.certPem);
  };

  // What the server logged, to see that a reload was attempted and how it went.
  const messages: string[] = [];
  const logger = pino({ level: 'info' }, { write: (line: string) => messages.push(JSON.parse(line).msg) });

  const startOn = async (at: string, clientCa?: string) => {
    const server = new WebhookServer({
      ...(clientCa ? { clientCa } : {}),
      certificates: {
        kind: 'files',
        certFile: path.join(at, 'tls.crt'),
        keyFile: path.join(at, 'tls.key'),
        caFile: path.join(at, 'ca.crt'),
      },
      port: 0,
      logger,
    });
    await server.start();
    return server;
  };

  const servedName = async (server: WebhookServer) =>
    (await call(server.port, ca.certPem, { path: '/healthz', method: 'GET' })).commonName;

  const eventually = async (check: () => Promise<boolean>, what: string) => {
    const deadline = Date.now() + 3000;
    while (!(await check())) {
      if (Date.now() > deadline) assert.fail(`not within 3 s: ${what}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  };

  test('reloads rewritten files and keeps the old certificate when the new one is bad', async () => {
    const at = path.join(dir, 'plain');
    await mkdir(at);
    await writePair(at, await ca.issue('first'));
    const server = await startOn(at);
    try {
      assert.equal(server.caBundle, ca.certPem);
      assert.equal(await servedName(server), 'first');

      await writePair(at, await ca.issue('second'));
      await eventually(async () => (await servedName(server)) === 'second', 'serving CN=second');

      messages.length = 0;
      await writeFile(path.join(at, 'tls.crt'), 'not a certificate');
      await eventually(async () => messages.some((m) => m.includes('reload failed')), 'a failed reload');
      assert.equal(await servedName(server), 'second');
    } finally {
      await server.stop();
    }
  });

  test('with a client CA, refuses in the TLS handshake a client without a certificate it signs, also after a reload', async () => {
    const at = path.join(dir, 'client-ca');
    await mkdir(at);
    await writePair(at, await ca.issue('first'));
    const apiservers = await createCertificateAuthority('apiserver-clients');
    const apiserver = await apiservers.issue({ commonName: 'kube-apiserver', usage: 'client' });
    const tenant = await (
      await createCertificateAuthority('cluster')
    ).issue({ commonName: 'tenant', usage: 'client' });
    const server = await startOn(at, apiservers.certPem);
    const refused = async () =>
      Number(
        (await metricsText()).match(
          /berth_http_rejected_total\{server="webhook",reason="client_certificate"\} (\d+)/,
        )?.[1] ?? 0,
      );
    const healthz = (client?: KeyPairPem) =>
      call(server.port, ca.certPem, { path: '/healthz', method: 'GET', ...(client ? { client } : {}) });
    try {
      const before = await refused();
      await assert.rejects(healthz(), /certificate required|ECONNRESET|socket hang up/);
      await assert.rejects(healthz(tenant), /ECONNRESET|socket hang up|unknown ca/);
      assert.equal((await healthz(apiserver)).status, 200);
      assert.equal(await refused(), before + 2);
      await writePair(at, await ca.issue('second'));
      await eventually(async () => (await healthz(apiserver)).commonName === 'second', 'serving CN=second');
      await assert.rejects(healthz(tenant));
    } finally {
      await server.stop();
    }
  });

  test("follows a secret volume's atomic ..data symlink swap", async () => {
    const at = path.join(dir, 'volume');
    await mkdir(path.join(at, '..2026_01'), { recursive: true });
    await writePair(path.join(at, '..2026_01'), await ca.issue('first'));
    await symlink('..2026_01', path.join(at, '..data'));
    for (const file of ['tls.crt', 'tls.key', 'ca.crt']) {
      await symlink(path.join('..data', file), path.join(at, file));
    }
    const server = await startOn(at);
    try {
      assert.equal(await servedName(server), 'first');
      // What the kubelet's atomic writer does: new timestamped dir, new symlink, rename over ..data.
      await mkdir(path.join(at, '..2026_02'));
      await writePair(path.join(at, '..2026_02'), await ca.issue('second'));
      await symlink('..2026_02', path.join(at, '..data_tmp'));
      await rename(path.join(at, '..data_tmp'), path.join(at, '..data'));
      await rm(path.join(at, '..2026_01'), { recursive: true });
      await eventually(async () => (await servedName(server)) === 'second', 'serving CN=second');
    } finally {
      await server.stop();
    }
  });
});

describe('registration builders', () => {
  test('webhookClientConfig in url and service mode', () => {
    assert.deepEqual(webhookClientConfig({ url: 'https://127.0.0.1:9443/' }, '/mutate', 'PEM'), {
      url: 'https://127.0.0.1:9443/mutate',
      caBundle: Buffer.from('PEM').toString('base64'),
    });
    assert.deepEqual(webhookClientConfig({ service: { namespace: 'berth', name: 'berth-webhook' } }, '/v'), {
      service: { namespace: 'berth', name: 'berth-webhook', path: '/v' },
    });
  });

  test('configurations carry defaults and the given failurePolicy', () => {
    const clientConfig = webhookClientConfig({ url: 'https://h' }, '/m');
    const rules = [
      { operations: ['CREATE' as const], apiGroups: [''], apiVersions: ['v1'], resources: ['pods'] },
    ];
    const mutating = mutatingWebhookConfiguration({
      name: 'berth',
      webhooks: [{ name: 'pods.berth.dev', clientConfig, rules, failurePolicy: 'Ignore', timeoutSeconds: 3 }],
    });
    assert.deepEqual(mutating, {
      apiVersion: 'admissionregistration.k8s.io/v1',
      kind: 'MutatingWebhookConfiguration',
      metadata: { name: 'berth' },
      webhooks: [
        {
          name: 'pods.berth.dev',
          clientConfig,
          rules,
          failurePolicy: 'Ignore',
          timeoutSeconds: 3,
          admissionReviewVersions: ['v1'],
          sideEffects: 'None',
          matchPolicy: 'Equivalent',
        },
      ],
    });
    const validating = validatingWebhookConfiguration({
      name: 'berth',
      webhooks: [{ name: 'pods.berth.dev', clientConfig, rules, failurePolicy: 'Fail' }],
    });
    assert.equal(validating.kind, 'ValidatingWebhookConfiguration');
    assert.equal(validating.webhooks[0]?.timeoutSeconds, 5);
    assert.equal(validating.webhooks[0]?.failurePolicy, 'Fail');
  });
});
