import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { z } from 'zod';
import {
  defineCustomResource,
  k8s,
  toStructuralSchema,
  type CustomResource,
  type StructuralSchema,
} from '../../../src/runtime/api/crd.ts';

// Keys a value-validation-only node (inside allOf) may carry in a structural schema.
const valueValidations = new Set([
  'enum',
  'minimum',
  'maximum',
  'exclusiveMinimum',
  'exclusiveMaximum',
  'multipleOf',
  'minLength',
  'maxLength',
  'pattern',
  'format',
  'minItems',
  'maxItems',
  'required',
]);
const knownKeys = new Set([
  ...valueValidations,
  'type',
  'description',
  'properties',
  'additionalProperties',
  'items',
  'allOf',
  'default',
  'nullable',
  'x-kubernetes-validations',
  'x-kubernetes-list-type',
  'x-kubernetes-list-map-keys',
  'x-kubernetes-map-type',
  'x-kubernetes-preserve-unknown-fields',
  'x-kubernetes-int-or-string',
  'x-kubernetes-embedded-resource',
]);

/** Asserts the rules of Kubernetes structural schemas on every node. */
function assertStructural(node: StructuralSchema, path = '(root)'): void {
  for (const key of Object.keys(node)) assert.ok(knownKeys.has(key), `${path}: unexpected key ${key}`);
  if (!node['x-kubernetes-int-or-string'] && !node['x-kubernetes-preserve-unknown-fields']) {
    assert.ok(node.type, `${path}: no type`);
  }
  if (node['x-kubernetes-int-or-string'])
    assert.equal(node.type, undefined, `${path}: int-or-string with a type`);
  assert.ok(
    !(node.properties && node.additionalProperties),
    `${path}: properties next to additionalProperties`,
  );
  if (node.type === 'array') assert.ok(node.items, `${path}: array without items`);
  if (node.properties || node.additionalProperties)
    assert.equal(node.type, 'object', `${path}: fields on a non-object`);
  for (const branch of node.allOf ?? []) {
    for (const key of Object.keys(branch))
      assert.ok(valueValidations.has(key), `${path}.allOf: ${key} is not a value validation`);
  }
  for (const k of node.required ?? [])
    assert.ok(node.properties?.[k], `${path}: required ${k} is not a property`);
  for (const [k, p] of Object.entries(node.properties ?? {})) assertStructural(p, `${path}.${k}`);
  if (node.additionalProperties) assertStructural(node.additionalProperties, `${path}[*]`);
  if (node.items) assertStructural(node.items, `${path}[*]`);
}

const convert = (schema: z.ZodType): StructuralSchema => {
  const node = toStructuralSchema(schema);
  assertStructural(node);
  return node;
};

