import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  compileRule,
  decide,
  tracedNodeWrite,
  refuseOwned,
  ruleErrors,
} from '../../../../src/labels/decide/nodes.ts';
import { nodeState as ownedState, taintRecordKey } from '../../../../src/policy/nodes/write.ts';
import { evictions, explainNodeLabels, previewRules } from '../../../../src/labels/explain.ts';
import {
  evalTerm,
  matchRule,
  nodeView,
  renderTemplate,
  type NodeView,
} from '../../../../src/labels/match.ts';
import { parseRuleFile } from '../../../../src/labels/files.ts';
import { FIELD_MANAGER, type MatchTerm, type Rule } from '../../../../src/labels/types.ts';
import type { Toleration } from '../../../../src/policy/nodes/taints.ts';
import type { KubeObject } from '../../../../src/runtime/api/meta.ts';

const view = (
  labels: Record<string, string>,
  fields: NodeView['fields'] = {},
  annotations = {},
): NodeView => ({
  name: 'n1',
  labels,
  annotations,
  fields,
});

const rule = (name: string, r: Partial<Rule>): Rule => ({
  name,
  source: { kind: 'NodeLabelRule', name },
  allOf: [],
  anyOf: [],
  labels: {},
  annotations: {},
  taints: [],
  ...r,
});

const edgetpu = parseRuleFile(
  'labels/accelerators/edgetpu',
  'accelerators',
  'edgetpu',
  Buffer.from(
    'kkohtaka.org/edgetpu\nfeature.node.kubernetes.io/usb-fe_1a6e_089a.present\nfeature.node.kubernetes.io/pci-0880_1ac1.present\nbeta.devicetree.org/fsl-imx8mq-phanbell\n',
  ),
).rule!;

describe('terms', () => {
  const t = (operator: MatchTerm['operator'], values?: string[]): MatchTerm => ({
    label: 'k',
    operator,
    ...(values ? { values } : {}),
  });
  test('operators follow NodeSelectorRequirement semantics', () => {
    assert.equal(evalTerm(view({ k: 'a' }), t('In', ['a', 'b'])), true);
    assert.equal(evalTerm(view({ k: 'c' }), t('In', ['a'])), false);
    assert.equal(evalTerm(view({}), t('In', ['a'])), false);
    assert.equal(evalTerm(view({}), t('NotIn', ['a'])), true, 'NotIn holds when the key is absent');
    assert.equal(evalTerm(view({ k: 'a' }), t('NotIn', ['a'])), false);
    assert.equal(evalTerm(view({ k: '' }), t('Exists')), true);
    assert.equal(evalTerm(view({}), t('DoesNotExist')), true);
    assert.equal(evalTerm(view({ k: '10' }), t('Gt', ['9'])), true);
    assert.equal(evalTerm(view({ k: '10' }), t('Lt', ['9'])), false);
    assert.equal(evalTerm(view({ k: 'x' }), t('Gt', ['9'])), false, 'a non-integer never compares');
    assert.equal(evalTerm(view({ k: '99999999999999999999' }), t('Gt', ['99999999999999999998'])), true);
    assert.equal(evalTerm(view({ k: 'v5.15.0' }), t('InRegexp', ['^v4', '^v5\\.'])), true);
    assert.equal(evalTerm(view({ k: 'v3' }), t('InRegexp', ['^v4'])), false);
  });

  test('fields and annotations are read from the node', () => {
    const v = nodeView({
      metadata: { name: 'n', labels: {}, annotations: { note: 'x' } },
      status: { nodeInfo: { architecture: 'arm64', kernelVersion: '6.1.0' } },
    } as KubeObject);
    assert.equal(evalTerm(v, { field: 'architecture', operator: 'In', values: ['arm64'] }), true);
    assert.equal(evalTerm(v, { field: 'name', operator: 'In', values: ['n'] }), true);
    assert.equal(evalTerm(v, { annotation: 'note', operator: 'Exists' }), true);
  });

  test('allOf and anyOf combine; the first matching term feeds templates', () => {
    const r = rule('r', {
      allOf: [{ field: 'architecture', operator: 'In', values: ['amd64'] }],
      anyOf: [
        { label: 'a', operator: 'Exists' },
        { label: 'b', operator: 'Exists' },
      ],
    });
    assert.equal(matchRule(view({ b: '1' }, { architecture: 'amd64' }), r).matched, true);
    assert.equal(matchRule(view({ b: '1' }, { architecture: 'arm64' }), r).matched, false);
    assert.equal(matchRule(view({}, { architecture: 'amd64' }), r).matched, false);
    const m = matchRule(view({ b: 'yes' }, { architecture: 'amd64' }), rule('r2', { anyOf: r.anyOf }));
    assert.deepEqual([m.first?.key, m.first?.value], ['b', 'yes']);
  });

  test('templates', () => {
    const v = view({ 'vendor/gpu': 'T4' }, { architecture: 'arm64' }, { zone: 'z1' });
    const first = {
      term: { label: 'vendor/gpu', operator: 'Exists' as const },
      key: 'vendor/gpu',
      value: 'T4',
    };
    assert.deepEqual(renderTemplate('{{ .match.value }}-{{field "architecture"}}', v, first), {
      value: 'T4-arm64',
    });
    assert.deepEqual(renderTemplate('{{ label "vendor/gpu" }}/{{ annotation "zone" }}', v, first), {
      value: 'T4/z1',
    });
    // A missing input renders nothing at all, not an empty string: the output is not set.
    assert.deepEqual(
      renderTemplate('{{ label "vendor/gpu" }}/{{ annotation "zone" }}/{{ label "missing" }}', v, first),
      { missing: '{{ label "missing" }}' },
    );
    assert.deepEqual(renderTemplate('{{ field "kernelVersion" }}', v, first), {
      missing: '{{ field "kernelVersion" }}',
    });
  });
});

