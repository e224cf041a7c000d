// Custom resources from zod schemas. A capability declares its API type once, as zod, and gets
// from it the TypeScript type (z.infer), runtime validation (files, dry runs) and the CRD with a
// structural OpenAPI v3 schema the apiserver accepts: one source of truth, no hand-written YAML.
import { isDeepStrictEqual } from 'node:util';
import * as z from '../platform/zod.ts';
import { apiVersionOf, crdName, type KubeObject, type ObjectMeta, type ResourceRef } from './meta.ts';

/** One CEL rule (x-kubernetes-validations); `self` is the value of the node it sits on. */
export interface CelValidation {
  rule: string;
  message?: string;
  messageExpression?: string;
  reason?: 'FieldValueInvalid' | 'FieldValueForbidden' | 'FieldValueRequired' | 'FieldValueDuplicate';
  fieldPath?: string;
  optionalOldSelf?: boolean;
}

/** The Kubernetes vendor extensions k8s() attaches to a zod schema. */
export interface KubernetesExtensions {
  'x-kubernetes-validations'?: CelValidation[];
  'x-kubernetes-list-type'?: 'atomic' | 'set' | 'map';
  'x-kubernetes-list-map-keys'?: string[];
  'x-kubernetes-map-type'?: 'atomic' | 'granular';
  'x-kubernetes-preserve-unknown-fields'?: true;
  'x-kubernetes-int-or-string'?: true;
  'x-kubernetes-embedded-resource'?: true;
}

const extensionKeys = [
  'x-kubernetes-validations',
  'x-kubernetes-list-type',
  'x-kubernetes-list-map-keys',
  'x-kubernetes-map-type',
  'x-kubernetes-preserve-unknown-fields',
  'x-kubernetes-int-or-string',
  'x-kubernetes-embedded-resource',
] as const satisfies readonly (keyof KubernetesExtensions)[];

/** The subset of apiextensions.k8s.io/v1 JSONSchemaProps that toStructuralSchema emits. */
export interface StructuralSchema extends KubernetesExtensions {
  description?: string;
  type?: 'object' | 'array' | 'string' | 'integer' | 'number' | 'boolean';
  format?: string;
  enum?: unknown[];
  properties?: Record<string, StructuralSchema>;
  required?: string[];
  additionalProperties?: StructuralSchema;
  items?: StructuralSchema;
  minItems?: number;
  maxItems?: number;
  minLength?: number;
  maxLength?: number;
  pattern?: string;
  minimum?: number;
  maximum?: number;
  exclusiveMinimum?: boolean;
  exclusiveMaximum?: boolean;
  multipleOf?: number;
  /** Only value validations: the extra patterns of a string with several. */
  allOf?: StructuralSchema[];
  default?: unknown;
  nullable?: true;
}

/**
 * Attaches Kubernetes extensions to a schema (stored as zod metadata, so the schema still parses
 * as before). CEL rules accumulate across calls; the other keys are replaced.
 */
export function k8s<T extends z.ZodType>(schema: T, extensions: KubernetesExtensions): T {
  const rules = [
    ...((z.globalRegistry.get(schema)?.['x-kubernetes-validations'] as CelValidation[] | undefined) ?? []),
    ...(extensions['x-kubernetes-validations'] ?? []),
  ];
  return schema.meta({ ...extensions, ...(rules.length ? { 'x-kubernetes-validations': rules } : {}) });
}

/**
 * Converts a zod schema to a Kubernetes structural schema, describing what may be stored (zod's
 * input side: a field with a default is optional, and the default is emitted for the apiserver to
 * apply). Throws, naming the field, for what structural schemas cannot express:
 * - unions other than enums of one JSON type, `int | string` (x-kubernetes-int-or-string) and
 *   z.discriminatedUnion of objects (the merged properties of its options, with CEL rules that
 *   require each option's fields when its discriminator value is set);
 * - z.any()/z.unknown() unless k8s() marks them x-kubernetes-preserve-unknown-fields or int-or-string;
 * - record keys other than a plain z.string(), objects with a typed catchall, recursive schemas
 *   (no $ref), tuples, intersections, dates, bigints, transforms, catch, string formats with no
 *   Kubernetes format (their zod regexes are not RE2), and nullable enums (the apiserver rejects
 *   null for them).
 * Refinements are client-side only: put server-side rules in x-kubernetes-validations.
 * `at` names the root in error messages.
 */
