// A CRD generated from zod is accepted by the real apiserver as structural, and the apiserver then
// enforces what the zod schema says: enums, bounds, CEL rules, list-map keys, discriminated unions,
// defaults, and the status subresource.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { z } from 'zod';
import { defineCustomResource, k8s, type CustomResourceDefinition } from '../../src/runtime/api/crd.ts';
import { ApiError } from '../../src/runtime/client/client.ts';
import { Resources, type KubeObject } from '../../src/runtime/api/meta.ts';
import { installCrds } from '../../src/cli/install.ts';
import { crdManifests } from '../../src/manifests.ts';
import { testSandbox, uniqueName } from '../helpers/cluster.ts';
import { waitFor } from '../helpers/wait.ts';

const condition = z.object({
  type: z.string().min(1),
  status: z.enum(['True', 'False', 'Unknown']),
  reason: z.string().optional(),
  message: z.string().optional(),
  lastTransitionTime: z.iso.datetime(),
  observedGeneration: z.int().min(0).optional(),
});

const spec = z.object({
  size: z.enum(['small', 'medium', 'large']).default('small').describe('How big the widget is.'),
  replicas: z.int().min(1).default(1),
  labels: z.record(z.string(), z.string()).optional(),
  ports: k8s(
    z
      .array(
        z.object({
          name: z.string().min(1),
          port: z.int().min(1).max(65535),
          protocol: z.enum(['TCP', 'UDP']).default('TCP'),
        }),
      )
      .max(16),
    { 'x-kubernetes-list-type': 'map', 'x-kubernetes-list-map-keys': ['name'] },
  ).optional(),
  source: z
    .discriminatedUnion('type', [
      z.object({ type: z.literal('Git'), url: z.string().min(1) }),
      z.object({ type: z.literal('Image'), image: z.string().min(1) }),
      // namespace is a CEL keyword: the generated rule must escape it.
      z.object({ type: z.literal('ConfigMap'), namespace: z.string().min(1), name: z.string().min(1) }),
    ])
    .optional(),
  maxUnavailable: z.union([z.int(), z.string()]).optional(),
});

const status = z.object({
  observedGeneration: z.int().min(0).optional(),
  conditions: k8s(z.array(condition), {
    'x-kubernetes-list-type': 'map',
    'x-kubernetes-list-map-keys': ['type'],
  }).optional(),
});

