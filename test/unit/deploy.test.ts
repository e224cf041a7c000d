// The deploy files (deploy/) agree with the code: the generated ones are current, and the
// hand-written ones keep the invariants an install depends on.
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { parse, parseAllDocuments } from 'yaml';
import { generatedFiles, HEADER, HELM_CRDS_DIR } from '../../scripts/manifests.ts';
import { capabilities } from '../../src/capabilities.ts';
import { runCommand } from '../../src/cli/run.ts';
import { parseRuleFile } from '../../src/labels/files.ts';
import { finalizerOwnerRule, rbacManifests } from '../../src/manifests.ts';
import { NAMESPACE, SERVICE_ACCOUNT, WEBHOOK_CERT_SECRET } from '../../src/policy/namespace.ts';
import { crdName, type KubeObject } from '../../src/runtime/api/meta.ts';
import { mergeRules } from '../../src/runtime/api/rbac.ts';
import { packageRoot } from '../../src/sandbox/paths.ts';
import { assertCaChain } from '../helpers/certmanager.ts';

const root = packageRoot();
const read = (path: string): string => readFileSync(join(root, path), 'utf8');
const docs = (path: string): KubeObject[] => parseAllDocuments(read(path)).map((d) => d.toJS() as KubeObject);
const packageVersion = (JSON.parse(read('package.json')) as { version: string }).version;

// Loosely typed views of the objects under test: a missing field fails an assertion, not the compiler.
/* eslint-disable @typescript-eslint/no-explicit-any */
type Any = any;

const BASE = 'deploy/kustomize/base';
const CHART = 'deploy/helm/berth';
const crdNames = capabilities.flatMap((c) => c.kinds.map(crdName)).sort();
const clusterRoleRules = (rbacManifests().find((o) => o.kind === 'ClusterRole') as Any).rules;
const runFlags = new Set(runCommand().options.map((o) => o.long));

/** Every object of the kustomize base, from the files its kustomization.yaml lists. */
function baseObjects(): KubeObject[] {
  const k = parse(read(`${BASE}/kustomization.yaml`)) as { resources: string[] };
  return k.resources.flatMap((r) => docs(`${BASE}/${r}`));
}

function find(objects: KubeObject[], kind: string, name?: string): Any {
  const o = objects.find((x) => x.kind === kind && (name === undefined || x.metadata?.name === name));
  assert.ok(o, `no ${kind}${name ? ` ${name}` : ''}`);
  return o;
}

/** `--flag=value` arguments by flag; bare `--flag` maps to ''. */
function flags(args: string[]): Map<string, string> {
  return new Map(
    args
      .filter((a) => a.startsWith('--'))
      .map((a): [string, string] => {
        const i = a.indexOf('=');
        return i < 0 ? [a, ''] : [a.slice(0, i), a.slice(i + 1)];
      }),
  );
}

function assertHardened(pod: Any, container: Any, where: string): void {
  const sc = container.securityContext ?? {};
  assert.equal(pod.runAsNonRoot ?? sc.runAsNonRoot, true, `${where}: runAsNonRoot`);
  assert.equal(sc.readOnlyRootFilesystem, true, `${where}: readOnlyRootFilesystem`);
  assert.equal(sc.allowPrivilegeEscalation, false, `${where}: allowPrivilegeEscalation`);
  assert.deepEqual(sc.capabilities?.drop, ['ALL'], `${where}: capabilities.drop`);
  assert.equal(
    (sc.seccompProfile ?? pod.seccompProfile)?.type,
    'RuntimeDefault',
    `${where}: seccompProfile RuntimeDefault`,
  );
  const user = sc.runAsUser ?? pod.runAsUser;
  assert.ok(user === undefined || user > 0, `${where}: runAsUser must not be root`);
}

