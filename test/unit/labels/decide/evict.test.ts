import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { compileRule } from '../../../../src/labels/decide/nodes.ts';
import {
  explainPodEviction,
  evictingKeys,
  evictingRules,
  evictionExemption,
  removedKeys,
  trackRemovals,
  verdict,
  EVICT_DEFAULTS,
} from '../../../../src/labels/decide/evict.ts';
import type { Rule } from '../../../../src/labels/types.ts';
import { labelsCapability } from '../../../../src/labels/index.ts';
import { declaringAnnotations } from '../../../../src/capability.ts';
import {
  slimNode,
  slimPod,
  type NodeSelectorRequirement,
  type SlimPod,
} from '../../../../src/policy/slim.ts';
import { withSeed } from '../../../helpers/prng.ts';

// The pods' annotations eviction reads, as `berth run` keeps them.
declaringAnnotations([labelsCapability]);

const TPU = 'accelerators/edgetpu';
const node = (labels: Record<string, string>, name = 'n1') =>
  slimNode({ apiVersion: 'v1', kind: 'Node', metadata: { name, labels } });
const pod = (spec: Record<string, unknown>, meta: Record<string, unknown> = {}): SlimPod =>
  slimPod({
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name: 'p', namespace: 'apps', uid: 'u1', ...meta },
    spec: { nodeName: 'n1', containers: [{ name: 'c', image: 'i' }], ...spec },
    status: { phase: 'Running' },
  } as never);
const affinity = (
  ...terms: { matchExpressions?: NodeSelectorRequirement[]; matchFields?: NodeSelectorRequirement[] }[]
) => ({
  affinity: {
    nodeAffinity: { requiredDuringSchedulingIgnoredDuringExecution: { nodeSelectorTerms: terms } },
  },
});
const rule = (
  name: string,
  labels: Record<string, string>,
  evictOnRemoval?: Rule['evictOnRemoval'],
): Rule => ({
  name,
  source: { kind: 'NodeLabelRule', name },
  allOf: [{ label: 'x', operator: 'Exists' }],
  anyOf: [],
  labels,
  annotations: {},
  taints: [],
  ...(evictOnRemoval ? { evictOnRemoval } : {}),
});
/** Derived labels that went away, with the values they had (derived by `rule`). */
const gone = (was: Record<string, string>, rule = 'nodelabelrule/tpu') =>
  new Map(Object.entries(was).map(([k, value]) => [k, { value, rule, at: 1000 }]));

