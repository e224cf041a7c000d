import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Command } from 'commander';
import { asList, formatted, outputOption, parseDuration } from '../../../src/cli/flags.ts';
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
