import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Command } from 'commander';
import {
  asList,
  berthNamespaceFlag,
  dryRunOption,
  formatted,
  listOption,
  outputOption,
  parseDuration,
} from '../../../src/command/flags.ts';
import {
  kubeconfigAccess,
  kubeconfigFileAccess,
  parseKubeconfig,
} from '../../../src/runtime/client/kubeconfig.ts';

test('parseDuration reads Go durations and bare seconds', () => {
  assert.equal(parseDuration('30s'), 30);
  assert.equal(parseDuration('2m'), 120);
  assert.equal(parseDuration('1h30m'), 5400);
  assert.equal(parseDuration('1.5s'), 1.5);
  assert.equal(parseDuration('500ms'), 0.5);
  assert.equal(parseDuration('1m0.5s'), 60.5);
  assert.equal(parseDuration('15'), 15);
  assert.equal(parseDuration('0'), 0);
});

test('parseDuration refuses what Go refuses', () => {
  for (const bad of ['', 's', '1d', '1.2.3s', '-1s', '1 h', 'h1', '.s', '1hh', '10x'])
    assert.throws(() => parseDuration(bad), /is not a duration/, bad);
});

test('-o prints json, yaml or text', async () => {
  const value = asList([{ kind: 'Cell', metadata: { name: 'a' } }]);
  assert.deepEqual(JSON.parse(await formatted('json', value, () => '')), value);
  assert.match(
    await formatted('yaml', value, () => ''),
    /^apiVersion: v1\nkind: List\nitems:\n {2}- kind: Cell/,
  );
  assert.equal(await formatted('text', value, () => 'NAME'), 'NAME\n');
  const cmd = new Command().exitOverride().addOption(outputOption());
  assert.throws(() => cmd.parse(['-o', 'wide'], { from: 'user' }), /Allowed choices are text, json, yaml/);
});

test('--context picks a context of the kubeconfig, and -n defaults to its namespace', () => {
  const text = JSON.stringify({
    'current-context': 'a',
    clusters: [{ name: 'c', cluster: { server: 'https://127.0.0.1:6443' } }],
    users: [{ name: 'u', user: { token: 't' } }],
    contexts: [
      { name: 'a', context: { cluster: 'c', user: 'u' } },
      { name: 'b', context: { cluster: 'c', user: 'u', namespace: 'shop' } },
    ],
  });
  assert.equal(kubeconfigAccess(parseKubeconfig(text)).namespace, undefined);
  assert.equal(kubeconfigAccess(parseKubeconfig(text, undefined, 'b')).namespace, 'shop');
  assert.throws(
    () => parseKubeconfig(text, undefined, 'nope'),
    /context "nope" is not in the kubeconfig \(it has: a, b\)/,
  );
  assert.throws(() => kubeconfigFileAccess('/nonexistent/kubeconfig'), {
    name: 'KubeconfigError',
    message: 'cannot read the kubeconfig /nonexistent/kubeconfig: no such file',
  });
});

/** `cmd`'s options after parsing `args` (no action runs). */
const parsed = (cmd: Command, args: string[]): Record<string, unknown> =>
  cmd
    .exitOverride()
    .configureOutput({ writeErr: () => {} })
    .parse(args, { from: 'user' })
    .opts();

test('a list flag is repeatable and comma-separated alike, and replaces its default when given', () => {
  const cmd = () => new Command().addOption(listOption('--ns <names>', 'namespaces', ['a']));
  assert.deepEqual(parsed(cmd(), []).ns, ['a']);
  assert.deepEqual(parsed(cmd(), ['--ns', 'shop,payments']).ns, ['shop', 'payments']);
  assert.deepEqual(parsed(cmd(), ['--ns', 'shop', '--ns=payments,web']).ns, ['shop', 'payments', 'web']);
  const noDefault = new Command().addOption(listOption('--ns <names>', 'namespaces'));
  assert.equal(parsed(noDefault, []).ns, undefined);
});

test('--berth-namespace is one name; the old spellings still work, hidden and warned about', (t) => {
  const said: string[] = [];
  t.mock.method(process.stderr, 'write', (s: string) => said.push(s));
  const cmd = () => berthNamespaceFlag(new Command(), "Berth's namespace", 'berth-system', ['--namespace']);
  assert.equal(parsed(cmd(), []).berthNamespace, 'berth-system');
  assert.equal(parsed(cmd(), ['--berth-namespace', 'ops']).berthNamespace, 'ops');
  assert.deepEqual(said, []);
  assert.equal(parsed(cmd(), ['--namespace=ops']).berthNamespace, 'ops');
  assert.deepEqual(said, ['berth: warning: --namespace is deprecated, use --berth-namespace\n']);
  assert.doesNotMatch(cmd().helpInformation(), /--namespace/);
});

test('--dry-run takes kubectl spellings: bare, =server, =client; nothing else', () => {
  const cmd = () => new Command().argument('[name]').addOption(dryRunOption());
  assert.equal(parsed(cmd(), []).dryRun, undefined);
  assert.equal(parsed(cmd(), ['--dry-run']).dryRun, 'client');
  assert.equal(parsed(cmd(), ['--dry-run=server']).dryRun, 'server');
  assert.equal(parsed(cmd(), ['--dry-run=client']).dryRun, 'client');
  assert.equal(parsed(cmd(), ['x', '--dry-run']).dryRun, 'client');
  assert.throws(() => parsed(cmd(), ['--dry-run=all']), /not a dry-run mode/);
});
