// The page's rows as pure functions: what Berth set on a node and from which rule, the startup
// gates' state, filtering and paging, Warning events of the last hour, the pods Berth holds; and
// the host check against DNS rebinding.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { PageView } from '../../../src/capability.ts';
import { parseGates } from '../../../src/gates/decide/parse.ts';
import { NodeStartupGate } from '../../../src/gates/crd.ts';
import { gateRows } from '../../../src/gates/view.ts';
import { compileRule } from '../../../src/labels/decide/nodes.ts';
import { type Rule } from '../../../src/labels/types.ts';
import { NodeLabelRule } from '../../../src/labels/crd.ts';
import { ruleSource } from '../../../src/labels/view.ts';
import { taintRecordKey } from '../../../src/policy/nodes/write.ts';
import { slimNode, slimPod, type SlimNode } from '../../../src/policy/slim.ts';
import { hostAllowed } from '../../../src/ui/server.ts';
import type { NodeRow } from '../../../src/ui/types.ts';
import {
  defaultPoolLabels,
  derivedOf,
  heldPods,
  nodeRow,
  queryNodes,
  warningEvents,
  type EventLike,
} from '../../../src/ui/view.ts';
import { withSeed } from '../../helpers/prng.ts';

const labelsOwned = (manager: string, labels: string[], annotations: string[] = []) => ({
  manager,
  operation: 'Apply',
  fieldsType: 'FieldsV1',
  fieldsV1: {
    'f:metadata': {
      'f:labels': Object.fromEntries(labels.map((k) => [`f:${k}`, {}])),
      ...(annotations.length
        ? { 'f:annotations': Object.fromEntries(annotations.map((k) => [`f:${k}`, {}])) }
        : {}),
    },
  },
});

const rule = (name: string, spec: Record<string, unknown>): Rule => {
  const c = compileRule({
    apiVersion: NodeLabelRule.apiVersion,
    kind: NodeLabelRule.kind,
    metadata: { name },
    spec,
  });
  assert.ok(c.rule, c.errors.join('; '));
  return c.rule;
};

const node = (
  name: string,
  extra: {
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
    taints?: { key: string; effect: string; value?: string }[];
    managedFields?: unknown[];
  } = {},
): SlimNode =>
  slimNode({
    apiVersion: 'v1',
    kind: 'Node',
    metadata: {
      name,
      creationTimestamp: '2026-01-01T00:00:00Z',
      labels: { 'kubernetes.io/arch': 'amd64', ...extra.labels },
      annotations: extra.annotations ?? {},
      managedFields: extra.managedFields as never,
    },
    spec: { taints: extra.taints ?? [] },
    status: { nodeInfo: { architecture: 'amd64' }, conditions: [{ type: 'Ready', status: 'True' }] },
  });

/** The labels' view over fixed rules (labels/view.ts, as the page builds it from the cached NodeLabelRules). */
const labelsView = (rules: Rule[]): PageView => ({
  keySource: { fieldManager: 'berth-labels', of: (n) => ruleSource(n, rules) },
});

test('derivedOf names what each of Berth’s field managers set, and the rule behind a derived label', () => {
  const gpu = rule('gpu', {
    match: { anyOf: [{ label: 'nvidia.com/gpu.present', operator: 'Exists' }] },
    labels: { 'accelerators/gpu': 'true' },
    annotations: { 'accelerators/note': '<b>x</b>' },
  });
  const n = node('n1', {
    labels: { 'nvidia.com/gpu.present': 'true', 'accelerators/gpu': 'true', 'agents.example/claim': 'a' },
    annotations: {
      'accelerators/note': '<b>x</b>',
      [taintRecordKey('berth-gates')]: '["gate/x:NoSchedule"]',
    },
    taints: [
      { key: 'gate/x', effect: 'NoSchedule' },
      { key: 'someone/else', effect: 'NoSchedule' },
    ],
    managedFields: [
      labelsOwned('berth-labels', ['accelerators/gpu'], ['accelerators/note']),
      labelsOwned('berth-agents', ['agents.example/claim']),
      { manager: 'berth-gates', operation: 'Update', fieldsType: 'FieldsV1', fieldsV1: {} },
      labelsOwned('kubectl', ['nvidia.com/gpu.present']),
    ],
  });
  assert.deepEqual(derivedOf(n, [labelsView([gpu])]), [
    { kind: 'label', key: 'agents.example/claim', value: 'a', by: 'berth-agents' },
    { kind: 'taint', key: 'gate/x:NoSchedule', value: '', by: 'berth-gates' },
    { kind: 'label', key: 'accelerators/gpu', value: 'true', by: 'berth-labels', rule: 'NodeLabelRule gpu' },
    {
      kind: 'annotation',
      key: 'accelerators/note',
      value: '<b>x</b>',
      by: 'berth-labels',
      rule: 'NodeLabelRule gpu',
    },
  ]);
  // A label berth-labels owns that no cached rule backs (a rule file, or a rule just deleted): no rule named.
  assert.deepEqual(
    derivedOf(n, [labelsView([])]).find((d) => d.key === 'accelerators/gpu'),
    {
      kind: 'label',
      key: 'accelerators/gpu',
      value: 'true',
      by: 'berth-labels',
    },
  );
  assert.deepEqual(
    derivedOf(node('plain'), [labelsView([gpu])]),
    [],
    'nothing of Berth on a node is nothing',
  );
  // Without the labels' view (labels off), its keys still show, with no rule.
  assert.deepEqual(
    derivedOf(n, []).find((d) => d.key === 'accelerators/gpu'),
    { kind: 'label', key: 'accelerators/gpu', value: 'true', by: 'berth-labels' },
  );
});

