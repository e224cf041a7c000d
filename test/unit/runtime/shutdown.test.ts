// A replica stopping (SIGTERM): /readyz fails at once, the webhooks are served through the shutdown
// delay (while the pod's endpoint leaves its Service), and only then does the server close.
import assert from 'node:assert/strict';
import https from 'node:https';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { runCommand, shutdownDelayMs } from '../../../src/cli/run.ts';
import { KubeClient } from '../../../src/runtime/client/client.ts';
import { Manager, type Runnable } from '../../../src/runtime/manager/manager.ts';
import { rootLogger } from '../../../src/runtime/observability/log.ts';
import type { WebhookConfiguration, ValidatingWebhook } from '../../../src/runtime/webhook/configuration.ts';
import { WebhookRunnable } from '../../../src/runtime/webhook/registration.ts';
import { admissionReview, allowPods } from '../../helpers/admission.ts';
import { applyRecorder } from '../../helpers/fakeclient.ts';

const quiet = rootLogger.child({}, { level: 'silent' });

/** A client of an apiserver that is not there: a replica that never wins the Lease. */
function deadClient(): KubeClient {
  return new KubeClient({
    server: 'https://127.0.0.1:1',
    resolve: () => Promise.resolve({ tls: { rejectUnauthorized: false }, headers: {} }),
  });
}

/** One review on a fresh connection the client would keep alive: its status and Connection header. */
function review(url: string, ca: string): Promise<{ status: number; connection: string | undefined }> {
  const agent = new https.Agent({ keepAlive: true });
  return new Promise<{ status: number; connection: string | undefined }>((resolve, reject) => {
    const req = https.request(
      url,
      { method: 'POST', ca, agent, headers: { 'content-type': 'application/json' } },
      (res) => {
        res.resume();
        res.on('end', () => resolve({ status: res.statusCode!, connection: res.headers.connection }));
      },
    );
    req.on('error', reject);
    req.end(admissionReview({ uid: 'u' }));
  }).finally(() => agent.destroy());
}

const readyz = async (port: number) => {
  const res = await fetch(`http://127.0.0.1:${port}/readyz`);
  return { status: res.status, body: await res.text() };
};

test('a follower told to stop fails /readyz at once and serves webhooks until the shutdown delay has passed', async () => {
  const delayMs = 1000;
  const manager = new Manager({
    client: deadClient(),
    metricsBindAddress: '0',
    healthBindAddress: '127.0.0.1:0',
    leaderElection: { namespace: 'berth-system', name: 'berth', retryPeriodMs: 100 },
    shutdownDelayMs: delayMs,
    logger: quiet,
  });
  const { client, applied } = applyRecorder();
  const webhooks = new WebhookRunnable({
    client,
    server: {
      host: '127.0.0.1',
      port: 0,
      certificates: { kind: 'generated', dnsNames: ['localhost'], ipAddresses: ['127.0.0.1'] },
    },
    registration: { mode: 'url', url: 'https://127.0.0.1:{port}' },
    specs: [allowPods],
    berthNamespace: 'berth-system',
    logger: quiet,
  });
  manager.addRunnable(webhooks);
  let stopped: Promise<void> | undefined;
  try {
    await manager.start();
    const health = manager.healthPort!;
    assert.equal((await readyz(health)).status, 200);
    await webhooks.ready();
    const { clientConfig } = (applied[0] as WebhookConfiguration<ValidatingWebhook>).webhooks[0]!;
    const [url, ca] = [clientConfig.url!, Buffer.from(clientConfig.caBundle!, 'base64').toString()];
    assert.equal((await review(url, ca)).connection, 'keep-alive');

    const stopAt = Date.now();
    stopped = manager.stop();
    assert.deepEqual(await readyz(health), { status: 503, body: 'stopping\n' });
    // Served on, each answer closing its connection so the apiserver dials a replica that stays.
    assert.deepEqual(await review(url, ca), { status: 200, connection: 'close' });
    await sleep(delayMs / 2);
    assert.deepEqual(await review(url, ca), { status: 200, connection: 'close' });

    await stopped;
    assert.ok(Date.now() - stopAt >= delayMs - 50, `stopped after ${Date.now() - stopAt} ms`);
    await assert.rejects(review(url, ca), { code: 'ECONNREFUSED' });
  } finally {
    await (stopped ?? manager.stop());
  }
});