const group = `${uniqueName('crd')}.test.berth.dev`;
const widget = defineCustomResource({
  group,
  version: 'v1alpha1',
  kind: 'Widget',
  plural: 'widgets',
  shortNames: ['wdg'],
  categories: ['berth-test'],
  scope: 'Cluster',
  spec,
  status,
  printerColumns: [
    { name: 'Size', type: 'string', jsonPath: '.spec.size' },
    { name: 'Replicas', type: 'integer', jsonPath: '.spec.replicas', description: 'Desired replicas.' },
    { name: 'Ready', type: 'string', jsonPath: '.status.conditions[?(@.type=="Ready")].status' },
    { name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp', priority: 1 },
  ],
  validations: [
    {
      rule: "self.size != 'large' || self.replicas >= 3",
      message: 'a large widget needs at least 3 replicas',
    },
  ],
});

const fieldManager = 'berth-test';
const client = testSandbox().client();

type Condition = { type: string; status: string; reason?: string; message?: string };
const crdConditions = async () =>
  (
    (await client.get<CustomResourceDefinition>(Resources.crds, widget.crd.metadata.name))['status'] as {
      conditions?: Condition[];
    }
  ).conditions ?? [];

const manifest = (name: string, spec: Record<string, unknown>): KubeObject => ({
  apiVersion: widget.apiVersion,
  kind: widget.kind,
  metadata: { name },
  spec,
});

/** Creates the object and expects a 422 whose message matches every pattern. */
async function rejected(spec: Record<string, unknown>, ...patterns: RegExp[]) {
  await assert.rejects(client.create(widget.ref, manifest(uniqueName('bad'), spec)), (e: unknown) => {
    assert.ok(e instanceof ApiError, String(e));
    assert.equal(e.status, 422, e.message);
    for (const p of patterns) assert.match(e.message, p);
    return true;
  });
}

before(async () => {
  await client.apply(Resources.crds, widget.crd, { fieldManager });
  await waitFor(
    'the CRD Established and NamesAccepted',
    async () => {
      const conds = await crdConditions();
      const isTrue = (type: string) => conds.some((c) => c.type === type && c.status === 'True');
      return isTrue('Established') && isTrue('NamesAccepted');
    },
    { observe: crdConditions },
  );
  // Established is not yet readable: until the watch cache is ready the apiserver answers 429
  // "storage is (re)initializing". (The first write still takes about 2 s after that.)
  await waitFor('the widgets storage ready', () => client.list(widget.ref).then(() => true));
});

after(async () => {
  await client.delete(Resources.crds, widget.crd.metadata.name);
  client.close();
});

describe('a CRD generated from zod', () => {
  test('is accepted as structural, keeps its printer columns, and re-applies without change', async () => {
    const conds = await crdConditions();
    assert.equal(
      conds.find((c) => c.type === 'NonStructuralSchema'),
      undefined,
      JSON.stringify(conds),
    );
    const stored = await client.get<CustomResourceDefinition>(Resources.crds, widget.crd.metadata.name);
    const [version] = stored.spec.versions;
    assert.deepEqual(
      version?.additionalPrinterColumns,
      widget.crd.spec.versions[0]!.additionalPrinterColumns,
    );
    assert.deepEqual(version?.subresources, { status: {} });
    assert.deepEqual(stored.spec.names.shortNames, ['wdg']);

    const again = await client.apply<CustomResourceDefinition>(Resources.crds, widget.crd, { fieldManager });
    assert.equal(again.metadata.generation, stored.metadata.generation);
  });

  test('a valid object is accepted, and the apiserver applies the same defaults as parse()', async () => {
    const name = uniqueName('ok');
    const obj = manifest(name, {
      labels: { 'team.example/owner': 'edge' },
      ports: [{ name: 'http', port: 8080 }],
      source: { type: 'Git', url: 'https://git.example/w' },
      maxUnavailable: '25%',
    });
    const created = await client.create<KubeObject>(widget.ref, obj);
    assert.deepEqual(created['spec'], {
      size: 'small',
      replicas: 1,
      labels: { 'team.example/owner': 'edge' },
      ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
      source: { type: 'Git', url: 'https://git.example/w' },
      maxUnavailable: '25%',
    });
    const parsed = widget.parse(obj);
    assert.ok(parsed.success, parsed.success ? '' : parsed.error);
    assert.deepEqual(parsed.data.spec, created['spec']);

    const intOrString = await client.create<KubeObject>(
      widget.ref,
      manifest(uniqueName('ok'), { maxUnavailable: 2 }),
    );
    assert.equal((intOrString['spec'] as { maxUnavailable: unknown }).maxUnavailable, 2);
  });

  test('invalid objects are rejected with the field path and the schema message', async () => {
    await rejected({ size: 'huge' }, /spec\.size: Unsupported value: "huge"/, /"small", "medium", "large"/);
    await rejected({ replicas: 0 }, /spec\.replicas: Invalid value: 0: .*greater than or equal to 1/);
    await rejected({ size: 'large' }, /spec: Invalid value: .*a large widget needs at least 3 replicas/);
    await rejected(
      { ports: [{ name: 'http', port: 70000 }] },
      /spec\.ports\[0\]\.port: Invalid value: 70000/,
    );
    await rejected(
      {
        ports: [
          { name: 'http', port: 80 },
          { name: 'http', port: 81 },
        ],
      },
      /spec\.ports\[1\]: Duplicate value/,
    );
    await rejected({ source: { type: 'Svn', url: 'x' } }, /spec\.source\.type: Unsupported value: "Svn"/);
    await rejected(
      { source: { type: 'Image' } },
      /spec\.source\.image: Required value: required when type is "Image"/,
    );
    await rejected(
      { source: { type: 'ConfigMap', name: 'w' } },
      /spec\.source\.namespace: Required value: required when type is "ConfigMap"/,
    );
    await rejected({ maxUnavailable: true }, /spec\.maxUnavailable/);

    // The client-side check agrees where it can (CEL rules are the apiserver's).
    for (const [bad, path] of [
      [{ size: 'huge' }, 'spec.size'],
      [{ replicas: 0 }, 'spec.replicas'],
      [{ source: { type: 'Image' } }, 'spec.source.image'],
    ] as const) {
      const r = widget.parse(manifest('bad', bad));
      assert.ok(!r.success);
      assert.match(r.error, new RegExp(`${path.replaceAll('.', '\\.')}: `));
    }
  });

  test('status is written through the status subresource only', async () => {
    const name = uniqueName('st');
    // Status sent to the main resource is dropped.
    const created = await client.apply<KubeObject>(
      widget.ref,
      { ...manifest(name, {}), status: { observedGeneration: 99 } },
      { fieldManager },
    );
    assert.equal(created['status'], undefined);

    const lastTransitionTime = new Date().toISOString().replace(/\.\d+Z$/, 'Z');
    const withStatus = await client.apply<KubeObject>(
      widget.ref,
      {
        apiVersion: widget.apiVersion,
        kind: widget.kind,
        metadata: { name },
        status: {
          observedGeneration: created.metadata!.generation,
          conditions: [{ type: 'Ready', status: 'True', reason: 'Built', lastTransitionTime }],
        },
      },
      { fieldManager, subresource: 'status' },
    );
    const st = widget.statusSchema!.parse(withStatus['status']);
    assert.equal(st.observedGeneration, created.metadata!.generation);
    assert.deepEqual(st.conditions, [{ type: 'Ready', status: 'True', reason: 'Built', lastTransitionTime }]);

    await assert.rejects(
      client.apply(
        widget.ref,
        {
          apiVersion: widget.apiVersion,
          kind: widget.kind,
          metadata: { name },
          status: { conditions: [{ type: 'Ready', status: 'Maybe', lastTransitionTime }] },
        },
        { fieldManager, subresource: 'status' },
      ),
      /status\.conditions\[0\]\.status: Unsupported value: "Maybe"/,
    );

    // A spec write leaves the status alone.
    const updated = await client.apply<KubeObject>(widget.ref, manifest(name, { replicas: 2 }), {
      fieldManager,
    });
    assert.deepEqual(updated['status'], withStatus['status']);
    assert.equal(updated.metadata!.generation, created.metadata!.generation! + 1);
  });
});

describe("Berth's own CRDs", () => {
  test('every generated CRD is accepted by the apiserver as structural and established', async () => {
    const crds = await crdManifests();
    assert.ok(crds.length > 0);
    await installCrds(client);
    for (const crd of crds) {
      const got = await client.get<CustomResourceDefinition>(Resources.crds, crd.metadata!.name!);
      const conds =
        (got.status as { conditions?: { type: string; status: string }[] } | undefined)?.conditions ?? [];
      assert.ok(
        conds.some((c) => c.type === 'Established' && c.status === 'True'),
        `${crd.metadata!.name} not established`,
      );
      assert.ok(
        !conds.some((c) => c.type === 'NonStructuralSchema' && c.status === 'True'),
        `${crd.metadata!.name} is not structural`,
      );
    }
  });
});