const gate = (name: string, pool: string) =>
  parseGates([
    {
      apiVersion: NodeStartupGate.apiVersion,
      kind: NodeStartupGate.kind,
      metadata: { name, creationTimestamp: '2025-01-01T00:00:00Z' },
      spec: {
        taint: { key: `${name}.example/startup`, effect: 'NoSchedule' },
        nodeSelector: { matchLabels: { pool } },
        requirements: { pods: [{ namespace: 'sys', selector: { matchLabels: { app: 'cni' } } }] },
      },
    },
  ]).gates;

test('nodeRow: pool, architecture, and a held node with what it waits for', () => {
  const gates = gate('net', 'edge');
  assert.equal(gates.length, 1);
  const since = '2026-01-01T00:00:01Z';
  const held = node('h', {
    labels: { pool: 'edge', 'karpenter.sh/nodepool': 'edge-pool' },
    annotations: { [gates[0]!.keys.gatedAt]: since },
    taints: [{ key: 'net.example/startup', effect: 'NoSchedule' }],
  });
  // The gates' view (gates/view.ts) over fixed gates and the pods `on` gives for a node.
  const gatesView = (on: (n: string) => ReturnType<typeof slimPod>[]): PageView => ({
    nodeGates: (n, now) => gateRows(gates, n, on(n.metadata?.name ?? ''), now),
  });
  const inputs = {
    views: [gatesView(() => [])],
    poolLabels: defaultPoolLabels,
    now: Date.parse(since) + 5000,
  };
  const row = nodeRow(held, inputs);
  assert.equal(row.pool, 'edge-pool');
  assert.equal(row.arch, 'amd64');
  assert.equal(row.ready, true);
  assert.equal(row.held, true);
  assert.equal(row.gates.length, 1);
  assert.equal(row.gates[0]!.state, 'Held');
  assert.equal(row.gates[0]!.since, since);
  assert.deepEqual(row.gates[0]!.waiting, ['pods app=cni in sys: none on the node yet']);

  // Its requirement met (a Ready cni pod on it): the gate would release it, nothing left to wait for.
  const cni = slimPod({
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name: 'cni-1', namespace: 'sys', labels: { app: 'cni' } },
    spec: { nodeName: 'h', containers: [{ name: 'c', image: 'i' }] },
    status: { phase: 'Running', conditions: [{ type: 'Ready', status: 'True' }] },
  });
  const met = nodeRow(held, { ...inputs, views: [gatesView((n) => (n === 'h' ? [cni] : []))] });
  assert.deepEqual(met.gates[0]!.waiting, []);

  const other = nodeRow(node('o', { labels: { pool: 'core' } }), inputs);
  assert.deepEqual(other.gates, [], 'a gate that does not select the node is not shown');
  assert.equal(other.held, false);
  assert.equal(other.pool, '', 'no pool label, no pool');
});

const row = (
  name: string,
  pool: string,
  arch: string,
  labels: Record<string, string> = {},
  held = false,
): NodeRow => ({
  name,
  pool,
  arch,
  ready: true,
  unschedulable: false,
  labels,
  derived: [],
  gates: [],
  held,
});

test('queryNodes filters by every word, pool, architecture and held, and pages', () => {
  const rows = [
    row('a-1', 'p1', 'amd64', { team: 'red' }),
    row('a-2', 'p1', 'arm64', { team: 'blue' }, true),
    row('b-1', 'p2', 'arm64', { team: 'red' }),
  ];
  const names = (q: Parameters<typeof queryNodes>[1]) => queryNodes(rows, q).rows.map((r) => r.name);
  assert.deepEqual(names({}), ['a-1', 'a-2', 'b-1']);
  assert.deepEqual(names({ text: 'team=RED' }), ['a-1', 'b-1'], 'label key=value, case-insensitive');
  assert.deepEqual(names({ text: 'red a-' }), ['a-1'], 'every word must match');
  assert.deepEqual(names({ pool: 'p1' }), ['a-1', 'a-2']);
  assert.deepEqual(names({ arch: 'arm64', pool: 'p2' }), ['b-1']);
  assert.deepEqual(names({ held: true }), ['a-2']);
  const p = queryNodes(rows, { offset: 1, limit: 1 });
  assert.deepEqual(
    { total: p.total, matched: p.matched, offset: p.offset, names: p.rows.map((r) => r.name) },
    { total: 3, matched: 3, offset: 1, names: ['a-2'] },
  );
  assert.deepEqual(p.pools, ['p1', 'p2']);
  assert.deepEqual(p.archs, ['amd64', 'arm64']);
  assert.equal(queryNodes(rows, { offset: 99 }).offset, 2, 'an offset past the end shows the last row');
});

