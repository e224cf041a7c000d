// Berth's roles (src/manifests.ts) are least privilege by construction, and the RBAC audit check
// (scripts/rbac-audit.ts) tells a used, an explained and an unexplained grant apart.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { generatedFiles } from '../../scripts/manifests.ts';
import { grantedPairs, isBerth, pairOf, usage, verdict } from '../../scripts/rbac-audit.ts';
import { capabilities } from '../../src/capabilities.ts';
import { explainers } from '../../src/explain.ts';
import {
  BUILTIN_OWNER_KINDS,
  CELL_ROLE,
  cellRbacManifests,
  finalizerOwnerRule,
  leaderElectionRoleName,
  rbacManifests,
  workloadPodsRoleName,
  type RbacOptions,
} from '../../src/manifests.ts';
import { emptyWebhookConfigurations } from '../../src/runtime/webhook/registration.ts';
import { NAMESPACE } from '../../src/policy/namespace.ts';
import type { KubeObject } from '../../src/runtime/api/meta.ts';
import {
  EVERYONE_RULES,
  excessGrants,
  type DeclaredRule,
  type PolicyRule,
} from '../../src/runtime/api/rbac.ts';
import { withSeed } from '../helpers/prng.ts';

type Role = KubeObject & { rules: PolicyRule[] };
const find = (opts: RbacOptions, kind: string, name?: string): Role =>
  rbacManifests(capabilities, opts).find(
    (o) => o.kind === kind && (name === undefined || o.metadata?.name === name),
  ) as Role;

/** What a role lets one do to a resource (of any group), by name when given. */
const may = (role: Role, verb: string, resource: string, name?: string): boolean =>
  role.rules.some(
    (r) =>
      r.resources?.includes(resource) &&
      r.verbs.includes(verb) &&
      (r.resourceNames === undefined || (name !== undefined && r.resourceNames.includes(name))),
  );