describe('the seed example: accelerators/edgetpu', () => {
  for (const [labels, expected] of [
    [{ 'kkohtaka.org/edgetpu': '' }, true],
    [{ 'feature.node.kubernetes.io/usb-fe_1a6e_089a.present': 'true' }, true],
    [{ 'feature.node.kubernetes.io/pci-0880_1ac1.present': 'true' }, true],
    [{ 'beta.devicetree.org/fsl-imx8mq-phanbell': '1' }, true],
    [{ 'feature.node.kubernetes.io/usb-other.present': 'true' }, false],
  ] as const) {
    test(`${Object.keys(labels)[0]} → ${expected ? 'labelled' : 'not labelled'}`, () => {
      const d = decide(view({ ...labels }), [edgetpu]);
      assert.deepEqual(d.labels, expected ? { 'accelerators/edgetpu': 'true' } : {});
    });
  }
});

describe('conflicts', () => {
  const a = rule('nodelabelrule/a', {
    anyOf: [{ label: 'x', operator: 'Exists' }],
    labels: { tier: 'gold' },
  });
  const b = rule('nodelabelrule/b', {
    anyOf: [{ label: 'x', operator: 'Exists' }],
    labels: { tier: 'silver' },
  });
  test('the first rule by name wins, whatever order rules come in, and both are reported', () => {
    for (const rules of [
      [a, b],
      [b, a],
    ]) {
      const d = decide(view({ x: '1' }), rules);
      assert.deepEqual(d.labels, { tier: 'gold' });
      assert.equal(d.conflicts.length, 1);
      assert.equal(d.conflicts[0]!.winner.rule, 'nodelabelrule/a');
      assert.deepEqual(
        d.conflicts[0]!.losers.map((o) => o.rule),
        ['nodelabelrule/b'],
      );
    }
  });
  test('the same value from two rules is no conflict', () => {
    const c = rule('nodelabelrule/c', {
      anyOf: [{ label: 'x', operator: 'Exists' }],
      labels: { tier: 'gold' },
    });
    assert.equal(decide(view({ x: '1' }), [a, c]).conflicts.length, 0);
  });
  test('a template that renders an invalid label value is held back', () => {
    const t = rule('nodelabelrule/t', {
      anyOf: [{ label: 'x', operator: 'Exists' }],
      labels: { copy: '{{ .match.value }}' },
    });
    const d = decide(view({ x: 'not valid!' }), [t]);
    assert.deepEqual(d.labels, {});
    assert.equal(d.renderErrors.length, 1);
  });
});