test('queryNodes: the pages of any filter put together are exactly the matching rows (300 generated cases)', async () => {
  await withSeed('paging', (r) => {
    for (let i = 0; i < 300; i++) {
      const rows = Array.from({ length: r.int(60) }, (_, i) =>
        row(
          `n-${String(i).padStart(3, '0')}`,
          r.pick(['', 'p1', 'p2']),
          r.pick(['amd64', 'arm64']),
          { k: r.pick(['x', 'y']) },
          r.chance(0.3),
        ),
      );
      const q = {
        pool: r.pick(['', 'p1']),
        arch: r.pick(['', 'arm64']),
        text: r.pick(['', 'k=x', 'n-0']),
        held: r.chance(0.3),
      };
      const expected = rows.filter(
        (x) =>
          (!q.pool || x.pool === q.pool) &&
          (!q.arch || x.arch === q.arch) &&
          (!q.held || x.held) &&
          `${x.name}\nk=${x.labels['k']}`.includes(q.text),
      );
      const limit = 1 + r.int(10);
      const seen: string[] = [];
      for (let offset = 0; offset < expected.length; offset += limit) {
        const p = queryNodes(rows, { ...q, offset, limit });
        assert.equal(p.matched, expected.length);
        seen.push(...p.rows.map((x) => x.name));
      }
      assert.deepEqual(
        seen,
        expected.map((x) => x.name),
      );
    }
  });
});

test('warningEvents: Warning events of the last hour, newest first, bounded', () => {
  const now = Date.parse('2026-01-01T12:00:00Z');
  const ev = (name: string, type: string, time: string, extra: Partial<EventLike> = {}): EventLike => ({
    apiVersion: 'events.k8s.io/v1',
    kind: 'Event',
    metadata: { name, namespace: 'default' },
    type,
    eventTime: time,
    reason: 'R',
    note: `note ${name}`,
    reportingController: 'berth.dev/labels',
    regarding: { kind: 'NodeLabelRule', name: 'gpu' },
    ...extra,
  });
  const events = [
    ev('old', 'Warning', '2026-01-01T10:59:59Z'),
    ev('normal', 'Normal', '2026-01-01T11:30:00Z'),
    ev('a', 'Warning', '2026-01-01T11:10:00Z'),
    ev('b', 'Warning', '2026-01-01T10:00:00Z', {
      series: { count: 4, lastObservedTime: '2026-01-01T11:50:00Z' },
    }),
  ];
  const rows = warningEvents(events, now, 3_600_000, 10);
  assert.deepEqual(
    rows.map((r) => [r.note, r.time, r.count, r.kind, r.regarding]),
    [
      ['note b', '2026-01-01T11:50:00Z', 4, 'NodeLabelRule', 'NodeLabelRule gpu'],
      ['note a', '2026-01-01T11:10:00Z', 1, 'NodeLabelRule', 'NodeLabelRule gpu'],
    ],
  );
  assert.equal(warningEvents(events, now, 3_600_000, 1).length, 1);
});

test('heldPods: pods a Berth scheduling gate holds, each with its reason', () => {
  const pod = (name: string, gates: string[]) =>
    slimPod({
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name, namespace: 'ns' },
      spec: { containers: [{ name: 'c', image: 'i' }], schedulingGates: gates.map((g) => ({ name: g })) },
    });
  const held = heldPods(
    [
      pod('b', ['arch.berth.dev/inspect']),
      pod('a', ['example.com/other', 'x.berth.dev/new']),
      pod('c', ['example.com/other']),
    ],
    { 'arch.berth.dev/inspect': (p) => `reading images of ${p.metadata?.name}` },
  );
  assert.deepEqual(held, [
    { namespace: 'ns', name: 'a', gate: 'x.berth.dev/new', reason: 'held by a Berth scheduling gate' },
    { namespace: 'ns', name: 'b', gate: 'arch.berth.dev/inspect', reason: 'reading images of b' },
  ]);
});

test('hostAllowed: localhost and IP addresses, and the names allowed; others are refused (DNS rebinding)', () => {
  for (const h of ['localhost:8088', 'localhost', '127.0.0.1:8088', '[::1]:8088', '10.0.0.7'])
    assert.equal(hostAllowed(h, []), true, h);
  for (const h of [undefined, '', 'evil.example', 'evil.example:8088', 'localhost.evil.example'])
    assert.equal(hostAllowed(h, []), false, String(h));
  assert.equal(hostAllowed('berth.internal:8088', ['berth.internal']), true);
});