describe('the generated roles', () => {
  const cluster = find({}, 'ClusterRole');

  test('no cluster-wide Lease; the Lease in a Role of its own, read and updated by name only', () => {
    assert.ok(!cluster.rules.some((r) => r.resources?.includes('leases')));
    const lease = find({}, 'Role', leaderElectionRoleName('berth'));
    assert.equal(lease.metadata?.namespace, NAMESPACE);
    assert.ok(may(lease, 'create', 'leases'));
    assert.ok(may(lease, 'get', 'leases', 'berth') && may(lease, 'update', 'leases', 'berth'));
    assert.ok(!may(lease, 'update', 'leases', 'another') && !may(lease, 'get', 'leases', 'another'));
    const named = find({ lease: 'mine', name: 'x' }, 'Role', 'x-leader-election');
    assert.ok(may(named, 'update', 'leases', 'mine') && !may(named, 'update', 'leases', 'berth'));
  });

  test("webhook configurations: patched by Berth's name only, never created (the install creates them empty)", () => {
    for (const r of ['mutatingwebhookconfigurations', 'validatingwebhookconfigurations']) {
      assert.ok(may(cluster, 'patch', r, 'berth'));
      assert.ok(!may(cluster, 'patch', r, 'someone-elses'), r);
      assert.ok(!may(cluster, 'delete', r, 'someone-elses'), r);
      assert.ok(!may(cluster, 'create', r), r);
    }
    assert.ok(
      may(find({ webhookConfiguration: 'w' }, 'ClusterRole'), 'patch', 'mutatingwebhookconfigurations', 'w'),
    );
    assert.deepEqual(
      emptyWebhookConfigurations('w').map((c) => [c.kind, c.metadata?.name, 'webhooks' in c]),
      [
        ['MutatingWebhookConfiguration', 'w', false],
        ['ValidatingWebhookConfiguration', 'w', false],
      ],
    );
  });

  test('Pods are written only in the namespaces named for workloads: bound there, or everywhere for *', () => {
    const pods = workloadPodsRoleName('berth');
    for (const verb of ['create', 'delete']) assert.ok(!may(cluster, verb, 'pods'), verb);
    assert.ok(may(cluster, 'list', 'pods') && may(cluster, 'get', 'pods'));
    // Cluster-wide patch is architecture-aware placement's (ungating), not the workloads'.
    const workloads = capabilities.filter((c) => c.name === 'workloads');
    assert.ok(!may(rbacManifests(workloads)[0] as Role, 'patch', 'pods'));
    assert.ok(may(find({}, 'ClusterRole', pods), 'create', 'pods'));
    const bindings = (opts: RbacOptions) =>
      rbacManifests(capabilities, opts)
        .filter((o) => o.kind?.endsWith('Binding') && o.metadata?.name === pods)
        .map((o) => [o.kind, o.metadata?.namespace, (o['roleRef'] as { name: string }).name]);
    assert.deepEqual(bindings({}), []);
    assert.deepEqual(bindings({ workloadNamespaces: ['team-a', 'team-b'] }), [
      ['RoleBinding', 'team-a', pods],
      ['RoleBinding', 'team-b', pods],
    ]);
    assert.deepEqual(bindings({ workloadNamespaces: ['*', 'team-a'] }), [
      ['ClusterRoleBinding', undefined, pods],
    ]);
    // Capabilities that write no Pod get no such role.
    const labels = capabilities.filter((c) => c.name === 'labels');
    assert.ok(!rbacManifests(labels, { workloadNamespaces: ['*'] }).some((o) => o.metadata?.name === pods));
    assert.throws(
      () => rbacManifests(capabilities, { workloadNamespaces: ['Team_A'] }),
      /workload namespace/,
    );
  });

  test('a cell: the role of what the management plane does there, bound to a ServiceAccount of its own', () => {
    const [role, binding] = cellRbacManifests() as [Role, KubeObject];
    assert.equal(role.kind, 'ClusterRole');
    assert.equal(role.metadata?.name, CELL_ROLE);
    assert.deepEqual(binding['subjects'], [
      { kind: 'ServiceAccount', name: CELL_ROLE, namespace: NAMESPACE },
    ]);
    for (const verb of ['list', 'watch', 'create', 'patch', 'delete'])
      assert.ok(may(role, verb, 'workloaddeployments'), verb);
    assert.ok(may(role, 'watch', 'instances') && may(role, 'patch', 'instances/status'));
    assert.ok(may(role, 'create', 'namespaces'));
    for (const r of ['pods', 'secrets', 'nodes'])
      assert.ok(!role.rules.some((x) => x.resources?.includes(r)), r);
    // Only what the capabilities that act in cells declare.
    const federation = capabilities.filter((c) => c.name === 'federation');
    assert.ok(!may(cellRbacManifests(federation)[0] as Role, 'patch', 'instances/status'));
  });

  test("the page's explain may read every kind `berth explain` knows", () => {
    for (const e of explainers) assert.ok(may(cluster, 'get', e.resource.resource), e.name);
  });

  test('no workload kind may be patched by default; each owner kind opted in adds exactly its own rule', () => {
    for (const r of ['deployments', 'statefulsets', 'daemonsets', 'cronjobs', 'replicasets', 'jobs'])
      assert.ok(!may(cluster, 'patch', r), r);
    const opted = find({ finalizerOwners: BUILTIN_OWNER_KINDS }, 'ClusterRole');
    for (const r of ['deployments', 'statefulsets', 'daemonsets', 'cronjobs'])
      assert.ok(may(opted, 'patch', r) && may(opted, 'watch', r), r);
    assert.ok(!may(opted, 'patch', 'replicasets'));
    assert.deepEqual(finalizerOwnerRule('configmaps'), {
      apiGroups: [''],
      resources: ['configmaps'],
      verbs: ['list', 'watch', 'patch'],
    });
    assert.deepEqual(finalizerOwnerRule('workerpools.ate.dev').apiGroups, ['ate.dev']);
    for (const bad of ['Deployments.apps', 'deployments.', 'deploy ments', '.apps', ''])
      assert.throws(() => finalizerOwnerRule(bad), /resource\.group/, bad);
  });

  test('Secrets: none read by default but the certificate; --arch-pull-secret by its name, and the namespaces opted in', () => {
    assert.ok(!may(cluster, 'get', 'secrets') && !may(cluster, 'list', 'secrets'));
    const inBerths = rbacManifests(capabilities)
      .filter((o) => o.kind === 'Role' && o.metadata?.namespace === NAMESPACE)
      .filter((r) => (r as Role).rules.some((x) => x.resources?.includes('secrets')));
    // The certificate's (by name, but its create), and the cells' kubeconfigs (a management plane's).
    assert.deepEqual(inBerths.map((r) => r.metadata?.name).sort(), ['berth', 'berth-cells']);
    assert.ok(!may(find({}, 'Role', 'berth'), 'get', 'secrets', 'any-login'));
    const login = find({ archPullSecret: `${NAMESPACE}/login` }, 'Role', 'berth-arch-pull-secret');
    assert.equal(login.metadata?.namespace, NAMESPACE);
    assert.ok(may(login, 'get', 'secrets', 'login') && !may(login, 'get', 'secrets', 'another'));
    assert.throws(() => rbacManifests(capabilities, { archPullSecret: 'login' }), /NAMESPACE\/NAME/);
    const opted = rbacManifests(capabilities, { pullSecretNamespaces: ['team-a', 'team-b'] }).filter(
      (o) => o.metadata?.name === 'berth-pull-secrets',
    );
    assert.deepEqual(
      opted.map((o) => [o.kind, o.metadata?.namespace]),
      [
        ['Role', 'team-a'],
        ['RoleBinding', 'team-a'],
        ['Role', 'team-b'],
        ['RoleBinding', 'team-b'],
      ],
    );
    assert.ok(may(opted[0] as Role, 'get', 'secrets', 'pull') && !may(opted[0] as Role, 'list', 'secrets'));
    const everywhere = find({ pullSecretNamespaces: ['*'] }, 'ClusterRole');
    assert.ok(may(everywhere, 'get', 'secrets') && !may(everywhere, 'list', 'secrets'));
    for (const bad of ['Team_A', '', '-a', 'a'.repeat(64)])
      assert.throws(
        () => rbacManifests(capabilities, { pullSecretNamespaces: [bad] }),
        /namespace name/,
        bad,
      );
  });

  test('CRD writes only with installCrds, patched by the names of Berth’s CRDs', () => {
    assert.ok(!may(cluster, 'patch', 'customresourcedefinitions', 'nodelabelrules.berth.dev'));
    const install = find({ installCrds: true }, 'ClusterRole');
    assert.ok(may(install, 'patch', 'customresourcedefinitions', 'nodelabelrules.berth.dev'));
    assert.ok(!may(install, 'patch', 'customresourcedefinitions', 'certificates.cert-manager.io'));
  });

  test('why is for the code: no generated rule or deploy file carries it', async () => {
    for (const o of rbacManifests(capabilities, { finalizerOwners: ['deployments.apps'], installCrds: true }))
      for (const r of (o as Role).rules ?? []) assert.ok(!('why' in r), JSON.stringify(r));
    for (const [path, text] of await generatedFiles()) assert.doesNotMatch(text, /^\s*why:/m, path);
  });
});