describe('removedKeys', () => {
  const tpu = gone({ [TPU]: 'true' });
  test('a nodeSelector on a label that went away or changed', () => {
    const p = pod({ nodeSelector: { [TPU]: 'true' } });
    assert.deepEqual(removedKeys(p, node({}), tpu), [TPU]);
    assert.deepEqual(removedKeys(p, node({ [TPU]: 'false' }), tpu), [TPU]);
  });

  test('nothing while the pod fits, or without a removal', () => {
    assert.deepEqual(removedKeys(pod({ nodeSelector: { [TPU]: 'true' } }), node({ [TPU]: 'true' }), tpu), []);
    assert.deepEqual(removedKeys(pod({ nodeSelector: { [TPU]: 'true' } }), node({}), gone({})), []);
    assert.deepEqual(removedKeys(pod({}), node({}), tpu), []);
  });

  test('nothing when another label is missing too', () => {
    const p = pod({ nodeSelector: { [TPU]: 'true', zone: 'a' } });
    assert.deepEqual(removedKeys(p, node({}), tpu), []);
    assert.deepEqual(removedKeys(p, node({ zone: 'a' }), tpu), [TPU]);
  });

  test('only a requirement the old value met counts', () => {
    const p = pod({ nodeSelector: { [TPU]: 'v2' } });
    assert.deepEqual(removedKeys(p, node({}), tpu), []);
    const q = pod(affinity({ matchExpressions: [{ key: TPU, operator: 'NotIn', values: ['old'] }] }));
    assert.deepEqual(removedKeys(q, node({ [TPU]: 'old' }), gone({ [TPU]: 'new' })), [TPU]);
  });

  test('required affinity: found only when no term still holds', () => {
    const p = pod(
      affinity(
        { matchExpressions: [{ key: TPU, operator: 'Exists' }] },
        { matchExpressions: [{ key: 'gpu', operator: 'In', values: ['a100'] }] },
      ),
    );
    const both = gone({ [TPU]: 'true', gpu: 'a100' });
    assert.deepEqual(removedKeys(p, node({ gpu: 'a100' }), both), []);
    assert.deepEqual(removedKeys(p, node({}), both), [TPU, 'gpu']);
    // The second term never held (no gpu label went away): the first is the one that went.
    assert.deepEqual(removedKeys(p, node({}), tpu), [TPU]);
    // The first term fails on a label that did not go away: the removal is not the whole reason.
    const q = pod(
      affinity({
        matchExpressions: [
          { key: TPU, operator: 'Exists' },
          { key: 'zone', operator: 'In', values: ['a'] },
        ],
      }),
    );
    assert.deepEqual(removedKeys(q, node({}), tpu), []);
    assert.deepEqual(removedKeys(q, node({ zone: 'a' }), tpu), [TPU]);
  });

  test('terms with matchFields hold only for their node; an empty term holds for none', () => {
    const p = pod(
      affinity({
        matchExpressions: [{ key: TPU, operator: 'Exists' }],
        matchFields: [{ key: 'metadata.name', operator: 'In', values: ['n1'] }],
      }),
    );
    assert.deepEqual(removedKeys(p, node({}, 'n1'), tpu), [TPU]);
    assert.deepEqual(removedKeys(p, node({}, 'n2'), tpu), []);
    assert.deepEqual(removedKeys(pod(affinity({})), node({}), tpu), []);
  });

  test('Gt on a label that went away', () => {
    const p = pod(affinity({ matchExpressions: [{ key: 'gpu', operator: 'Gt', values: ['1'] }] }));
    assert.deepEqual(removedKeys(p, node({ gpu: '2' }), gone({ gpu: '2' })), []);
    assert.deepEqual(removedKeys(p, node({}), gone({ gpu: '2' })), ['gpu']);
  });
});

describe('trackRemovals', () => {
  const watched = (k: string) => (k !== 'other' ? 'nodelabelrule/tpu' : undefined);
  test('a removal or change of a derived value is noted once with its old value and rule, and forgotten when the value is back', () => {
    const was = (value: string, at: number) => ({ value, rule: 'nodelabelrule/tpu', at });
    let r = trackRemovals(undefined, { [TPU]: 'true', other: 'x' }, { other: 'y' }, watched, 1);
    assert.deepEqual([...r], [[TPU, was('true', 1)]]);
    r = trackRemovals(r, {}, { [TPU]: 'false' }, watched, 2);
    assert.deepEqual([...r], [[TPU, was('true', 1)]]);
    // The old value is back; the one between went away in its turn.
    r = trackRemovals(r, { [TPU]: 'false' }, { [TPU]: 'true' }, watched, 3);
    assert.deepEqual([...r], [[TPU, was('false', 3)]]);
    r = trackRemovals(r, { [TPU]: 'true' }, { [TPU]: 'false' }, watched, 4);
    assert.deepEqual([...r], [[TPU, was('true', 4)]]);
    r = trackRemovals(r, { [TPU]: 'false' }, { [TPU]: 'true' }, () => undefined, 5);
    assert.deepEqual([...r], []);
    // A value no rule derived here (an admin's own, another rule's elsewhere) is no removal of a rule's.
    const byValue = (_k: string, v: string) => (v === 'a100' ? 'nodelabelrule/b-a100' : undefined);
    assert.deepEqual([...trackRemovals(undefined, { gpu: 'tesla' }, {}, byValue, 6)], []);
    assert.deepEqual(
      [...trackRemovals(undefined, { gpu: 'a100' }, {}, byValue, 6)],
      [['gpu', { value: 'a100', rule: 'nodelabelrule/b-a100', at: 6 }]],
    );
    // A label that appears is no removal.
    assert.deepEqual([...trackRemovals(undefined, {}, { [TPU]: 'true' }, watched, 4)], []);
  });
});

