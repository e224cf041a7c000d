// Helm (built from controlplane/helm) and kubectl against a test sandbox, as the chart's users run them.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { Resources } from '../../src/runtime/api/meta.ts';
import type { KubeClient } from '../../src/runtime/client/client.ts';
import type { Sandbox } from '../../src/sandbox/sandbox.ts';
import { packageRoot } from '../../src/sandbox/paths.ts';
import { addNodes, deleteNamespace, deleteNodes, uniqueName } from './cluster.ts';

// Rendered objects, read field by field: a missing field fails an assertion, not the compiler.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type Any = any;

export const chart = join(packageRoot(), 'deploy/helm/berth');

/** Runs `bin` with the sandbox's kubeconfig; a non-zero exit fails the test with its stderr. */
export function exec(
  sandbox: Sandbox,
  bin: string,
  args: string[],
  input?: string,
): { stdout: string; stderr: string } {
  const r = spawnSync(bin, args, {
    input,
    encoding: 'utf8',
    timeout: 300_000,
    env: { ...process.env, KUBECONFIG: sandbox.kubeconfigPath, HELM_CACHE_HOME: join(sandbox.dir, 'helm') },
  });
  assert.equal(r.status, 0, `${bin} ${args.join(' ')} failed:\n${r.stderr}${r.error ?? ''}`);
  return { stdout: r.stdout, stderr: r.stderr };
}

/** `--set` arguments for one option set. */
export const sets = (values: Record<string, string>): string[] =>
  Object.entries(values).flatMap(([k, v]) => ['--set', `${k}=${v}`]);

/** The objects `helm template` renders, hooks included. */
export function render(
  helm: (args: string[]) => { stdout: string },
  namespace: string,
  values: Record<string, string> = {},
  release = 'berth',
  from = chart,
): Any[] {
  const out = helm(['template', release, from, '--namespace', namespace, ...sets(values)]).stdout;
  return parseAllDocuments(out)
    .map((d) => d.toJS() as Any)
    .filter(Boolean);
}

/**
 * A namespace under restricted Pod Security for a release, and a kwok node of its own for the
 * release's pods and its hooks' (kwok runs them, and completes the Jobs Helm waits for): the values
 * that put them there, and the removal of both.
 */
export async function releasePlace(
  client: KubeClient,
  ns: string,
): Promise<{ onNode: Record<string, string>; node: string; remove: () => Promise<void> }> {
  await client.create(Resources.namespaces, {
    apiVersion: 'v1',
    kind: 'Namespace',
    metadata: { name: ns, labels: { 'pod-security.kubernetes.io/enforce': 'restricted' } },
  });
  const label = `${ns}.test/berth`;
  const nodes = await addNodes(client, {
    prefix: uniqueName(`${ns}-node`),
    count: 1,
    labels: { [label]: 'berth' },
  });
  return {
    onNode: { [`nodeSelector.${label.replaceAll('.', '\\.')}`]: 'berth' },
    node: nodes[0]!,
    remove: async () => {
      await deleteNodes(client, nodes);
      await deleteNamespace(client, ns);
    },
  };
}
