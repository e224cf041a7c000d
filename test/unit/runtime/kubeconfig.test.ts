// Berth's kubeconfig reader against client-node's (a development dependency kept as the reference):
// the same kubeconfigs must give the same TLS material and headers. Credential plugins, which Berth
// runs itself (exec-credential.ts), are tested on their own.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, writeFileSync } from 'node:fs';
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

  test('JSON is read without the YAML library; YAML, a flow mapping too, with it', () => {
    const json = JSON.stringify(kubeconfig({ token: 'a' }));
    const flow = `{apiVersion: v1, current-context: c, contexts: [{name: c, context: {cluster: k, user: u}}],
      clusters: [{name: k, cluster: {server: 'https://127.0.0.1:6443'}}], users: [{name: u, user: {token: a}}]}`;
    // A fresh process: what it loads for each.
    const loadsYaml = (text: string) =>
      spawnSync(
        process.execPath,
        [
          '--input-type=module',
          '-e',
          `import { registerHooks } from 'node:module';
           let yaml = false;
           registerHooks({ resolve: (s, c, next) => { const r = next(s, c); yaml ||= r.url.includes('/node_modules/yaml/'); return r; } });
           const { parseKubeconfig } = await import(${JSON.stringify(new URL('../../../src/runtime/client/kubeconfig.ts', import.meta.url).href)});
           console.log(parseKubeconfig(${JSON.stringify(text)}).cluster.server, yaml);`,
        ],
        { encoding: 'utf8' },
      ).stdout.trim();
    assert.equal(loadsYaml(json), 'https://127.0.0.1:6443 false');
    assert.equal(loadsYaml(flow), 'https://127.0.0.1:6443 true');
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

  test('an exec plugin is run by Berth: a command with a slash is beside the kubeconfig', async () => {
    // A plugin that counts its runs and prints an ExecCredential with that count as its token.
    const runs = file('runs', '');
    file(
      'plugin.cjs',
      `const fs = require('fs');
      fs.appendFileSync(${JSON.stringify(runs)}, 'x');
      process.stdout.write(JSON.stringify({ apiVersion: 'client.authentication.k8s.io/v1', kind: 'ExecCredential',
        status: { token: 'run-' + fs.readFileSync(${JSON.stringify(runs)}, 'utf8').length } }));`,
    );
    file('plugin.sh', `#!/bin/sh\nexec ${JSON.stringify(process.execPath)} "$(dirname "$0")/plugin.cjs"\n`);
    chmodSync(join(dir, 'plugin.sh'), 0o755);
    file(
      'exec.yaml',
      JSON.stringify(
        kubeconfig({
          exec: {
            apiVersion: 'client.authentication.k8s.io/v1',
            command: './plugin.sh',
            interactiveMode: 'Never',
          },
        }),
      ),
    );
    // The kubeconfig named relative to the working folder, as `--kubeconfig config` names it.
    const cwd = process.cwd();
    process.chdir(dir);
    let a: ReturnType<typeof kubeconfigFileAccess>;
    try {
      a = kubeconfigFileAccess('exec.yaml');
    } finally {
      process.chdir(cwd);
    }
    assert.equal((await a.resolve()).headers['Authorization'], 'Bearer run-1');
    // No expirationTimestamp: kept, until the server refuses it.
    assert.equal((await a.resolve()).headers['Authorization'], 'Bearer run-1');
    a.refused?.();
    assert.equal((await a.resolve()).headers['Authorization'], 'Bearer run-2');
  });

  test('a plugin that fails, or an exec config client-go would refuse, is a KubeconfigError', async () => {
    const failing = kubeconfigTextAccess(
      JSON.stringify(
        kubeconfig({
          exec: {
            apiVersion: 'client.authentication.k8s.io/v1beta1',
            command: process.execPath,
            args: ['-e', 'console.error("not logged in"); process.exit(1)'],
          },
        }),
      ),
    );
    await assert.rejects(failing.resolve(), {
      name: 'KubeconfigError',
      message: `the kubeconfig's exec plugin ${process.execPath}: it exited with 1: not logged in`,
    });
    assert.throws(
      () =>
        kubeconfigTextAccess(
          JSON.stringify(
            kubeconfig({ exec: { apiVersion: 'client.authentication.k8s.io/v1', command: 'x' } }),
          ),
        ),
      { name: 'KubeconfigError', message: /user cannot be used: exec interactiveMode is required/ },
    );
  });

  test('an auth-provider is refused, naming the exec plugin to use instead', () => {
    assert.throws(
      () =>
        kubeconfigTextAccess(JSON.stringify(kubeconfig({ 'auth-provider': { name: 'oidc', config: {} } }))),
      {
        name: 'KubeconfigError',
        message:
          /auth-provider "oidc", which Berth does not run: use an exec credential plugin .*kubelogin for oidc/,
      },
    );
  });
});