describe('grants beyond a role (berth cells join)', () => {
  const needed: PolicyRule[] = [
    { apiGroups: ['berth.dev'], resources: ['workloaddeployments'], verbs: ['list', 'watch', 'create'] },
    { apiGroups: [''], resources: ['secrets'], resourceNames: ['a'], verbs: ['get'] },
    ...EVERYONE_RULES,
  ];

  test('an admin: every wildcard is named', () => {
    const admin = [
      { apiGroups: ['*'], resources: ['*'], verbs: ['*'] },
      { nonResourceURLs: ['*'], verbs: ['*'] },
    ];
    assert.deepEqual(excessGrants(admin, needed), ['* */*', '* URL *']);
  });

  test('what the role needs, what everyone may, and names within the needed ones: nothing', () => {
    const granted: PolicyRule[] = [
      { apiGroups: ['berth.dev'], resources: ['workloaddeployments'], verbs: ['create', 'list'] },
      { apiGroups: [''], resources: ['secrets'], resourceNames: ['a'], verbs: ['get'] },
      { apiGroups: ['authorization.k8s.io'], resources: ['selfsubjectrulesreviews'], verbs: ['create'] },
      { nonResourceURLs: ['/api', '/apis/*', '/version'], verbs: ['get'] },
    ];
    assert.deepEqual(excessGrants(granted, needed), []);
  });

  test('each grant beyond, by resource with its verbs: a verb, a name, a resource, a URL', () => {
    const granted: PolicyRule[] = [
      { apiGroups: ['berth.dev'], resources: ['workloaddeployments'], verbs: ['create', 'delete', 'update'] },
      { apiGroups: [''], resources: ['secrets'], resourceNames: ['a', 'b'], verbs: ['get'] },
      { apiGroups: [''], resources: ['secrets'], verbs: ['get'] },
      { apiGroups: [''], resources: ['pods'], verbs: ['create'] },
      { nonResourceURLs: ['/metrics'], verbs: ['get'] },
    ];
    assert.deepEqual(excessGrants(granted, needed), [
      'create core/pods',
      'delete, update berth.dev/workloaddeployments',
      'get URL /metrics',
      'get core/secrets',
      'get core/secrets named a, b',
    ]);
  });
});