describe('generated deploy files', () => {
  test('are what npm run manifests writes now', async () => {
    const files = await generatedFiles();
    const stale = [...files].filter(
      ([path, content]) => !existsSync(join(root, path)) || read(path) !== content,
    );
    assert.deepEqual(
      stale.map(([path]) => path),
      [],
      'generated deploy files are stale: run npm run manifests',
    );
    const extra = readdirSync(join(root, HELM_CRDS_DIR)).filter((f) => !files.has(`${HELM_CRDS_DIR}/${f}`));
    assert.deepEqual(extra, [], `${HELM_CRDS_DIR} has files no capability defines: run npm run manifests`);
    for (const [path, content] of files) assert.ok(content.startsWith(HEADER), `${path} has the header`);
  });

  test('hold every capability CRD, in kustomize and in Helm', () => {
    const kustomize = baseObjects()
      .filter((o) => o.kind === 'CustomResourceDefinition')
      .map((o) => o.metadata!.name!);
    assert.deepEqual(kustomize.sort(), crdNames);
    const helm = readdirSync(join(root, HELM_CRDS_DIR)).flatMap((f) =>
      docs(`${HELM_CRDS_DIR}/${f}`).map((o) => o.metadata!.name!),
    );
    assert.deepEqual(helm.sort(), crdNames);
  });

  test('grant the ClusterRole exactly the rules of rbacManifests()', () => {
    assert.deepEqual(find(baseObjects(), 'ClusterRole', 'berth').rules, clusterRoleRules);
    const template = read(`${CHART}/templates/clusterrole.yaml`);
    // The metadata is Go template; the rules section is plain YAML, each capability's within its
    // condition (all of them: every capability among the controllers), then the opted-in owner kinds.
    const section = template.slice(
      template.indexOf('\nrules:'),
      template.indexOf('\n{{- range .Values.agents.finalizerOwners }}'),
    );
    const guards = section.split('\n').filter((l) => l.startsWith('{{-'));
    assert.deepEqual(
      guards.filter((l) => l.startsWith('{{- if')),
      capabilities.map((c) => `{{- if has "${c.name}" .Values.controllers }}`),
    );
    // Its webhook configurations are the release's (berth, for the release berth).
    const rules = parse(
      section
        .split('\n')
        .filter((l) => !l.startsWith('{{-'))
        .join('\n')
        .replaceAll('{{ include "berth.fullname" . }}', 'berth'),
    ) as Any;
    assert.deepEqual(mergeRules(rules.rules), clusterRoleRules);
    // Each opted-in owner kind gets finalizerOwnerRule's verbs, whatever the kind.
    const owners = template.slice(template.indexOf('{{- range .Values.agents.finalizerOwners }}'));
    const verbs = parse(
      owners.slice(owners.indexOf('    verbs:'), owners.indexOf('{{- end }}')).trim(),
    ) as Any;
    assert.deepEqual(verbs.verbs, finalizerOwnerRule('deployments.apps').verbs);
  });
});