describe('rule validation', () => {
  const base = {
    apiVersion: 'berth.dev/v1alpha1',
    kind: 'NodeLabelRule',
    metadata: { name: 'r', uid: 'u', generation: 1 },
    spec: { match: { anyOf: [{ label: 'a', operator: 'Exists' }] }, labels: { 'example.com/x': 'true' } },
  };
  test('a valid rule compiles', () => {
    const c = compileRule(base);
    assert.deepEqual(c.errors, []);
    assert.equal(c.rule?.name, 'nodelabelrule/r');
  });
  for (const [why, spec, pattern] of [
    ['an invalid label key', { ...base.spec, labels: { 'Bad Key': 'x' } }, /label "Bad Key"/],
    ['an invalid label value', { ...base.spec, labels: { x: 'not valid!' } }, /value "not valid!"/],
    ['a reserved key', { ...base.spec, labels: { 'kubernetes.io/arch': 'arm64' } }, /reserved/],
    [
      'a bad regular expression',
      { ...base.spec, match: { anyOf: [{ label: 'a', operator: 'InRegexp', values: ['('] }] } },
      /bad regular expression/,
    ],
    [
      'Exists with values',
      { ...base.spec, match: { anyOf: [{ label: 'a', operator: 'Exists', values: ['x'] }] } },
      /takes no values/,
    ],
    [
      'two subjects',
      { ...base.spec, match: { anyOf: [{ label: 'a', field: 'name', operator: 'Exists' }] } },
      /exactly one of label/,
    ],
    ['an unknown template', { ...base.spec, labels: { x: '{{ .nope }}' } }, /unknown template expression/],
    ['no terms', { ...base.spec, match: {} }, /at least one term/],
    [
      'too many outputs',
      {
        ...base.spec,
        labels: Object.fromEntries(Array.from({ length: 100 }, (_, i) => [`example.com/l${i}`, 'x'])),
        annotations: Object.fromEntries(Array.from({ length: 29 }, (_, i) => [`example.com/a${i}`, 'x'])),
      },
      /a rule sets at most 128 labels and annotations together; this one sets 129/,
    ],
  ] as const) {
    test(`rejects ${why}`, () => {
      const c = compileRule({ ...base, spec });
      assert.equal(c.rule, undefined);
      assert.match(c.errors.join('\n'), pattern);
    });
  }
  test('node-role.kubernetes.io is allowed', () => {
    assert.deepEqual(
      ruleErrors(
        rule('r', {
          anyOf: [{ label: 'a', operator: 'Exists' }],
          labels: { 'node-role.kubernetes.io/edge': '' },
        }),
      ),
      [],
    );
  });
});

