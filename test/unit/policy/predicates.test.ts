import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import * as predicates from '../../../src/policy/predicates.ts';
import type { SlimNode } from '../../../src/policy/slim.ts';

const { and, changed, not, or, resync, valueChanged, recordChanged } = predicates;
const { labelsChanged, annotationsChanged, generationChanged, deletionChanged, ownersChanged } = predicates;
const { managedFieldsChanged, taintsChanged, conditionsChanged, nodeInfoChanged } = predicates;
type UpdatePredicate<T> = predicates.UpdatePredicate<T>;

const node = (
  extra: { metadata?: SlimNode['metadata']; spec?: SlimNode['spec']; status?: SlimNode['status'] } = {},
) =>
  ({
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name: 'n', resourceVersion: '1', ...extra.metadata },
    spec: { ...extra.spec },
    status: { ...extra.status },
  }) as SlimNode;

/** The predicate passes the update from `a` to `b`, and stays quiet on a copy of `a` (a write that changed none of it). */
function detects<T>(p: UpdatePredicate<T>, a: T, b: T, what: string) {
  assert.equal(p(a, b), true, `${what}: the change passes`);
  assert.equal(p(b, a), true, `${what}: and back`);
  assert.equal(p(a, structuredClone(a)), false, `${what}: an equal copy does not`);
}

describe('leaf predicates compare one part of an object', () => {
  test('generationChanged: the spec (metadata.generation)', () => {
    detects(
      generationChanged,
      node({ metadata: { generation: 1 } }),
      node({ metadata: { generation: 2 } }),
      'gen',
    );
    assert.equal(
      generationChanged(
        node({ metadata: { generation: 1 } }),
        node({ metadata: { generation: 1, labels: { a: '1' } } }),
      ),
      false,
      'a metadata write leaves the generation',
    );
  });

  test('deletionChanged: deletionTimestamp', () => {
    detects(
      deletionChanged,
      node(),
      node({ metadata: { deletionTimestamp: '2024-01-01T00:00:00Z' } }),
      'deletion',
    );
  });

  test('labelsChanged and annotationsChanged: any entry, whatever the order; absent is empty', () => {
    const labelled = (labels?: Record<string, string>) => node({ metadata: { labels } });
    const annotated = (annotations: Record<string, string>) => node({ metadata: { annotations } });
    for (const [what, before, after] of [
      ['value', { a: '1' }, { a: '2' }],
      ['added', { a: '1' }, { a: '1', b: '' }],
      ['renamed', { a: '' }, { b: '' }],
    ] as const) {
      detects(labelsChanged, labelled(before), labelled(after), what);
      detects(annotationsChanged, annotated(before), annotated(after), what);
      assert.equal(
        annotationsChanged(labelled(before), labelled(after)),
        false,
        'labels are not annotations',
      );
      assert.equal(labelsChanged(annotated(before), annotated(after)), false, 'annotations are not labels');
    }
    assert.equal(labelsChanged(labelled({ a: '1', b: '2' }), labelled({ b: '2', a: '1' })), false);
    assert.equal(labelsChanged(labelled(), labelled({})), false);
  });

  test('ownersChanged: each owner by uid, name, kind, apiVersion and controller flag, in order', () => {
    const rs = { apiVersion: 'apps/v1', kind: 'ReplicaSet', name: 'rs', uid: 'u1', controller: true };
    const owned = (...ownerReferences: (typeof rs | Omit<typeof rs, 'controller'>)[]) =>
      node({ metadata: { ownerReferences } });
    detects(ownersChanged, owned(rs), owned(), 'orphaned');
    for (const [field, value] of [
      ['uid', 'u2'],
      ['name', 'rs2'],
      ['kind', 'Job'],
      ['apiVersion', 'batch/v1'],
    ] as const)
      detects(ownersChanged, owned(rs), owned({ ...rs, [field]: value }), field);
    detects(ownersChanged, owned(rs), owned({ ...rs, controller: false }), 'controller flag');
    const { controller: _, ...plain } = rs;
    assert.equal(ownersChanged(owned({ ...rs, controller: false }), owned(plain)), false, 'false is absent');
    detects(ownersChanged, owned(rs, { ...rs, uid: 'u2' }), owned({ ...rs, uid: 'u2' }, rs), 'reordered');
  });

  test('managedFieldsChanged: any entry, deeply', () => {
    const entry = (f: string) => ({
      manager: 'berth-labels',
      operation: 'Apply',
      fieldsV1: { 'f:metadata': { [f]: {} } },
    });
    detects(
      managedFieldsChanged,
      node({ metadata: { managedFields: [entry('f:labels')] } }),
      node({ metadata: { managedFields: [entry('f:annotations')] } }),
      'fields',
    );
    detects(
      managedFieldsChanged,
      node(),
      node({ metadata: { managedFields: [entry('f:labels')] } }),
      'first entry',
    );
  });

  test('taintsChanged: any taint added, removed, reordered or altered', () => {
    const t1 = { key: 'a', effect: 'NoSchedule' };
    const t2 = { key: 'b', value: 'x', effect: 'NoExecute' };
    const tainted = (...taints: { key: string; value?: string; effect: string }[]) =>
      node({ spec: { taints } });
    detects(taintsChanged, node(), tainted(t1), 'added');
    detects(taintsChanged, tainted(t1, t2), tainted(t2, t1), 'reordered');
    detects(taintsChanged, tainted(t2), tainted({ ...t2, value: 'y' }), 'value');
    detects(taintsChanged, tainted(t1), tainted({ ...t1, effect: 'NoExecute' }), 'effect');
    detects(
      taintsChanged,
      tainted(t2),
      tainted({ ...t2, timeAdded: '2024-01-01T00:00:00Z' } as typeof t2),
      'timeAdded',
    );
    assert.equal(taintsChanged(node(), tainted()), false, 'none is none');
  });

  test('conditionsChanged: type, status, reason, message; not the heartbeat', () => {
    const ready = { type: 'Ready', status: 'True' };
    const withConditions = (...conditions: object[]) =>
      ({ status: { conditions } }) as { status: { conditions: { type: string; status: string }[] } };
    detects(
      conditionsChanged,
      withConditions(ready),
      withConditions({ ...ready, status: 'False' }),
      'status',
    );
    detects(
      conditionsChanged,
      withConditions(ready),
      withConditions({ ...ready, reason: 'KubeletReady' }),
      'reason',
    );
    detects(conditionsChanged, withConditions(ready), withConditions({ ...ready, message: 'ok' }), 'message');
    detects(
      conditionsChanged,
      withConditions(ready),
      withConditions({ ...ready, type: 'MemoryPressure' }),
      'type',
    );
    detects(conditionsChanged, withConditions(), withConditions(ready), 'added');
    assert.equal(
      conditionsChanged(
        withConditions({ ...ready, lastHeartbeatTime: '2024-01-01T00:00:00Z' }),
        withConditions({ ...ready, lastHeartbeatTime: '2024-01-01T00:00:10Z' }),
      ),
      false,
    );
  });

  test('nodeInfoChanged: any field of status.nodeInfo', () => {
    const info = (nodeInfo?: Record<string, string>) => node({ status: { nodeInfo } });
    detects(
      nodeInfoChanged,
      info({ architecture: 'amd64' }),
      info({ architecture: 'arm64' }),
      'architecture',
    );
    assert.equal(nodeInfoChanged(info(), info({})), false);
  });

  test('valueChanged and recordChanged read what they are given', () => {
    const phase = valueChanged((p: { phase?: string }) => p.phase);
    detects(phase, { phase: 'Pending' }, { phase: 'Running' }, 'phase');
    detects(phase, {}, { phase: 'Running' }, 'set');
    const selector = recordChanged((o: { sel?: Record<string, string> }) => o.sel);
    detects(selector, { sel: { a: '1' } }, {}, 'selector');
  });
});