describe('kustomize base', () => {
  const objects = baseObjects();
  const deployment = find(objects, 'Deployment', 'berth');
  const pod = deployment.spec.template.spec;
  const container = pod.containers[0];
  const args = flags(container.args);
  const podLabels = deployment.spec.template.metadata.labels;
  const selects = (selector: Record<string, string>) =>
    Object.entries(selector).every(([k, v]) => podLabels[k] === v);

  test('lists every file of the base', () => {
    const listed = (parse(read(`${BASE}/kustomization.yaml`)) as { resources: string[] }).resources;
    const files = readdirSync(join(root, BASE)).filter(
      (f) => f.endsWith('.yaml') && f !== 'kustomization.yaml',
    );
    assert.deepEqual([...listed].sort(), files.sort());
  });

  test('puts everything namespaced in berth-system, under the berth service account', () => {
    for (const o of objects) {
      const clusterScoped = [
        'Namespace',
        'CustomResourceDefinition',
        'ClusterRole',
        'ClusterRoleBinding',
        'MutatingWebhookConfiguration',
        'ValidatingWebhookConfiguration',
        'ValidatingAdmissionPolicy',
        'ValidatingAdmissionPolicyBinding',
      ];
      if (!clusterScoped.includes(o.kind!))
        assert.equal(o.metadata?.namespace, NAMESPACE, `${o.kind} ${o.metadata?.name}`);
    }
    const ns = find(objects, 'Namespace', NAMESPACE);
    assert.equal(ns.metadata.labels['pod-security.kubernetes.io/enforce'], 'restricted');
    find(objects, 'ServiceAccount', SERVICE_ACCOUNT);
    assert.equal(pod.serviceAccountName, SERVICE_ACCOUNT);
    assert.deepEqual(find(objects, 'ClusterRoleBinding', 'berth').subjects, [
      { kind: 'ServiceAccount', name: SERVICE_ACCOUNT, namespace: NAMESPACE },
    ]);
  });

  test('runs the package version of the image', () => {
    const k = parse(read(`${BASE}/kustomization.yaml`)) as Any;
    const image = k.images.find((i: Any) => i.name === container.image);
    assert.equal(image?.newTag, packageVersion, `${BASE}/kustomization.yaml images: tag ${packageVersion}`);
  });

  test('passes only flags berth run knows, leader election included', () => {
    assert.equal(container.args[0], 'run');
    for (const flag of args.keys()) assert.ok(runFlags.has(flag), `berth run has no ${flag}`);
    assert.ok(args.has('--leader-elect'));
    assert.ok(deployment.spec.replicas >= 2);
    for (const f of ['--metrics-bind-address', '--health-probe-bind-address', '--webhook-bind-address'])
      assert.match(args.get(f) ?? '', /^0\.0\.0\.0:\d+$/, f);
    const env = new Map(container.env.map((e: Any) => [e.name, e.valueFrom?.fieldRef?.fieldPath]));
    assert.equal(env.get('POD_NAME'), 'metadata.name');
    assert.equal(env.get('POD_NAMESPACE'), 'metadata.namespace');
  });

  test('probes /readyz and /healthz on the health port', () => {
    const port = (name: string) => container.ports.find((p: Any) => p.name === name)?.containerPort;
    assert.equal(`0.0.0.0:${port('health')}`, args.get('--health-probe-bind-address'));
    assert.equal(`0.0.0.0:${port('metrics')}`, args.get('--metrics-bind-address'));
    assert.equal(`0.0.0.0:${port('webhook')}`, args.get('--webhook-bind-address'));
    assert.deepEqual(container.readinessProbe.httpGet, { path: '/readyz', port: 'health' });
    assert.deepEqual(container.livenessProbe.httpGet, { path: '/healthz', port: 'health' });
  });

  test('hardens the pod (restricted Pod Security) and bounds its memory', () => {
    assertHardened(pod.securityContext, container, 'deployment');
    assert.ok(container.resources.requests.cpu && container.resources.requests.memory);
    assert.ok(container.resources.limits.memory);
    assert.ok(
      pod.topologySpreadConstraints.some(
        (c: Any) => c.topologyKey === 'kubernetes.io/hostname' && selects(c.labelSelector.matchLabels),
      ),
    );
    const pdb = find(objects, 'PodDisruptionBudget');
    assert.equal(pdb.spec.minAvailable, 1);
    assert.ok(selects(pdb.spec.selector.matchLabels));
  });

  test('registers the webhooks with a Service that reaches the webhook port', () => {
    const [ns, name] = (args.get('--webhook-register') ?? '').replace(/^service=/, '').split('/');
    assert.equal(ns, NAMESPACE);
    const svc = find(objects, 'Service', name);
    assert.ok(selects(svc.spec.selector));
    assert.ok(svc.spec.ports.some((p: Any) => p.port === 443 && p.targetPort === 'webhook'));
    assert.ok(
      find(objects, 'Service', 'berth-metrics').spec.ports.some((p: Any) => p.targetPort === 'metrics'),
    );
    // The serving certificate: Berth's own shared Secret, which its namespaced Role lets it keep.
    assert.equal(args.get('--webhook-cert-dir'), undefined);
    assert.equal(args.get('--webhook-cert-secret') ?? WEBHOOK_CERT_SECRET, WEBHOOK_CERT_SECRET);
    const role = find(objects, 'Role', 'berth');
    assert.equal(role.metadata.namespace, NAMESPACE);
    const may = (verb: string, name?: string) =>
      role.rules.some(
        (r: Any) =>
          r.resources.includes('secrets') &&
          r.verbs.includes(verb) &&
          (r.resourceNames === undefined || r.resourceNames.includes(name)),
      );
    assert.ok(may('create') && may('get', WEBHOOK_CERT_SECRET) && may('patch', WEBHOOK_CERT_SECRET));
    assert.ok(!may('get', 'some-other-secret'), 'the Role reads only the certificate Secret');
    const binding = find(objects, 'RoleBinding', 'berth');
    assert.deepEqual(binding.roleRef, { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'berth' });
    assert.deepEqual(binding.subjects, [
      { kind: 'ServiceAccount', name: SERVICE_ACCOUNT, namespace: NAMESPACE },
    ]);
    const k = parse(read('deploy/kustomize/default/kustomization.yaml')) as Any;
    assert.deepEqual([k.resources, k.components], [['../base'], undefined]);
  });

  test('a NetworkPolicy admits the webhook port from anywhere, /metrics from the monitoring namespace, nothing else', () => {
    const policy = find(objects, 'NetworkPolicy', 'berth');
    assert.ok(selects(policy.spec.podSelector.matchLabels));
    assert.deepEqual(policy.spec.policyTypes, ['Ingress']);
    const port = (name: string) => container.ports.find((p: Any) => p.name === name)?.containerPort;
    // No rule for the health port: the kubelet calls from the pod's node, which is always allowed.
    assert.deepEqual(policy.spec.ingress, [
      { ports: [{ port: port('webhook'), protocol: 'TCP' }] },
      {
        ports: [{ port: port('metrics'), protocol: 'TCP' }],
        from: [
          {
            namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'monitoring' } },
            podSelector: {},
          },
        ],
      },
    ]);
  });

  test('the cert-manager Component mounts its Certificate where --webhook-cert-dir says', () => {
    const component = parse(read('deploy/kustomize/cert-manager/kustomization.yaml')) as Any;
    const ops = component.patches.flatMap((p: Any) => parse(p.patch) as Any[]);
    const added = (path: string) => ops.find((o: Any) => o.op === 'add' && o.path === path)?.value;
    const dir = String(added('/spec/template/spec/containers/0/args/-')).replace(/^--webhook-cert-dir=/, '');
    const mount = added('/spec/template/spec/containers/0/volumeMounts/-');
    const volume = added('/spec/template/spec/volumes/-');
    assert.equal(mount.mountPath, dir);
    assert.equal(volume.name, mount.name);
    const certManager = docs('deploy/kustomize/cert-manager/certificate.yaml');
    const cert: Any = certManager.find(
      (o: Any) => o.kind === 'Certificate' && o.spec.secretName === volume.secret.secretName,
    );
    assert.ok(cert, 'a Certificate makes the mounted Secret');
    const name = (args.get('--webhook-register') ?? '').replace(/^service=/, '').split('/')[1];
    assert.ok(cert.spec.dnsNames.includes(`${name}.${NAMESPACE}.svc`));
    assertCaChain(certManager, volume.secret.secretName);
  });

  test('mounts valid rule files, one per ConfigMap key, at --label-dir', () => {
    const cm = find(objects, 'ConfigMap', 'berth-label-rules');
    const mount = container.volumeMounts.find((m: Any) => m.mountPath === args.get('--label-dir'));
    const volume = pod.volumes.find((v: Any) => v.name === mount?.name);
    assert.equal(volume?.configMap?.name, cm.metadata.name);
    // Optional, so that removing a key removes the file (and its labels) instead of failing the mount.
    assert.equal(volume.configMap.optional, true);
    const items: { key: string; path: string }[] = volume.configMap.items;
    assert.deepEqual(items.map((i) => i.key).sort(), Object.keys(cm.data).sort());
    for (const { key, path } of items) {
      const [namespace, label, ...rest] = path.split('/');
      assert.equal(rest.length, 0, `${path} is <namespace>/<label>`);
      const { rule, errors } = parseRuleFile(path, namespace!, label!, Buffer.from(cm.data[key]));
      assert.deepEqual(errors, [], `${key}: ${JSON.stringify(errors)}`);
      assert.ok(rule);
    }
  });
});