describe('tracedNodeWrite: ownership', () => {
  const node = (
    labels: Record<string, string>,
    ownedByBerth: string[],
    taints: unknown[] = [],
    taintRecord: Record<string, string> = {},
  ): KubeObject => ({
    metadata: {
      name: 'n1',
      labels,
      // The taints Berth put on are in its record, with their values (spec.taints is an atomic list).
      annotations: Object.keys(taintRecord).length
        ? { [taintRecordKey(FIELD_MANAGER)]: JSON.stringify(taintRecord) }
        : {},
      managedFields: [
        {
          manager: FIELD_MANAGER,
          operation: 'Apply',
          fieldsV1: {
            'f:metadata': { 'f:labels': Object.fromEntries(ownedByBerth.map((k) => [`f:${k}`, {}])) },
          },
        },
      ],
    },
    spec: { taints },
  });
  const gpu = rule('nodelabelrule/gpu', {
    anyOf: [{ label: 'gpu', operator: 'Exists' }],
    labels: { 'accelerators/gpu': 'true' },
  });

  test('in sync when Berth owns exactly the desired labels with the desired values', () => {
    const n = node({ gpu: '1', 'accelerators/gpu': 'true' }, ['accelerators/gpu']);
    assert.equal(tracedNodeWrite(ownedState(n, FIELD_MANAGER), decide(nodeView(n), [gpu])).inSync, true);
  });
  test('a missing label needs a write', () => {
    const n = node({ gpu: '1' }, []);
    const p = tracedNodeWrite(ownedState(n, FIELD_MANAGER), decide(nodeView(n), [gpu]));
    assert.equal(p.inSync, false);
    assert.deepEqual(p.labels, { 'accelerators/gpu': 'true' });
  });
  test('a label Berth owns but no longer wants needs a write that drops it', () => {
    const n = node({ 'accelerators/gpu': 'true' }, ['accelerators/gpu']);
    const p = tracedNodeWrite(ownedState(n, FIELD_MANAGER), decide(nodeView(n), [gpu]));
    assert.equal(p.inSync, false);
    assert.deepEqual(p.labels, {});
  });
  test('a label someone else set to another value is held back, never fought over', () => {
    const n = node({ gpu: '1', 'accelerators/gpu': 'false' }, []);
    const p = tracedNodeWrite(ownedState(n, FIELD_MANAGER), decide(nodeView(n), [gpu]));
    assert.deepEqual(p.labels, {});
    assert.equal(p.foreignOutputs.length, 1);
    assert.equal(p.inSync, true, 'nothing of ours to write');
  });
  test('a label someone else set to the same value is shared, not a conflict', () => {
    const n = node({ gpu: '1', 'accelerators/gpu': 'true' }, []);
    const p = tracedNodeWrite(ownedState(n, FIELD_MANAGER), decide(nodeView(n), [gpu]));
    assert.deepEqual(p.foreignOutputs, []);
    assert.equal(
      p.inSync,
      false,
      'Berth takes shared ownership so the label outlives the other owner only while backed',
    );
  });
  test('taints are owned by key and effect', () => {
    const tainting = rule('nodelabelrule/t', {
      anyOf: [{ label: 'gpu', operator: 'Exists' }],
      taints: [{ key: 'gpu', value: 'x', effect: 'NoSchedule' }],
    });
    const owned = node({ gpu: '1' }, [], [{ key: 'gpu', value: 'x', effect: 'NoSchedule' }], {
      'gpu:NoSchedule': 'x',
    });
    assert.equal(
      tracedNodeWrite(ownedState(owned, FIELD_MANAGER), decide(nodeView(owned), [tainting])).inSync,
      true,
    );
    const foreign = node({ gpu: '1' }, [], [{ key: 'gpu', value: 'other', effect: 'NoSchedule' }]);
    const p = tracedNodeWrite(ownedState(foreign, FIELD_MANAGER), decide(nodeView(foreign), [tainting]));
    assert.deepEqual(p.taints, []);
    assert.equal(p.foreignOutputs[0]?.key, 'gpu:NoSchedule');
  });
});

describe('explain and dry run', () => {
  const gpu = rule('nodelabelrule/gpu', {
    anyOf: [{ label: 'gpu', operator: 'Exists' }],
    labels: { 'accelerators/gpu': 'true' },
  });
  const node = (name: string, labels: Record<string, string>): KubeObject => ({ metadata: { name, labels } });

  test('previewRules lists gains, losses and changes per node', () => {
    const tesla = rule('nodelabelrule/gpu', {
      anyOf: [{ label: 'gpu', operator: 'In', values: ['tesla'] }],
      labels: { 'accelerators/gpu': 'tesla' },
    });
    const nodes = [node('a', { gpu: 'tesla' }), node('b', { gpu: 'other' }), node('c', {})];
    assert.deepEqual(previewRules(nodes, [gpu], [tesla]), [
      {
        node: 'a',
        changes: [
          {
            kind: 'label',
            key: 'accelerators/gpu',
            before: 'true',
            after: 'tesla',
            rule: 'nodelabelrule/gpu',
          },
        ],
      },
      {
        node: 'b',
        changes: [{ kind: 'label', key: 'accelerators/gpu', before: 'true', rule: 'nodelabelrule/gpu' }],
      },
    ]);
    assert.deepEqual(
      previewRules(nodes, [], [gpu]).map((n) => n.node),
      ['a', 'b'],
    );
  });

  test('explain names the matching term, the output, what is pending and why other rules miss', () => {
    const lines = explainNodeLabels(node('a', { gpu: 'x' }), [
      gpu,
      rule('nodelabelrule/arm', {
        allOf: [{ field: 'architecture', operator: 'In', values: ['arm64'] }],
        labels: { arm: 'true' },
      }),
    ]).join('\n');
    assert.match(lines, /nodelabelrule\/gpu \(NodeLabelRule nodelabelrule\/gpu\)/);
    assert.match(lines, /matched: anyOf label gpu Exists \(node: "x"\)/);
    assert.match(lines, /sets label accelerators\/gpu=true/);
    assert.match(lines, /will set label accelerators\/gpu=true/);
    assert.match(
      lines,
      /nodelabelrule\/arm: allOf field architecture In \[arm64\] \(node: absent\) does not hold/,
    );
  });
});