export function toStructuralSchema(schema: z.core.$ZodType, at = ''): StructuralSchema {
  return convert(schema, at, new Set());
}

type Meta = KubernetesExtensions & { description?: string };

function convert(schema: z.core.$ZodType, path: string, active: Set<z.core.$ZodType>): StructuralSchema {
  // Peel the wrappers that only change presence, nullability or defaults, collecting their metadata.
  const chain: z.core.$ZodType[] = [];
  const metas: Meta[] = [];
  let dflt: { value: unknown } | undefined;
  let nullable = false;
  let s = schema;
  try {
    for (;;) {
      if (active.has(s)) throw fail(path, 'is recursive: a CRD schema cannot refer to itself (no $ref)');
      active.add(s);
      chain.push(s);
      metas.push((z.globalRegistry.get(s) ?? {}) as Meta);
      const def = (s as z.core.$ZodTypes)._zod.def;
      if (def.type === 'optional' || def.type === 'nonoptional' || def.type === 'readonly') s = def.innerType;
      else if (def.type === 'default' || def.type === 'prefault') {
        dflt ??= { value: def.defaultValue };
        s = def.innerType;
      } else if (def.type === 'nullable') {
        nullable = true;
        s = def.innerType;
      } else if (def.type === 'lazy') s = (s as z.core.$ZodLazy)._zod.innerType;
      else if (def.type === 'pipe') s = def.in._zod.traits.has('$ZodTransform') ? def.out : def.in;
      else break;
    }
    const meta = mergeMetas(metas);
    const { description: inner, ...core } = convertCore(s, path, meta, active);
    const description = meta.description ?? inner;
    const node: StructuralSchema = { ...(description ? { description } : {}), ...core };
    if (dflt) node.default = jsonValue(dflt.value, path);
    if (nullable) node.nullable = true;
    // The apiserver checks a null against the enum, and rejects it even when the enum lists null.
    if (node.nullable && node.enum)
      throw fail(path, 'is a nullable enum, which Kubernetes rejects null for: use .optional()');
    const rules = [...(core['x-kubernetes-validations'] ?? []), ...(meta['x-kubernetes-validations'] ?? [])];
    for (const key of extensionKeys) if (meta[key] !== undefined) Object.assign(node, { [key]: meta[key] });
    if (rules.length) node['x-kubernetes-validations'] = rules;
    if (node['x-kubernetes-int-or-string']) delete node.type;
    return node;
  } finally {
    for (const c of chain) active.delete(c);
  }
}

// Outer wrappers win, except CEL rules, which all apply.
function mergeMetas(metas: Meta[]): Meta {
  const merged: Meta = {};
  const rules: CelValidation[] = [];
  for (const m of metas.toReversed()) {
    Object.assign(merged, m);
    rules.push(...(m['x-kubernetes-validations'] ?? []));
  }
  if (rules.length) merged['x-kubernetes-validations'] = rules;
  return merged;
}

const hints: Partial<Record<string, string>> = {
  any: 'give it a type, or mark it k8s(z.unknown(), { "x-kubernetes-preserve-unknown-fields": true })',
  unknown: 'give it a type, or mark it k8s(z.unknown(), { "x-kubernetes-preserve-unknown-fields": true })',
  date: 'use z.iso.datetime()',
  bigint: 'use z.int()',
  intersection: 'use .extend()',
  tuple: 'use an object',
};