test('leader work stops at once; only the always-on runnables wait for the shutdown delay', async () => {
  const delayMs = 300;
  const manager = new Manager({
    client: deadClient(),
    metricsBindAddress: '0',
    healthBindAddress: '0',
    shutdownDelayMs: delayMs,
    logger: quiet,
  });
  const seen: Record<string, number> = {};
  let stopAt = 0;
  const mark = (what: string) => () => {
    seen[what] = Date.now() - stopAt;
    return Promise.resolve();
  };
  const runnable = (name: string, needLeaderElection: boolean): Runnable => ({
    name,
    needLeaderElection,
    start: () => Promise.resolve(),
    stop: mark(`${name} stopped`),
    drain: () => void mark(`${name} drained`)(),
  });
  manager.addRunnable(runnable('leader', true));
  manager.addRunnable(runnable('always', false));
  await manager.start();
  stopAt = Date.now();
  await manager.stop();
  assert.ok(seen['always drained']! < delayMs / 2, JSON.stringify(seen));
  assert.ok(seen['leader stopped']! < delayMs / 2, JSON.stringify(seen));
  assert.ok(seen['always stopped']! >= delayMs - 20, JSON.stringify(seen));
  assert.equal(seen['leader drained'], undefined, 'only what serves always drains');
});

test('with nothing that drains (no webhooks), stop does not wait for the shutdown delay', async () => {
  const manager = new Manager({
    client: deadClient(),
    metricsBindAddress: '0',
    healthBindAddress: '0',
    shutdownDelayMs: 5000,
    logger: quiet,
  });
  manager.addRunnable({ name: 'page', needLeaderElection: false, start: () => Promise.resolve() });
  await manager.start();
  const started = Date.now();
  await manager.stop();
  assert.ok(Date.now() - started < 2000, `stopped in ${Date.now() - started} ms`);
});

test('berth run waits 5 s by default only when the webhook server binds a non-loopback address', () => {
  const parsed = (...args: string[]) =>
    runCommand()
      .exitOverride()
      .configureOutput({ writeErr: () => {} })
      .action(() => {})
      .parse(args, { from: 'user' })
      .opts();
  assert.equal(shutdownDelayMs(parsed('--webhook-bind-address=0.0.0.0:9443')), 5000);
  assert.equal(shutdownDelayMs(parsed('--webhook-bind-address=[::]:9443')), 5000);
  assert.equal(shutdownDelayMs(parsed()), 0, 'the default 127.0.0.1:9443');
  assert.equal(shutdownDelayMs(parsed('--webhook-bind-address=0')), 0, 'webhooks off');
  assert.equal(shutdownDelayMs(parsed('--webhook-bind-address=0.0.0.0:9443', '--shutdown-delay=0')), 0);
  assert.equal(shutdownDelayMs(parsed('--shutdown-delay=12')), 12_000, 'bare seconds, as configs pass them');
  assert.equal(shutdownDelayMs(parsed('--shutdown-delay=1m30s')), 90_000, 'a Go duration');
  assert.throws(() => parsed('--shutdown-delay=-1'), /is not a duration/);
});

test('a start that fails stops what it started: its servers close and the manager is done with 1', async () => {
  const manager = new Manager({
    client: deadClient(),
    metricsBindAddress: '0',
    healthBindAddress: '127.0.0.1:0',
  });
  const failing: Runnable = {
    name: 'page',
    needLeaderElection: false,
    start: () => Promise.reject(new Error('listen EADDRINUSE 127.0.0.1:8088')),
  };
  manager.addRunnable(failing);
  await assert.rejects(manager.start(), /EADDRINUSE/);
  assert.equal(await manager.done, 1);
  const health = manager.healthPort!;
  await assert.rejects(fetch(`http://127.0.0.1:${health}/healthz`), 'the health server is closed');
});