describe('Helm chart', () => {
  const chart = parse(read(`${CHART}/Chart.yaml`)) as Any;
  const values = parse(read(`${CHART}/values.yaml`)) as Any;
  const deployment = read(`${CHART}/templates/deployment.yaml`);

  test('runs the package version, is versioned with it, and names every capability', () => {
    assert.equal(chart.appVersion, packageVersion, `${CHART}/Chart.yaml appVersion`);
    // A release moves the chart, the image and the CLI together (npm run release refuses otherwise).
    assert.equal(String(chart.version), packageVersion, `${CHART}/Chart.yaml version`);
    for (const what of ['node labels', 'startup gates', 'agent placement', 'architecture-aware', 'federated'])
      assert.ok(chart.description.includes(what), `${CHART}/Chart.yaml description names ${what}`);
  });

  test('defaults to leader election, every controller of a cluster (what berth run runs) and a hardened pod', () => {
    assert.equal(values.leaderElect, true);
    assert.ok(values.replicas >= 2);
    assert.deepEqual(
      values.controllers,
      capabilities.filter((c) => c.roles.includes('cluster')).map((c) => c.name),
    );
    assertHardened(values.podSecurityContext, { securityContext: values.securityContext }, 'values.yaml');
    assert.ok(values.resources.limits.memory);
  });

  test('passes only flags berth run knows, and probes /readyz and /healthz', () => {
    const used = new Set(deployment.match(/(?<=^\s*- "?)--[a-z-]+/gm));
    for (const flag of used) assert.ok(runFlags.has(flag), `berth run has no ${flag}`);
    assert.ok(used.has('--leader-elect'));
    assert.match(deployment, /path: \/readyz/);
    assert.match(deployment, /path: \/healthz/);
    assert.match(deployment, /name: POD_NAME\b/);
    assert.match(deployment, /name: POD_NAMESPACE\b/);
  });

  test('guards optional objects by their values', () => {
    const guard = (file: string) => read(`${CHART}/templates/${file}`).split('\n')[0];
    assert.equal(guard('servicemonitor.yaml'), '{{- if .Values.metrics.serviceMonitor.enabled }}');
    assert.match(guard('certificate.yaml')!, /\.Values\.webhook\.certManager\.enabled/);
    assert.match(guard('pdb.yaml')!, /\.Values\.podDisruptionBudget\.enabled/);
    assert.match(guard('configmap.yaml')!, /\.Values\.labelRules/);
    // A capability's own Role only when the release runs it (the header comment is the first line).
    const second = (file: string) => read(`${CHART}/templates/${file}`).split('\n')[1];
    assert.equal(second('capability-roles.yaml'), '{{- if has "cells" .Values.controllers }}');
    // Pull secrets only in the namespaces the values name, and the one login by its name.
    assert.equal(second('pull-secret-roles.yaml'), '{{- range .Values.arch.pullSecretNamespaces }}');
    assert.equal(
      second('arch-pull-secret.yaml'),
      '{{- if and (has "arch" .Values.controllers) .Values.arch.pullSecret }}',
    );
    // Pods written only where workloads run, the ClusterRole of it only when they do.
    const pods = read(`${CHART}/templates/workload-pods.yaml`);
    assert.equal(pods.split('\n')[1], '{{- if has "workloads" .Values.controllers }}');
    assert.match(pods, /^\{\{- range \.Values\.workloads\.namespaces \}\}$/m);
    assert.equal(second('webhook-configurations.yaml'), '{{- if .Values.webhook.enabled }}');
  });
});
