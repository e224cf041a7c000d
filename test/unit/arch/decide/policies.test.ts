import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { choosePolicy, namespaceDecides } from '../../../../src/arch/decide/policies.ts';
import { parsePolicies } from '../../../../src/arch/decide/parse.ts';
import { BERTH, pod } from './fixtures.ts';

describe('policies', () => {
  const obj = (name: string, s: Record<string, unknown>, extra: Record<string, unknown> = {}) => ({
    apiVersion: 'berth.dev/v1alpha1',
    kind: 'ArchPlacement',
    metadata: { name, uid: name, generation: 1, ...extra },
    spec: s,
  });

  test('the chosen policy: the first live one that selects the pod; protected namespaces only when named', () => {
    const { policies } = parsePolicies([
      obj('top', { priority: 9, podSelector: { matchLabels: { app: 'db' } } }),
      obj('gone', { priority: 8 }, { deletionTimestamp: '2026-01-01T00:00:00Z' }),
      obj('all', {}),
      obj('system', {
        priority: -1,
        namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'kube-system' } },
      }),
    ]);
    assert.equal(choosePolicy(policies, pod(), 'apps', {}, BERTH)?.name, 'all');
    assert.equal(choosePolicy(policies, pod({}, { labels: { app: 'db' } }), 'apps', {}, BERTH)?.name, 'top');
    assert.equal(
      choosePolicy(policies, pod(), 'kube-system', { 'kubernetes.io/metadata.name': 'kube-system' }, BERTH)
        ?.name,
      'system',
    );
    assert.equal(choosePolicy(policies.slice(0, 3), pod(), BERTH, {}, BERTH), undefined);
  });

  test("a namespace not known yet decides only when a namespaceSelector's policy would come first", () => {
    const team = { namespaceSelector: { matchLabels: { team: 'a' } } };
    const { policies } = parsePolicies([
      obj('db', { priority: 9, podSelector: { matchLabels: { app: 'db' } } }),
      obj('gone', { priority: 8, ...team }, { deletionTimestamp: '2026-01-01T00:00:00Z' }),
      obj('team', { priority: 5, ...team }),
      obj('all', {}),
    ]);
    assert.equal(namespaceDecides(policies, pod(), 'apps', BERTH), true, 'team before all');
    assert.equal(namespaceDecides(policies, pod({}, { labels: { app: 'db' } }), 'apps', BERTH), false);
    assert.equal(namespaceDecides(policies.slice(0, 2), pod(), 'apps', BERTH), false, 'only a deleting one');
    assert.equal(namespaceDecides(policies, pod(), 'kube-system', BERTH), false, 'protected');
  });
});