describe('toStructuralSchema', () => {
  test('objects: required, optional, defaults and nesting', () => {
    assert.deepEqual(
      convert(
        z.object({
          name: z.string(),
          note: z.string().optional(),
          count: z.int().default(3),
          inner: z.object({ on: z.boolean() }).optional(),
        }),
      ),
      {
        type: 'object',
        properties: {
          name: { type: 'string' },
          note: { type: 'string' },
          count: { type: 'integer', default: 3 },
          inner: { type: 'object', properties: { on: { type: 'boolean' } }, required: ['on'] },
        },
        required: ['name'],
      },
    );
    // An object default goes through JSON, as the apiserver stores it.
    assert.deepEqual(convert(z.object({ a: z.string().default('x') }).default({ a: 'y' })).default, {
      a: 'y',
    });
    assert.deepEqual(convert(z.object({})), { type: 'object' });
  });

  test('enums and literals become enums of one JSON type', () => {
    assert.deepEqual(convert(z.enum(['a', 'b'])), { type: 'string', enum: ['a', 'b'] });
    assert.deepEqual(convert(z.literal('x')), { type: 'string', enum: ['x'] });
    assert.deepEqual(convert(z.literal([1, 2])), { type: 'integer', enum: [1, 2] });
    assert.deepEqual(convert(z.literal([1, 2.5])), { type: 'number', enum: [1, 2.5] });
    assert.deepEqual(convert(z.literal(true)), { type: 'boolean', enum: [true] });
    assert.deepEqual(convert(z.union([z.literal('a'), z.enum(['b', 'a'])])), {
      type: 'string',
      enum: ['a', 'b'],
    });
  });

  test('records, arrays and their bounds', () => {
    assert.deepEqual(convert(z.record(z.string(), z.string())), {
      type: 'object',
      additionalProperties: { type: 'string' },
    });
    assert.deepEqual(convert(z.array(z.string()).min(1).max(5)), {
      type: 'array',
      items: { type: 'string' },
      minItems: 1,
      maxItems: 5,
    });
    assert.deepEqual(convert(z.array(z.int()).length(2)), {
      type: 'array',
      items: { type: 'integer' },
      minItems: 2,
      maxItems: 2,
    });
  });

  test('numbers: integers, bounds, exclusive bounds and formats', () => {
    assert.deepEqual(convert(z.int().min(0).max(10)), { type: 'integer', minimum: 0, maximum: 10 });
    assert.deepEqual(convert(z.int().positive()), { type: 'integer', minimum: 1 });
    assert.deepEqual(convert(z.number().gt(0.5).lt(2)), {
      type: 'number',
      minimum: 0.5,
      exclusiveMinimum: true,
      maximum: 2,
      exclusiveMaximum: true,
    });
    assert.deepEqual(convert(z.number().multipleOf(5)), { type: 'number', multipleOf: 5 });
    assert.deepEqual(convert(z.int32()), { type: 'integer', format: 'int32' });
    assert.deepEqual(convert(z.uint32().max(10)), { type: 'integer', minimum: 0, maximum: 10 });
    // The tighter of two bounds wins.
    assert.deepEqual(convert(z.int().min(1).min(5).max(9).max(7)), {
      type: 'integer',
      minimum: 5,
      maximum: 7,
    });
  });

  test('strings: lengths, patterns without JS flags, Kubernetes formats', () => {
    assert.deepEqual(convert(z.string().min(1).max(63)), { type: 'string', minLength: 1, maxLength: 63 });
    assert.deepEqual(convert(z.string().regex(/^[a-z]+$/)), { type: 'string', pattern: '^[a-z]+$' });
    assert.deepEqual(convert(z.string().regex(/^[a-z]+$/giu)), { type: 'string', pattern: '(?i)^[a-z]+$' });
    assert.deepEqual(convert(z.string().regex(/^a/).regex(/b$/)), {
      type: 'string',
      pattern: '^a',
      allOf: [{ pattern: 'b$' }],
    });
    // The format replaces zod's own (JS, not RE2) regex.
    assert.deepEqual(convert(z.email()), { type: 'string', format: 'email' });
    assert.deepEqual(convert(z.iso.datetime()), { type: 'string', format: 'date-time' });
    assert.deepEqual(convert(z.url()), { type: 'string', format: 'uri' });
    assert.deepEqual(convert(z.uuid()), { type: 'string', format: 'uuid' });
    assert.deepEqual(convert(z.cidrv4()), { type: 'string', format: 'cidr' });
  });

  test('nullable, int-or-string, and the input side of transforms', () => {
    assert.deepEqual(convert(z.string().nullable()), { type: 'string', nullable: true });
    assert.deepEqual(convert(z.union([z.object({ a: z.string() }), z.null()])), {
      type: 'object',
      properties: { a: { type: 'string' } },
      required: ['a'],
      nullable: true,
    });
    assert.deepEqual(convert(z.union([z.int(), z.string()])), { 'x-kubernetes-int-or-string': true });
    assert.deepEqual(convert(z.string().transform((s) => s.length)), { type: 'string' });
    assert.deepEqual(convert(z.preprocess((v) => v, z.int())), { type: 'integer' });
  });

  test('descriptions from .describe() and .meta(), the outermost winning', () => {
    assert.deepEqual(convert(z.string().describe('inner').optional()), {
      description: 'inner',
      type: 'string',
    });
    assert.deepEqual(convert(z.string().describe('inner').optional().meta({ description: 'outer' })), {
      description: 'outer',
      type: 'string',
    });
  });

  test('k8s() extensions: CEL rules accumulate, list maps, preserve-unknown-fields', () => {
    const port = z.object({ name: z.string(), port: z.int() });
    const ports = k8s(z.array(port), {
      'x-kubernetes-list-type': 'map',
      'x-kubernetes-list-map-keys': ['name'],
    });
    assert.deepEqual(convert(ports), {
      type: 'array',
      items: {
        type: 'object',
        properties: { name: { type: 'string' }, port: { type: 'integer' } },
        required: ['name', 'port'],
      },
      'x-kubernetes-list-type': 'map',
      'x-kubernetes-list-map-keys': ['name'],
    });

    const a = { rule: 'self.min <= self.max', message: 'min above max' };
    const b = { rule: 'self.max < 100' };
    const c = { rule: 'self.min >= 0' };
    const range = k8s(
      k8s(z.object({ min: z.int(), max: z.int() }).describe('range'), { 'x-kubernetes-validations': [a] }),
      {
        'x-kubernetes-validations': [b],
      },
    );
    const node = convert(k8s(range.optional(), { 'x-kubernetes-validations': [c] }));
    assert.equal(node.description, 'range');
    assert.deepEqual(node['x-kubernetes-validations'], [a, b, c]);

    const anything = { 'x-kubernetes-preserve-unknown-fields': true } as const;
    assert.deepEqual(convert(k8s(z.unknown(), anything)), anything);
    assert.deepEqual(convert(k8s(z.record(z.string(), z.unknown()), anything)), {
      type: 'object',
      ...anything,
    });
    assert.deepEqual(convert(z.looseObject({ a: z.string() })), {
      type: 'object',
      properties: { a: { type: 'string' } },
      required: ['a'],
      ...anything,
    });
    assert.deepEqual(convert(k8s(z.string(), { 'x-kubernetes-int-or-string': true })), {
      'x-kubernetes-int-or-string': true,
    });
  });

  test('a discriminated union: merged properties, CEL rules requiring each option’s fields', () => {
    const node = convert(
      z.discriminatedUnion('type', [
        z.object({ type: z.literal('Git'), url: z.string(), ref: z.string().optional() }),
        z.object({ type: z.literal(['Image', 'OCI']), image: z.string(), ref: z.string().optional() }),
      ]),
    );
    assert.deepEqual(node, {
      type: 'object',
      properties: {
        type: { type: 'string', enum: ['Git', 'Image', 'OCI'] },
        url: { type: 'string' },
        ref: { type: 'string' },
        image: { type: 'string' },
      },
      required: ['type'],
      'x-kubernetes-validations': [
        {
          rule: '!(self.type == "Git") || has(self.url)',
          message: 'required when type is "Git"',
          fieldPath: '.url',
          reason: 'FieldValueRequired',
        },
        {
          rule: '!(self.type == "Image" || self.type == "OCI") || has(self.image)',
          message: 'required when type is "Image" or "OCI"',
          fieldPath: '.image',
          reason: 'FieldValueRequired',
        },
      ],
    });
  });

  test('a discriminated union escapes CEL keywords in its rules', () => {
    const node = convert(
      z.discriminatedUnion('kind', [
        z.object({ kind: z.literal('Local'), namespace: z.string() }),
        z.object({ kind: z.literal('Remote'), url: z.string() }),
      ]),
    );
    assert.equal(
      node['x-kubernetes-validations']![0]!.rule,
      '!(self.kind == "Local") || has(self.__namespace__)',
    );
  });

  test('what structural schemas cannot express is rejected, naming the field', () => {
    const cases: [z.ZodType, RegExp][] = [
      [
        z.object({ s: z.union([z.object({ a: z.string() }), z.object({ b: z.int() })]) }),
        /Error: s is a union that is not structural/,
      ],
      [z.union([z.string(), z.boolean()]), /Error: \(root\) is a union that is not structural/],
      [
        z.object({ x: z.object({ y: z.any() }) }),
        /Error: x\.y is z\.any.*x-kubernetes-preserve-unknown-fields/,
      ],
      [z.object({ v: z.array(z.unknown()) }), /Error: v\[\*\] is z\.unknown/],
      [z.object({ when: z.date() }), /Error: when is z\.date.*z\.iso\.datetime\(\)/],
      [z.tuple([z.string(), z.int()]), /z\.tuple.*use an object/],
      [z.object({ a: z.string() }).and(z.object({ b: z.string() })), /z\.intersection.*\.extend\(\)/],
      [z.bigint(), /z\.bigint/],
      [z.object({ e: z.emoji() }), /Error: e has the zod format emoji.*\.regex\(\)/],
      [z.record(z.string().regex(/^a/), z.string()), /record keys other than a plain z\.string\(\)/],
      [z.record(z.enum(['a', 'b']), z.string()), /record keys/],
      [z.object({ a: z.string() }).catchall(z.int()), /typed catchall/],
      [z.object({ m: z.enum(['a', 'b']).nullable() }), /Error: m is a nullable enum/],
      [z.string().catch('x'), /z\.catch/],
      [
        z.discriminatedUnion('t', [
          z.object({ t: z.literal('a'), x: z.string() }),
          z.object({ t: z.literal('b'), x: z.int() }),
        ]),
        /Error: x differs between the options/,
      ],
      [
        z.discriminatedUnion('t', [
          z.object({ t: z.literal('a'), 'x-y': z.string() }),
          z.object({ t: z.literal('b') }),
        ]),
        /Error: x-y is not a CEL identifier/,
      ],
    ];
    for (const [schema, message] of cases) assert.throws(() => toStructuralSchema(schema), message);

    interface Tree {
      children: Tree[];
    }
    const tree: z.ZodType<Tree> = z.object({ children: z.array(z.lazy(() => tree)) });
    assert.throws(() => toStructuralSchema(tree, 'spec'), /Error: spec\.children\[\*\] is recursive/);
    // One schema used twice side by side is not recursion.
    const name = z.string();
    assert.doesNotThrow(() => toStructuralSchema(z.object({ a: name, b: z.array(name) })));
  });
});

