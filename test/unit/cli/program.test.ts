import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { test } from 'node:test';
import type { Command } from 'commander';
import { berthProgram, pathOf } from '../../../src/cli/program.ts';
import { bashCompletion, completionWords } from '../../../src/cli/completion.ts';
import { berthErrorLine, describeError, EXIT, usageExitCode } from '../../../src/cli/errors.ts';
import { explainers } from '../../../src/explain.ts';
import { ApiError } from '../../../src/runtime/client/client.ts';
import { KubeconfigError } from '../../../src/runtime/client/kubeconfig.ts';
import { UnsupportedKubernetesError } from '../../../src/runtime/api/version.ts';

const help = async (only?: string | null) => {
  const p = await berthProgram(only);
  p.configureOutput({ getOutHelpWidth: () => 100, getOutHasColors: () => false });
  return p.helpInformation();
};

test('berth --help without loading any command says what the whole program says', async () => {
  assert.equal(await help(null), await help());
});

test('one command loads only itself', async () => {
  const p = await berthProgram('version');
  assert.deepEqual(
    p.commands.map((c) => c.name()),
    ['version'],
  );
});

test('completion offers the subcommands and flags of the path typed so far', async () => {
  const words = completionWords(await berthProgram());
  assert.ok(words.get('berth')!.includes('sandbox'));
  assert.ok(words.get('berth sandbox')!.includes('up'));
  assert.ok(words.get('berth sandbox up')!.includes('--quota-source'));
  assert.ok(words.get('berth explain node')!.includes('--context'));
  assert.ok(words.get('berth cells list')!.includes('-o'));
  // A deprecated spelling still works but is not offered.
  assert.ok(words.get('berth uninstall')!.includes('--berth-namespace'));
  assert.ok(!words.get('berth uninstall')!.includes('--namespace'));
  // Every command that reads Berth's namespace takes the one flag, the page's too.
  for (const c of ['berth ui', 'berth plan', 'berth run'])
    assert.ok(words.get(c)!.includes('--berth-namespace'), c);
  const script = bashCompletion(await berthProgram(), ['berth', 'kubectl-berth']);
  assert.match(script, /complete -F _berth berth kubectl-berth\n$/);
});

test('errors say what failed in a user’s words, with their exit code', () => {
  const missingType = new ApiError(
    404,
    'NotFound',
    'GET /apis/berth.dev/v1alpha1/cells: 404 404 page not found',
    '404 page not found',
  );
  assert.deepEqual(describeError(missingType), {
    message:
      "the cluster does not serve cells.berth.dev: Berth's CRDs are not installed there (berth install, or helm install berth deploy/helm/berth)",
    exitCode: EXIT.crdsMissing,
  });
  const missingObject = new ApiError(
    404,
    'NotFound',
    'GET /apis/berth.dev/v1alpha1/namespaces/a/workloads/w: 404 not found',
    {
      reason: 'NotFound',
      details: { name: 'w' },
    },
  );
  assert.equal(describeError(missingObject).exitCode, EXIT.failed);
  const refused =
    'cells.berth.dev is forbidden: User "alice" cannot list resource "cells" in API group "berth.dev" at the cluster scope';
  assert.deepEqual(
    describeError(
      new ApiError(403, 'Forbidden', `GET /apis/berth.dev/v1alpha1/cells: 403 ${refused}`, {
        message: refused,
      }),
    ),
    { message: `forbidden: ${refused} (GET /apis/berth.dev/v1alpha1/cells)`, exitCode: EXIT.refused },
  );
  assert.equal(describeError(new KubeconfigError('no kubeconfig')).exitCode, EXIT.noCluster);
  assert.deepEqual(describeError(new UnsupportedKubernetesError('the apiserver runs Kubernetes v1.34.4')), {
    message: 'the apiserver runs Kubernetes v1.34.4',
    exitCode: EXIT.unsupportedKubernetes,
  });
  const refusedConnection = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:6443'), {
    code: 'ECONNREFUSED',
  });
  assert.deepEqual(describeError(refusedConnection), {
    message: 'cannot reach the cluster: connect ECONNREFUSED 127.0.0.1:6443',
    exitCode: EXIT.noCluster,
  });
});

/** `berth ARGS` as its own process, with no cluster to reach. */
const berth = (...args: string[]) =>
  spawnSync(process.execPath, ['src/cli/main.ts', ...args], {
    encoding: 'utf8',
    env: { ...process.env, KUBECONFIG: '/nonexistent' },
  });

test('every error line starts berth:, a usage error exits 2, but 1 for plan whose 2 says changes', () => {
  assert.equal(berthErrorLine("error: unknown option '--x'\n"), "berth: unknown option '--x'\n");
  assert.equal(usageExitCode('plan'), EXIT.failed);
  assert.equal(usageExitCode('run'), EXIT.usage);
  const plan = berth('plan', '--no-such-flag');
  assert.equal(plan.status, EXIT.failed);
  assert.match(plan.stderr, /^berth: unknown option '--no-such-flag'\n/);
  assert.equal(plan.stdout, '');
  const run = berth('run', '--lease-duration=1d');
  assert.equal(run.status, EXIT.usage);
  assert.match(run.stderr, /^berth: option '--lease-duration <duration>' argument '1d' is invalid/);
});

test('explain of a kind it does not know says so and which it knows, exit 1, without the help', () => {
  for (const args of [
    ['explain', 'deployment', 'web'],
    ['explain', 'deployment/web'],
  ]) {
    const r = berth(...args);
    assert.equal(r.status, EXIT.failed, args.join(' '));
    assert.equal(
      r.stderr,
      `berth: unknown kind "deployment": berth explain knows ${explainers.map((e) => e.name).join(', ')}\n`,
    );
  }
});

test('each command’s help ends with its Examples, under the name the program runs as', async () => {
  const all = (c: Command): Command[] => [c, ...c.commands.filter((s) => s.name() !== 'help').flatMap(all)];
  const missing = all(await berthProgram())
    .filter((c) => !/\nExamples:\n {2}\S/.test(c.helpInformation()))
    .map((c) => pathOf(c) || 'berth');
  assert.deepEqual(missing, []);
  const plugin = await berthProgram('plan');
  plugin.name('kubectl berth');
  assert.match(plugin.commands[0]!.helpInformation(), /\n {2}kubectl berth plan -f policy\.yaml\n/);
});

test('manifests puts Berth in --berth-namespace, and a list flag takes commas', () => {
  const r = berth(
    'manifests',
    '--kind',
    'rbac',
    '--berth-namespace',
    'ops',
    '--workload-namespace',
    'shop,web',
  );
  assert.equal(r.status, EXIT.ok, r.stderr);
  assert.match(r.stdout, /system:serviceaccount:ops:berth/);
  for (const ns of ['shop', 'web']) assert.match(r.stdout, new RegExp(`namespace: ${ns}\\n`));
  assert.doesNotMatch(r.stdout, /berth-system/);
});
