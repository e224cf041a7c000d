// test-driver: alone — it loads the machine on purpose (hundreds of connections); files beside it
// would measure that load, and it theirs.
//
// Berth's webhook server under abuse, in a process of its own with `berth run`'s --webhook-* flags
// (test/fixtures/webhook-server.ts) and registered with the sandbox's apiserver: oversize and
// malformed bodies, slow headers and bodies, idle connections, many concurrent clients, a
// connection flood, a client that never reads, one address holding the connections, and a tenant
// forging a review. After each case the server still answers well-formed reviews within the
// registration's 2 s, the apiserver's reviews included, and its process is healthy. It takes only
// clients with the apiserver's webhook client certificate (--webhook-client-ca), which this file
// presents as the apiserver does. Loopback only (127/8: several client addresses); every case is
// bounded by the server's short timeouts.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import https from 'node:https';
import net from 'node:net';
import { createInterface } from 'node:readline';
import { after, before, describe, test } from 'node:test';
import tls from 'node:tls';
import { fileURLToPath } from 'node:url';
import { parse as parseYaml } from 'yaml';
import { isNotFound } from '../../src/runtime/client/client.ts';
import { Resources, type KubeObject } from '../../src/runtime/api/meta.ts';
import type { MutatingWebhook } from '../../src/runtime/webhook/configuration.ts';
import {
  createNamespace,
  deleteNamespace,
  podManifest,
  testSandbox,
  uniqueName,
} from '../helpers/cluster.ts';
import { berthKubeconfig, removeBerthIdentity } from '../helpers/berth.ts';
import { settles, sleep, waitFor } from '../helpers/wait.ts';
import { admissionReview } from '../helpers/admission.ts';

const sandbox = testSandbox();
const client = sandbox.client();
const fixture = fileURLToPath(new URL('../fixtures/webhook-server.ts', import.meta.url));
const key = uniqueName('abuse');
const label = 'berth.test/abuse';
const annotation = 'berth.test/mutated-by';

// Short timeouts keep every case to seconds; the rest as `berth run` would have them.
const headerTimeoutMs = 2000;
const requestTimeoutMs = 4000;
const handlerTimeoutMs = 5000; // WebhookServer's default; not a flag
const maxConnections = 600;
// berth run's default: half of the connections.
const maxConnectionsPerAddress = 300;
const maxInFlight = 100;
const maxRequestBytes = 256 * 1024;
const maxRequestsPerConnection = 1000;
const flags = [
  `--webhook-header-timeout=${headerTimeoutMs / 1000}`,
  `--webhook-request-timeout=${requestTimeoutMs / 1000}`,
  `--webhook-max-connections=${maxConnections}`,
  `--webhook-max-in-flight=${maxInFlight}`,
  `--webhook-max-request-bytes=${maxRequestBytes}`,
  `--webhook-max-in-flight-bytes=${4 * 1024 * 1024}`,
  `--webhook-max-requests-per-connection=${maxRequestsPerConnection}`,
  `--webhook-client-ca=${sandbox.webhookClientCa}`,
];
// The apiserver's webhook client certificate: what this file presents to call the webhook as it does.
const apiserverCertificate = sandbox.webhookClientCertificate;
assert.ok(apiserverCertificate, 'the sandbox presents no client certificate to webhooks: start it again');
// Node checks its connections' timeouts every quarter of the headers timeout; the rest is this
// busy two-core machine's scheduling.
const slackMs = 1500;
// The registration's timeoutSeconds: what "promptly" has to mean for the apiserver.
const promptMs = 2000;

interface Stats {
  rssMB: number;
  lagMs: number;
}

/** The fixture process: Berth's webhook server and metrics server. */
class Server {
  readonly child: ChildProcess;
  readonly output: string[] = [];
  stats: Stats[] = [];
  readonly ready: Promise<{ metricsPort: number }>;

