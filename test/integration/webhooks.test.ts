// The webhook runnable against the real apiserver: it serves a capability's webhook, registers it
// by server-side apply, never gates kube-system or Berth's own namespace, and a webhook that may
// fail open lets creates through once its server is gone.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { isNotFound, KubeClient } from '../../src/runtime/client/client.ts';
import { rootLogger } from '../../src/runtime/observability/log.ts';
import { Resources, type KubeObject } from '../../src/runtime/api/meta.ts';
import { type MutatingWebhook } from '../../src/runtime/webhook/configuration.ts';
import type { WebhookCertificates } from '../../src/runtime/webhook/admission.ts';
import { mutate } from '../../src/runtime/api/jsonpatch.ts';
import {
  WebhookRunnable,
  generatedCertificates,
  webhookFieldManager,
  type WebhookRegistration,
  type WebhookScope,
  type WebhookSelection,
} from '../../src/runtime/webhook/registration.ts';
import {
  createNamespace,
  deleteNamespace,
  podManifest,
  testSandbox,
  uniqueName,
} from '../helpers/cluster.ts';
import { waitFor } from '../helpers/wait.ts';

const sandbox = testSandbox();
const client = sandbox.client();
const logger = rootLogger.child({ component: 'webhooks-test' }, { level: 'warn' });
const selectorLabel = 'berth.test/webhooks';
const annotation = 'berth.test/mutated-by';
const registration: WebhookRegistration = { mode: 'url', url: 'https://127.0.0.1:{port}' };
const stopping = new AbortController();
const started: { runnable: WebhookRunnable; configName: string }[] = [];
let ns: string;
let berthNs: string;

before(async () => {
  [ns, berthNs] = await Promise.all([createNamespace(client, 'wh'), createNamespace(client, 'wh-berth')]);
});

after(async () => {
  stopping.abort();
  for (const { runnable, configName } of started) {
    await runnable.stop();
    await client.delete(Resources.mutatingWebhookConfigurations, configName).catch((e) => {
      if (!isNotFound(e)) throw e;
    });
  }
  await Promise.all([deleteNamespace(client, ns), deleteNamespace(client, berthNs)]);
  client.close();
});

/** Starts a runnable whose one webhook annotates the pods labelled with its own key, and waits until it is registered. */
async function startWebhook(
  failurePolicy: 'Fail' | 'Ignore',
  certificates: WebhookCertificates = generatedCertificates(registration),
  scope?: WebhookScope,
): Promise<{ runnable: WebhookRunnable; key: string }> {
  const key = uniqueName('wh');
  const runnable = new WebhookRunnable({
    client,
    server: { port: 0, certificates },
    registration,
    specs: [
      {
        name: 'pods.test.berth.dev',
        path: '/mutate-pod',
        kind: 'mutating',
        handler: (req) => {
          const pod = req.object!;
          const copy = structuredClone(pod);
          copy.metadata!.annotations = { ...copy.metadata!.annotations, [annotation]: key };
          return { allowed: true, patch: mutate(pod, copy) };
        },
        rules: [{ operations: ['CREATE'], apiGroups: [''], apiVersions: ['v1'], resources: ['pods'] }],
        failurePolicy,
        // Only this test's pods, so that parallel tests never depend on this server.
        objectSelector: { matchLabels: { [selectorLabel]: key } },
        ...(scope ? { scope } : {}),
      },
    ],
    berthNamespace: berthNs,
    configName: key,
    logger,
  });
  started.push({ runnable, configName: key });
  await runnable.start(stopping.signal);
  await runnable.ready();
  return { runnable, key };
}

const createPod = (namespace: string, key: string) =>
  client.create(
    Resources.pods,
    podManifest({ name: uniqueName('pod'), namespace, labels: { [selectorLabel]: key } }),
  );

const deletePod = (pod: KubeObject) =>
  client.delete(Resources.pods, pod.metadata!.name!, pod.metadata!.namespace, {
    apiVersion: 'v1',
    kind: 'DeleteOptions',
    gracePeriodSeconds: 0,
  });

/** The apiserver's webhook configuration cache lags: create pods until one comes back mutated. */
const mutatedPod = (key: string) =>
  waitFor('a pod created through the webhook', async () => {
    const pod = await createPod(ns, key);
    if (pod.metadata?.annotations?.[annotation] === key) return pod;
    await deletePod(pod);
    return undefined;
  });

