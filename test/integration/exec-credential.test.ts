// A kubeconfig whose user is an exec credential plugin (client.authentication.k8s.io/v1), against
// the sandbox's kube-apiserver: Berth runs the plugin itself, tells it the cluster when asked
// (provideClusterInfo), uses the client certificate or token it prints, runs it again after the
// apiserver refuses its credentials (401), and says why when the plugin fails or hangs.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { parse, stringify } from 'yaml';
import { KubeClient } from '../../src/runtime/client/client.ts';
import { runBerthCli } from '../helpers/berth.ts';
import { testSandbox } from '../helpers/cluster.ts';

const sandbox = testSandbox();
const dir = mkdtempSync(join(tmpdir(), 'berth-exec-'));
const clients: KubeClient[] = [];
const admin0 = sandbox.client();
after(() => [...clients, admin0].forEach((c) => c.close()));

type Named<T> = { name: string } & T;
const admin = parse(readFileSync(sandbox.kubeconfigPath, 'utf8')) as {
  clusters: Named<{ cluster: Record<string, string> }>[];
  users: Named<{ user: Record<string, string> }>[];
};
const cluster = admin.clusters[0]!.cluster;
const pem = (k: string) => Buffer.from(admin.users[0]!.user[k]!, 'base64').toString();

/**
 * A kubeconfig whose user runs `script` (Node, as a plugin file) with provideClusterInfo; the
 * script sees `cert`, `key` (the sandbox admin's PEMs), `dir` and `info()` (KUBERNETES_EXEC_INFO).
 */
function pluginKubeconfig(name: string, script: string): string {
  const plugin = join(dir, `${name}.cjs`);
  writeFileSync(
    plugin,
    `const fs = require('fs'); const dir = ${JSON.stringify(dir)};
     const cert = ${JSON.stringify(pem('client-certificate-data'))}, key = ${JSON.stringify(pem('client-key-data'))};
     const info = () => JSON.parse(process.env.KUBERNETES_EXEC_INFO);
     const answer = (status) => process.stdout.write(JSON.stringify({ apiVersion: 'client.authentication.k8s.io/v1', kind: 'ExecCredential', status }));
     ${script}`,
  );
  const path = join(dir, `${name}.kubeconfig`);
  const exec = {
    apiVersion: 'client.authentication.k8s.io/v1',
    command: process.execPath,
    args: [plugin],
    interactiveMode: 'Never',
    provideClusterInfo: true,
  };
  writeFileSync(
    path,
    stringify({
      apiVersion: 'v1',
      kind: 'Config',
      'current-context': 'c',
      contexts: [{ name: 'c', context: { cluster: 'k', user: 'u' } }],
      clusters: [{ name: 'k', cluster }],
      users: [{ name: 'u', user: { exec } }],
    }),
  );
  return path;
}

const client = (path: string) => {
  const c = KubeClient.fromFile(path);
  clients.push(c);
  return c;
};
/** The user the apiserver takes a client for. */
const whoAmI = async (c: KubeClient) =>
  (
    await c.request<{ status: { userInfo: { username: string } } }>(
      'POST',
      '/apis/authentication.k8s.io/v1/selfsubjectreviews',
      { body: { apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview' } },
    )
  ).status.userInfo.username;
const namespaces = (c: KubeClient) => c.request<{ items: unknown[] }>('GET', '/api/v1/namespaces');

describe('exec credential plugins against kube-apiserver', () => {
  test("the plugin is told the cluster, and its client certificate is the user's", async () => {
    const path = pluginKubeconfig(
      'cert',
      `if (info().spec.interactive !== false || info().spec.cluster?.server !== ${JSON.stringify(cluster['server'])}
           || info().spec.cluster['certificate-authority-data'] !== ${JSON.stringify(cluster['certificate-authority-data'])}) {
         console.error('not told the cluster: ' + process.env.KUBERNETES_EXEC_INFO); process.exit(1);
       }
       answer({ clientCertificateData: cert, clientKeyData: key });`,
    );
    assert.equal(await whoAmI(client(path)), await whoAmI(admin0));
    // The compiled CLI, as a user runs it with such a kubeconfig: it reaches the cluster, which
    // serves Cells or says that Berth's CRDs are not installed (404, not 401).
    const r = runBerthCli(['cells', 'list', '--kubeconfig', path]);
    assert.ok(r.status === 0 || /CRDs are not installed/.test(r.stderr), `exit ${r.status}: ${r.stderr}`);
  });

  test('refused credentials (401) are asked for again: the next request has new ones', async () => {
    // The first run prints a token the apiserver does not know; every later run, the certificate.
    const path = pluginKubeconfig(
      'refused',
      `const runs = dir + '/refused.runs'; fs.appendFileSync(runs, 'x');
       answer(fs.readFileSync(runs, 'utf8').length === 1 ? { token: 'not-a-token' } : { clientCertificateData: cert, clientKeyData: key });`,
    );
    const c = client(path);
    await assert.rejects(namespaces(c), { name: 'ApiError', status: 401 } as object);
    assert.ok((await namespaces(c)).items.length > 0);
    assert.equal(readFileSync(join(dir, 'refused.runs'), 'utf8'), 'xx');
  });

  test('a plugin that exits 1: the request fails, saying so and what the plugin printed', async () => {
    const path = pluginKubeconfig('fails', `console.error('please run login first'); process.exit(1);`);
    await assert.rejects(namespaces(client(path)), {
      name: 'KubeconfigError',
      message: /exec plugin .*: it exited with 1: please run login first$/,
    });
    const r = runBerthCli(['cells', 'list', '--kubeconfig', path]);
    assert.equal(r.status, 4, 'the exit code of a kubeconfig that cannot be used');
    assert.match(r.stderr, /it exited with 1: please run login first/);
  });

  test(
    'a plugin that hangs is killed after 30 s: the request fails, saying so',
    { timeout: 60_000 },
    async () => {
      const path = pluginKubeconfig('hangs', `setInterval(() => {}, 1000);`);
      const start = Date.now();
      await assert.rejects(namespaces(client(path)), {
        name: 'KubeconfigError',
        message: /it did not finish in 30 s \(killed\)/,
      });
      assert.ok(Date.now() - start < 40_000);
    },
  );
});