  constructor(berthNs: string, kubeconfig: string) {
    this.child = spawn(process.execPath, [fixture, kubeconfig, berthNs, key, label, annotation, ...flags], {
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let ready!: (v: { metricsPort: number }) => void;
    this.ready = new Promise((resolve) => (ready = resolve));
    for (const stream of [this.child.stdout!, this.child.stderr!]) {
      createInterface({ input: stream }).on('line', (line) => {
        this.output.push(line);
        if (this.output.length > 50) this.output.shift();
        let said: { fixture?: string } & Partial<Stats> & { metricsPort?: number };
        try {
          said = JSON.parse(line) as typeof said;
        } catch {
          return;
        }
        if (said.fixture === 'ready') ready({ metricsPort: said.metricsPort! });
        if (said.fixture === 'stats') this.stats.push({ rssMB: said.rssMB!, lagMs: said.lagMs! });
      });
    }
  }

  /** The sum of the samples whose text starts with `prefix`, e.g. `berth_http_connections{server="webhook"}`. */
  async metric(prefix: string): Promise<number> {
    const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
    return text
      .split('\n')
      .filter((l) => l.startsWith(prefix))
      .reduce((sum, l) => sum + Number(l.split(' ').pop()), 0);
  }

  rejected(reason: string): Promise<number> {
    return this.metric(`berth_http_rejected_total{server="webhook",reason="${reason}"}`);
  }
}

let ns: string;
let berthNs: string;
/** Berth's identity for the fixture: its roles in its namespace, registering the configuration named `key`. */
const identity = () => ({ name: key, namespace: berthNs, webhookConfiguration: key });
let server: Server;
let metricsPort: number;
let url: URL;
/** The CA of the webhook's serving certificate. */
let caBundle: string;
// One TLS context for every client: building one per connection would make this process, not the server, the bottleneck.
let secureContext: tls.SecureContext;
// An established keep-alive connection, as the apiserver holds them.
const pooled = new https.Agent({ keepAlive: true, maxSockets: 1 });

before(async () => {
  [ns, berthNs] = await Promise.all([
    createNamespace(client, 'abuse'),
    createNamespace(client, 'abuse-berth'),
  ]);
  server = new Server(berthNs, await berthKubeconfig(sandbox, identity()));
  ({ metricsPort } = await Promise.race([
    server.ready,
    new Promise<never>((_, reject) =>
      server.child.once('exit', (code) =>
        reject(new Error(`fixture exited with ${code}:\n${server.output.join('\n')}`)),
      ),
    ),
  ]));
  const config = await client.get(Resources.mutatingWebhookConfigurations, key);
  const hook = (config['webhooks'] as MutatingWebhook[]).find((w) =>
    w.clientConfig.url?.endsWith('/mutate-ignore'),
  )!;
  url = new URL(hook.clientConfig.url!);
  caBundle = Buffer.from(hook.clientConfig.caBundle!, 'base64').toString();
  secureContext = tls.createSecureContext({ ca: caBundle, ...apiserverCertificate });
  // The apiserver's webhook cache is eventually consistent: wait until its reviews arrive.
  await waitFor(
    'a pod mutated through the webhook',
    async () => (await createPod('fail')).mutated || undefined,
  );
});

after(async () => {
  pooled.destroy();
  server?.child.stdin!.end();
  await client.delete(Resources.mutatingWebhookConfigurations, key).catch((e) => {
    if (!isNotFound(e)) throw e;
  });
  await Promise.all([deleteNamespace(client, ns), deleteNamespace(client, berthNs)]);
  await removeBerthIdentity(client, identity());
  client.close();
});

const reviewBody = (uid: string) =>
  admissionReview({
    uid,
    userInfo: { username: 'abuse-test' },
    object: podManifest({ name: uid, namespace: 'abuse', labels: { [label]: `${key}-ignore` } }),
  });

interface Reply {
  status: number;
  ms: number;
  body: string;
  headers: Record<string, string | string[] | undefined>;
}

/**
 * POSTs `body` to the webhook as the apiserver (its client certificate) unless another TLS context is
 * given; a fresh connection unless an agent is given. Rejects on a connection error.
 */
function post(
  body: string | Buffer,
  opts: {
    agent?: https.Agent;
    headers?: Record<string, string | number>;
    chunked?: boolean;
    as?: tls.SecureContext;
  } = {},
): Promise<Reply> {
  const started = performance.now();
  return new Promise((resolve, reject) => {
    // https passes secureContext on to tls.connect; its types do not say so.
    const options: https.RequestOptions & tls.ConnectionOptions = {
      method: 'POST',
      secureContext: opts.as ?? secureContext,
      agent: opts.agent ?? false,
      headers: { 'content-type': 'application/json', ...opts.headers },
    };
    const req = https.request(url, options, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () =>
        resolve({
          status: res.statusCode!,
          ms: performance.now() - started,
          body: Buffer.concat(chunks).toString(),
          headers: res.headers,
        }),
      );
      res.on('error', reject);
    });
    req.on('error', reject);
    if (opts.chunked) {
      req.write(body.slice(0, 1024));
      req.end(body.slice(1024));
    } else req.end(body);
  });
}

