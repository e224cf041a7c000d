import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import type { ServerResponse } from 'node:http';
import net from 'node:net';
import { Writable } from 'node:stream';
import { after, before, describe, mock, test } from 'node:test';
import { pino } from 'pino';
import {
  AddressConnections,
  ServerGuard,
  probeServerLimits,
  serve,
  serverOptions,
  type RunningServer,
  type ServerLimits,
} from '../../../src/runtime/server/http.ts';
import { rootLogger } from '../../../src/runtime/observability/log.ts';
import { registry } from '../../../src/runtime/observability/metrics.ts';

const quiet = rootLogger.child({}, { level: 'silent' });
const limits = (overrides: Partial<ServerLimits> = {}): ServerLimits => ({
  ...probeServerLimits,
  ...overrides,
});

/** The value of berth_http_rejected_total for one server and reason. */
async function rejected(server: string, reason: string): Promise<number> {
  const metric = await registry.getSingleMetric('berth_http_rejected_total')!.get();
  return (
    metric.values.find((v) => v.labels['server'] === server && v.labels['reason'] === reason)?.value ?? 0
  );
}

describe('serverOptions', () => {
  test('passes the timeouts to Node and checks connections often enough to honour them', () => {
    const o = serverOptions(limits({ headersTimeoutMs: 2000, requestTimeoutMs: 4000 }));
    assert.equal(o.headersTimeout, 2000);
    assert.equal(o.requestTimeout, 4000);
    assert.equal(o.handshakeTimeout, 2000);
    assert.equal(o.connectionsCheckingInterval, 500);
    // Never more than a second late, whatever the timeouts.
    assert.equal(
      serverOptions(limits({ headersTimeoutMs: 60_000, requestTimeoutMs: 60_000 }))
        .connectionsCheckingInterval,
      1000,
    );
  });

  const bad: [string, Partial<ServerLimits>, RegExp][] = [
    [
      'a headers timeout over the request timeout',
      { headersTimeoutMs: 5000, requestTimeoutMs: 4000 },
      /must not exceed/,
    ],
    ['no connections', { maxConnections: 0 }, /maxConnections must be a positive integer/],
    ['a fraction of a request', { maxInFlight: 1.5 }, /maxInFlight must be a positive integer/],
    ['a negative timeout', { keepAliveTimeoutMs: -1 }, /keepAliveTimeoutMs/],
    ['NaN', { requestTimeoutMs: NaN }, /requestTimeoutMs/],
    ['a negative request count', { maxRequestsPerConnection: -1 }, /non-negative/],
    [
      'more connections per address than in all',
      { maxConnections: 4, maxConnectionsPerAddress: 5 },
      /connections per address \(5\) must not exceed the connections \(4\)/,
    ],
  ];
  for (const [what, overrides, message] of bad) {
    test(`rejects ${what}`, () => assert.throws(() => serverOptions(limits(overrides)), message));
  }

  test('accepts no limit on requests per connection', () => {
    assert.doesNotThrow(() => serverOptions(limits({ maxRequestsPerConnection: 0 })));
  });
});

describe('AddressConnections', () => {
  test('admits up to its cap from each address, and again once one of them is released', () => {
    const open = new AddressConnections(2);
    assert.deepEqual(
      ['10.0.0.1', '10.0.0.1', '10.0.0.1', '10.0.0.2'].map((a) => open.admit(a)),
      [true, true, false, true],
    );
    open.release('10.0.0.1');
    assert.equal(open.admit('10.0.0.1'), true);
    assert.equal(open.admit('10.0.0.1'), false);
  });

  test('forgets an address once its last connection is released', () => {
    const open = new AddressConnections(2);
    open.admit('10.0.0.1');
    open.admit('10.0.0.2');
    open.release('10.0.0.1');
    assert.equal(open.addresses, 1);
    open.release('10.0.0.2');
    assert.equal(open.addresses, 0);
  });
});