function convertCore(
  s: z.core.$ZodType,
  path: string,
  meta: Meta,
  active: Set<z.core.$ZodType>,
): StructuralSchema {
  const def = (s as z.core.$ZodTypes)._zod.def;
  switch (def.type) {
    case 'string':
      return stringNode(s, path);
    case 'number':
      return numberNode(s, path);
    case 'boolean':
      return { type: 'boolean' };
    case 'enum':
    case 'literal':
      return enumNode([...((s._zod as { values?: Set<unknown> }).values ?? [])], path);
    case 'array': {
      const { min, max } = lengths(s);
      return {
        type: 'array',
        items: convert(def.element, `${path}[*]`, active),
        ...(min === undefined ? {} : { minItems: min }),
        ...(max === undefined ? {} : { maxItems: max }),
      };
    }
    case 'object':
      return objectNode(def, path, active);
    case 'record': {
      const key = def.keyType;
      if (key._zod.def.type !== 'string' || key._zod.def.checks?.length || key._zod.traits.has('$ZodCheck')) {
        throw fail(path, 'has record keys other than a plain z.string(); constrain them with a CEL rule');
      }
      // A free-form map: the apiserver keeps whatever is under it.
      if (meta['x-kubernetes-preserve-unknown-fields'] && isAnything(def.valueType))
        return { type: 'object' };
      return { type: 'object', additionalProperties: convert(def.valueType, `${path}[*]`, active) };
    }
    case 'union':
      return unionNode(def, path, active);
    case 'any':
    case 'unknown':
      if (meta['x-kubernetes-preserve-unknown-fields'] || meta['x-kubernetes-int-or-string']) return {};
  }
  const hint = hints[def.type];
  throw fail(path, `is z.${def.type}, which has no structural OpenAPI equivalent${hint ? `: ${hint}` : ''}`);
}

const isAnything = (s: z.core.$ZodType) => s._zod.def.type === 'any' || s._zod.def.type === 'unknown';

/** The checks of a schema; a format schema such as z.email() is its own first check. */
function checksOf(s: z.core.$ZodType): z.core.$ZodChecks['_zod']['def'][] {
  const own = s._zod.traits.has('$ZodCheck') ? [s as unknown as z.core.$ZodChecks] : [];
  return [...own, ...((s._zod.def.checks ?? []) as z.core.$ZodChecks[])].map((c) => c._zod.def);
}

function lengths(s: z.core.$ZodType): { min?: number; max?: number } {
  let min: number | undefined;
  let max: number | undefined;
  for (const c of checksOf(s)) {
    if (c.check === 'min_length' || c.check === 'length_equals') {
      const v = c.check === 'min_length' ? c.minimum : c.length;
      min = Math.max(min ?? v, v);
    }
    if (c.check === 'max_length' || c.check === 'length_equals') {
      const v = c.check === 'max_length' ? c.maximum : c.length;
      max = Math.min(max ?? v, v);
    }
  }
  return { min, max };
}

// zod string formats with a Kubernetes equivalent; the others carry JS regexes that RE2 may reject.
const kubeFormats: Partial<Record<string, string>> = {
  email: 'email',
  url: 'uri',
  uuid: 'uuid',
  guid: 'uuid',
  ipv4: 'ipv4',
  ipv6: 'ipv6',
  cidrv4: 'cidr',
  cidrv6: 'cidr',
  mac: 'mac',
  hostname: 'hostname',
  base64: 'byte',
  datetime: 'date-time',
  date: 'date',
};
// Checks whose zod regex is the author's (regex) or built from the author's text.
const patternFormats = new Set(['regex', 'starts_with', 'ends_with', 'includes', 'lowercase', 'uppercase']);

function stringNode(s: z.core.$ZodType, path: string): StructuralSchema {
  const node: StructuralSchema = { type: 'string' };
  const patterns: string[] = [];
  for (const c of checksOf(s)) {
    if (c.check !== 'string_format') continue;
    if (patternFormats.has(c.format) && c.pattern) patterns.push(re2Source(c.pattern));
    else if (kubeFormats[c.format]) node.format = kubeFormats[c.format];
    else throw fail(path, `has the zod format ${c.format}, which Kubernetes lacks: use .regex()`);
  }
  const { min, max } = lengths(s);
  if (min !== undefined) node.minLength = min;
  if (max !== undefined) node.maxLength = max;
  const [first, ...rest] = patterns;
  if (first !== undefined) node.pattern = first;
  if (rest.length) node.allOf = rest.map((pattern) => ({ pattern }));
  return node;
}