describe('evictionExemption', () => {
  const sel = { nodeSelector: { [TPU]: 'true' } };
  test('DaemonSet, mirror and static pods, kube-system, Berth, opted out, terminating, finished', () => {
    const cases: [SlimPod, string][] = [
      [
        pod(sel, {
          ownerReferences: [
            { apiVersion: 'apps/v1', kind: 'DaemonSet', name: 'd', uid: 'd', controller: true },
          ],
        }),
        'a DaemonSet pod',
      ],
      [pod(sel, { annotations: { 'kubernetes.io/config.mirror': 'x' } }), 'a mirror pod'],
      [pod(sel, { annotations: { 'kubernetes.io/config.source': 'file' } }), 'a static pod'],
      [pod(sel, { namespace: 'kube-system' }), 'in kube-system'],
      [pod(sel, { namespace: 'berth-system' }), "in Berth's namespace"],
      [
        pod(sel, { annotations: { 'berth.dev/evict-on-removal': 'false' } }),
        'opted out (berth.dev/evict-on-removal: "false")',
      ],
      [pod(sel, { deletionTimestamp: '2026-01-01T00:00:00Z' }), 'terminating'],
      [pod({ ...sel, nodeName: undefined }), 'not scheduled'],
    ];
    for (const [p, why] of cases) assert.equal(evictionExemption(p, 'berth-system'), why);
    assert.equal(
      evictionExemption(
        pod(sel, {
          ownerReferences: [
            { apiVersion: 'apps/v1', kind: 'ReplicaSet', name: 'r', uid: 'r', controller: true },
          ],
        }),
        'berth-system',
      ),
      undefined,
    );
    assert.equal(
      evictionExemption(pod(sel, { annotations: { 'kubernetes.io/config.source': 'api' } }), 'berth-system'),
      undefined,
    );
  });
});