describe('outputs tell the truth', () => {
  const base = {
    apiVersion: 'berth.dev/v1alpha1',
    kind: 'NodeLabelRule',
    metadata: { name: 'r' },
    spec: { match: { anyOf: [{ label: 'a', operator: 'Exists' }] }, labels: { 'example.com/x': 'true' } },
  };
  const errorsOf = (spec: unknown) =>
    compileRule({ ...base, spec: { ...base.spec, ...(spec as object) } }).errors;

  test('a literal value invalid for its output makes the rule Invalid, for annotations and taints too', () => {
    assert.match(
      errorsOf({ annotations: { 'example.com/n': 'a\nb' } }).join('\n'),
      /annotation "example.com\/n" value "a\\nb": must not contain control characters/,
    );
    assert.match(
      errorsOf({ labels: { 'example.com/x': 'a\nb' } }).join('\n'),
      /label "example.com\/x" value "a\\nb"/,
    );
    assert.match(
      errorsOf({ taints: [{ key: 'example.com/t', value: 'a b', effect: 'NoSchedule' }] }).join('\n'),
      /taint "example.com\/t" value "a b": must be empty or consist of/,
    );
    assert.match(
      errorsOf({
        taints: [{ key: 'example.com/t', value: '{{ .match.value }}', effect: 'NoSchedule' }],
      }).join('\n'),
      /taint value takes no template/,
    );
    assert.deepEqual(
      errorsOf({ annotations: { 'example.com/n': 'arch {{ field "architecture" }}, "ok"' } }),
      [],
    );
  });

  test("a template's literal text with a line break is Invalid for every output kind", () => {
    assert.match(
      errorsOf({ annotations: { 'example.com/n': 'x\n{{ .match.value }}' } }).join('\n'),
      /annotation "example.com\/n": value "x\\n\{\{ .match.value }}": must not contain control characters/,
    );
  });

  test('messages quote user text bounded and escaped', () => {
    const errors = errorsOf({ labels: { [`bad key\n${'k'.repeat(500)}`]: 'v' } }).join('\n');
    assert.doesNotMatch(errors, /\n/);
    assert.ok(errors.length < 400, errors);
  });

  const copy = rule('nodelabelrule/copy', {
    anyOf: [{ label: 'src', operator: 'Exists' }],
    labels: { 'example.com/zone': '{{ label "zone" }}', 'example.com/fixed': 'yes' },
    annotations: { 'example.com/note': '{{ annotation "note" }}' },
  });

  test('a template with a missing input sets nothing on that node, not an empty value, and says why', () => {
    const d = decide(view({ src: '1' }), [copy]);
    assert.deepEqual(d.labels, { 'example.com/fixed': 'yes' });
    assert.deepEqual(d.annotations, {});
    assert.deepEqual(
      d.missingInputs.map((m) => [m.kind, m.key, m.message]),
      [
        [
          'label',
          'example.com/zone',
          'label "example.com/zone": not set: this node has no input for {{ label "zone" }}',
        ],
        [
          'annotation',
          'example.com/note',
          'annotation "example.com/note": not set: this node has no input for {{ annotation "note" }}',
        ],
      ],
    );
    assert.deepEqual(d.renderErrors, []);
    const lines = explainNodeLabels({ metadata: { name: 'n1', labels: { src: '1' } } }, [copy]).join('\n');
    assert.match(
      lines,
      /nodelabelrule\/copy[^\n]*\n(.*\n)*\s+label "example.com\/zone": not set: this node has no input for \{\{ label "zone" }}/,
    );
  });

  test('a rendered value invalid for its output is skipped on that node and reported, for annotations too', () => {
    const d = decide(view({ src: '1', zone: 'z1' }, {}, { note: 'line one\nline two' }), [copy]);
    assert.deepEqual(d.labels, { 'example.com/zone': 'z1', 'example.com/fixed': 'yes' });
    assert.deepEqual(d.annotations, {});
    assert.deepEqual(
      d.renderErrors.map((e) => e.message),
      [
        'annotation "example.com/note": rendered "line one\\nline two": must not contain control characters or line breaks (found "\\n")',
      ],
    );
    const lines = explainNodeLabels(
      { metadata: { name: 'n1', labels: { src: '1', zone: 'z1' }, annotations: { note: 'a\nb' } } },
      [copy],
    ).join('\n');
    assert.match(lines, /held back: nodelabelrule\/copy: annotation "example.com\/note": rendered "a\\nb"/);
  });
});