// The apiserver matches patterns with Go's RE2: JS flags become inline flags where RE2 has them.
function re2Source(re: RegExp): string {
  const flags = [...re.flags].filter((f) => 'ims'.includes(f)).join('');
  return flags ? `(?${flags})${re.source}` : re.source;
}

const numberFormats: Record<string, StructuralSchema> = {
  safeint: { type: 'integer' },
  int32: { type: 'integer', format: 'int32' },
  uint32: { type: 'integer', minimum: 0, maximum: 2 ** 32 - 1 },
  float32: { type: 'number', format: 'float' },
  float64: { type: 'number', format: 'double' },
};

function numberNode(s: z.core.$ZodType, path: string): StructuralSchema {
  const node: StructuralSchema = { type: 'number' };
  let lower: { value: number; exclusive: boolean } | undefined;
  let upper: { value: number; exclusive: boolean } | undefined;
  for (const c of checksOf(s)) {
    if (c.check === 'number_format') Object.assign(node, numberFormats[c.format]);
    else if (c.check === 'greater_than') {
      const b = { value: Number(c.value), exclusive: !c.inclusive };
      if (!lower || b.value > lower.value || (b.value === lower.value && b.exclusive)) lower = b;
    } else if (c.check === 'less_than') {
      const b = { value: Number(c.value), exclusive: !c.inclusive };
      if (!upper || b.value < upper.value || (b.value === upper.value && b.exclusive)) upper = b;
    } else if (c.check === 'multiple_of') {
      if (node.multipleOf !== undefined) throw fail(path, 'has more than one multipleOf');
      node.multipleOf = Number(c.value);
    }
  }
  const integer = node.type === 'integer';
  if (lower) {
    // An exclusive integer bound reads better as the inclusive one next to it.
    if (integer && lower.exclusive) node.minimum = lower.value + 1;
    else Object.assign(node, { minimum: lower.value }, lower.exclusive ? { exclusiveMinimum: true } : {});
  }
  if (upper) {
    if (integer && upper.exclusive) node.maximum = upper.value - 1;
    else Object.assign(node, { maximum: upper.value }, upper.exclusive ? { exclusiveMaximum: true } : {});
  }
  return node;
}

function enumNode(values: unknown[], path: string): StructuralSchema {
  const nonNull = values.filter((v) => v !== null);
  const kinds = new Set(nonNull.map((v) => (Number.isInteger(v) ? 'integer' : typeof v)));
  if (kinds.has('integer') && kinds.has('number')) kinds.delete('integer');
  const [kind] = kinds;
  if (
    kinds.size !== 1 ||
    !(kind === 'string' || kind === 'integer' || kind === 'number' || kind === 'boolean')
  ) {
    throw fail(path, 'is an enum or literal whose values do not share one JSON type');
  }
  return { type: kind, enum: nonNull, ...(nonNull.length < values.length ? { nullable: true } : {}) };
}

function objectNode(def: z.core.$ZodObjectDef, path: string, active: Set<z.core.$ZodType>): StructuralSchema {
  const node: StructuralSchema = { type: 'object' };
  const properties: Record<string, StructuralSchema> = {};
  const required: string[] = [];
  for (const [key, prop] of Object.entries(def.shape)) {
    properties[key] = convert(prop, field(path, key), active);
    if (prop._zod.optin === undefined) required.push(key);
  }
  if (Object.keys(properties).length) node.properties = properties;
  if (required.length) node.required = required;
  if (def.catchall && def.catchall._zod.def.type !== 'never') {
    // z.looseObject keeps unknown keys; Kubernetes' equivalent is to not prune them.
    if (!isAnything(def.catchall)) throw fail(path, 'has a typed catchall: use z.record() for a map');
    node['x-kubernetes-preserve-unknown-fields'] = true;
  }
  return node;
}