/** A well-formed review answered with a patch within the registration's timeout. */
async function assertAnswered(what: string, agent: https.Agent = pooled): Promise<number> {
  const uid = uniqueName('probe');
  const reply = await post(reviewBody(uid), { agent });
  assert.equal(reply.status, 200, `${what}: ${reply.body}`);
  const response = (JSON.parse(reply.body) as { response: { uid: string; allowed: boolean; patch?: string } })
    .response;
  assert.equal(response.uid, uid);
  assert.ok(response.patch, `${what}: the review came back without its patch`);
  assert.ok(reply.ms < promptMs, `${what}: answered after ${reply.ms.toFixed(0)} ms`);
  return reply.ms;
}

/** The process is alive, its event loop has not stalled and its memory is bounded; both servers answer. */
async function assertHealthy(what: string): Promise<void> {
  assert.equal(server.child.exitCode, null, `${what}: the server exited:\n${server.output.join('\n')}`);
  await waitFor(`${what}: stats from the server`, () => server.stats.length > 0, { timeoutMs: 2000 });
  const recent = server.stats.slice(-8);
  server.stats = [];
  const lag = Math.max(...recent.map((s) => s.lagMs));
  const rss = Math.max(...recent.map((s) => s.rssMB));
  assert.ok(lag < promptMs, `${what}: the event loop stalled for ${lag} ms`);
  assert.ok(rss < 512, `${what}: ${rss} MB resident`);
  await assertAnswered(`${what}, on a new connection`, new https.Agent({ keepAlive: false }));
  await assertAnswered(`${what}, on a pooled connection`);
  assert.equal((await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).status, 200);
}

/** Creates a pod through the apiserver under the Fail or the Ignore webhook. */
async function createPod(
  policy: 'fail' | 'ignore',
): Promise<{ ms: number; mutated?: boolean; error?: string }> {
  const started = performance.now();
  try {
    const pod = await client.create<KubeObject>(
      Resources.pods,
      podManifest({ name: uniqueName('pod'), namespace: ns, labels: { [label]: `${key}-${policy}` } }),
    );
    return { ms: performance.now() - started, mutated: pod.metadata?.annotations?.[annotation] === key };
  } catch (e) {
    return { ms: performance.now() - started, error: String(e) };
  }
}

/** Resolves with the milliseconds until `socket` closes, from now (Infinity after 15 s). */
function closesAfter(socket: net.Socket): Promise<number> {
  const started = performance.now();
  socket.on('error', () => {});
  socket.resume();
  return new Promise((resolve) => {
    // A server that never lets go fails the case instead of hanging the run.
    const giveUp = setTimeout(() => {
      resolve(Infinity);
      socket.destroy();
    }, 15_000);
    socket.once('close', () => {
      clearTimeout(giveUp);
      resolve(performance.now() - started);
    });
  });
}