/** A stand-in response: admit() only listens for its 'close'. */
const response = () => new EventEmitter() as unknown as ServerResponse;

describe('ServerGuard', () => {
  test('admits up to maxInFlight and frees a place when a response closes', async () => {
    const guard = new ServerGuard('guard-test', quiet, limits({ maxInFlight: 2 }));
    const [a, b, c] = [response(), response(), response()];
    const before = await rejected('guard-test', 'in_flight');
    assert.equal(guard.admit(a), true);
    assert.equal(guard.admit(b), true);
    assert.equal(guard.admit(c), false);
    assert.equal(await rejected('guard-test', 'in_flight'), before + 1);
    a.emit('close');
    assert.equal(guard.admit(c), true);
    assert.equal(guard.admit(response()), false);
  });

  test('logs a refusal at most once a minute per reason, with the count since the last line', () => {
    mock.timers.enable({ apis: ['Date'], now: 1_000_000 });
    try {
      const lines: { reason: string; count: number }[] = [];
      const sink = new Writable({
        write(chunk: Buffer, _enc, done) {
          lines.push(JSON.parse(chunk.toString()) as { reason: string; count: number });
          done();
        },
      });
      const guard = new ServerGuard('log-test', pino(sink), limits());
      for (let i = 0; i < 5; i++) guard.count('connections');
      guard.count('timeout');
      mock.timers.tick(59_000);
      guard.count('connections');
      mock.timers.tick(1_000);
      guard.count('connections');
      assert.deepEqual(
        lines.map((l) => [l.reason, l.count]),
        [
          ['connections', 1],
          ['timeout', 1],
          // Five more were refused in the minute after the first line.
          ['connections', 6],
        ],
      );
    } finally {
      mock.timers.reset();
    }
  });
});

describe('serve with limits', () => {
  let server: RunningServer;
  let release: () => void = () => {};
  const routeLimits = limits({
    headersTimeoutMs: 400,
    requestTimeoutMs: 400,
    maxConnections: 3,
    maxConnectionsPerAddress: 3,
    maxInFlight: 1,
  });

  before(async () => {
    server = (await serve(
      '127.0.0.1:0',
      'serve-test',
      {
        '/healthz': async () => ({ status: 200, body: 'ok\n' }),
        '/slow': () => new Promise((resolve) => (release = () => resolve({ status: 200, body: 'done\n' }))),
      },
      routeLimits,
      quiet,
    ))!;
  });

  after(() => server.close());

  const get = (path: string) => fetch(`http://127.0.0.1:${server.port}${path}`);

  test('answers 429 at once beyond maxInFlight, and serves again once the request in flight ends', async () => {
    const slow = get('/slow');
    // The first request reaches its route within a few turns of the event loop.
    let status = 0;
    for (let i = 0; i < 50 && status !== 429; i++) {
      await new Promise((r) => setTimeout(r, 10));
      status = (await get('/healthz')).status;
    }
    assert.equal(status, 429);
    release();
    assert.equal((await slow).status, 200);
    assert.equal((await get('/healthz')).status, 200);
  });

  test('drops a client that sends no complete headers within the headers timeout', async () => {
    const before = await rejected('serve-test', 'timeout');
    const socket = net.connect(server.port, '127.0.0.1');
    const started = performance.now();
    socket.write('GET /healthz HTTP/1.1\r\n');
    let answer = '';
    socket.on('data', (d: Buffer) => (answer += d.toString()));
    await new Promise((r) => socket.once('close', r));
    const ms = performance.now() - started;
    assert.match(answer, /^HTTP\/1\.1 408 Request Timeout/);
    assert.ok(ms >= 350 && ms < 400 + 400, `dropped after ${ms.toFixed(0)} ms`);
    assert.equal(await rejected('serve-test', 'timeout'), before + 1);
  });
});