function unionNode(def: z.core.$ZodUnionDef, path: string, active: Set<z.core.$ZodType>): StructuralSchema {
  const options = def.options.filter((o) => o._zod.def.type !== 'null');
  const nullable = options.length < def.options.length ? { nullable: true as const } : {};
  if (options.length === 1) return { ...convert(options[0]!, path, active), ...nullable };
  const discriminator = (def as { discriminator?: string }).discriminator;
  if (discriminator) return { ...discriminated(options, discriminator, path, active), ...nullable };
  const nodes = options.map((o) => convert(o, path, active));
  const bare = (n: StructuralSchema, ...keys: string[]) =>
    Object.keys(n).every((k) => k === 'type' || k === 'description' || keys.includes(k));
  const types = new Set(nodes.map((n) => n.type));
  if (types.size === 1 && nodes.every((n) => n.enum && bare(n, 'enum'))) {
    return { type: nodes[0]!.type, enum: [...new Set(nodes.flatMap((n) => n.enum!))], ...nullable };
  }
  if (types.size === 2 && types.has('integer') && types.has('string') && nodes.every((n) => bare(n))) {
    return { 'x-kubernetes-int-or-string': true, ...nullable };
  }
  throw fail(
    path,
    'is a union that is not structural: use an enum, int | string, or z.discriminatedUnion() of objects',
  );
}

// The merged properties of every option make the structural part; CEL rules require each option's
// own fields when its discriminator value is chosen (a oneOf would report the first option's errors).
function discriminated(
  options: readonly z.core.$ZodType[],
  discriminator: string,
  path: string,
  active: Set<z.core.$ZodType>,
): StructuralSchema {
  const properties: Record<string, StructuralSchema> = {};
  const rules: CelValidation[] = [];
  let tag: StructuralSchema | undefined;
  let required: string[] | undefined;
  for (const option of options) {
    const node = convert(option, path, active);
    const own = node.properties?.[discriminator];
    const plain = Object.keys(node).every((k) =>
      ['type', 'description', 'properties', 'required'].includes(k),
    );
    if (!own?.enum || !plain || !node.required?.includes(discriminator)) {
      throw fail(
        path,
        'has a discriminated union option that is not a plain object with a required literal discriminator',
      );
    }
    tag = { type: own.type, enum: [...(tag?.enum ?? []), ...own.enum] };
    for (const [key, prop] of Object.entries(node.properties!)) {
      if (key === discriminator) continue;
      if (properties[key] && !isDeepStrictEqual(properties[key], prop)) {
        throw fail(field(path, key), 'differs between the options of the discriminated union');
      }
      properties[key] = prop;
    }
    const mine = node.required!;
    required = required ? required.filter((k) => mine.includes(k)) : mine;
    const tagField = celField(path, discriminator);
    const chosen = own.enum.map((v) => `self.${tagField} == ${JSON.stringify(v)}`).join(' || ');
    for (const key of mine) {
      if (key === discriminator) continue;
      rules.push({
        rule: `!(${chosen}) || has(self.${celField(path, key)})`,
        message: `required when ${discriminator} is ${own.enum.map((v) => JSON.stringify(v)).join(' or ')}`,
        fieldPath: `.${key}`,
        reason: 'FieldValueRequired',
      });
    }
  }
  return {
    type: 'object',
    properties: { [discriminator]: tag!, ...properties },
    required: required!,
    ...(rules.length ? { 'x-kubernetes-validations': rules } : {}),
  };
}

// Kubernetes' CEL reaches a field named like a CEL keyword as __keyword__.
const celKeywords = new Set(
  'true false null in as break const continue else for function if import let loop package namespace return var void while'.split(
    ' ',
  ),
);
function celField(path: string, key: string): string {
  // Other names need escapes (__dash__, __dot__, ...) that no Kubernetes-style field name needs.
  if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(key) || key.includes('__')) {
    throw fail(field(path, key), 'is not a CEL identifier, which a discriminated union option field must be');
  }
  return celKeywords.has(key) ? `__${key}__` : key;
}

function jsonValue(value: unknown, path: string): unknown {
  const text = JSON.stringify(value);
  if (text === undefined) throw fail(path, 'has a default that is not JSON');
  return JSON.parse(text);
}

