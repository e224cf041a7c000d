import assert from 'node:assert/strict';
import { test } from 'node:test';
import { berthProgram } from '../../../src/cli/program.ts';
import { bashCompletion, completionWords } from '../../../src/cli/completion.ts';
import { describeError, EXIT } from '../../../src/cli/errors.ts';
import { ApiError } from '../../../src/runtime/client/client.ts';
import { KubeconfigError } from '../../../src/runtime/client/kubeconfig.ts';

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
  const refusedConnection = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:6443'), {
    code: 'ECONNREFUSED',
  });
  assert.deepEqual(describeError(refusedConnection), {
    message: 'cannot reach the cluster: connect ECONNREFUSED 127.0.0.1:6443',
    exitCode: EXIT.noCluster,
  });
});