describe('the RBAC audit check', () => {
  const rules: DeclaredRule[] = [
    { apiGroups: [''], resources: ['nodes'], verbs: ['list', 'patch'] },
    { apiGroups: ['coordination.k8s.io'], resources: ['leases'], verbs: ['create'], why: 'apply creates' },
    { apiGroups: ['berth.dev'], resources: ['nodestartupgates/status'], verbs: ['update'] },
  ];
  const berth = `system:serviceaccount:${NAMESPACE}:berth`;
  const event = (
    verb: string,
    resource: string,
    o: {
      group?: string;
      sub?: string;
      code?: number;
      user?: string;
      id?: string;
      stage?: string;
      admission?: boolean;
    } = {},
  ) =>
    JSON.stringify({
      kind: 'Event',
      auditID: o.id,
      stage: o.stage ?? 'ResponseComplete',
      verb,
      user: { username: o.user ?? berth },
      objectRef: {
        resource,
        ...(o.group ? { apiGroup: o.group } : {}),
        ...(o.sub ? { subresource: o.sub } : {}),
      },
      responseStatus: { code: o.code ?? 200 },
      annotations: { 'authorization.k8s.io/decision': o.code === 403 && !o.admission ? 'forbid' : 'allow' },
    });

  test('used, explained, unexplained, forbidden and opted-in pairs, from Berth’s requests only', () => {
    const lines = [
      event('list', 'nodes', { id: 'a', stage: 'ResponseStarted' }),
      event('list', 'nodes', { id: 'a' }), // the same request, completed
      event('patch', 'nodes', { user: 'system:serviceaccount:kube-system:other' }),
      event('patch', 'nodes', { user: 'berth-admin' }),
      event('patch', 'deployments', { group: 'apps' }),
      event('get', 'secrets', { code: 403 }),
      // Allowed by RBAC, refused by admission (a namespace being deleted): used, not denied.
      event('patch', 'nodes', { code: 403, admission: true }),
      event('create', 'leases', { group: 'coordination.k8s.io', id: 'r', stage: 'RequestReceived' }),
      '',
      JSON.stringify({ kind: 'Event', stage: 'ResponseComplete', verb: 'get', user: { username: berth } }),
    ];
    const u = usage(lines, isBerth);
    assert.deepEqual([...u.users], [berth]);
    const v = verdict(grantedPairs(rules), u);
    assert.deepEqual(v.used, [
      ['list core/nodes', 1],
      ['patch core/nodes', 1],
    ]);
    assert.deepEqual(v.explained, [['create coordination.k8s.io/leases', ['apply creates']]]);
    assert.deepEqual(v.unexplained, ['update berth.dev/nodestartupgates/status']);
    assert.deepEqual(v.forbidden, [['get core/secrets', [berth]]]);
    assert.deepEqual(v.optedIn, [['patch apps/deployments', 1]]);
    const sub = usage([event('update', 'nodestartupgates', { group: 'berth.dev', sub: 'status' })], isBerth);
    assert.deepEqual(verdict(grantedPairs(rules), sub).used, [
      ['update berth.dev/nodestartupgates/status', 1],
    ]);
  });

  test('2,000 generated logs: every granted pair is used, explained or unexplained, exactly once; requests count once', async () => {
    await withSeed('audit verdicts', (r) => {
      const verbs = ['get', 'list', 'watch', 'create', 'patch', 'update', 'delete'];
      const resources: [string, string][] = [
        ['', 'nodes'],
        ['', 'pods'],
        ['apps', 'daemonsets'],
        ['berth.dev', 'nodelabelrules/status'],
      ];
      for (let i = 0; i < 2000; i++) {
        const granted: DeclaredRule[] = resources
          .filter(() => r.chance(0.7))
          .map(([g, res]) => ({
            apiGroups: [g],
            resources: [res],
            verbs: verbs.filter(() => r.chance(0.4)),
            ...(r.chance(0.3) ? { why: `reason ${i}` } : {}),
          }));
        const requests = Array.from({ length: r.int(30) }, (_, n) => {
          const [group, resource] = r.pick(resources);
          const [res, sub] = resource.split('/') as [string, string | undefined];
          return {
            verb: r.pick(verbs),
            group,
            resource,
            line: event(r.pick(verbs), res, {
              group,
              ...(sub ? { sub } : {}),
              id: `${i}-${n}`,
              code: r.chance(0.1) ? 403 : 200,
              user: r.chance(0.8) ? berth : 'someone',
            }),
          };
        });
        // Every line twice: a watch's ResponseStarted and ResponseComplete are one request.
        const lines = requests.flatMap((q) => [
          q.line.replace('ResponseComplete', 'ResponseStarted'),
          q.line,
        ]);
        const pairs = grantedPairs(granted);
        const v = verdict(pairs, usage(lines, isBerth));
        const sorted = [...v.used.map(([k]) => k), ...v.explained.map(([k]) => k), ...v.unexplained].sort();
        assert.deepEqual(sorted, [...pairs.keys()].sort());
        for (const k of v.unexplained) assert.deepEqual(pairs.get(k), []);
        for (const [k, why] of v.explained) assert.ok(why.length > 0, k);
        const total = [...v.used, ...v.optedIn].reduce((a, [, n]) => a + n, 0);
        const parsed = lines
          .filter((_, n) => n % 2 === 1)
          .map((l) => JSON.parse(l) as { user: { username: string }; responseStatus: { code: number } });
        assert.equal(
          total,
          parsed.filter((e) => e.user.username === berth && e.responseStatus.code !== 403).length,
        );
        for (const [k] of v.forbidden) assert.ok(!v.used.some(([u]) => u === k) || pairs.has(k));
      }
    });
  });

  test('pairs name the core group and subresources', () => {
    assert.equal(pairOf('create', '', 'pods/eviction'), 'create core/pods/eviction');
    assert.equal(pairOf('get', 'apps', 'daemonsets'), 'get apps/daemonsets');
    assert.ok(isBerth(`system:serviceaccount:${NAMESPACE}:gt-1`));
    assert.ok(!isBerth('system:serviceaccount:kube-system:berth') && !isBerth('berth-admin'));
  });
});
