// The kustomize install (deploy/kustomize/default) is accepted by the real apiserver: built with
// the sandbox's kubectl and applied with a server-side dry run, which validates every object (the
// Deployment's pod template included) and warns when the pod breaks the namespace's restricted Pod
// Security profile. The build is moved to a namespace of its own: only the Namespace is created for
// real, since dry-run objects cannot land in a namespace that does not exist.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { parseAllDocuments, stringify } from 'yaml';
import { ensureBinaries } from '../../src/sandbox/build.ts';
import { packageRoot } from '../../src/sandbox/paths.ts';
import type { KubeObject } from '../../src/runtime/api/meta.ts';
import { mergeRules } from '../../src/runtime/api/rbac.ts';
import { capabilities } from '../../src/capabilities.ts';
import { BUILTIN_OWNER_KINDS, rbacManifests } from '../../src/manifests.ts';
import { deleteNamespace, testSandbox, uniqueName } from '../helpers/cluster.ts';

const sandbox = testSandbox();
const client = sandbox.client();
const ns = uniqueName('deploy');
const dir = mkdtempSync(join(tmpdir(), 'berth-deploy-'));
let kubectlPath: string;

function kubectl(args: string[], input?: string): { stdout: string; stderr: string } {
  const r = spawnSync(kubectlPath, ['--kubeconfig', sandbox.kubeconfigPath, ...args], {
    input,
    encoding: 'utf8',
    timeout: 60_000,
  });
  assert.equal(r.status, 0, `kubectl ${args.join(' ')} failed:\n${r.stderr}${r.error ?? ''}`);
  return { stdout: r.stdout, stderr: r.stderr };
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- built objects, read field by field
type Any = any;

const yamlOf = (objects: KubeObject[]): string => objects.map((o) => stringify(o)).join('---\n');

/** Server-side dry-run apply; returns kubectl's stdout and warnings. */
const dryRun = (objects: KubeObject[]) =>
  kubectl(
    // --force-conflicts: the sandbox's CRDs may have been installed by `berth install` (another manager).
    [
      'apply',
      '--server-side',
      '--dry-run=server',
      '--force-conflicts',
      '--field-manager=berth-deploy-test',
      '-f',
      '-',
    ],
    yamlOf(objects),
  );

let objects: KubeObject[];

before(async () => {
  kubectlPath = (await ensureBinaries()).kubectl;
  // kustomize refuses absolute resource paths: refer to the repository relative to the overlay.
  const target = relative(dir, join(packageRoot(), 'deploy/kustomize/default'));
  writeFileSync(
    join(dir, 'kustomization.yaml'),
    stringify({
      apiVersion: 'kustomize.config.k8s.io/v1beta1',
      kind: 'Kustomization',
      namespace: ns,
      resources: [target],
    }),
  );
  objects = parseAllDocuments(kubectl(['kustomize', dir]).stdout).map((d) => d.toJS() as KubeObject);
  const namespace = objects.filter((o) => o.kind === 'Namespace');
  assert.deepEqual(
    namespace.map((o) => o.metadata?.name),
    [ns],
  );
  kubectl(['apply', '--server-side', '--field-manager=berth-deploy-test', '-f', '-'], yamlOf(namespace));
});

after(async () => {
  rmSync(dir, { recursive: true, force: true });
  await deleteNamespace(client, ns);
  client.close();
});

describe('deploy/kustomize/default', () => {
  test('is accepted by the apiserver (server-side dry run), within restricted Pod Security', () => {
    // A plain cluster: nothing of cert-manager's is needed (Berth keeps its own webhook certificate).
    assert.deepEqual(
      objects.filter((o) => o.apiVersion?.startsWith('cert-manager.io/')),
      [],
    );
    const rest = objects.filter((o) => o.kind !== 'Namespace');
    const { stdout, stderr } = dryRun(rest);
    const applied = stdout.split('\n').filter((l) => l.includes('serverside-applied (server dry run)'));
    assert.equal(applied.length, rest.length, stdout);
    assert.doesNotMatch(stderr, /Warning/, stderr);
  });

  test('with the cert-manager Component: its Certificate, mounted for --webhook-cert-dir', () => {
    const overlay = mkdtempSync(join(tmpdir(), 'berth-deploy-cm-'));
    try {
      writeFileSync(
        join(overlay, 'kustomization.yaml'),
        stringify({
          apiVersion: 'kustomize.config.k8s.io/v1beta1',
          kind: 'Kustomization',
          namespace: ns,
          resources: [relative(overlay, join(packageRoot(), 'deploy/kustomize/default'))],
          components: [relative(overlay, join(packageRoot(), 'deploy/kustomize/cert-manager'))],
        }),
      );
      const built = parseAllDocuments(kubectl(['kustomize', overlay]).stdout).map((d) => d.toJS() as Any);
      const cert = built.find((o) => o.kind === 'Certificate');
      assert.ok(built.some((o) => o.kind === 'Issuer') && cert);
      const pod = built.find((o) => o.kind === 'Deployment').spec.template.spec;
      assert.ok(pod.containers[0].args.includes('--webhook-cert-dir=/certs'));
      const mount = pod.containers[0].volumeMounts.find((m: Any) => m.mountPath === '/certs');
      assert.equal(
        pod.volumes.find((v: Any) => v.name === mount.name).secret.secretName,
        cert.spec.secretName,
      );
      // The Deployment with the mount is still valid for the apiserver.
      const { stdout } = dryRun(built.filter((o) => o.kind === 'Deployment'));
      assert.match(stdout, /serverside-applied \(server dry run\)/);
    } finally {
      rmSync(overlay, { recursive: true, force: true });
    }
  });

  test('with the finalizer-owners Component: the built-in workload kinds in the ClusterRole, nothing else changed', () => {
    const overlay = mkdtempSync(join(tmpdir(), 'berth-deploy-fo-'));
    try {
      writeFileSync(
        join(overlay, 'kustomization.yaml'),
        stringify({
          apiVersion: 'kustomize.config.k8s.io/v1beta1',
          kind: 'Kustomization',
          namespace: ns,
          resources: [relative(overlay, join(packageRoot(), 'deploy/kustomize/default'))],
          components: [relative(overlay, join(packageRoot(), 'deploy/kustomize/finalizer-owners'))],
        }),
      );
      const built = parseAllDocuments(kubectl(['kustomize', overlay]).stdout).map((d) => d.toJS() as Any);
      const role = (list: Any[]) => list.find((o) => o.kind === 'ClusterRole' && o.metadata.name === 'berth');
      const base = role(objects);
      const opted = rbacManifests(capabilities, { finalizerOwners: BUILTIN_OWNER_KINDS }).find(
        (o) => o.kind === 'ClusterRole',
      ) as Any;
      // The same grants as the roles generated with these owner kinds (rules compared merged).
      assert.deepEqual(mergeRules(role(built).rules), opted.rules);
      assert.notDeepEqual(mergeRules(base.rules), opted.rules);
      assert.deepEqual(
        built.filter((o) => o.kind !== 'ClusterRole'),
        objects.filter((o) => o.kind !== 'ClusterRole'),
      );
      const { stdout } = dryRun([role(built)]);
      assert.match(stdout, /serverside-applied \(server dry run\)/);
    } finally {
      rmSync(overlay, { recursive: true, force: true });
    }
  });

  test('the Pod Security check is live: a privileged pod template draws a warning', () => {
    const deployment = structuredClone(objects.find((o) => o.kind === 'Deployment')) as KubeObject & {
      spec: {
        template: { spec: { securityContext?: unknown; containers: { securityContext?: unknown }[] } };
      };
    };
    const pod = deployment.spec.template.spec;
    delete pod.securityContext;
    for (const c of pod.containers) c.securityContext = { privileged: true };
    assert.match(dryRun([deployment]).stderr, /violate PodSecurity "restricted/);
  });
});