/** The server's open connections, once the closing ones are gone (the count holds for 300 ms). */
const settledConnections = (): Promise<number> =>
  settles('the open connections', () => server.metric('berth_http_connections{server="webhook"}'), {
    quietMs: 300,
  });

/** A TLS connection to the webhook server, handshake done. */
function connectTls(): Promise<tls.TLSSocket> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ host: url.hostname, port: Number(url.port), secureContext }, () =>
      resolve(socket),
    );
    socket.once('error', reject);
  });
}

/** Connections that send their request one piece every `everyMs`; resolves with when each was dropped. */
function slowClients(n: number, head: string, piece: string, everyMs: number): Promise<number[]> {
  return Promise.all(
    Array.from({ length: n }, async () => {
      const socket = await connectTls();
      const dropped = closesAfter(socket);
      // Answered (refused over a limit) rather than dropped: let go.
      socket.once('data', () => socket.destroy());
      socket.write(head);
      const timer = setInterval(() => socket.writable && socket.write(piece), everyMs);
      return dropped.finally(() => clearInterval(timer));
    }),
  );
}

/**
 * Keeps `n` connections open from `address` that never start TLS, each dialled again a moment after
 * the server closes it, as a client set on holding the server's connections does; until stopped.
 */
function holdConnections(address: string, n: number): { stop(): void } {
  let stopped = false;
  const sockets = new Set<net.Socket>();
  const dial = () => {
    if (stopped) return;
    const socket = net.connect({ port: Number(url.port), host: url.hostname, localAddress: address });
    sockets.add(socket);
    socket.on('error', () => {});
    // Not at once: a socket closed as accepted would otherwise make this a busy loop.
    socket.once('close', () => (sockets.delete(socket), setTimeout(dial, 250)));
  };
  for (let i = 0; i < n; i++) dial();
  return {
    stop: () => {
      stopped = true;
      for (const socket of sockets) socket.destroy();
    },
  };
}

const requestHead = (extra = '') =>
  `POST ${url.pathname} HTTP/1.1\r\nHost: ${url.host}\r\nContent-Type: application/json\r\n${extra}`;

// Every case takes seconds.
const bounded = { timeout: 30_000 };

/** Min-max of drop times, for the test report. */
const range = (ms: number[]) => `${Math.min(...ms).toFixed(0)}-${Math.max(...ms).toFixed(0)} ms`;