describe('WebhookRunnable', () => {
  let key: string;

  before(async () => {
    ({ key } = await startWebhook('Fail'));
  });

  test('serves the webhook on the bound port and registers it by server-side apply', async () => {
    const pod = await mutatedPod(key);
    assert.equal(pod.metadata?.annotations?.[annotation], key);

    const config = await client.get(Resources.mutatingWebhookConfigurations, key);
    assert.equal(config.metadata?.labels?.['app.kubernetes.io/managed-by'], 'berth');
    const managers = (config.metadata?.managedFields as { manager: string; operation: string }[]).map(
      (m) => `${m.manager} ${m.operation}`,
    );
    assert.deepEqual(managers, [`${webhookFieldManager} Apply`]);
    const [webhook] = config['webhooks'] as MutatingWebhook[];
    assert.match(webhook?.clientConfig.url ?? '', /^https:\/\/127\.0\.0\.1:\d+\/mutate-pod$/);
    assert.doesNotMatch(webhook?.clientConfig.url ?? '', /:(0|9443)\//);
    assert.ok(webhook?.clientConfig.caBundle);
  });

  test('never gates kube-system or the namespace Berth runs in', async () => {
    // Mutation observed first, so the apiserver has the configuration when the next pods are created.
    await mutatedPod(key);
    for (const namespace of ['kube-system', berthNs]) {
      const pod = await createPod(namespace, key);
      try {
        assert.equal(pod.metadata?.annotations?.[annotation], undefined, `pod in ${namespace} was mutated`);
      } finally {
        await deletePod(pod);
      }
    }
  });
});

/** A scope the test sets, as a capability's policies would. */
function settableScope(initial: WebhookSelection) {
  let selection = initial;
  let changed = () => {};
  const scope: WebhookScope = {
    selection: () => ({ selection, token: selection }),
    watch: (c) => (changed = c),
    applied: () => {},
    engage: () => () => {},
  };
  return { scope, set: (next: WebhookSelection) => ((selection = next), changed()) };
}

test('no webhook thread while no policy needs a webhook; one before the first that does is registered', async () => {
  const { scope, set } = settableScope({ send: 'none' });
  const { runnable, key } = await startWebhook('Fail', undefined, scope);
  const config = await client.get(Resources.mutatingWebhookConfigurations, key);
  assert.deepEqual(config['webhooks'] ?? [], []);
  assert.equal(runnable.listening, false);

  set({ send: 'all' });
  const pod = await mutatedPod(key);
  assert.equal(pod.metadata?.annotations?.[annotation], key);
  assert.equal(runnable.listening, true);
});

test('failurePolicy Ignore lets creates through once the server is stopped', async () => {
  const { runnable, key } = await startWebhook('Ignore');
  await mutatedPod(key);
  await runnable.stop();
  // The configuration stays: the apiserver still calls the webhook, cannot reach it, and admits.
  await client.get(Resources.mutatingWebhookConfigurations, key);
  const pod = await createPod(ns, key);
  assert.equal(pod.metadata?.annotations?.[annotation], undefined);
});

test('replicas share one CA through the Secret, and converge again when it is replaced', async () => {
  const secret = uniqueName('cert');
  const shared = (): WebhookCertificates => ({
    ...generatedCertificates(registration),
    kind: 'secret',
    client,
    namespace: berthNs,
    name: secret,
    checkMs: 300,
  });
  // Two replicas starting at once race to create the Secret: one wins, the other reads it.
  const [a, b] = await Promise.all([startWebhook('Fail', shared()), startWebhook('Fail', shared())]);
  const caBundle = async (key: string) => {
    const config = await client.get(Resources.mutatingWebhookConfigurations, key);
    return (config['webhooks'] as MutatingWebhook[])[0]!.clientConfig.caBundle;
  };
  const first = await caBundle(a.key);
  assert.ok(first);
  assert.equal(await caBundle(b.key), first);
  const stored = await client.get(Resources.secrets, secret, berthNs);
  assert.equal(stored['type'], 'kubernetes.io/tls');
  assert.equal((stored['data'] as Record<string, string>)['ca.crt'], first);
  await mutatedPod(a.key);
  await mutatedPod(b.key);

  // Deleted (by hand, or restored from an old backup): a replica writes a new one, both serve and register it.
  await client.delete(Resources.secrets, secret, berthNs);
  await waitFor('both replicas to register the new CA', async () => {
    const [x, y] = await Promise.all([caBundle(a.key), caBundle(b.key)]);
    return x !== first && x === y ? x : undefined;
  });
  await mutatedPod(a.key);
  await mutatedPod(b.key);
});

test('a replica that cannot reach the Secret serves with its own certificate, then moves to the Secret', async () => {
  const secret = uniqueName('cert');
  const user = uniqueName('no-secrets');
  const limited = KubeClient.fromFile(await sandbox.mintUser(user));
  try {
    const { key } = await startWebhook('Fail', {
      ...generatedCertificates(registration),
      kind: 'secret',
      client: limited,
      namespace: berthNs,
      name: secret,
      checkMs: 300,
    });
    // Served, and registered, though the Secret is forbidden to it.
    await mutatedPod(key);
    await assert.rejects(client.get(Resources.secrets, secret, berthNs), (e) => isNotFound(e));
    // Once it may keep the Secret, it creates it and moves to it: the caBundle follows.
    await client.create(Resources.roles, {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'Role',
      metadata: { name: user, namespace: berthNs },
      rules: [{ apiGroups: [''], resources: ['secrets'], verbs: ['get', 'create', 'patch'] }],
    });
    await client.create(Resources.roleBindings, {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'RoleBinding',
      metadata: { name: user, namespace: berthNs },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: user },
      subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: user }],
    });
    await waitFor('the caBundle of the Secret to be registered', async () => {
      const stored = await client.get(Resources.secrets, secret, berthNs).catch(() => undefined);
      const config = await client.get(Resources.mutatingWebhookConfigurations, key);
      const bundle = (config['webhooks'] as MutatingWebhook[])[0]!.clientConfig.caBundle;
      return stored && (stored['data'] as Record<string, string>)['ca.crt'] === bundle;
    });
    await mutatedPod(key);
  } finally {
    limited.close();
  }
});
