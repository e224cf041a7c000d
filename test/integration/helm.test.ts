// The Helm chart as its users meet it, with Helm itself (built from its pinned Go module): it lints
// and renders with the default values and with every documented option, the apiserver accepts what
// it renders (server-side dry run, in a namespace under restricted Pod Security), and a default
// install, upgrade and uninstall work on a plain cluster: no cert-manager, no Secret made by hand.
// values.schema.json refuses what values.yaml does not name. The upgrade from the previous chart and
// the hooks' commands: helm-upgrade.test.ts.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { after, before, describe, test } from 'node:test';
import { stringify } from 'yaml';
import { capabilities } from '../../src/capabilities.ts';
import { clusterControllers } from '../../src/capability.ts';
import { ensureBinaries, ensureHelm } from '../../src/sandbox/build.ts';
import { LEADER_ELECTION_ID, WEBHOOK_CERT_SECRET } from '../../src/policy/namespace.ts';
import { crdName, Resources, type KubeObject } from '../../src/runtime/api/meta.ts';
import { mergeRules } from '../../src/runtime/api/rbac.ts';
import { rbacManifests, type RbacOptions } from '../../src/manifests.ts';
import { testSandbox, uniqueName } from '../helpers/cluster.ts';
import { waitFor } from '../helpers/wait.ts';
import { assertCaChain } from '../helpers/certmanager.ts';
import {
  chart,
  exec as execIn,
  releasePlace,
  render as renderWith,
  sets,
  type Any,
} from '../helpers/helm.ts';

const sandbox = testSandbox();
const client = sandbox.client();
const ns = uniqueName('helm');
let helmPath: string;
let kubectlPath: string;
let place: Awaited<ReturnType<typeof releasePlace>> | undefined;

const exec = (bin: string, args: string[], input?: string) => execIn(sandbox, bin, args, input);
const helm = (args: string[]) => exec(helmPath, args);
const render = (values: Record<string, string> = {}, release = 'berth'): Any[] =>
  renderWith(helm, ns, values, release);

// Kinds of other projects' CRDs that a plain cluster does not serve: rendered, not dry-run.
const foreignGroups = ['cert-manager.io/', 'monitoring.coreos.com/'];

/** Server-side dry run of what the apiserver can serve; returns the warnings. */
function dryRun(objects: Any[]): string {
  const served = objects.filter((o) => !foreignGroups.some((g) => String(o.apiVersion).startsWith(g)));
  const { stdout, stderr } = exec(
    kubectlPath,
    [
      '--kubeconfig',
      sandbox.kubeconfigPath,
      'apply',
      '--server-side',
      '--dry-run=server',
      '--force-conflicts',
      '--field-manager=berth-helm-test',
      '-f',
      '-',
    ],
    served.map((o) => stringify(o)).join('---\n'),
  );
  const applied = stdout.split('\n').filter((l) => l.includes('(server dry run)'));
  assert.equal(applied.length, served.length, stdout);
  return stderr;
}

/** The Role for the webhook certificate's Secret: the release's full name (berth, for the release berth). */
const certRole = (objects: Any[]) => objects.find((o) => o.kind === 'Role' && o.metadata.name === 'berth');
const deployment = (objects: Any[]) => objects.find((o) => o.kind === 'Deployment');
const args = (objects: Any[]): string[] => deployment(objects).spec.template.spec.containers[0].args;

