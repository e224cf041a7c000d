import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  namespaceLabelsByName,
  namespaceLabelsWhenKnown,
  podSelected,
  podSelection,
} from '../../../src/policy/namespace.ts';

const BERTH = 'berth-system';

test('a selection that turns on an unknown namespace says so; podSelected counts it as not selected', () => {
  const team = {
    namespaceSelector: { matchLabels: { team: 'a' } },
    podSelector: { matchLabels: { app: 'web' } },
  };
  const web = { app: 'web' };
  assert.equal(podSelection('apps', web, { team: 'a' }, team, BERTH), true);
  assert.equal(podSelection('apps', web, { team: 'b' }, team, BERTH), false);
  assert.equal(podSelection('apps', web, undefined, team, BERTH), undefined, 'depends on the namespace');
  assert.equal(podSelected('apps', web, undefined, team, BERTH), false);
  // Known already whatever the namespace's labels: the pod selector, no namespaceSelector, protected.
  assert.equal(podSelection('apps', { app: 'db' }, undefined, team, BERTH), false);
  assert.equal(podSelection('apps', web, undefined, { podSelector: team.podSelector }, BERTH), true);
  assert.equal(podSelection('kube-system', web, undefined, team, BERTH), false);
  assert.equal(podSelection(BERTH, web, undefined, {}, BERTH), false);
});

test("the webhook thread's namespace labels: a namespace without labels is known, as {}", () => {
  const byName = namespaceLabelsByName({
    list: () => [{ metadata: { name: 'bare' } }, { metadata: { name: 'apps', labels: { team: 'a' } } }],
  });
  assert.deepEqual(byName.get('bare'), {});
  assert.deepEqual(byName.get('apps'), { team: 'a' });
  assert.equal(byName.get('new'), undefined);
  // A namespace known to have no labels is decided at once (a DoesNotExist selector matches it).
  const none = {
    namespaceSelector: { matchExpressions: [{ key: 'team', operator: 'DoesNotExist' as const }] },
  };
  assert.equal(podSelection('bare', {}, byName.get('bare'), none, BERTH), true);
});

test('a namespace the cache does not know yet is waited for, up to the bound', async () => {
  let known: Record<string, string> | undefined;
  // When it became known, read there: a timer may fire early against a clock read after it was
  // set (the event loop's cached time), so the wait is measured from the moment itself.
  let knownAt = Infinity;
  setTimeout(() => {
    known = { team: 'a' };
    knownAt = performance.now();
  }, 20);
  assert.deepEqual(await namespaceLabelsWhenKnown(() => known, 'fresh', 1000), { team: 'a' });
  const late = performance.now() - knownAt;
  assert.ok(late >= 0 && late < 500, `answered once known (${late} ms after)`);

  const again = performance.now();
  assert.equal(await namespaceLabelsWhenKnown(() => undefined, 'lost', 50), undefined);
  assert.ok(performance.now() - again >= 50, 'gave up only after the bound');
  assert.deepEqual(await namespaceLabelsWhenKnown(() => ({}), 'bare', 0), {}, 'known at once');
});