describe('evictingKeys and verdict', () => {
  test('only opted-in rules; the first by name owns a key; files follow the flag', () => {
    const file: Rule = { ...rule('file:ns/gpu', { gpu: 'yes' }), source: { kind: 'File', path: 'ns/gpu' } };
    const rules = [
      rule('nodelabelrule/b', { [TPU]: 'true' }, { afterSeconds: 5 }),
      rule('nodelabelrule/a', { [TPU]: 'true' }, { mode: 'DryRun' }),
      rule('nodelabelrule/c', { zone: 'a' }),
      file,
    ];
    const keys = evictingKeys(rules);
    assert.deepEqual([...keys.keys()], [TPU]);
    assert.deepEqual(keys.get(TPU), {
      rule: 'nodelabelrule/a',
      policy: { ...EVICT_DEFAULTS, mode: 'DryRun' },
    });
    const withFiles = evictingKeys(rules, { afterSeconds: 1 });
    assert.deepEqual(withFiles.get('gpu'), {
      rule: 'file:ns/gpu',
      policy: { ...EVICT_DEFAULTS, afterSeconds: 1 },
    });
  });

  test('verdict names the rule and label; none for exempt pods or without opted-in rules', () => {
    const keys = evictingRules([
      rule('nodelabelrule/tpu', { [TPU]: 'true' }, { afterSeconds: 3, maxPerMinute: 2 }),
    ]);
    const p = pod({ nodeSelector: { [TPU]: 'true' } });
    assert.deepEqual(verdict(p, node({}), keys, gone({ [TPU]: 'true' }), 'berth-system'), {
      label: TPU,
      since: 1000,
      rule: 'nodelabelrule/tpu',
      policy: { mode: 'Evict', afterSeconds: 3, maxPerMinute: 2 },
    });
    const was = gone({ [TPU]: 'true' });
    assert.equal(verdict(p, node({ [TPU]: 'true' }), keys, was, 'berth-system'), undefined);
    assert.equal(verdict(p, undefined, keys, was, 'berth-system'), undefined);
    assert.equal(verdict(p, node({}), keys, undefined, 'berth-system'), undefined);
    assert.equal(
      verdict(
        pod({ nodeSelector: { [TPU]: 'true' } }, { namespace: 'kube-system' }),
        node({}),
        keys,
        was,
        'x',
      ),
      undefined,
    );
    assert.equal(
      verdict(p, node({}), evictingRules([rule('nodelabelrule/tpu', { [TPU]: 'true' })]), was, 'x'),
      undefined,
    );
  });

  test('a value another rule derived, which did not opt in, evicts nothing, whoever else opted in on the key', () => {
    const policies = evictingRules([
      rule('nodelabelrule/a-tesla', { gpu: 'tesla' }),
      rule('nodelabelrule/b-a100', { gpu: 'a100' }, {}),
    ]);
    const p = pod({ nodeSelector: { gpu: 'tesla' } });
    assert.equal(
      verdict(p, node({}), policies, gone({ gpu: 'tesla' }, 'nodelabelrule/a-tesla'), 'x'),
      undefined,
    );
    const q = pod({ nodeSelector: { gpu: 'a100' } });
    assert.equal(
      verdict(q, node({}), policies, gone({ gpu: 'a100' }, 'nodelabelrule/b-a100'), 'x')?.rule,
      'nodelabelrule/b-a100',
    );
  });

  test('compileRule carries evictOnRemoval; the schema bounds it', () => {
    const obj = (e: unknown) => ({
      apiVersion: 'berth.dev/v1alpha1',
      kind: 'NodeLabelRule',
      metadata: { name: 'tpu' },
      spec: {
        match: { allOf: [{ label: 'usb', operator: 'Exists' }] },
        labels: { [TPU]: 'true' },
        evictOnRemoval: e,
      },
    });
    assert.deepEqual(compileRule(obj({ afterSeconds: 5, mode: 'DryRun' })).rule?.evictOnRemoval, {
      afterSeconds: 5,
      mode: 'DryRun',
    });
    assert.equal(compileRule(obj(undefined)).rule?.evictOnRemoval, undefined);
    assert.ok(compileRule(obj({ afterSeconds: -1 })).errors.length > 0);
    assert.ok(compileRule(obj({ mode: 'Force' })).errors.length > 0);
  });
});

describe('explainPodEviction', () => {
  const rules = [rule('nodelabelrule/tpu', { [TPU]: 'true' }, { afterSeconds: 30 })];
  const p = pod({ nodeSelector: { [TPU]: 'true' } });
  test('a pod that needs a derived label: fits, or goes after the delay', () => {
    assert.deepEqual(explainPodEviction(p, node({ [TPU]: 'true' }), rules, 'berth-system', undefined, []), [
      'Eviction on removal of derived labels:',
      `  needs label ${TPU}, derived by nodelabelrule/tpu (evictOnRemoval: Evict after 30s, at most 10 a minute)`,
      '  fits node n1 as far as these labels go',
    ]);
    const events = [{ time: '2026-11-22T14:00:00Z', reason: 'EvictedOnRemoval', note: 'evicted' }];
    assert.deepEqual(explainPodEviction(p, node({}), rules, 'berth-system', undefined, events).slice(2), [
      `  no longer fits node n1: label ${TPU} is gone; evicted 30s after Berth saw it go, unless it comes back`,
      '  2026-11-22T14:00:00Z EvictedOnRemoval: evicted',
    ]);
  });

  test('exempt pods and pods that need no derived label', () => {
    const system = pod({ nodeSelector: { [TPU]: 'true' } }, { namespace: 'kube-system' });
    assert.equal(
      explainPodEviction(system, node({}), rules, 'x', undefined, [])[1],
      '  never evicted: in kube-system',
    );
    assert.deepEqual(explainPodEviction(pod({}), node({}), rules, 'x', undefined, []), [
      'Eviction on removal of derived labels:',
      '  needs no label that a rule with evictOnRemoval derives',
    ]);
  });
});