/** Every option values.yaml documents, one set at a time. */
const options: Record<string, Record<string, string>> = {
  'cert-manager': { 'webhook.certManager.enabled': 'true' },
  'a Secret of the user': { 'webhook.secretName': 'my-webhook-tls' },
  'no webhooks': { 'webhook.enabled': 'false' },
  'one replica, no leader election': {
    replicas: '1',
    leaderElect: 'false',
    'podDisruptionBudget.enabled': 'false',
  },
  'some controllers': { 'controllers={labels,arch}': '' },
  'gates fail closed': { 'gates.failurePolicy': 'Fail' },
  'rule files': { 'labelRules.accelerators/edgetpu[0]': 'kkohtaka.org/edgetpu' },
  'webhook limits': {
    'webhook.maxConnections': '100',
    'webhook.maxInFlight': '50',
    'webhook.headerTimeoutSeconds': '3',
    'webhook.requestTimeoutSeconds': '8',
  },
  'service monitor': { 'metrics.serviceMonitor.enabled': 'true' },
  'alerts, dashboard and text logs': {
    'prometheusRule.enabled': 'true',
    'grafanaDashboard.enabled': 'true',
    logFormat: 'text',
  },
  'extra args': { 'extraArgs[0]': '--label-workers=32' },
  'finalizer owners': { 'agents.finalizerOwners': '{deployments.apps,configmaps}' },
  'pull secrets in a namespace': { 'arch.pullSecretNamespaces': `{${ns}}` },
  'pull secrets everywhere': { 'arch.pullSecretNamespaces': '{*}' },
  "the apiserver's webhook client CA": { 'webhook.clientCA': 'PEM' },
  'no network policy': { 'networkPolicy.enabled': 'false' },
  'a network policy narrowed': {
    'networkPolicy.webhookFrom[0]': '10.0.0.0/24',
    'networkPolicy.metricsFrom.namespaceSelector.matchLabels.team': 'observability',
  },
  'metrics from no namespace': { 'networkPolicy.metricsFrom': 'null' },
  'a registry login': { 'arch.pullSecret': 'registry-login' },
  'workloads in a namespace': { 'workloads.namespaces': `{${ns}}` },
  'workloads everywhere': { 'workloads.namespaces': '{*}' },
  'an image by digest': { 'image.digest': `sha256:${'a'.repeat(64)}` },
  'pod labels, env and volumes': {
    'podLabels.team': 'platform',
    'extraEnv[0].name': 'HTTPS_PROXY',
    'extraEnv[0].value': 'http://proxy.example:3128',
    'extraVolumes[0].name': 'extra-ca',
    'extraVolumes[0].configMap.name': 'extra-ca',
    'extraVolumeMounts[0].name': 'extra-ca',
    'extraVolumeMounts[0].mountPath': '/etc/extra-ca',
  },
  'spread across zones': {
    'topologySpreadConstraints[0].maxSkew': '1',
    'topologySpreadConstraints[0].topologyKey': 'topology.kubernetes.io/zone',
    'topologySpreadConstraints[0].whenUnsatisfiable': 'DoNotSchedule',
  },
  'no topology spread': { topologySpreadConstraints: 'null' },
  'CRDs deleted on uninstall': { 'crds.keep': 'false' },
  'no hooks': { 'hooks.enabled': 'false' },
};

before(async () => {
  [helmPath, { kubectl: kubectlPath }] = await Promise.all([ensureHelm(), ensureBinaries()]);
  place = await releasePlace(client, ns);
});

after(async () => {
  await place?.remove();
  client.close();
});

