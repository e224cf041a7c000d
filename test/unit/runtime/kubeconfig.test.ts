// Berth's kubeconfig reader against client-node's, which it replaces on every path but credential
// plugins: the same kubeconfigs must give the same TLS material and headers.
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import type { RequestOptions } from 'node:https';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { describe, test } from 'node:test';
import { KubeConfig } from '@kubernetes/client-node';
import {
  defaultAccess,
  inClusterAccess,
  kubeconfigFileAccess,
  kubeconfigTextAccess,
  parseKubeconfig,
} from '../../../src/runtime/client/kubeconfig.ts';

const dir = mkdtempSync(join(tmpdir(), 'berth-kubeconfig-'));
const file = (name: string, text: string) => {
  const p = join(dir, name);
  writeFileSync(p, text);
  return p;
};
const b64 = (s: string) => Buffer.from(s).toString('base64');

const kubeconfig = (user: Record<string, unknown>, cluster: Record<string, unknown> = {}) => ({
  apiVersion: 'v1',
  kind: 'Config',
  'current-context': 'c',
  contexts: [
    { name: 'other', context: { cluster: 'x', user: 'x' } },
    { name: 'c', context: { cluster: 'k', user: 'u' } },
  ],
  clusters: [
    { name: 'x', cluster: { server: 'https://10.0.0.1' } },
    { name: 'k', cluster: { server: 'https://127.0.0.1:6443', ...cluster } },
  ],
  users: [
    { name: 'x', user: { token: 'wrong' } },
    { name: 'u', user },
  ],
});

/** What client-node makes of a kubeconfig file, in the shape Berth's resolve gives. */
async function clientNode(path: string) {
  const kc = new KubeConfig();
  kc.loadFromFile(path);
  const o: RequestOptions = {};
  await kc.applyToHTTPSOptions(o);
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(o.headers ?? {})) if (typeof v === 'string') headers[k] = v;
  if (o.auth) headers['Authorization'] = 'Basic ' + Buffer.from(o.auth).toString('base64');
  const s = (v: unknown) => (v === undefined ? undefined : Buffer.from(v as string).toString());
  return {
    server: kc.getCurrentCluster()?.server,
    ca: s(o.ca),
    cert: s(o.cert),
    key: s(o.key),
    servername: o.servername,
    reject: o.rejectUnauthorized === false ? false : undefined,
    headers,
  };
}

async function berth(path: string) {
  const a = kubeconfigFileAccess(path);
  const { tls, headers } = await a.resolve();
  const s = (v: Buffer | undefined) => v?.toString();
  return {
    server: a.server,
    ca: s(tls.ca),
    cert: s(tls.cert),
    key: s(tls.key),
    servername: tls.servername,
    reject: tls.rejectUnauthorized,
    headers,
  };
}

describe('kubeconfig: the same as client-node', () => {
  // Every combination of how a CA, a client certificate and a credential can be given.
  const caFile = file('ca.crt', 'CA-FROM-FILE');
  file('client.crt', 'CERT-FROM-FILE');
  file('client.key', 'KEY-FROM-FILE');
  const clusters: Record<string, unknown>[] = [
    {},
    { 'certificate-authority-data': b64('CA-DATA') },
    { 'certificate-authority': caFile },
    { 'insecure-skip-tls-verify': true },
    { 'certificate-authority-data': b64('CA-DATA'), 'tls-server-name': 'kubernetes.default' },
  ];
  const users: Record<string, unknown>[] = [
    {},
    { token: 'abc' },
    { username: 'admin', password: 's3cret' },
    { 'client-certificate-data': b64('CERT-DATA'), 'client-key-data': b64('KEY-DATA') },
    // Relative to the kubeconfig's folder, as kubectl reads them.
    { 'client-certificate': 'client.crt', 'client-key': 'client.key' },
  ];
  let n = 0;
  for (const cluster of clusters)
    for (const user of users) {
      const i = n++;
      test(`cluster ${JSON.stringify(cluster)}, user ${JSON.stringify(user)}`, async () => {
        const path = file(`config-${i}.yaml`, JSON.stringify(kubeconfig(user, cluster)));
        assert.deepEqual(await berth(path), await clientNode(path));
      });
    }
});

