// A replica that cannot use the shared webhook certificate Secret: it serves a certificate of its
// own, but must never register that certificate's CA over the shared one the other replicas serve.
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { ApiError, KubeClient } from '../../../src/runtime/client/client.ts';
import { Manager } from '../../../src/runtime/manager/manager.ts';
import type { KubeObject } from '../../../src/runtime/api/meta.ts';
import { rootLogger } from '../../../src/runtime/observability/log.ts';
import { WebhookServer, type WebhookCertificates } from '../../../src/runtime/webhook/admission.ts';
import type { WebhookConfiguration, ValidatingWebhook } from '../../../src/runtime/webhook/configuration.ts';
import { WebhookRunnable } from '../../../src/runtime/webhook/registration.ts';
import { allowPods } from '../../helpers/admission.ts';
import { applyRecorder } from '../../helpers/fakeclient.ts';

const quiet = rootLogger.child({}, { level: 'silent' });

/** The manager's own client: an apiserver that is not there, which nothing here needs. */
const deadClient = () =>
  new KubeClient({
    server: 'https://127.0.0.1:1',
    resolve: () => Promise.resolve({ tls: { rejectUnauthorized: false }, headers: {} }),
  });
const namespace = 'berth-system';
const secretName = 'berth-webhook-cert';
const forbidden = () => Promise.reject(new ApiError(403, 'Forbidden', 'secrets is forbidden', {}));

/**
 * The shared Secret as the apiserver keeps it (merge patches compare-and-swap on resourceVersion),
 * reachable only while `usable`; every client also records its server-side applies in `applied`.
 */
function cluster() {
  let stored: KubeObject | undefined;
  let version = 0;
  const recorder = applyRecorder();
  const store = {
    get: () =>
      stored
        ? Promise.resolve(structuredClone(stored))
        : Promise.reject(new ApiError(404, 'NotFound', 'secrets not found', {})),
    create: (_ref: unknown, obj: KubeObject) => {
      stored = { ...obj, metadata: { ...obj.metadata, resourceVersion: String(++version) } };
      return Promise.resolve(structuredClone(stored));
    },
    patch: (
      _ref: unknown,
      _name: string,
      p: { metadata: { resourceVersion: string }; data: Record<string, string> },
    ) => {
      if (p.metadata.resourceVersion !== stored!.metadata!.resourceVersion)
        return Promise.reject(new ApiError(409, 'Conflict', 'the object has been modified', {}));
      stored = {
        ...stored!,
        data: p.data,
        metadata: { ...stored!.metadata, resourceVersion: String(++version) },
      };
      return Promise.resolve(structuredClone(stored));
    },
  };
  const client = (usable: () => boolean) =>
    ({
      get: (...a: Parameters<typeof store.get>) => (usable() ? store.get(...a) : forbidden()),
      create: (...a: Parameters<typeof store.create>) => (usable() ? store.create(...a) : forbidden()),
      patch: (...a: Parameters<typeof store.patch>) => (usable() ? store.patch(...a) : forbidden()),
      apply: recorder.client.apply,
    }) as unknown as KubeClient;
  return {
    client,
    applied: recorder.applied as WebhookConfiguration<ValidatingWebhook>[],
    /** The Secret's CA bundle, PEM. */
    sharedCa: () => Buffer.from((stored!['data'] as Record<string, string>)['ca.crt']!, 'base64').toString(),
  };
}

const certificates = (client: KubeClient): Extract<WebhookCertificates, { kind: 'secret' }> => ({
  kind: 'secret',
  client,
  namespace,
  name: secretName,
  dnsNames: [`berth-webhook.${namespace}.svc`],
  ipAddresses: ['127.0.0.1'],
});

function replica(client: KubeClient): WebhookRunnable {
  return new WebhookRunnable({
    client,
    server: { host: '127.0.0.1', port: 0, certificates: certificates(client) },
    registration: { mode: 'service', namespace, name: 'berth-webhook' },
    specs: [allowPods],
    berthNamespace: namespace,
    logger: quiet,
  });
}

test('a replica that cannot use the shared Secret never registers its own CA, and is unready', async () => {
  const c = cluster();
  const shared = replica(c.client(() => true));
  const fallback = replica(c.client(() => false));
  const signal = new AbortController().signal;
  try {
    await shared.start(signal);
    await shared.ready();
    await fallback.start(signal);
    // Its registration loop has had every chance to apply by now.
    await sleep(200);
    assert.ok(c.applied.length > 0, 'the replica on the Secret registered');
    const sharedCa = c.sharedCa();
    for (const config of c.applied) {
      for (const webhook of config.webhooks) {
        const caBundle = Buffer.from(webhook.clientConfig.caBundle!, 'base64').toString();
        assert.equal(caBundle, sharedCa, 'every registered caBundle is the Secret one');
      }
    }
    assert.equal(shared.unready(), undefined);
    assert.match(
      fallback.unready() ?? '',
      /^webhooks: the Secret berth-system\/berth-webhook-cert cannot be used \(.*forbidden.*\): serving a certificate of this replica's own, which the apiserver does not trust$/,
    );
  } finally {
    await fallback.stop();
    await shared.stop();
  }
});

test('/readyz says a replica on its own certificate is not ready, so the Service sends the apiserver elsewhere', async () => {
  const manager = new Manager({
    client: deadClient(),
    metricsBindAddress: '0',
    healthBindAddress: '127.0.0.1:0',
    logger: quiet,
  });
  manager.addRunnable(replica(cluster().client(() => false)));
  try {
    await manager.start();
    const res = await fetch(`http://127.0.0.1:${manager.healthPort}/readyz`);
    assert.equal(res.status, 503);
    assert.match(
      await res.text(),
      /^webhooks: the Secret .* cannot be used .*, which the apiserver does not trust\n$/,
    );
  } finally {
    await manager.stop();
  }
});

test('a server on its own certificate moves to the Secret one at the first poll that can use it', async () => {
  const c = cluster();
  let usable = false;
  const client = c.client(() => usable);
  const server = new WebhookServer({
    certificates: { ...certificates(client), checkMs: 50 },
    port: 0,
    logger: quiet,
  });
  try {
    await server.start();
    assert.match(server.fallback ?? '', /cannot be used/);
    const own = server.caBundle!;
    usable = true;
    const deadline = Date.now() + 5000;
    while (server.fallback && Date.now() < deadline) await sleep(20);
    assert.equal(server.fallback, undefined);
    assert.equal(server.caBundle, c.sharedCa());
    assert.notEqual(
      new X509Certificate(server.caBundle).fingerprint256,
      new X509Certificate(own).fingerprint256,
    );
  } finally {
    await server.stop();
  }
});

test('on its own certificate a server tries the Secret every few seconds, not once a minute', async () => {
  const c = cluster();
  let usable = false;
  const server = new WebhookServer({
    certificates: { ...certificates(c.client(() => usable)), checkMs: 60_000 },
    port: 0,
    logger: quiet,
  });
  try {
    await server.start();
    assert.match(server.fallback ?? '', /cannot be used/);
    usable = true;
    const deadline = Date.now() + 7000;
    while (server.fallback && Date.now() < deadline) await sleep(50);
    assert.equal(server.fallback, undefined, 'on the Secret within 7 s');
    assert.equal(server.caBundle, c.sharedCa());
  } finally {
    await server.stop();
  }
});