describe('NoExecute needs an acknowledgement', () => {
  const spec = {
    match: { anyOf: [{ label: 'a', operator: 'Exists' }] },
    taints: [{ key: 'example.com/drain', effect: 'NoExecute' }],
  };
  const compile = (s: object) =>
    compileRule({
      apiVersion: 'berth.dev/v1alpha1',
      kind: 'NodeLabelRule',
      metadata: { name: 'r' },
      spec: s,
    });
  test('a NoExecute taint without acknowledgeNoExecute: true is Invalid, naming the field', () => {
    assert.match(
      compile(spec).errors.join('\n'),
      /NoExecute taint "example.com\/drain" evicts .* set spec.acknowledgeNoExecute: true/,
    );
    assert.match(compile({ ...spec, acknowledgeNoExecute: false }).errors.join('\n'), /acknowledgeNoExecute/);
  });
  test('with it, the rule compiles; NoSchedule needs nothing', () => {
    assert.deepEqual(compile({ ...spec, acknowledgeNoExecute: true }).errors, []);
    assert.deepEqual(
      compile({ ...spec, taints: [{ key: 'example.com/drain', effect: 'NoSchedule' }] }).errors,
      [],
    );
  });
});

describe('dry run: pods a NoExecute taint would evict', () => {
  const drain = rule('nodelabelrule/drain', {
    anyOf: [{ label: 'drain', operator: 'Exists' }],
    taints: [{ key: 'example.com/drain', value: 'now', effect: 'NoExecute' }],
  });
  const soft = rule('nodelabelrule/soft', {
    anyOf: [{ label: 'drain', operator: 'Exists' }],
    taints: [{ key: 'example.com/soft', effect: 'NoSchedule' }],
  });
  const nodes: KubeObject[] = [
    { metadata: { name: 'a', labels: { drain: '' } } },
    { metadata: { name: 'b', labels: {} } },
  ];
  const pod = (name: string, nodeName: string, tolerations: Toleration[] = [], phase = 'Running') => ({
    metadata: { name, namespace: 'ns' },
    spec: { nodeName, tolerations },
    status: { phase },
  });
  const pods = [
    pod('plain', 'a'),
    pod('elsewhere', 'b'),
    pod('done', 'a', [], 'Succeeded'),
    pod('tolerates', 'a', [{ key: 'example.com/drain', operator: 'Exists', effect: 'NoExecute' }]),
    pod('tolerates-all', 'a', [{ operator: 'Exists' }]),
    pod('other-value', 'a', [
      { key: 'example.com/drain', operator: 'Equal', value: 'later', effect: 'NoExecute' },
    ]),
    pod('for-a-while', 'a', [{ key: 'example.com/drain', operator: 'Exists', tolerationSeconds: 60 }]),
  ];
  test('counts the running pods on nodes gaining the taint that do not tolerate it for good', () => {
    assert.deepEqual(evictions(previewRules(nodes, [], [drain, soft]), pods), [
      {
        node: 'a',
        taint: 'example.com/drain:NoExecute',
        pods: ['ns/plain', 'ns/other-value', 'ns/for-a-while'],
      },
    ]);
  });
  test('a taint the node already has from the rules evicts nothing new', () => {
    assert.deepEqual(evictions(previewRules(nodes, [drain], [drain, soft]), pods), []);
  });
});

describe('refuseOwned', () => {
  test('a rule with an owned output is refused whole, with why; the others apply', () => {
    const a = rule('a', { labels: { 'example.com/a': 'x' } });
    const owning = rule('owning', {
      labels: { 'example.com/b': 'x' },
      taints: [{ key: 'example.com/owned', effect: 'NoSchedule' }],
    });
    const c = rule('c', { annotations: { 'example.com/owned': 'x' } });
    // Only the taint is owned: an annotation with the same key is not.
    const { rules, refused } = refuseOwned([a, owning, c], (keys) =>
      keys.flatMap((k) =>
        'key' in k && k.kind === 'taint' && k.key === 'example.com/owned' ? ['owned'] : [],
      ),
    );
    assert.deepEqual(rules, [a, c]);
    assert.deepEqual([...refused], [['owning', ['owned']]]);
  });
});