/** A server of /healthz named `name` (its metrics' label), with `overrides` of the probe limits. */
const healthz = async (name: string, overrides: Partial<ServerLimits>): Promise<RunningServer> =>
  (await serve(
    '127.0.0.1:0',
    name,
    { '/healthz': async () => ({ status: 200, body: 'ok\n' }) },
    limits(overrides),
    quiet,
  ))!;

/** Whether `socket` is closed within `ms` (by the server: the client never closes it). */
const closedWithin = (socket: net.Socket, ms: number) =>
  new Promise<boolean>((resolve) => {
    socket.on('error', () => {});
    socket.once('close', () => resolve(true));
    setTimeout(() => resolve(false), ms);
  });

test('a connection that never sends a byte is closed at the headers timeout unanswered and uncounted; one that served a request idles on', async () => {
  const server = await healthz('silent-test', { headersTimeoutMs: 300, requestTimeoutMs: 300 });
  try {
    const connect = () => {
      const socket = net.connect(server.port, '127.0.0.1');
      const got = { text: '', closed: false };
      socket.on('data', (d: Buffer) => (got.text += d.toString()));
      socket.once('close', () => (got.closed = true));
      return { socket, got };
    };
    const silent = connect();
    const used = connect();
    used.socket.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
    const started = performance.now();
    await new Promise((r) => silent.socket.once('close', r));
    const ms = performance.now() - started;
    assert.ok(ms >= 250 && ms < 300 + 400, `closed after ${ms.toFixed(0)} ms`);
    assert.equal(silent.got.text, '', 'no answer to a request never sent');
    assert.equal(await rejected('silent-test', 'timeout'), 0);
    // The keep-alive timeout governs a connection between requests, not the headers timeout.
    await new Promise((r) => setTimeout(r, 700));
    assert.match(used.got.text, /^HTTP\/1\.1 200 OK/);
    assert.equal(used.got.closed, false);
    used.socket.destroy();
  } finally {
    await server.close();
  }
});

test('serve closes connections over maxConnections as they are accepted', async () => {
  const server = await healthz('connections-test', { maxConnections: 3, maxConnectionsPerAddress: 3 });
  try {
    const sockets = Array.from({ length: 5 }, () => net.connect(server.port, '127.0.0.1'));
    const closed = await Promise.all(sockets.map((s) => closedWithin(s, 300)));
    assert.equal(closed.filter(Boolean).length, 2, 'two of five connections closed at once');
    assert.equal(await rejected('connections-test', 'connections'), 2);
    for (const s of sockets) s.destroy();
    await new Promise((r) => setTimeout(r, 50));
    assert.equal((await fetch(`http://127.0.0.1:${server.port}/healthz`)).status, 200);
  } finally {
    await server.close();
  }
});

test('serve closes connections from one address over maxConnectionsPerAddress at once, and answers another address', async () => {
  const server = await healthz('per-address-test', { maxConnections: 8, maxConnectionsPerAddress: 3 });
  try {
    // Linux routes all of 127/8 to the loopback interface: 127.0.0.2 is another client's address.
    const held = Array.from({ length: 5 }, () =>
      net.connect({ port: server.port, host: '127.0.0.1', localAddress: '127.0.0.2' }),
    );
    const closed = await Promise.all(held.map((s) => closedWithin(s, 300)));
    assert.equal(closed.filter(Boolean).length, 2, 'two of five connections from one address closed at once');
    assert.equal(await rejected('per-address-test', 'connections_per_address'), 2);
    assert.equal((await fetch(`http://127.0.0.1:${server.port}/healthz`)).status, 200);
    for (const s of held) s.destroy();
    // Their places are free again once they closed.
    await new Promise((r) => setTimeout(r, 50));
    const again = net.connect({ port: server.port, host: '127.0.0.1', localAddress: '127.0.0.2' });
    assert.equal(await closedWithin(again, 300), false);
    again.destroy();
  } finally {
    await server.close();
  }
});