describe('kubeconfig', () => {
  // client-node ignores a user's tokenFile; kubectl (client-go) reads it, and so does Berth.
  test('a token file is read again on every resolve: the kubelet rotates it', async () => {
    const tokenFile = file('rotating', 'one');
    const a = kubeconfigTextAccess(JSON.stringify(kubeconfig({ tokenFile })));
    assert.equal((await a.resolve()).headers['Authorization'], 'Bearer one');
    writeFileSync(tokenFile, 'two\n');
    assert.equal((await a.resolve()).headers['Authorization'], 'Bearer two');
  });

  test('the current context is what counts; a missing one is said', () => {
    assert.equal(
      parseKubeconfig(JSON.stringify(kubeconfig({ token: 'a' }))).cluster?.server,
      'https://127.0.0.1:6443',
    );
    assert.throws(() => kubeconfigTextAccess('{}'), /no current context/);
    assert.throws(
      () => kubeconfigTextAccess(JSON.stringify({ ...kubeconfig({}), 'current-context': 'nope' })),
      /no current context/,
    );
    assert.throws(() => parseKubeconfig('- a list'), /not a YAML or JSON mapping/);
    assert.throws(() => parseKubeconfig(JSON.stringify({ users: [{ user: {} }] })), /has no name/);
  });

  test('$KUBECONFIG with several files merges them, the first of a name winning', async () => {
    const first = file('first.yaml', JSON.stringify({ users: [{ name: 'u', user: { token: 'first' } }] }));
    const second = file('second.yaml', JSON.stringify(kubeconfig({ token: 'second' })));
    const a = defaultAccess({ KUBECONFIG: [first, second].join(delimiter) });
    assert.equal(a.server, 'https://127.0.0.1:6443');
    assert.equal((await a.resolve()).headers['Authorization'], 'Bearer first');
  });

  test("in a pod: the service's address, the mounted CA and token", async () => {
    const sa = mkdtempSync(join(tmpdir(), 'berth-sa-'));
    writeFileSync(join(sa, 'ca.crt'), 'SA-CA');
    writeFileSync(join(sa, 'token'), 'sa-token');
    const a = inClusterAccess(sa, { KUBERNETES_SERVICE_HOST: '10.96.0.1', KUBERNETES_SERVICE_PORT: '443' });
    assert.equal(a.server, 'https://10.96.0.1:443');
    const { tls, headers } = await a.resolve();
    assert.equal(tls.ca?.toString(), 'SA-CA');
    assert.equal(headers['Authorization'], 'Bearer sa-token');
    assert.equal(
      inClusterAccess(sa, { KUBERNETES_SERVICE_HOST: 'fd00::1', KUBERNETES_SERVICE_PORT: '443' }).server,
      'https://[fd00::1]:443',
    );
    assert.throws(() => inClusterAccess(sa, {}), /not in a cluster/);
  });

  test('a credential plugin is run by client-node', async () => {
    // An exec plugin that prints an ExecCredential, as a cloud's kubectl plugin does.
    const credential = JSON.stringify({
      apiVersion: 'client.authentication.k8s.io/v1',
      kind: 'ExecCredential',
      status: { token: 'from-plugin' },
    });
    const path = file(
      'exec.yaml',
      JSON.stringify(
        kubeconfig({
          exec: {
            apiVersion: 'client.authentication.k8s.io/v1',
            command: process.execPath,
            args: ['-e', `process.stdout.write(${JSON.stringify(credential)})`],
            interactiveMode: 'Never',
          },
        }),
      ),
    );
    const { headers } = await kubeconfigFileAccess(path).resolve();
    assert.equal(headers['Authorization'], 'Bearer from-plugin');
  });
});