describe('combinators', () => {
  const a = node({ metadata: { labels: { a: '1' } } });
  const relabelled = node({ metadata: { labels: { a: '2' } } });
  const annotated = node({ metadata: { labels: { a: '1' }, annotations: { n: '1' } } });

  test('resync passes only the informer resync, onUpdate(obj, obj)', () => {
    assert.equal(resync(a, a), true);
    assert.equal(resync(a, structuredClone(a)), false);
  });

  test('changed: the resync, or any change named', () => {
    const p = changed(labelsChanged);
    assert.equal(p(a, a), true, 'a resync reconciles');
    assert.equal(p(a, relabelled), true);
    assert.equal(p(a, annotated), false);
    assert.equal(changed()(a, a), true);
    assert.equal(changed()(a, relabelled), false);
  });

  test('or, and, not', () => {
    assert.equal(or(labelsChanged, annotationsChanged)(a, annotated), true);
    assert.equal(or(labelsChanged, annotationsChanged)(a, structuredClone(a)), false);
    assert.equal(or<SlimNode>()(a, relabelled), false, 'an empty or holds for nothing');
    assert.equal(and(labelsChanged, annotationsChanged)(a, annotated), false);
    assert.equal(
      and(labelsChanged, annotationsChanged)(
        a,
        node({ metadata: { labels: { a: '2' }, annotations: { n: '1' } } }),
      ),
      true,
    );
    assert.equal(and<SlimNode>()(a, relabelled), true, 'an empty and holds for everything');
    assert.equal(not(labelsChanged)(a, relabelled), false);
    assert.equal(not(labelsChanged)(a, annotated), true);
    assert.equal(and(labelsChanged, not(annotationsChanged))(a, relabelled), true, 'relabelled only');
  });
});

describe('onChanges', () => {
  test('calls back on an add, a delete, and an update the predicate lets through; never on a resync', () => {
    let calls = 0;
    const h = predicates.onChanges(predicates.generationChanged, () => calls++);
    const v1 = { metadata: { name: 'p', generation: 1 } };
    const status = { metadata: { name: 'p', generation: 1 }, status: { placed: 3 } };
    const v2 = { metadata: { name: 'p', generation: 2 } };
    h.onAdd();
    h.onUpdate(v1, v1);
    h.onUpdate(v1, status);
    assert.equal(calls, 1, 'a resync and a status write are not changes');
    h.onUpdate(status, v2);
    h.onDelete();
    assert.equal(calls, 3);
  });
});