/** Whether the pod fits the node: Kubernetes' nodeSelector and required node affinity, written out plainly. */
function fits(p: SlimPod, labels: Record<string, string>, name: string): boolean {
  const holds = (r: NodeSelectorRequirement, v: string | undefined) => {
    const vs = r.values ?? [];
    if (r.operator === 'In') return v !== undefined && vs.includes(v);
    if (r.operator === 'NotIn') return v === undefined || !vs.includes(v);
    if (r.operator === 'Exists') return v !== undefined;
    if (r.operator === 'DoesNotExist') return v === undefined;
    if (v === undefined || !/^-?\d+$/.test(v)) return false;
    return r.operator === 'Gt' ? Number(v) > Number(vs[0]) : Number(v) < Number(vs[0]);
  };
  for (const [k, v] of Object.entries(p.spec.nodeSelector ?? {})) if (labels[k] !== v) return false;
  const terms =
    p.spec.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms;
  if (!terms) return true;
  return terms.some(
    (t) =>
      (t.matchExpressions?.length ?? 0) + (t.matchFields?.length ?? 0) > 0 &&
      (t.matchExpressions ?? []).every((r) => holds(r, labels[r.key])) &&
      (t.matchFields ?? []).every((r) => holds(r, name)),
  );
}

test('generated: a scheduled pod is found exactly when putting back the labels that went away makes it fit again', async () => {
  // Enough cases that the generator's own check below (over 50 evictions found) cannot fail by chance:
  // about 1 checked pod in 23 is an eviction, and 6000 cases check about 2,250: some 100 found.
  const CASES = 6000;
  await withSeed('evict fuzz', (r) => {
    const KEYS = ['a', 'b', 'c', 'd', 'e'];
    const VALS = ['1', '2', '3'];
    const WATCHED = new Set(['a', 'b', 'c']);
    let found = 0;
    let checked = 0;
    for (let i = 0; i < CASES; i++) {
      const req = (): NodeSelectorRequirement => {
        const op = r.pick(['In', 'NotIn', 'Exists', 'DoesNotExist', 'Gt', 'Lt'] as const);
        const key = r.pick(KEYS);
        if (op === 'Exists' || op === 'DoesNotExist') return { key, operator: op };
        if (op === 'Gt' || op === 'Lt') return { key, operator: op, values: [r.pick(VALS)] };
        return { key, operator: op, values: [r.pick(VALS), r.pick(VALS)] };
      };
      const spec: Record<string, unknown> = {};
      if (r.chance(0.5))
        spec['nodeSelector'] = Object.fromEntries(
          Array.from({ length: r.int(3) }, () => [r.pick(KEYS), r.pick(VALS)]),
        );
      if (r.chance(0.7))
        Object.assign(
          spec,
          affinity(
            ...Array.from({ length: 1 + r.int(3) }, () => ({
              matchExpressions: Array.from({ length: r.int(3) }, req),
            })),
          ),
        );
      const p = pod(spec);
      const labels: Record<string, string> = {};
      for (const k of KEYS) if (r.chance(0.7)) labels[k] = r.pick(VALS);
      if (!fits(p, labels, 'n1')) continue; // only pods the scheduler could have placed here
      checked++;
      // Some labels go away, change or appear; watched ones or not.
      const after = { ...labels };
      for (const k of KEYS) {
        if (!r.chance(0.4)) continue;
        if (r.chance(0.5)) delete after[k];
        else after[k] = r.pick(VALS);
      }
      const removals = trackRemovals(undefined, labels, after, (k) => (WATCHED.has(k) ? 'r' : undefined), 7);
      const got = removedKeys(p, node(after), removals);
      const restored = { ...after };
      for (const [k, v] of removals) restored[k] = v.value;
      const expected = !fits(p, after, 'n1') && fits(p, restored, 'n1');
      const why = JSON.stringify({ spec, labels, after, got });
      assert.equal(got.length > 0, expected, why);
      for (const k of got) assert.ok(removals.has(k), `${k} went away: ${why}`);
      if (got.length) found++;
    }
    assert.ok(checked > 500 && found > 50, `the generator finds evictions (${found} of ${checked})`);
  });
});
