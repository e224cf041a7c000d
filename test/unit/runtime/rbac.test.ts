import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  clusterRole,
  clusterRoleBinding,
  mergeRules,
  role,
  roleBinding,
  type PolicyRule,
} from '../../../src/runtime/api/rbac.ts';

const rules: PolicyRule[] = [
  { apiGroups: [''], resources: ['nodes'], verbs: ['list', 'get', 'watch'] },
  { apiGroups: [''], resources: ['nodes'], verbs: ['patch', 'get'] },
  { apiGroups: [''], resources: ['pods'], verbs: ['watch', 'list', 'get'] },
  { apiGroups: ['apps'], resources: ['daemonsets'], verbs: ['get', 'list', 'watch'] },
  {
    apiGroups: ['berth.dev'],
    resources: ['nodelabelrules', 'nodestartupgates'],
    verbs: ['get', 'list', 'watch'],
  },
  {
    apiGroups: ['berth.dev'],
    resources: ['nodelabelrules/status', 'nodestartupgates/status'],
    verbs: ['patch', 'update'],
  },
  {
    apiGroups: ['coordination.k8s.io'],
    resources: ['leases'],
    verbs: ['get', 'update'],
    resourceNames: ['berth'],
  },
  { apiGroups: ['coordination.k8s.io'], resources: ['leases'], verbs: ['create'] },
  { apiGroups: ['events.k8s.io'], resources: ['events'], verbs: ['create', 'patch'] },
  { apiGroups: [''], resources: ['events'], verbs: ['patch', 'create'] },
  { nonResourceURLs: ['/metrics'], verbs: ['get'] },
  { nonResourceURLs: ['/healthz', '/metrics'], verbs: ['get'] },
];

const expected: PolicyRule[] = [
  { apiGroups: [''], resources: ['nodes'], verbs: ['get', 'list', 'patch', 'watch'] },
  { apiGroups: [''], resources: ['pods'], verbs: ['get', 'list', 'watch'] },
  // Groups merge only over identical resources: a rule grants each of its groups × each resource.
  { apiGroups: ['', 'events.k8s.io'], resources: ['events'], verbs: ['create', 'patch'] },
  { apiGroups: ['apps'], resources: ['daemonsets'], verbs: ['get', 'list', 'watch'] },
  {
    apiGroups: ['berth.dev'],
    resources: ['nodelabelrules', 'nodestartupgates'],
    verbs: ['get', 'list', 'watch'],
  },
  {
    apiGroups: ['berth.dev'],
    resources: ['nodelabelrules/status', 'nodestartupgates/status'],
    verbs: ['patch', 'update'],
  },
  { apiGroups: ['coordination.k8s.io'], resources: ['leases'], verbs: ['create'] },
  {
    apiGroups: ['coordination.k8s.io'],
    resources: ['leases'],
    resourceNames: ['berth'],
    verbs: ['get', 'update'],
  },
  { nonResourceURLs: ['/healthz', '/metrics'], verbs: ['get'] },
];

/** Every (apiGroup, resource, resourceName | '', verb) or (url, verb) a rule set grants. */
function grants(rs: PolicyRule[]): string[] {
  const out = new Set<string>();
  for (const r of rs) {
    for (const v of r.verbs) {
      for (const u of r.nonResourceURLs ?? []) out.add(`url ${u} ${v}`);
      for (const g of r.apiGroups ?? [])
        for (const res of r.resources ?? [])
          for (const n of r.resourceNames?.length ? r.resourceNames : ['']) out.add(`${g}/${res}/${n} ${v}`);
    }
  }
  return [...out].sort();
}

describe('mergeRules', () => {
  test('merges verbs, groups resources and API groups, and sorts everything', () => {
    assert.deepEqual(mergeRules(rules), expected);
  });

  test('grants exactly what the input grants', () => {
    assert.deepEqual(grants(mergeRules(rules)), grants(rules));
  });

  test('is deterministic: input order and duplicates do not change the output', () => {
    const shuffled = [...rules, ...rules].reverse().map((r) => ({
      ...r,
      verbs: [...r.verbs].reverse(),
      resources: r.resources && [...r.resources].reverse(),
    }));
    assert.deepEqual(mergeRules(shuffled), expected);
    assert.deepEqual(mergeRules(mergeRules(rules)), expected);
    assert.deepEqual(JSON.stringify(mergeRules(shuffled)), JSON.stringify(expected));
  });

  test('a * verb absorbs the others, and unnamed rules absorb named ones', () => {
    assert.deepEqual(
      mergeRules([
        { apiGroups: [''], resources: ['configmaps'], verbs: ['get', '*'] },
        { apiGroups: [''], resources: ['configmaps'], verbs: ['update'], resourceNames: ['a'] },
        { apiGroups: [''], resources: ['secrets'], verbs: ['get'] },
        { apiGroups: [''], resources: ['secrets'], verbs: ['get', 'update'], resourceNames: ['b', 'a'] },
      ]),
      [
        { apiGroups: [''], resources: ['configmaps'], verbs: ['*'] },
        { apiGroups: [''], resources: ['secrets'], verbs: ['get'] },
        { apiGroups: [''], resources: ['secrets'], resourceNames: ['a', 'b'], verbs: ['update'] },
      ],
    );
  });

  test('rules that grant nothing disappear, and a rule mixing resources and URLs is refused', () => {
    assert.deepEqual(
      mergeRules([{ apiGroups: [''], resources: ['pods'], verbs: [] }, { verbs: ['get'] }]),
      [],
    );
    assert.throws(
      () =>
        mergeRules([{ apiGroups: [''], resources: ['pods'], nonResourceURLs: ['/metrics'], verbs: ['get'] }]),
      /both resources and nonResourceURLs/,
    );
  });
});

describe('manifest builders', () => {
  const sa = { kind: 'ServiceAccount', name: 'berth', namespace: 'berth-system' } as const;

  test('clusterRole and role merge their rules', () => {
    assert.deepEqual(clusterRole('berth-manager', rules), {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRole',
      metadata: { name: 'berth-manager' },
      rules: expected,
    });
    assert.deepEqual(role('berth-leader', 'berth-system', rules.slice(6, 8)), {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'Role',
      metadata: { name: 'berth-leader', namespace: 'berth-system' },
      rules: expected.slice(6, 8),
    });
  });

  test('bindings reference the role and the service account', () => {
    assert.deepEqual(clusterRoleBinding('berth-manager', 'berth-manager', sa), {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRoleBinding',
      metadata: { name: 'berth-manager' },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'berth-manager' },
      subjects: [sa],
    });
    assert.deepEqual(
      roleBinding('berth-leader', 'berth-system', { kind: 'Role', name: 'berth-leader' }, sa),
      {
        apiVersion: 'rbac.authorization.k8s.io/v1',
        kind: 'RoleBinding',
        metadata: { name: 'berth-leader', namespace: 'berth-system' },
        roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'berth-leader' },
        subjects: [sa],
      },
    );
  });
});
