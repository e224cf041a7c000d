// The exec credential plugin protocol (client.authentication.k8s.io), as client-go runs it: what a
// plugin is told, what Berth makes of its answer, when it is asked again, and how a plugin that
// fails, hangs or floods is bounded.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  execCredentials,
  execPlan,
  expired,
  parseExecCredential,
  runExecPlugin,
  type ExecCredential,
} from '../../../src/runtime/client/exec-credential.ts';

const V1 = 'client.authentication.k8s.io/v1';
const V1BETA1 = 'client.authentication.k8s.io/v1beta1';
const cluster = { server: 'https://127.0.0.1:6443' };
const noCa = () => undefined;
const exec = (over: Record<string, unknown> = {}) => ({
  apiVersion: V1,
  command: 'get-token',
  interactiveMode: 'Never',
  ...over,
});
const info = (env: Record<string, string>) => JSON.parse(env['KUBERNETES_EXEC_INFO']!);
const answer = (status: unknown, apiVersion = V1, kind = 'ExecCredential') =>
  JSON.stringify({ apiVersion, kind, status });

describe('execPlan: what a plugin is run with', () => {
  test('its command, args and env over the process env, and the ExecCredential request', () => {
    const plan = execPlan(
      exec({ args: ['--region', 'x'], env: [{ name: 'A', value: 'from-config' }] }),
      cluster,
      noCa,
      { A: 'from-process', B: 'kept' },
    );
    assert.equal(plan.command, 'get-token');
    assert.deepEqual(plan.args, ['--region', 'x']);
    assert.equal(plan.env['A'], 'from-config');
    assert.equal(plan.env['B'], 'kept');
    assert.deepEqual(info(plan.env), {
      apiVersion: V1,
      kind: 'ExecCredential',
      spec: { interactive: false },
    });
  });

  test('v1beta1 is spoken too, and needs no interactiveMode', () => {
    const plan = execPlan({ apiVersion: V1BETA1, command: 'c' }, cluster, noCa, {});
    assert.equal(plan.apiVersion, V1BETA1);
    assert.equal(info(plan.env).apiVersion, V1BETA1);
  });

  test('provideClusterInfo: the cluster, its CA as bytes and the exec extension config', () => {
    let read = 0;
    const ca = () => (read++, Buffer.from('CA'));
    const plan = execPlan(
      exec({ provideClusterInfo: true }),
      {
        ...cluster,
        'tls-server-name': 'kubernetes',
        extensions: [{ name: 'client.authentication.k8s.io/exec', extension: { audience: 'x' } }],
      },
      ca,
      {},
    );
    assert.deepEqual(info(plan.env).spec, {
      interactive: false,
      cluster: {
        server: cluster.server,
        'tls-server-name': 'kubernetes',
        'certificate-authority-data': Buffer.from('CA').toString('base64'),
        config: { audience: 'x' },
      },
    });
    execPlan(exec(), cluster, ca, {});
    assert.equal(read, 1, 'the CA is read only for a plugin that is told the cluster');
  });

  const refused: [string, unknown, RegExp][] = [
    ['not a mapping', 'get-token', /not a mapping/],
    ['no command', exec({ command: undefined }), /no command/],
    [
      'an apiVersion of neither v1 nor v1beta1',
      exec({ apiVersion: 'client.authentication.k8s.io/v1alpha1' }),
      /v1alpha1" is not one of/,
    ],
    ['v1 without interactiveMode', exec({ interactiveMode: undefined }), /interactiveMode is required/],
    [
      'interactiveMode Always (no terminal in a controller)',
      exec({ interactiveMode: 'Always' }),
      /Always, but Berth runs a plugin without a terminal/,
    ],
    ['an unknown interactiveMode', exec({ interactiveMode: 'Sometimes' }), /"Sometimes" is not/],
    ['args that are not strings', exec({ args: [1] }), /args is not a list of strings/],
    ['env without a value', exec({ env: [{ name: 'A' }] }), /env is not a list of name and value/],
  ];
  for (const [what, config, error] of refused)
    test(`refused: ${what}`, () => assert.throws(() => execPlan(config, cluster, noCa, {}), error));
});