const field = (path: string, key: string) => (path ? `${path}.${key}` : key);
const fail = (path: string, message: string) => new Error(`${path || '(root)'} ${message}`);

// ---------------------------------------------------------------------------------------------

export interface PrinterColumn {
  name: string;
  type: 'integer' | 'number' | 'string' | 'boolean' | 'date';
  jsonPath: string;
  description?: string;
  priority?: number;
  format?: string;
}

/** A column of `kubectl get` by its JSONPath: a string unless said. */
export const column = (
  name: string,
  jsonPath: string,
  type: PrinterColumn['type'] = 'string',
): PrinterColumn => ({
  name,
  type,
  jsonPath,
});

/** The column of a condition's status (or reason) by its type, as `kubectl get` shows it. */
export const conditionColumn = (
  name: string,
  type: string,
  field: 'status' | 'reason' = 'status',
  priority?: number,
): PrinterColumn => ({
  name,
  type: 'string',
  jsonPath: `.status.conditions[?(@.type=='${type}')].${field}`,
  ...(priority === undefined ? {} : { priority }),
});

/** The Age column every kind ends with. */
export const AGE_COLUMN: PrinterColumn = {
  name: 'Age',
  type: 'date',
  jsonPath: '.metadata.creationTimestamp',
};

export interface CustomResourceOptions<Spec extends z.ZodType, Status extends z.ZodType | undefined> {
  group: string;
  version: string;
  kind: string;
  plural: string;
  singular?: string;
  shortNames?: string[];
  categories?: string[];
  scope: 'Cluster' | 'Namespaced';
  spec: Spec;
  status?: Status;
  printerColumns?: PrinterColumn[];
  /** CEL rules on the spec root (`self` is the spec). */
  validations?: CelValidation[];
  /** The scale subresource (`kubectl scale`, autoscalers): JSON paths of the replica counts. */
  scale?: ScaleSubresource;
}

/** apiextensions.k8s.io/v1 CustomResourceSubresourceScale. */
export interface ScaleSubresource {
  specReplicasPath: string;
  statusReplicasPath: string;
  /** The label selector (as a string) of what the replicas are: status.selector by convention. */
  labelSelectorPath?: string;
}

/** apiextensions.k8s.io/v1 CustomResourceDefinition, as defineCustomResource builds it. */
export interface CustomResourceDefinition extends KubeObject {
  apiVersion: 'apiextensions.k8s.io/v1';
  kind: 'CustomResourceDefinition';
  metadata: ObjectMeta & { name: string };
  spec: {
    group: string;
    scope: 'Cluster' | 'Namespaced';
    names: {
      kind: string;
      listKind: string;
      plural: string;
      singular: string;
      shortNames?: string[];
      categories?: string[];
    };
    versions: {
      name: string;
      served: boolean;
      storage: boolean;
      schema: { openAPIV3Schema: StructuralSchema };
      subresources?: { status?: Record<string, never>; scale?: ScaleSubresource };
      additionalPrinterColumns?: PrinterColumn[];
    }[];
  };
}

/** An object of a custom resource, as parse() returns it. */
export interface CustomObject<Spec = unknown, Status = unknown> extends KubeObject {
  apiVersion: string;
  kind: string;
  metadata: ObjectMeta;
  spec: Spec;
  status?: Status;
}

export type ParseResult<T> = { success: true; data: T } | { success: false; error: string };

export interface CustomResource<Spec = unknown, Status = unknown> {
  readonly ref: ResourceRef;
  readonly apiVersion: string;
  readonly kind: string;
  readonly crd: CustomResourceDefinition;
  readonly specSchema: z.ZodType<Spec>;
  readonly statusSchema: z.ZodType<Status> | undefined;
  /** Validates a whole object (apiVersion, kind, metadata.name, spec, and status when present), applying defaults. */
  parse(obj: unknown): ParseResult<CustomObject<Spec, Status>>;
}

type StatusOf<Status> = Status extends z.ZodType ? z.output<Status> : never;

export function defineCustomResource<
  Spec extends z.ZodType,
  Status extends z.ZodType | undefined = undefined,