const port = z.object({ name: z.string().min(1), port: z.int().min(1).max(65535) });
const widgetSpec = z.object({
  size: z.enum(['small', 'large']).default('small'),
  replicas: z.int().min(1).default(1),
  labels: z.record(z.string(), z.string()).optional(),
  ports: k8s(z.array(port), {
    'x-kubernetes-list-type': 'map',
    'x-kubernetes-list-map-keys': ['name'],
    'x-kubernetes-validations': [{ rule: 'self.size() < 10' }],
  }),
});
const widgetStatus = z.object({ observedGeneration: z.int().optional(), phase: z.string().optional() });
const widget = defineCustomResource({
  group: 'test.berth.dev',
  version: 'v1alpha1',
  kind: 'Widget',
  plural: 'widgets',
  shortNames: ['wdg'],
  scope: 'Namespaced',
  spec: k8s(widgetSpec, { 'x-kubernetes-validations': [{ rule: 'true', message: 'from k8s()' }] }),
  status: widgetStatus,
  printerColumns: [{ name: 'Size', type: 'string', jsonPath: '.spec.size' }],
  validations: [{ rule: "self.size != 'large' || self.replicas >= 3", message: 'large needs 3 replicas' }],
});

describe('defineCustomResource', () => {
  test('builds the CRD manifest and the ResourceRef', () => {
    assert.deepEqual(widget.ref, {
      group: 'test.berth.dev',
      version: 'v1alpha1',
      resource: 'widgets',
      kind: 'Widget',
      namespaced: true,
    });
    assert.equal(widget.apiVersion, 'test.berth.dev/v1alpha1');
    const { crd } = widget;
    assert.equal(crd.metadata.name, 'widgets.test.berth.dev');
    assert.deepEqual(crd.spec.names, {
      kind: 'Widget',
      listKind: 'WidgetList',
      plural: 'widgets',
      singular: 'widget',
      shortNames: ['wdg'],
    });
    assert.equal(crd.spec.scope, 'Namespaced');
    const [version] = crd.spec.versions;
    assert.equal(crd.spec.versions.length, 1);
    assert.equal(version!.name, 'v1alpha1');
    assert.ok(version!.served && version!.storage);
    assert.deepEqual(version!.subresources, { status: {} });
    assert.deepEqual(version!.additionalPrinterColumns, [
      { name: 'Size', type: 'string', jsonPath: '.spec.size' },
    ]);

    const root = version!.schema.openAPIV3Schema;
    assertStructural(root);
    assert.deepEqual(Object.keys(root.properties!), ['apiVersion', 'kind', 'metadata', 'spec', 'status']);
    assert.deepEqual(root.properties!['metadata'], { type: 'object' });
    assert.deepEqual(root.required, ['spec']);
    assert.deepEqual(root.properties!['spec']!['x-kubernetes-validations'], [
      { rule: 'true', message: 'from k8s()' },
      { rule: "self.size != 'large' || self.replicas >= 3", message: 'large needs 3 replicas' },
    ]);
    assert.deepEqual(root.properties!['status'], toStructuralSchema(widgetStatus));
  });

  test('without status there is no status subresource, and an all-optional spec is not required', () => {
    const gadget = defineCustomResource({
      group: 'test.berth.dev',
      version: 'v1',
      kind: 'Gadget',
      plural: 'gadgets',
      singular: 'gizmo',
      categories: ['berth'],
      scope: 'Cluster',
      spec: z.object({ on: z.boolean().default(false) }),
    });
    const [version] = gadget.crd.spec.versions;
    assert.equal(version!.subresources, undefined);
    assert.equal(version!.additionalPrinterColumns, undefined);
    assert.equal(version!.schema.openAPIV3Schema.required, undefined);
    assert.equal(version!.schema.openAPIV3Schema.properties!['status'], undefined);
    assert.equal(gadget.crd.spec.names.singular, 'gizmo');
    assert.deepEqual(gadget.crd.spec.names.categories, ['berth']);
    assert.equal(gadget.ref.namespaced, false);
    assert.equal(gadget.statusSchema, undefined);

    // Collectable into one registry, whatever the spec and status types.
    const registry: CustomResource[] = [widget, gadget];
    assert.equal(registry.length, 2);
  });

  test('a scale subresource sits beside status, and needs one', () => {
    const scale = {
      specReplicasPath: '.spec.replicas',
      statusReplicasPath: '.status.replicas',
      labelSelectorPath: '.status.selector',
    };
    const status = z.object({ replicas: z.int().optional(), selector: z.string().optional() });
    const spec = z.object({ replicas: z.int().min(0).default(1) });
    const base = { group: 'test.berth.dev', version: 'v1', plural: 'scalers', scope: 'Namespaced' } as const;
    const scaler = defineCustomResource({ ...base, kind: 'Scaler', spec, status, scale });
    assert.deepEqual(scaler.crd.spec.versions[0]!.subresources, { status: {}, scale });
    assert.throws(
      () => defineCustomResource({ ...base, kind: 'Scaler', spec, scale }),
      /Scaler: a scale subresource needs a status/,
    );
  });

  test('the spec must be an object', () => {
    assert.throws(
      () =>
        defineCustomResource({
          group: 'test.berth.dev',
          version: 'v1',
          kind: 'Bad',
          plural: 'bads',
          scope: 'Cluster',
          spec: z.string(),
        }),
      /Bad: spec must be an object/,
    );
  });

  test('parse() applies defaults and types the result', () => {
    const r = widget.parse({
      apiVersion: 'test.berth.dev/v1alpha1',
      kind: 'Widget',
      metadata: { name: 'w', namespace: 'ns', labels: { a: 'b' } },
      spec: { ports: [{ name: 'http', port: 80 }] },
    });
    assert.ok(r.success, r.success ? '' : r.error);
    const replicas: number = r.data.spec.replicas;
    assert.equal(replicas, 1);
    assert.equal(r.data.spec.size, 'small');
    assert.deepEqual(r.data.metadata, { name: 'w', namespace: 'ns', labels: { a: 'b' } });
    assert.equal(r.data.status, undefined);
  });

  test('parse() errors name every failing field by its path', () => {
    const r = widget.parse({
      apiVersion: 'test.berth.dev/v1alpha1',
      kind: 'Widget',
      metadata: { name: 'w' },
      spec: { size: 'huge', labels: { 'app.kubernetes.io/name': 1 }, ports: [{ name: 'http', port: 0 }] },
      status: { observedGeneration: 'one' },
    });
    assert.ok(!r.success);
    assert.match(r.error, /^invalid Widget w: /);
    assert.match(r.error, /spec\.size: Invalid option: expected one of "small"\|"large"/);
    assert.match(r.error, /spec\.labels\["app\.kubernetes\.io\/name"\]: Invalid input: expected string/);
    assert.match(r.error, /spec\.ports\[0\]\.port: Too small/);
    assert.match(r.error, /status\.observedGeneration: Invalid input: expected number/);

    const wrongKind = widget.parse({
      apiVersion: 'test.berth.dev/v1',
      kind: 'Gadget',
      metadata: {},
      spec: { ports: [] },
    });
    assert.ok(!wrongKind.success);
    assert.match(wrongKind.error, /^invalid Widget: apiVersion: .*; kind: .*; metadata\.name: /);
    assert.equal(widget.parse(null).success, false);
  });
});
