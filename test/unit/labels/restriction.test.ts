import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { compileRule } from '../../../src/labels/decide/nodes.ts';
import { parseRuleFile } from '../../../src/labels/files.ts';
import { kubeletMaySet } from '../../../src/labels/restriction.ts';

const compile = (spec: object) =>
  compileRule({ apiVersion: 'berth.dev/v1alpha1', kind: 'NodeLabelRule', metadata: { name: 'r' }, spec });

describe('node-restriction labels', () => {
  test('which labels a kubelet may set on itself (NodeRestriction)', () => {
    for (const k of [
      'example.com/gpu',
      'plain',
      'kubernetes.io/hostname',
      'kubernetes.io/arch',
      'topology.kubernetes.io/zone',
      'node.kubernetes.io/instance-type',
      'node.kubernetes.io/anything',
      'x.kubelet.kubernetes.io/y',
    ])
      assert.ok(kubeletMaySet(k), k);
    for (const k of [
      'node-restriction.kubernetes.io/pool',
      'node-role.kubernetes.io/worker',
      'kubernetes.io/other',
      'sub.k8s.io/x',
    ])
      assert.ok(!kubeletMaySet(k), k);
  });

  test('a node-restriction label derived from what a kubelet sets is Invalid, naming the inputs', () => {
    const errors = compile({
      match: {
        anyOf: [
          { label: 'example.com/gpu', operator: 'Exists' },
          { field: 'architecture', operator: 'In', values: ['arm64'] },
        ],
      },
      labels: { 'node-restriction.kubernetes.io/gpu': 'true' },
    }).errors.join('\n');
    assert.match(errors, /the label "node-restriction.kubernetes.io\/gpu" is one a kubelet may not set/);
    assert.match(errors, /label "example.com\/gpu", field architecture/);
    assert.match(errors, /acknowledgeKubeletInputs: true/);
  });

  test('templates are inputs too: an annotation read is the kubelet’s', () => {
    const errors = compile({
      match: { allOf: [{ label: 'node-role.kubernetes.io/gpu', operator: 'Exists' }] },
      labels: { 'node-restriction.kubernetes.io/pool': '{{ annotation "example.com/pool" }}' },
    }).errors;
    assert.match(errors.join('\n'), /annotation "example.com\/pool"/);
  });

  test('protected inputs (node-restriction and node-role labels, the name) or the acknowledgement: valid', () => {
    const protectedOnly = {
      match: {
        allOf: [
          { label: 'node-restriction.kubernetes.io/tier', operator: 'In', values: ['a'] },
          { field: 'name', operator: 'InRegexp', values: ['^gpu-'] },
        ],
      },
      labels: { 'node-restriction.kubernetes.io/gpu': '{{ label "node-role.kubernetes.io/gpu" }}x' },
    };
    assert.deepEqual(compile(protectedOnly).errors, []);
    assert.deepEqual(
      compile({
        match: { anyOf: [{ label: 'example.com/gpu', operator: 'Exists' }] },
        labels: { 'node-restriction.kubernetes.io/gpu': 'true' },
        acknowledgeKubeletInputs: true,
      }).errors,
      [],
    );
    // Other outputs are not judged by their inputs.
    assert.deepEqual(
      compile({
        match: { anyOf: [{ label: 'example.com/gpu', operator: 'Exists' }] },
        labels: { 'example.com/x': 'y' },
      }).errors,
      [],
    );
  });

  test('a rule file: refused unless every dependent label is protected (it has no acknowledgement)', () => {
    const file = (content: string) =>
      parseRuleFile(
        '/rules/node-restriction.kubernetes.io/gpu',
        'node-restriction.kubernetes.io',
        'gpu',
        Buffer.from(content),
      );
    const refused = file('example.com/gpu\n');
    assert.equal(refused.rule, undefined);
    assert.match(
      refused.errors.map((e) => e.message).join('\n'),
      /label "example.com\/gpu".*NodeLabelRule that acknowledges it/,
    );
    assert.deepEqual(file('node-restriction.kubernetes.io/tier=a\n').errors, []);
  });
});