>(o: CustomResourceOptions<Spec, Status>): CustomResource<z.output<Spec>, StatusOf<Status>> {
  const ref: ResourceRef = {
    group: o.group,
    version: o.version,
    resource: o.plural,
    kind: o.kind,
    namespaced: o.scope === 'Namespaced',
  };
  const apiVersion = apiVersionOf(ref);
  const spec = toStructuralSchema(o.spec, 'spec');
  if (spec.type !== 'object') throw new Error(`${o.kind}: spec must be an object`);
  if (o.validations?.length) {
    spec['x-kubernetes-validations'] = [...(spec['x-kubernetes-validations'] ?? []), ...o.validations];
  }
  if (o.scale && !o.status) throw new Error(`${o.kind}: a scale subresource needs a status`);
  const specRequired = o.spec._zod.optin === undefined && !!spec.required?.length;
  const openAPIV3Schema: StructuralSchema = {
    type: 'object',
    properties: {
      apiVersion: { type: 'string' },
      kind: { type: 'string' },
      metadata: { type: 'object' },
      spec,
      ...(o.status ? { status: toStructuralSchema(o.status, 'status') } : {}),
    },
    ...(specRequired ? { required: ['spec'] } : {}),
  };
  const crd: CustomResourceDefinition = {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: crdName(ref) },
    spec: {
      group: o.group,
      scope: o.scope,
      names: {
        kind: o.kind,
        listKind: `${o.kind}List`,
        plural: o.plural,
        singular: o.singular ?? o.kind.toLowerCase(),
        ...(o.shortNames ? { shortNames: o.shortNames } : {}),
        ...(o.categories ? { categories: o.categories } : {}),
      },
      versions: [
        {
          name: o.version,
          served: true,
          storage: true,
          schema: { openAPIV3Schema },
          ...(o.status ? { subresources: { status: {}, ...(o.scale ? { scale: o.scale } : {}) } } : {}),
          ...(o.printerColumns ? { additionalPrinterColumns: o.printerColumns } : {}),
        },
      ],
    },
  };
  const whole = z.object({
    apiVersion: z.literal(apiVersion),
    kind: z.literal(o.kind),
    metadata: z.looseObject({ name: z.string().min(1) }),
    spec: o.spec,
    ...(o.status ? { status: o.status.optional() } : {}),
  });
  return {
    ref,
    apiVersion,
    kind: o.kind,
    crd,
    specSchema: o.spec as z.ZodType<z.output<Spec>>,
    statusSchema: o.status as z.ZodType<StatusOf<Status>> | undefined,
    parse(obj) {
      const r = whole.safeParse(obj);
      if (r.success)
        return { success: true, data: r.data as unknown as CustomObject<z.output<Spec>, StatusOf<Status>> };
      const name = (obj as { metadata?: { name?: unknown } } | null)?.metadata?.name;
      const what = typeof name === 'string' ? `${o.kind} ${name}` : o.kind;
      return { success: false, error: `invalid ${what}: ${formatIssues(r.error.issues)}` };
    },
  };
}

function formatIssues(issues: z.core.$ZodIssue[]): string {
  return issues.map((i) => `${formatPath(i.path) || '(root)'}: ${i.message}`).join('; ');
}

function formatPath(path: PropertyKey[]): string {
  let out = '';
  for (const seg of path) {
    if (typeof seg === 'number') out += `[${seg}]`;
    else if (typeof seg === 'string' && /^[A-Za-z_$][\w$]*$/.test(seg)) out += out ? `.${seg}` : seg;
    else out += `[${JSON.stringify(String(seg))}]`;
  }
  return out;
}

/** metav1.Condition as a status field: a list keyed by type, as every Kubernetes API has it. */
export const conditionsSchema = k8s(
  z
    .array(
      z.object({
        type: z.string(),
        status: z.enum(['True', 'False', 'Unknown']),
        reason: z.string(),
        message: z.string(),
        lastTransitionTime: z.string(),
        observedGeneration: z.number().int().optional(),
      }),
    )
    .optional(),
  { 'x-kubernetes-list-type': 'map', 'x-kubernetes-list-map-keys': ['type'] },
);
