// The page's explain panel and plan view as pure functions of what `berth explain` and `berth plan`
// compute, and the guard that keeps other sites from making the page plan.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { manifestsOf, MAX_BYTES } from '../../../src/plan.ts';
import { explainView, PANEL_SUBJECTS, planView } from '../../../src/ui/answers.ts';
import { crossSite } from '../../../src/ui/server.ts';

const now = new Date('2026-11-27T16:00:00Z');

test('the panel shows conditions with tone and since-when, counts, and each side of the subjects cut', () => {
  const nodes = (n: number, inside: boolean) =>
    Array.from({ length: n }, (_, i) => ({
      kind: 'Node',
      name: `${inside ? 'in' : 'out'}-${i}`,
      in: inside,
      why: [`reason ${i}`],
    }));
  const v = explainView(
    {
      kind: 'NodeLabelRule',
      name: 'gpu',
      conditions: [
        {
          type: 'Ready',
          status: 'True',
          reason: 'Applied',
          message: '',
          lastTransitionTime: '2026-11-27T15:57:00Z',
        },
        {
          type: 'Invalid',
          status: 'True',
          reason: 'BadMatch',
          message: 'no such operator',
          lastTransitionTime: '',
        },
      ],
      counts: { matchedNodes: 150 },
      subjects: [...nodes(PANEL_SUBJECTS + 50, true), ...nodes(2, false)],
      lines: ['  sets gpu=true'],
      missingCrds: ['Cell'],
    },
    now,
  );
  assert.equal(v.title, 'NodeLabelRule gpu');
  assert.deepEqual(
    v.conditions?.map((c) => [c.type, c.tone, c.since, c.message]),
    [
      ['Ready', 'good', 'since 2026-11-27T15:57:00Z (3m ago)', ''],
      ['Invalid', 'bad', 'since (unknown)', 'no such operator'],
    ],
  );
  assert.deepEqual(v.counts, { matchedNodes: 150 });
  assert.equal(v.acts.total, PANEL_SUBJECTS + 50);
  assert.equal(v.acts.shown.length, PANEL_SUBJECTS);
  assert.deepEqual(
    v.leaves.shown.map((s) => s.name),
    ['out-0', 'out-1'],
  );
  assert.deepEqual(v.missingCrds, ['Cell']);
  assert.deepEqual(v.lines, ['  sets gpu=true']);
});

test('a kind without status conditions (node, pod) has none, not an empty list', () => {
  const v = explainView({ kind: 'Node', name: 'n1', lines: ['  labels: none'] }, now);
  assert.equal(v.conditions, undefined);
  assert.deepEqual([v.acts.total, v.leaves.total], [0, 0]);
});

test('the plan view groups effects by object and says the exit code berth plan would give', () => {
  const p = planView({
    changes: true,
    effects: [
      { kind: 'Node', name: 'n1', op: '+', what: 'label a=b', by: 'NodeLabelRule r' },
      { kind: 'Pod', name: 'shop/web-0', op: '!', what: 'evicted (taint t)', by: 'NodeLabelRule r' },
      { kind: 'Node', name: 'n1', op: '-', what: 'taint t:NoSchedule=x', by: 'NodeLabelRule r' },
    ],
    warnings: ['every node (1) would be tainted t:NoSchedule'],
    unknown: [],
    errors: [],
    evictions: { namespaces: { shop: 1 }, budgets: {} },
  });
  assert.equal(p.exitCode, 2);
  assert.deepEqual(
    p.objects.map((o) => [o.object, o.effects.map((e) => `${e.op} ${e.what} (${e.by})`)]),
    [
      ['Node n1', ['+ label a=b (NodeLabelRule r)', '- taint t:NoSchedule=x (NodeLabelRule r)']],
      ['Pod shop/web-0', ['! evicted (taint t) (NodeLabelRule r)']],
    ],
  );
  assert.deepEqual(p.evictions, { namespaces: { shop: 1 }, budgets: {} });
  assert.equal(p.lines[0], '2 object(s) would change (nothing was written)');
  const none = { changes: false, effects: [], warnings: [], unknown: [], errors: [] };
  assert.equal(planView(none).exitCode, 0);
  assert.equal(planView({ ...none, errors: ['Quota q: bad'] }).exitCode, 1);
});

test('only the page itself may post a plan: YAML content type, same origin', () => {
  const page = { host: '127.0.0.1:8080', 'content-type': 'application/yaml; charset=utf-8' };
  assert.equal(crossSite(page), undefined);
  assert.equal(
    crossSite({ ...page, origin: 'http://127.0.0.1:8080', 'sec-fetch-site': 'same-origin' }),
    undefined,
  );
  // What a form of another site can send.
  assert.match(crossSite({ ...page, 'content-type': 'text/plain' }) ?? '', /content type text\/plain/);
  assert.match(
    crossSite({ ...page, 'content-type': 'application/x-www-form-urlencoded' }) ?? '',
    /content type/,
  );
  assert.match(crossSite({ ...page, 'sec-fetch-site': 'cross-site' }) ?? '', /cross-site/);
  assert.match(crossSite({ ...page, origin: 'http://evil.example' }) ?? '', /evil\.example/);
});

test('manifests past the byte limit are refused before they are parsed', () => {
  const { objects, errors } = manifestsOf([['#'.repeat(MAX_BYTES + 1), 'the pasted file']]);
  assert.deepEqual([objects, errors], [[], [`more than ${MAX_BYTES} bytes of manifests`]]);
});
