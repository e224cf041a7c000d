import assert from 'node:assert/strict';
import { test } from 'node:test';
import { z } from 'zod';
import { capabilities } from '../../../src/capabilities.ts';
import { defineBerthResource, definePolicy, observedStatus, specColumn } from '../../../src/policy/crd.ts';
import { berthKind, POLICY_GROUP } from '../../../src/policy/kinds.ts';
import { conditionsSchema, toStructuralSchema } from '../../../src/runtime/api/crd.ts';

const Trial = definePolicy({
  ref: { ...berthKind('TrialPolicy', 'Cluster'), resource: 'trialpolicies' },
  shortNames: ['tp'],
  spec: z.object({ size: z.number().int() }),
  counts: { seen: 'Nodes seen.', held: 'Nodes held.' },
  printerColumns: [specColumn('Size', 'size'), 'seen'],
});

test('a policy kind: Berth group and version, cluster scope, the berth category', () => {
  const { crd, ref, apiVersion } = Trial;
  assert.equal(crd.metadata.name, 'trialpolicies.berth.dev');
  assert.equal(crd.spec.group, POLICY_GROUP);
  assert.equal(apiVersion, 'berth.dev/v1alpha1');
  assert.equal(crd.spec.scope, 'Cluster');
  assert.equal(ref.namespaced, false);
  assert.deepEqual(crd.spec.names, {
    kind: 'TrialPolicy',
    listKind: 'TrialPolicyList',
    plural: 'trialpolicies',
    singular: 'trialpolicy',
    shortNames: ['tp'],
    categories: ['berth'],
  });
  assert.deepEqual(crd.spec.versions[0]!.subresources, { status: {} });
});

test('its status: observedGeneration, the counts in order with their descriptions, conditions keyed by type', () => {
  const status = Trial.crd.spec.versions[0]!.schema.openAPIV3Schema.properties!['status']!;
  assert.deepEqual(Object.keys(status.properties!), ['observedGeneration', 'seen', 'held', 'conditions']);
  assert.deepEqual(status.properties!['seen'], { description: 'Nodes seen.', type: 'integer' });
  assert.deepEqual(status.properties!['held'], { description: 'Nodes held.', type: 'integer' });
  assert.deepEqual(status.properties!['observedGeneration'], { type: 'integer' });
  assert.deepEqual(status.properties!['conditions'], toStructuralSchema(conditionsSchema));
  assert.equal(status.required, undefined, 'every field optional: a new object has no status yet');

  const parsed = Trial.parse({
    apiVersion: 'berth.dev/v1alpha1',
    kind: 'TrialPolicy',
    metadata: { name: 't' },
    spec: { size: 1 },
    status: { seen: 2, held: 1, observedGeneration: 3, conditions: [] },
  });
  assert.ok(parsed.success);
  assert.deepEqual(parsed.data.status, { seen: 2, held: 1, observedGeneration: 3, conditions: [] });
  assert.equal(
    Trial.parse({
      apiVersion: 'berth.dev/v1alpha1',
      kind: 'TrialPolicy',
      metadata: { name: 't' },
      spec: { size: 1 },
      status: { seen: 1.5 },
    }).success,
    false,
    'counts are integers',
  );
});

test('its columns: its own first, then Ready, Reason (wide) and Age', () => {
  const columns = Trial.crd.spec.versions[0]!.additionalPrinterColumns!;
  assert.deepEqual(
    columns.map((c) => `${c.name} ${c.type} ${c.jsonPath} ${c.priority ?? 0}`),
    [
      'Size string .spec.size 0',
      'Seen integer .status.seen 0',
      "Ready string .status.conditions[?(@.type=='Ready')].status 0",
      "Reason string .status.conditions[?(@.type=='Ready')].reason 1",
      'Age date .metadata.creationTimestamp 0',
    ],
  );
});

test('a Berth kind: its group, version and category given, its plural from its kind', () => {
  const Gadget = defineBerthResource({
    ref: berthKind('Gadget', 'Namespaced'),
    spec: z.object({ size: z.number().int() }),
    status: observedStatus({ seen: z.number().int().optional() }),
  });
  assert.equal(Gadget.apiVersion, 'berth.dev/v1alpha1');
  assert.equal(Gadget.crd.metadata.name, 'gadgets.berth.dev');
  assert.deepEqual(Gadget.crd.spec.names.categories, ['berth']);
  const status = Gadget.crd.spec.versions[0]!.schema.openAPIV3Schema.properties!['status']!;
  assert.deepEqual(Object.keys(status.properties!), ['observedGeneration', 'seen', 'conditions']);
});

/** Each capability with its CRDs, built as `berth install` builds them. */
const built = () => Promise.all(capabilities.map(async (c) => ({ c, crds: await c.crds() })));

test("a capability's kinds are its CRDs' refs, known without building them", async () => {
  for (const { c, crds } of await built())
    assert.deepEqual(
      crds.map((r) => r.ref),
      c.kinds,
      c.name,
    );
});

test("every capability's policy kind is a policy: its group, and the standard columns last", async () => {
  // The workloads, cells and federation capabilities' kinds are Berth's API but not placement
  // policies: their columns are a Deployment's (Ready, Up-to-date, Available) or a cluster's
  // (Reachable, Version), not a policy's standard ones.
  const all = await built();
  const crds = all.flatMap(({ c, crds }) =>
    crds.map((r) => ({ crd: r.crd, policy: !['workloads', 'cells', 'federation'].includes(c.name) })),
  );
  assert.ok(crds.length >= 3);
  for (const { crd, policy } of crds) {
    assert.equal(crd.spec.group, POLICY_GROUP, crd.metadata.name);
    assert.deepEqual(crd.spec.names.categories, ['berth'], crd.metadata.name);
    if (!policy) continue;
    assert.deepEqual(
      crd.spec.versions[0]!.additionalPrinterColumns!.slice(-3).map((c) => c.name),
      ['Ready', 'Reason', 'Age'],
      crd.metadata.name,
    );
  }
});

test('no two policy kinds share a plural, kind or short name (the apiserver would not establish the second)', async () => {
  const names = (await built()).flatMap(({ crds }) =>
    crds.flatMap((r) => {
      const n = r.crd.spec.names;
      return [...new Set([n.plural, n.singular ?? '', n.kind.toLowerCase(), ...(n.shortNames ?? [])])].filter(
        Boolean,
      );
    }),
  );
  assert.deepEqual(
    names.filter((n, i) => names.indexOf(n) !== i),
    [],
  );
});