describe('the Helm chart', () => {
  test('lints clean with the default values and with every option', () => {
    for (const [what, values] of [['defaults', {}] as const, ...Object.entries(options)]) {
      const { stdout } = helm(['lint', chart, '--strict', ...sets(values)]);
      assert.match(stdout, /1 chart\(s\) linted, 0 chart\(s\) failed/, `${what}:\n${stdout}`);
    }
  });

  test('by default needs nothing but the cluster: Berth keeps its webhook certificate in a Secret', () => {
    const objects = render();
    assert.deepEqual(
      objects.filter((o) => foreignGroups.some((g) => String(o.apiVersion).startsWith(g))),
      [],
      'no cert-manager or Prometheus Operator kinds by default',
    );
    // <fullname>-webhook-cert: with the release named berth, the name `berth run` defaults to.
    assert.ok(args(objects).includes(`--webhook-cert-secret=${WEBHOOK_CERT_SECRET}`));
    const role = certRole(objects);
    assert.equal(role.metadata.namespace, ns);
    const names = role.rules.flatMap((r: Any) => r.resourceNames ?? []);
    assert.deepEqual(names, [WEBHOOK_CERT_SECRET]);
    assert.ok(objects.some((o) => o.kind === 'RoleBinding' && o.roleRef.name === role.metadata.name));
    // The Lease, in a Role of its own: by name, in the release namespace only.
    const lease = objects.find((o) => o.kind === 'Role' && o.metadata.name === 'berth-leader-election');
    assert.equal(lease.metadata.namespace, ns);
    assert.deepEqual(
      lease.rules.flatMap((r: Any) => r.resourceNames ?? []),
      [LEADER_ELECTION_ID],
    );
    assert.ok(objects.some((o) => o.kind === 'RoleBinding' && o.roleRef.name === lease.metadata.name));
    assert.equal(
      render(options['one replica, no leader election']).find(
        (o) => o.kind === 'Role' && o.metadata.name === lease.metadata.name,
      ),
      undefined,
      'no leader election: no Lease to keep',
    );
    assert.doesNotMatch(dryRun(objects), /Warning/);
  });

  test('every option renders what the apiserver accepts, within restricted Pod Security', () => {
    for (const [what, values] of Object.entries(options)) {
      const objects = render(values);
      const warnings = dryRun(objects);
      assert.doesNotMatch(warnings, /Warning/, `${what}: ${warnings}`);
    }
    const cm = render(options['cert-manager']);
    const pod = deployment(cm).spec.template.spec;
    const mount = pod.containers[0].volumeMounts.find((m: Any) => m.name === 'webhook-certs');
    assertCaChain(cm, pod.volumes.find((v: Any) => v.name === mount.name).secret.secretName);
    assert.ok(args(cm).includes(`--webhook-cert-dir=${mount.mountPath}`));
    assert.equal(certRole(cm), undefined, 'no Secret to keep: no Role');
    assert.ok(args(render(options['a Secret of the user'])).includes('--webhook-cert-dir=/certs'));
    // Owner kinds opted in: the ClusterRole is the one generated with them, and only with them.
    const clusterRoleRules = (values: Record<string, string>) =>
      mergeRules(render(values).find((o) => o.kind === 'ClusterRole' && o.metadata.name === 'berth').rules);
    // The chart's default controllers are a cluster's capabilities.
    const generated = (
      opts: RbacOptions,
      caps = capabilities.filter((c) => clusterControllers(capabilities).includes(c.name)),
    ) => (rbacManifests(caps, opts).find((o) => o.kind === 'ClusterRole') as Any).rules;
    assert.deepEqual(
      clusterRoleRules(options['finalizer owners']!),
      generated({ finalizerOwners: ['deployments.apps', 'configmaps'] }),
    );
    assert.deepEqual(clusterRoleRules({}), generated({}));
    // Only the controllers the release runs are granted: labels and arch may not create pods.
    const some = capabilities.filter((c) => ['labels', 'arch'].includes(c.name));
    assert.deepEqual(clusterRoleRules(options['some controllers']!), generated({}, some));
    assert.ok(
      !clusterRoleRules(options['some controllers']!).some(
        (r: Any) => r.resources.includes('pods') && r.verbs.includes('create'),
      ),
    );
    // Pull secrets: read in Berth's namespace (arch's Role), in the namespaces named, or everywhere.
    assert.deepEqual(
      clusterRoleRules(options['pull secrets everywhere']!),
      generated({ pullSecretNamespaces: ['*'] }),
    );
    assert.ok(!clusterRoleRules({}).some((r: Any) => r.resources.includes('secrets')));
    const pulls = render(options['pull secrets in a namespace']).filter(
      (o) => o.metadata.name === 'berth-pull-secrets',
    );
    assert.deepEqual(
      pulls.map((o) => [o.kind, o.metadata.namespace]),
      [
        ['Role', ns],
        ['RoleBinding', ns],
      ],
    );
    assert.deepEqual(pulls[0].rules, [{ apiGroups: [''], resources: ['secrets'], verbs: ['get'] }]);
    assert.deepEqual(pulls[1].subjects, [{ kind: 'ServiceAccount', name: 'berth', namespace: ns }]);
    // A registry login: read by its name only, and passed to Berth.
    const login = render(options['a registry login']);
    const loginRole = login.find((o) => o.metadata.name === 'berth-arch-pull-secret' && o.kind === 'Role');
    assert.deepEqual(loginRole.rules, [
      { apiGroups: [''], resources: ['secrets'], resourceNames: ['registry-login'], verbs: ['get'] },
    ]);
    assert.ok(args(login).includes(`--arch-pull-secret=${ns}/registry-login`));
    assert.equal(
      render({}).find((o) => o.metadata.name === 'berth-arch-pull-secret'),
      undefined,
      "no login: no Role reads a Secret of Berth's namespace but the certificate's",
    );
    // Pods written only where workloads run: bound in the namespaces named, or everywhere.
    const podBindings = (values: Record<string, string>) =>
      render(values)
        .filter((o) => o.kind.endsWith('Binding') && o.metadata.name === 'berth-workload-pods')
        .map((o) => [o.kind, o.metadata.namespace]);
    assert.deepEqual(podBindings({}), []);
    assert.deepEqual(podBindings(options['workloads in a namespace']!), [['RoleBinding', ns]]);
    assert.deepEqual(podBindings(options['workloads everywhere']!), [['ClusterRoleBinding', undefined]]);
    // The webhook configurations Berth registers into: the release's, created empty.
    const configs = render({}).filter((o) => o.kind.endsWith('WebhookConfiguration'));
    assert.deepEqual(
      configs.map((o) => [o.kind, o.metadata.name, o.webhooks]),
      [
        ['MutatingWebhookConfiguration', 'berth', undefined],
        ['ValidatingWebhookConfiguration', 'berth', undefined],
      ],
    );
    assert.ok(args(render({})).includes('--webhook-configuration=berth'));
    const off = render(options['no webhooks']);
    assert.deepEqual(
      args(off).filter((a) => a.startsWith('--webhook-')),
      ['--webhook-bind-address=0'],
    );
    assert.equal(certRole(off), undefined, 'no webhooks: no certificate Secret to keep');
    assert.ok(!off.some((o) => o.kind.endsWith('WebhookConfiguration')));
  });

  test('refuses values that values.yaml does not name, or of the wrong form (values.schema.json)', () => {
    const wrongs: Record<string, string>[] = [
      { 'imag.tag': 'x' },
      { 'image.digest': 'latest' },
      { replicas: 'two' },
      { 'crds.kep': 'true' },
    ];
    for (const wrong of wrongs) {
      const r = spawnSync(helmPath, ['lint', chart, '--strict', ...sets(wrong)], { encoding: 'utf8' });
      assert.notEqual(r.status, 0, `${JSON.stringify(wrong)} was accepted:\n${r.stdout}`);
      assert.match(r.stdout + r.stderr, /schema/, JSON.stringify(wrong));
    }
  });

  test('installs and upgrades the CRDs by a hook, and takes back what Berth wrote by another on uninstall', () => {
    const objects = render();
    const hook = (o: Any) => o.metadata.annotations?.['helm.sh/hook'];
    const jobs = objects.filter((o) => o.kind === 'Job');
    assert.deepEqual(
      jobs.map((j) => [j.metadata.name, hook(j), j.spec.template.spec.containers[0].args]),
      [
        ['berth-crds', 'pre-install,pre-upgrade', ['install', '--crds-only']],
        [
          'berth-uninstall',
          'post-delete',
          [
            'uninstall',
            `--berth-namespace=${ns}`,
            `--webhook-cert-secret=${WEBHOOK_CERT_SECRET}`,
            '--keep-crds',
          ],
        ],
      ],
    );
    for (const j of jobs) {
      assert.equal(j.spec.template.spec.serviceAccountName, 'berth-hooks');
      assert.equal(
        j.spec.template.spec.containers[0].image,
        deployment(objects).spec.template.spec.containers[0].image,
      );
      assert.equal(
        j.metadata.annotations['helm.sh/hook-delete-policy'],
        'before-hook-creation,hook-succeeded',
      );
    }
    // The ServiceAccount and each hook's roles exist for its hooks only, before its Job.
    const weight = (o: Any) => Number(o.metadata.annotations['helm.sh/hook-weight']);
    const sa = objects.find((o) => o.kind === 'ServiceAccount' && o.metadata.name === 'berth-hooks');
    assert.equal(hook(sa), 'pre-install,pre-upgrade,post-delete');
    const roles = objects.filter((o) => hook(o) && o.kind.includes('Role'));
    assert.deepEqual(roles.map((o) => [o.kind, o.metadata.name, hook(o)]).sort(), [
      ['ClusterRole', 'berth-crds', 'pre-install,pre-upgrade'],
      ['ClusterRole', 'berth-uninstall', 'post-delete'],
      ['ClusterRoleBinding', 'berth-crds', 'pre-install,pre-upgrade'],
      ['ClusterRoleBinding', 'berth-uninstall', 'post-delete'],
      ['Role', 'berth-uninstall', 'post-delete'],
      ['RoleBinding', 'berth-uninstall', 'post-delete'],
    ]);
    for (const o of roles) assert.ok(weight(sa) < weight(o) && weight(o) < weight(jobs[0]));
    // The CRDs the hook may write: Berth's, by name.
    const crds = roles.find((o) => o.kind === 'ClusterRole' && o.metadata.name === 'berth-crds');
    assert.deepEqual(
      crds.rules.find((r: Any) => r.verbs.includes('patch')).resourceNames,
      capabilities.flatMap((c) => c.kinds.map(crdName)).sort(),
    );
    const deleting = render(options['CRDs deleted on uninstall']).find(
      (o) => o.kind === 'Job' && o.metadata.name === 'berth-uninstall',
    );
    assert.ok(!deleting.spec.template.spec.containers[0].args.includes('--keep-crds'));
    assert.ok(!render(options['no hooks']).some((o) => hook(o)), 'no hooks: no hook objects');
  });

  test("aggregates viewing and editing Berth's kinds into Kubernetes' view, edit and admin roles; Quotas are admin's to write", () => {
    const aggregated = render().filter(
      (o) => o.kind === 'ClusterRole' && /-(view|edit|admin)$/.test(o.metadata.name),
    );
    const into = (o: Any) =>
      Object.keys(o.metadata.labels)
        .filter((l) => l.startsWith('rbac.authorization.k8s.io/aggregate-to-'))
        .map((l) => l.split('-').pop());
    assert.deepEqual(
      aggregated.map((o) => [o.metadata.name, into(o)]),
      [
        ['berth-view', ['view', 'edit', 'admin']],
        ['berth-edit', ['edit', 'admin']],
        ['berth-admin', ['admin']],
      ],
    );
    const plurals = capabilities
      .flatMap((c) => c.kinds)
      .map((r) => r.resource)
      .sort();
    const [view, edit, admin] = aggregated.map((o) => o.rules.flatMap((r: Any) => r.resources).sort());
    assert.deepEqual(view, plurals);
    assert.deepEqual(
      edit,
      plurals.filter((p: string) => p !== 'quotas'),
    );
    assert.deepEqual(admin, ['quotas']);
    assert.deepEqual(aggregated[0].rules[0].verbs, ['get', 'list', 'watch']);
  });

  test('takes the image by digest, pod labels, env, volumes and topology spread from the values', () => {
    const pod = (values: Record<string, string>) => deployment(render(values)).spec.template;
    assert.equal(
      pod(options['an image by digest']!).spec.containers[0].image,
      `ghcr.io/berth-dev/berth@sha256:${'a'.repeat(64)}`,
    );
    const extra = pod(options['pod labels, env and volumes']!);
    assert.equal(extra.metadata.labels.team, 'platform');
    assert.deepEqual(extra.spec.containers[0].env.at(-1), {
      name: 'HTTPS_PROXY',
      value: 'http://proxy.example:3128',
    });
    assert.deepEqual(extra.spec.volumes, [{ name: 'extra-ca', configMap: { name: 'extra-ca' } }]);
    assert.deepEqual(extra.spec.containers[0].volumeMounts, [
      { name: 'extra-ca', mountPath: '/etc/extra-ca' },
    ]);
    const selector = deployment(render()).spec.selector;
    assert.deepEqual(pod({}).spec.topologySpreadConstraints, [
      {
        maxSkew: 1,
        topologyKey: 'kubernetes.io/hostname',
        whenUnsatisfiable: 'ScheduleAnyway',
        labelSelector: selector,
      },
    ]);
    assert.deepEqual(pod(options['spread across zones']!).spec.topologySpreadConstraints, [
      {
        maxSkew: 1,
        topologyKey: 'topology.kubernetes.io/zone',
        whenUnsatisfiable: 'DoNotSchedule',
        labelSelector: selector,
      },
    ]);
    assert.equal(pod(options['no topology spread']!).spec.topologySpreadConstraints, undefined);
  });

  test('a NetworkPolicy by default: the webhook port from anywhere, /metrics from the monitoring namespace, nothing else', () => {
    const policy = (values: Record<string, string>) => render(values).find((o) => o.kind === 'NetworkPolicy');
    const objects = render();
    const pod = deployment(objects).spec.template;
    const port = (name: string) =>
      pod.spec.containers[0].ports.find((p: Any) => p.name === name).containerPort as number;
    const p = policy({});
    assert.deepEqual(p.spec.podSelector, deployment(objects).spec.selector);
    assert.deepEqual(p.spec.policyTypes, ['Ingress']);
    const metrics = {
      ports: [{ port: port('metrics'), protocol: 'TCP' }],
      from: [
        {
          namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'monitoring' } },
          podSelector: {},
        },
      ],
    };
    // No rule for the health port: the kubelet calls from the pod's node, which is always allowed.
    assert.deepEqual(p.spec.ingress, [{ ports: [{ port: port('webhook'), protocol: 'TCP' }] }, metrics]);
    const narrowed = policy(options['a network policy narrowed']!);
    assert.deepEqual(narrowed.spec.ingress[0].from, [{ ipBlock: { cidr: '10.0.0.0/24' } }]);
    assert.deepEqual(narrowed.spec.ingress[1].from[0].namespaceSelector.matchLabels, {
      'kubernetes.io/metadata.name': 'monitoring',
      team: 'observability',
    });
    assert.deepEqual(policy(options['metrics from no namespace']!).spec.ingress, [p.spec.ingress[0]]);
    assert.deepEqual(policy(options['no webhooks']!).spec.ingress, [metrics]);
    assert.equal(policy(options['no network policy']!), undefined);
  });

  test("the apiserver's webhook client CA, given, is mounted for --webhook-client-ca", () => {
    const objects = render(options["the apiserver's webhook client CA"]);
    const pod = deployment(objects).spec.template.spec;
    const mount = pod.containers[0].volumeMounts.find((m: Any) => m.name === 'webhook-client-ca');
    assert.ok(args(objects).includes(`--webhook-client-ca=${mount.mountPath}/ca.crt`));
    const configMap = pod.volumes.find((v: Any) => v.name === mount.name).configMap.name;
    assert.equal(
      objects.find((o) => o.kind === 'ConfigMap' && o.metadata.name === configMap).data['ca.crt'],
      'PEM',
    );
    assert.ok(!args(render()).some((a) => a.startsWith('--webhook-client-ca')), 'none asked for by default');
  });

  test('installs, upgrades and uninstalls on a plain cluster', async () => {
    const release = uniqueName('b');
    // Berth's pods and the hooks' on this file's node, where kwok runs them (and completes the
    // hooks' Jobs: Helm waits for them; what the hooks' commands do is helm-upgrade.test.ts's).
    const onNode = sets(place!.onNode);
    helm(['install', release, chart, '--namespace', ns, '--wait=false', ...onNode]);
    const name = `${release}-berth`;
    const d = await waitFor('the Deployment to be created', () =>
      client.get(Resources.deployments, name, ns).catch(() => undefined),
    );
    assert.ok(d);
    helm(['upgrade', release, chart, '--namespace', ns, '--set', 'replicas=1', '--wait=false', ...onNode]);
    await waitFor('the upgrade to reach the Deployment', async () => {
      const now = (await client.get(Resources.deployments, name, ns)) as KubeObject & {
        spec: { replicas: number };
      };
      return now.spec.replicas === 1;
    });
    // The CRDs stay through upgrades and the uninstall (crds.keep).
    await client.get(Resources.crds, 'nodelabelrules.berth.dev');
    helm(['uninstall', release, '--namespace', ns, '--wait']);
    await client.get(Resources.crds, 'nodelabelrules.berth.dev');
    const left = helm(['list', '--namespace', ns, '--all', '--short']).stdout.trim();
    assert.equal(left, '');
    await waitFor('the release objects to be gone', () =>
      client.get(Resources.deployments, name, ns).then(
        () => false,
        () => true,
      ),
    );
  });
});