describe('parseExecCredential: what a plugin answered', () => {
  test('a token, with its expiry', () => {
    assert.deepEqual(
      parseExecCredential(answer({ token: 't', expirationTimestamp: '2030-01-02T03:04:05Z' }), V1),
      {
        token: 't',
        expires: Date.parse('2030-01-02T03:04:05Z'),
      },
    );
  });

  test('a client certificate and key (PEM), held for the process without an expiry', () => {
    const c = parseExecCredential(answer({ clientCertificateData: 'CERT', clientKeyData: 'KEY' }), V1);
    assert.equal(c.cert?.toString(), 'CERT');
    assert.equal(c.key?.toString(), 'KEY');
    assert.equal(c.expires, undefined);
    assert.equal(c.token, undefined);
  });

  const refused: [string, string, RegExp][] = [
    ['not JSON', 'Error: please log in', /not JSON/],
    [
      'another apiVersion than the kubeconfig says',
      answer({ token: 't' }, V1BETA1),
      /ExecCredential client.authentication.k8s.io\/v1beta1, not ExecCredential client.authentication.k8s.io\/v1/,
    ],
    ['another kind', answer({ token: 't' }, V1, 'Status'), /answered Status/],
    ['no status', JSON.stringify({ apiVersion: V1, kind: 'ExecCredential' }), /has no status/],
    ['neither a token nor a certificate', answer({}), /no token and no client certificate/],
    ['a certificate without its key', answer({ clientCertificateData: 'CERT' }), /without the other/],
    [
      'an expiry that is not a time',
      answer({ token: 't', expirationTimestamp: 'soon' }),
      /"soon" is not a time/,
    ],
  ];
  for (const [what, stdout, error] of refused)
    test(`refused: ${what}`, () => assert.throws(() => parseExecCredential(stdout, V1), error));
});

describe('execCredentials: asked again only when needed', () => {
  test('kept until expirationTimestamp, asked again after it; one run for concurrent callers', async () => {
    let now = 1_000;
    let runs = 0;
    const creds = execCredentials(
      async () => ({ token: `t${++runs}`, expires: 2_000 }),
      () => now,
    );
    const [a, b] = await Promise.all([creds.get(), creds.get()]);
    assert.equal(runs, 1);
    assert.equal(a, b);
    now = 1_999;
    assert.equal((await creds.get()).token, 't1');
    now = 2_000;
    assert.equal(expired(a, now), true);
    assert.equal((await creds.get()).token, 't2');
  });

  test('without an expiry: kept for the process, until the server refuses them', async () => {
    let runs = 0;
    const creds = execCredentials(
      async (): Promise<ExecCredential> => ({ token: `t${++runs}` }),
      () => 9e15,
    );
    await creds.get();
    assert.equal((await creds.get()).token, 't1');
    creds.refused();
    assert.equal((await creds.get()).token, 't2');
  });

  test('a failed run is not kept: the next get runs the plugin again', async () => {
    let runs = 0;
    const creds = execCredentials(async () => {
      if (++runs === 1) throw new Error('flaky');
      return { token: 'ok' };
    });
    await assert.rejects(creds.get(), /flaky/);
    assert.equal((await creds.get()).token, 'ok');
  });
});

describe('runExecPlugin: a bounded run', () => {
  const node = (script: string, over: Partial<Parameters<typeof runExecPlugin>[0]> = {}) => ({
    command: process.execPath,
    args: ['-e', script],
    env: { PATH: process.env['PATH'] ?? '', KUBERNETES_EXEC_INFO: '{"spec":{"interactive":false}}' },
    apiVersion: V1,
    ...over,
  });

  test('its stdout, with KUBERNETES_EXEC_INFO in its env and no stdin', async () => {
    const out = await runExecPlugin(
      node('process.stdout.write(process.env.KUBERNETES_EXEC_INFO + require("fs").readFileSync(0, "utf8"))'),
    );
    assert.equal(out, '{"spec":{"interactive":false}}');
  });

  test('a missing command says so, with its installHint', async () => {
    await assert.rejects(
      runExecPlugin(
        node('', {
          command: '/nonexistent/get-token',
          installHint: 'Install it with: brew install get-token\n',
        }),
      ),
      /its command \/nonexistent\/get-token is not found: Install it with: brew install get-token$/,
    );
  });

  test('a non-zero exit says its code and the end of its stderr', async () => {
    await assert.rejects(
      runExecPlugin(node('console.error("x".repeat(5000) + "token expired, run login"); process.exit(3)')),
      (e: Error) =>
        /^it exited with 3: …x+token expired, run login$/.test(e.message) && e.message.length < 2100,
    );
  });

  test('a plugin that hangs is killed after the timeout', async () => {
    const start = Date.now();
    await assert.rejects(
      runExecPlugin(node('setInterval(() => {}, 1000)'), 300),
      /did not finish in 0.3 s \(killed\)/,
    );
    assert.ok(Date.now() - start < 5_000);
  });

  test('a plugin that floods its stdout is killed past the bound', async () => {
    await assert.rejects(
      runExecPlugin(
        node('const b = "x".repeat(65536); const w = () => process.stdout.write(b, w); w()'),
        30_000,
        1 << 20,
      ),
      /printed more than 1048576 bytes \(killed\)/,
    );
  });
});
