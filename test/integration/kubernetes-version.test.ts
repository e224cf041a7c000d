// Kubernetes minors as Berth meets them (issue 61), on real apiservers: one that serves the APIs of a
// minor Berth does not support (a kube-apiserver run with --emulated-version=kube=1.34, as a cluster
// can be mid-upgrade) is refused before anything is written, and the Warning headers an apiserver
// sends are each logged once and all counted.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Resources, type KubeObject } from '../../src/runtime/api/meta.ts';
import type { KubeClient } from '../../src/runtime/client/client.ts';
import { apiWarnings } from '../../src/runtime/client/warnings.ts';
import { restMetrics } from '../../src/runtime/observability/metrics.ts';
import { Sandbox } from '../../src/sandbox/sandbox.ts';
import { runBerthCli } from '../helpers/berth.ts';
import { createNamespace, deleteNamespace, testSandbox, uniqueName } from '../helpers/cluster.ts';

/** Every supported minor's kube-apiserver can emulate 1.34 (three minors back at most from 1.35). */
const EMULATED = '1.34';
const emulating = new Sandbox(uniqueName('emulated'));

before(async () => {
  const minor = testSandbox().kubernetesVersion;
  await emulating.up({ emulatedVersion: EMULATED, ...(minor ? { kubernetesVersion: minor } : {}) });
});

after(async () => {
  await emulating.destroy();
});

const berthCrds = async (client: KubeClient): Promise<string[]> =>
  (await client.list(Resources.crds)).items
    .map((c) => c.metadata?.name ?? '')
    .filter((n) => n.endsWith('.berth.dev'));

test('an apiserver emulating Kubernetes 1.34: install and run refuse with exit code 7, writing nothing', async () => {
  const version = await emulating.client().request<{ emulationMinor?: string }>('GET', '/version');
  assert.equal(version.emulationMinor, '34', 'the apiserver says it emulates 1.34');
  const kubeconfig = ['--kubeconfig', emulating.kubeconfigPath];
  for (const args of [['install'], ['run', '--controllers', 'labels']]) {
    const r = runBerthCli([...args, ...kubeconfig], {}, 60_000);
    assert.equal(r.status, 7, `berth ${args[0]}: ${r.stderr}`);
    assert.match(
      r.stderr,
      /^berth: the apiserver runs Kubernetes 1\.34 \(emulated by v1\.3\d\.\d+\), older than/m,
    );
    assert.match(r.stderr, /--allow-unsupported-kubernetes/);
  }
  assert.deepEqual(await berthCrds(emulating.client()), [], 'no CRD installed');
});

test('--allow-unsupported-kubernetes goes on against it, with a warning', async () => {
  const r = runBerthCli([
    'install',
    '--kubeconfig',
    emulating.kubeconfigPath,
    '--allow-unsupported-kubernetes',
  ]);
  assert.equal(r.status, 0, r.stderr);
  assert.match(
    r.stderr + r.stdout,
    /Kubernetes 1\.34 \(emulated by .*going on \(--allow-unsupported-kubernetes\)/,
  );
  assert.ok((await berthCrds(emulating.client())).length > 0, 'the CRDs installed');
});

test("the apiserver's Warning headers: each text logged once, every one counted", async () => {
  const sandbox = testSandbox();
  const client = sandbox.client();
  const host = new URL(sandbox.server).host;
  const ns = await createNamespace(client, 'warn');
  const fresh: string[][] = [];
  const note = apiWarnings.note.bind(apiWarnings);
  apiWarnings.note = (h, values) => {
    const logged = note(h, values);
    fresh.push(logged);
    return logged;
  };
  const counted = async () =>
    (await restMetrics.warnings.get()).values.find((v) => v.labels.host === host)?.value ?? 0;
  const before = await counted();
  try {
    // A node selector on a label deprecated since 1.14: the apiserver warns at every create.
    for (const name of ['first', 'second'])
      await client.create<KubeObject>(Resources.pods, {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name, namespace: ns },
        spec: {
          nodeSelector: { 'beta.kubernetes.io/arch': 'amd64' },
          containers: [{ name: 'c', image: 'registry.example/app:1' }],
        },
      });
  } finally {
    apiWarnings.note = note;
    await deleteNamespace(client, ns);
  }
  assert.equal((await counted()) - before, 2, 'both warnings counted');
  assert.equal(fresh.length, 2, 'one Warning header per create');
  assert.equal(fresh[0]?.length, 1, 'the first logged');
  assert.match(fresh[0]?.[0] ?? '', /beta\.kubernetes\.io\/arch.*deprecated/);
  assert.deepEqual(fresh[1], [], 'the same text again: counted, not logged');
});
