// Every kustomization in deploy/kustomize is accepted by the real apiserver: built with the sandbox's
// kubectl (`kubectl kustomize`; a Component on top of default, as its users add it) and applied with a
// server-side dry run, which validates every object (the Deployment's pod template included) and
// warns when the pod breaks the namespace's restricted Pod Security profile. The builds are moved to
// a namespace of their own: only the Namespace is created for real, since dry-run objects cannot land
// in a namespace that does not exist. Kinds of cert-manager's and the Prometheus Operator's, which a
// plain cluster does not serve, are checked by what they say, not dry-run (the monitoring Component's
// rules by promtool: monitoring.test.ts).
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { parse, parseAllDocuments, stringify } from 'yaml';
import { ensureBinaries } from '../../src/sandbox/build.ts';
import { packageRoot } from '../../src/sandbox/paths.ts';
import type { KubeObject } from '../../src/runtime/api/meta.ts';
import { mergeRules } from '../../src/runtime/api/rbac.ts';
import { capabilities } from '../../src/capabilities.ts';
import { BUILTIN_OWNER_KINDS, rbacManifests } from '../../src/manifests.ts';
import { deleteNamespace, kubectl as runKubectl, testSandbox, uniqueName } from '../helpers/cluster.ts';
import { assertCaChain } from '../helpers/certmanager.ts';

const sandbox = testSandbox();
const client = sandbox.client();
const ns = uniqueName('deploy');
const dir = mkdtempSync(join(tmpdir(), 'berth-deploy-'));
let kubectlPath: string;

const kubectl = (args: string[], input?: string) => runKubectl(sandbox, kubectlPath, args, input);

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

const kustomize = join(packageRoot(), 'deploy/kustomize');
/** Every directory of deploy/kustomize, and whether it is a Kustomization or a Component. */
const overlays = readdirSync(kustomize, { withFileTypes: true })
  .filter((d) => d.isDirectory())
  .map((d) => ({
    name: d.name,
    kind: (parse(readFileSync(join(kustomize, d.name, 'kustomization.yaml'), 'utf8')) as { kind: string })
      .kind,
  }));

/**
 * `kubectl kustomize` of an overlay moved to the test's namespace (a Component on top of default).
 * kustomize refuses absolute resource paths: the repository is named relative to the overlay.
 */
function build(overlay: { name: string; kind: string }): Any[] {
  const rel = (name: string) => relative(dir, join(kustomize, name));
  writeFileSync(
    join(dir, 'kustomization.yaml'),
    stringify({
      apiVersion: 'kustomize.config.k8s.io/v1beta1',
      kind: 'Kustomization',
      namespace: ns,
      ...(overlay.kind === 'Component'
        ? { resources: [rel('default')], components: [rel(overlay.name)] }
        : { resources: [rel(overlay.name)] }),
    }),
  );
  return parseAllDocuments(kubectl(['kustomize', dir]).stdout).map((d) => d.toJS() as Any);
}

const certManager = (o: KubeObject) => o.apiVersion?.startsWith('cert-manager.io/');
const operator = (o: KubeObject) => o.apiVersion?.startsWith('monitoring.coreos.com/');
let objects: KubeObject[];

before(async () => {
  kubectlPath = (await ensureBinaries()).kubectl;
  objects = build({ name: 'default', kind: 'Kustomization' });
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

describe('deploy/kustomize', () => {
  test('every kustomization is accepted by the apiserver (server-side dry run), within restricted Pod Security', () => {
    // Found by reading the directory (a new one is built below too); never none, or nothing would be tested.
    assert.deepEqual(
      overlays.map((o) => `${o.name}: ${o.kind}`),
      [
        'base: Kustomization',
        'cert-manager: Component',
        'default: Kustomization',
        'finalizer-owners: Component',
        'monitoring: Component',
        'webhook-client-ca: Component',
      ],
    );
    for (const overlay of overlays) {
      const built = build(overlay);
      // A plain cluster: nothing of cert-manager's is needed, but with the Component that asks for it.
      assert.deepEqual(
        built
          .filter(certManager)
          .map((o) => o.kind)
          .sort(),
        overlay.name === 'cert-manager' ? ['Certificate', 'Certificate', 'Issuer', 'Issuer'] : [],
        overlay.name,
      );
      assert.deepEqual(
        built
          .filter(operator)
          .map((o) => o.kind)
          .sort(),
        overlay.name === 'monitoring' ? ['PrometheusRule', 'ServiceMonitor'] : [],
        overlay.name,
      );
      const rest = built.filter((o) => o.kind !== 'Namespace' && !certManager(o) && !operator(o));
      const { stdout, stderr } = dryRun(rest);
      const applied = stdout.split('\n').filter((l) => l.includes('serverside-applied (server dry run)'));
      assert.equal(applied.length, rest.length, `${overlay.name}: ${stdout}`);
      assert.doesNotMatch(stderr, /Warning/, `${overlay.name}: ${stderr}`);
    }
  });

  test('with the cert-manager Component: its Certificate, signed by a CA of its own, mounted for --webhook-cert-dir', () => {
    const built = build({ name: 'cert-manager', kind: 'Component' });
    const pod = built.find((o) => o.kind === 'Deployment').spec.template.spec;
    assert.ok(pod.containers[0].args.includes('--webhook-cert-dir=/certs'));
    const mount = pod.containers[0].volumeMounts.find((m: Any) => m.mountPath === '/certs');
    const mounted = pod.volumes.find((v: Any) => v.name === mount.name).secret.secretName;
    assertCaChain(built, mounted);
    // That the apiserver takes the Deployment with the mount: the dry run of every kustomization above.
  });

  test("with the webhook-client-ca Component: the apiserver's client CA mounted from its ConfigMap for --webhook-client-ca", () => {
    const pod = build({ name: 'webhook-client-ca', kind: 'Component' }).find((o) => o.kind === 'Deployment')
      .spec.template.spec;
    const mount = pod.containers[0].volumeMounts.find((m: Any) => m.name === 'webhook-client-ca');
    assert.ok(pod.containers[0].args.includes(`--webhook-client-ca=${mount.mountPath}/ca.crt`));
    assert.equal(
      pod.volumes.find((v: Any) => v.name === mount.name).configMap.name,
      'berth-webhook-client-ca',
    );
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