describe('the webhook server under abuse', () => {
  before(() => assertAnswered('before any abuse'));

  test(
    'oversize bodies are refused with 413 and the connection closed, alone or many at once',
    bounded,
    async () => {
      const refusals = () =>
        server.metric(
          `controller_runtime_webhook_requests_total{webhook="ignore.abuse.test.berth.dev",code="413"}`,
        );
      const before = await refusals();
      // The server answers and closes rather than read on, so a client still sending may see a reset first.
      const refused = (what: string, reply: Reply | NodeJS.ErrnoException) => {
        if (reply instanceof Error)
          assert.match(reply.code ?? '', /^(EPIPE|ECONNRESET)$/, `${what}: ${reply.message}`);
        else {
          assert.equal(reply.status, 413, `${what}: ${reply.body}`);
          assert.equal(reply.headers['connection'], 'close', what);
        }
      };
      const big = Buffer.alloc(maxRequestBytes + 1, 'a');
      const failed = (e: NodeJS.ErrnoException) => e;
      refused('declared', await post(big).catch(failed));
      refused('chunked', await post(big, { chunked: true }).catch(failed));
      for (const reply of await Promise.all(
        Array.from({ length: 40 }, () => post(Buffer.alloc(2 ** 20)).catch(failed)),
      )) {
        refused('one of many', reply);
      }
      // A length far beyond the limit is refused before a byte of the body is read.
      const socket = await connectTls();
      const closed = closesAfter(socket);
      let answer = '';
      socket.on('data', (d: Buffer) => (answer += d.toString()));
      socket.write(requestHead(`Content-Length: ${2 ** 30}\r\n\r\n`) + '{"a":');
      assert.ok((await closed) < promptMs);
      assert.match(answer, /^HTTP\/1\.1 413 /);
      // Counted when each answer is done, which may be after the client saw its connection reset.
      await waitFor('43 requests counted with code 413', async () => (await refusals()) === before + 43, {
        timeoutMs: 2000,
        observe: refusals,
      });
      await assertHealthy('after oversize bodies');
    },
  );

  test('malformed bodies are refused with 400, alone or many at once', bounded, async () => {
    const bad = [
      'not json',
      '{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{',
      '['.repeat(100_000) + ']'.repeat(100_000),
      '{"a":'.repeat(40_000) + '1' + '}'.repeat(40_000),
      JSON.stringify({ apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', request: { uid: 'x' } }),
      JSON.stringify({ apiVersion: 'v1', kind: 'Pod' }),
      Buffer.from(Array.from({ length: 4096 }, (_, i) => (i * 7919) % 256)),
      '"' + '\\u0000'.repeat(20_000) + '"',
    ];
    for (const body of bad) {
      const reply = await post(body, { agent: pooled });
      assert.equal(reply.status, 400, `${String(body).slice(0, 40)}: ${reply.body}`);
    }
    // Over twenty connections, as a pool would send them.
    const agent = new https.Agent({ keepAlive: true, maxSockets: 20 });
    try {
      const many = await Promise.all(
        Array.from({ length: 200 }, (_, i) => post(bad[i % bad.length]!, { agent })),
      );
      assert.deepEqual([...new Set(many.map((r) => r.status))], [400]);
    } finally {
      agent.destroy();
    }
    await assertHealthy('after malformed bodies');
  });

  test(
    'slow headers are dropped within the headers timeout while reviews are answered',
    bounded,
    async (t) => {
      const before = await server.rejected('timeout');
      const drops = slowClients(100, requestHead(), 'X-Slow: 1\r\n', 100);
      await sleep(300);
      await assertAnswered('while slow headers arrive');
      const ms = await drops;
      t.diagnostic(`slow headers dropped after ${range(ms)}`);
      assert.ok(
        Math.max(...ms) < headerTimeoutMs + slackMs,
        `the last dropped after ${Math.max(...ms).toFixed(0)} ms`,
      );
      // Dropped for their timeout, not for anything else.
      assert.ok((await server.rejected('timeout')) >= before + 100);
      await assertHealthy('after slow headers');
    },
  );

  test(
    'connections that never complete a TLS handshake, or never send a request, are dropped',
    bounded,
    async (t) => {
      const silentTcp = Array.from({ length: 100 }, () =>
        closesAfter(net.connect(Number(url.port), url.hostname)),
      );
      const silentTls = (await Promise.all(Array.from({ length: 100 }, connectTls))).map(closesAfter);
      const ms = await Promise.all([...silentTcp, ...silentTls]);
      t.diagnostic(`silent connections dropped after ${range(ms)}`);
      assert.ok(
        Math.max(...ms) < headerTimeoutMs + slackMs,
        `the last dropped after ${Math.max(...ms).toFixed(0)} ms`,
      );
      await assertHealthy('after silent connections');
    },
  );

  test(
    'slow bodies are dropped within the request timeout while reviews are answered',
    bounded,
    async (t) => {
      const before = await server.rejected('timeout');
      const drops = slowClients(50, requestHead('Content-Length: 10000\r\n\r\n'), ' ', 200);
      await sleep(500);
      await assertAnswered('while slow bodies arrive');
      const ms = await drops;
      t.diagnostic(`slow bodies dropped after ${range(ms)}`);
      assert.ok(
        Math.max(...ms) < requestTimeoutMs + slackMs,
        `the last dropped after ${Math.max(...ms).toFixed(0)} ms`,
      );
      assert.ok((await server.rejected('timeout')) >= before + 50);
      await assertHealthy('after slow bodies');
    },
  );

  test(
    'beyond the in-flight limit reviews are refused at once, and the apiserver applies failurePolicy without waiting',
    bounded,
    async (t) => {
      // Slow bodies are requests in flight until the request timeout drops them, each that long after
      // its head: more of them than the limit, so that it is reached even when their connections come
      // seconds apart on a loaded machine (those over it are refused, and let go at their answer).
      const drops = slowClients(maxInFlight + 20, requestHead('Content-Length: 10000\r\n\r\n'), ' ', 200);
      const inFlight = () => server.metric('controller_runtime_webhook_requests_in_flight{');
      await waitFor('the limit reached', async () => (await inFlight()) >= maxInFlight, {
        timeoutMs: requestTimeoutMs,
        intervalMs: 20,
        observe: inFlight,
      });
      const refused = await waitFor(
        'a review refused for load',
        async () => {
          const reply = await post(reviewBody(uniqueName('over')), { agent: pooled });
          return reply.status === 429 ? reply : undefined;
        },
        { timeoutMs: requestTimeoutMs, intervalMs: 20 },
      );
      assert.ok(refused.ms < 500, `refused after ${refused.ms.toFixed(0)} ms`);
      assert.equal(refused.headers['retry-after'], undefined);
      assert.match(refused.body, new RegExp(`over ${maxInFlight} admission requests in flight`));
      // Through the apiserver, well within the webhook's 2 s timeout: Fail refuses, Ignore admits unmutated.
      const [failed, ignored] = await Promise.all([createPod('fail'), createPod('ignore')]);
      assert.match(
        failed.error ?? '',
        /failed calling webhook[\s\S]*admission requests in flight/,
        JSON.stringify(failed),
      );
      t.diagnostic(
        `refused in ${refused.ms.toFixed(0)} ms; through the apiserver Fail in ${failed.ms.toFixed(0)} ms, Ignore in ${ignored.ms.toFixed(0)} ms`,
      );
      assert.ok(failed.ms < 1500, `Fail answered after ${failed.ms.toFixed(0)} ms`);
      assert.equal(ignored.error, undefined, ignored.error);
      assert.equal(ignored.mutated, false);
      assert.ok(ignored.ms < 1500, `Ignore answered after ${ignored.ms.toFixed(0)} ms`);
      await drops;
      await assertHealthy('after the in-flight limit was reached');
      const again = await createPod('fail');
      assert.equal(again.mutated, true, JSON.stringify(again));
    },
  );

  test('many concurrent clients are answered within the timeout or refused at once', bounded, async (t) => {
    const clients = 500;
    const answered: number[] = [];
    const refused: number[] = [];
    const failures: string[] = [];
    const record = (reply: Reply | Error) => {
      if (reply instanceof Error) failures.push(reply.message);
      else if (reply.status === 200) answered.push(reply.ms);
      else if (reply.status === 429) refused.push(reply.ms);
      else failures.push(`HTTP ${reply.status}`);
    };
    // Connected fifty at a time, as a pool grows: one process cannot do 500 TLS handshakes at once
    // within the handshake timeout (the benchmark, in Go, measures that storm).
    // From four addresses, as many clients would come: one address may keep only half the connections.
    const agents = Array.from(
      { length: clients },
      (_, c) => new https.Agent({ keepAlive: true, maxSockets: 1, localAddress: `127.0.0.${10 + (c % 4)}` }),
    );
    try {
      for (let i = 0; i < clients; i += 50) {
        const batch = agents.slice(i, i + 50);
        (
          await Promise.all(
            batch.map((agent, j) => post(reviewBody(`warm-${i + j}`), { agent }).catch((e: Error) => e)),
          )
        ).forEach(record);
      }
      const until = performance.now() + 3000;
      await Promise.all(
        agents.map(async (agent, c) => {
          for (let i = 0; performance.now() < until; i++) {
            record(await post(reviewBody(`c-${c}-${i}`), { agent }).catch((e: Error) => e));
          }
        }),
      );
    } finally {
      for (const agent of agents) agent.destroy();
    }
    const p99 = (ms: number[]) => [...ms].sort((a, b) => a - b)[Math.ceil(ms.length * 0.99) - 1] ?? 0;
    t.diagnostic(
      `${answered.length} answered (p99 ${p99(answered).toFixed(0)} ms), ${refused.length} refused (p99 ${p99(refused).toFixed(0)} ms)`,
    );
    assert.deepEqual(failures, []);
    assert.ok(answered.length >= 2 * clients, `${answered.length} answered`);
    assert.ok(p99(answered) < promptMs, `answered p99 ${p99(answered).toFixed(0)} ms`);
    assert.ok(p99(refused) < promptMs, `refused p99 ${p99(refused).toFixed(0)} ms`);
    await assertHealthy('after many concurrent clients');
  });

  test('a client that pipelines reviews and never reads the answers is let go', bounded, async (t) => {
    const handled = () =>
      server.metric('controller_runtime_webhook_requests_total{webhook="ignore.abuse.test.berth.dev",');
    const open = () => server.metric('berth_http_connections{server="webhook"}');
    const before = await settledConnections();
    const handledBefore = await handled();
    const socket = await connectTls();
    socket.on('error', () => {});
    socket.pause();
    const started = performance.now();
    // Five times what a connection may carry, and not a byte read back.
    const body = reviewBody('unread');
    const request = `${requestHead(`Content-Length: ${Buffer.byteLength(body)}\r\n\r\n`)}${body}`;
    for (let i = 0; i < 5 * maxRequestsPerConnection; i++) socket.write(request);
    await waitFor('the server to let the connection go', async () => (await open()) <= before, {
      timeoutMs: requestTimeoutMs + handlerTimeoutMs + slackMs,
      intervalMs: 250,
    });
    const ms = performance.now() - started;
    socket.destroy();
    t.diagnostic(`let go after ${ms.toFixed(0)} ms`);
    assert.ok(ms < requestTimeoutMs + handlerTimeoutMs + slackMs, `let go after ${ms.toFixed(0)} ms`);
    // Node stops parsing while answers queue up and drops a client that keeps sending; the
    // requests-per-connection limit and the inactivity timeout bound the rest.
    const served = (await handled()) - handledBefore;
    assert.ok(served > 0 && served <= maxRequestsPerConnection, `${served} of the pipelined reviews handled`);
    await assertHealthy('after a client that never reads');
  });

  test(
    'a connection flood beyond the limit is refused at once while pooled connections are answered',
    bounded,
    async (t) => {
      const open = () => server.metric('berth_http_connections{server="webhook"}');
      const baseline = await settledConnections();
      const refusedBefore = await server.rejected('connections');
      const flood = maxConnections + 300;
      const lifetimes: number[] = [];
      // From three addresses, each within its own limit: what is refused here is over the server's.
      const sockets = Array.from({ length: flood }, (_, i) => {
        const socket = net.connect({
          port: Number(url.port),
          host: url.hostname,
          localAddress: `127.0.0.${20 + (i % 3)}`,
        });
        let connected = 0;
        socket.on('error', () => {});
        socket.once('connect', () => (connected = performance.now()));
        socket.once('close', () => connected && lifetimes.push(performance.now() - connected));
        return socket;
      });
      try {
        await sleep(200);
        await assertAnswered('during the flood');
        // Over the limit, closed as they are accepted; the others, when their TLS handshake times out.
        await waitFor(
          'the connections over the limit refused',
          async () => (await server.rejected('connections')) >= refusedBefore + flood - maxConnections,
          { timeoutMs: 2000 },
        );
        await waitFor('the flood dropped', async () => (await open()) <= baseline, {
          timeoutMs: headerTimeoutMs + 2 * slackMs,
        });
      } finally {
        for (const socket of sockets) socket.destroy();
      }
      const refusedAtOnce = lifetimes.filter((ms) => ms < 500).length;
      t.diagnostic(`${refusedAtOnce} of ${flood} closed within 500 ms of connecting`);
      assert.ok(
        refusedAtOnce >= flood - maxConnections,
        `${refusedAtOnce} closed within 500 ms of connecting`,
      );
      await assertHealthy('after the connection flood');
    },
  );

  test(
    "one address holding the server's connections leaves the apiserver room: its reviews are answered",
    bounded,
    async (t) => {
      const refusedBefore = await server.rejected('connections_per_address');
      // More than the server keeps in all, from an address that is not the apiserver's.
      const holder = holdConnections('127.0.0.2', maxConnections + 100);
      try {
        // Its connections are open within a moment (the connection flood's are).
        await sleep(500);
        // More pods at once than the apiserver keeps idle connections to the webhook: it dials anew.
        const pods = await Promise.all(Array.from({ length: 20 }, () => createPod('fail')));
        const failed = pods.filter((p) => !p.mutated);
        t.diagnostic(
          `${pods.length - failed.length} of ${pods.length} pods mutated in ${Math.max(...pods.map((p) => p.ms)).toFixed(0)} ms at most`,
        );
        assert.deepEqual(failed, []);
        assert.ok((await server.rejected('connections_per_address')) > refusedBefore);
        const open = await server.metric('berth_http_connections{server="webhook"}');
        assert.ok(open <= maxConnectionsPerAddress + 50, `${open} connections open`);
      } finally {
        holder.stop();
      }
      await assertHealthy('after one address held the connections');
    },
  );

  test(
    "a tenant's forged review, without the apiserver's client certificate, is refused in the TLS handshake",
    bounded,
    async () => {
      // A namespace user of the cluster, as `berth sandbox user` mints one: its certificate is signed
      // by the cluster's CA, which is not the apiserver's webhook client CA.
      const user = (
        parseYaml(readFileSync(await sandbox.mintUser(uniqueName('tenant'), ['tenants']), 'utf8')) as {
          users: { user: Record<string, string> }[];
        }
      ).users[0]!.user;
      const asTenant = tls.createSecureContext({
        ca: caBundle,
        cert: Buffer.from(user['client-certificate-data']!, 'base64'),
        key: Buffer.from(user['client-key-data']!, 'base64'),
      });
      const anonymous = tls.createSecureContext({ ca: caBundle });
      // A review of a pod that was never created, naming another namespace's Secret.
      const pod = podManifest({
        name: 'forged',
        namespace: 'kube-system',
        labels: { [label]: `${key}-ignore` },
      });
      (pod['spec'] as Record<string, unknown>)['imagePullSecrets'] = [{ name: 'registry-login' }];
      const forged = admissionReview({
        uid: uniqueName('forged'),
        userInfo: { username: 'tenant' },
        namespace: 'kube-system',
        object: pod,
      });
      const handled = () =>
        server.metric('controller_runtime_webhook_requests_total{webhook="ignore.abuse.test.berth.dev",');
      const [refusedBefore, handledBefore] = [await server.rejected('client_certificate'), await handled()];
      for (const [who, as] of [
        ['the tenant', asTenant],
        ['a client without a certificate', anonymous],
      ] as const) {
        const reply = await post(forged, { as }).catch((e: NodeJS.ErrnoException) => e);
        assert.ok(reply instanceof Error, `${who}'s review was answered: ${JSON.stringify(reply)}`);
        assert.match(
          reply.code ?? '',
          /^(ECONNRESET|ERR_SSL_TLSV13_ALERT_CERTIFICATE_REQUIRED)$/,
          reply.message,
        );
      }
      await waitFor(
        'both refusals counted',
        async () => (await server.rejected('client_certificate')) === refusedBefore + 2,
        { timeoutMs: 2000 },
      );
      assert.equal(await handled(), handledBefore, 'the handler saw a forged review');
      await assertHealthy("after a tenant's forged reviews");
    },
  );
});
