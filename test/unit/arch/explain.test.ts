// berth explain archplacement: the pods it stands for (gated, placed on which architectures,
// failed, released), the pods it selects but never gated, and the pods another policy or an
// exemption keeps; the placed pods no node can take; its conditions and counts as `-o json` gives
// them, `--pod` narrowing to one pod, and an invalid policy.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parsePolicies } from '../../../src/arch/decide/parse.ts';
import { type ArchPod } from '../../../src/arch/decide/pods.ts';
import { explainArchPlacement } from '../../../src/arch/explain.ts';
import {
  FAILURE_ANNOTATION,
  POLICY_ANNOTATION,
  RESULT_ANNOTATION,
  SCHEDULING_GATE,
  STATE_LABEL,
} from '../../../src/arch/types.ts';
import { explainerOf, explanationOf, explanationText } from '../../../src/explain.ts';
import type { KubeObject, ResourceRef } from '../../../src/runtime/api/meta.ts';
import type { KubeClient } from '../../../src/runtime/client/client.ts';

const policy = (name: string, spec: Record<string, unknown> = {}, status?: object): KubeObject => ({
  apiVersion: 'berth.dev/v1alpha1',
  kind: 'ArchPlacement',
  metadata: { name },
  spec,
  ...(status ? { status } : {}),
});

function pod(
  name: string,
  o: { ns?: string; state?: string; by?: string; result?: object; failure?: string; gated?: boolean } = {},
): ArchPod {
  const annotations: Record<string, string> = {};
  if (o.by) annotations[POLICY_ANNOTATION] = o.by;
  if (o.result) annotations[RESULT_ANNOTATION] = JSON.stringify(o.result);
  if (o.failure) annotations[FAILURE_ANNOTATION] = o.failure;
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      namespace: o.ns ?? 'shop',
      name,
      labels: { app: 'web', ...(o.state ? { [STATE_LABEL]: o.state } : {}) },
      annotations,
    },
    spec: {
      containers: [{ name: 'c', image: 'r.io/web:1' }],
      ...(o.gated ? { schedulingGates: [{ name: SCHEDULING_GATE }] } : {}),
    },
  };
}

const pods = [
  pod('placed', { state: 'Placed', by: 'p', result: { architectures: ['arm64', 's390x'], images: [] } }),
  pod('nowhere', { state: 'Placed', by: 'p', result: { architectures: [], images: [] } }),
  pod('gated', { state: 'Gated', by: 'p', gated: true }),
  pod('failed', { state: 'Failed', by: 'p', failure: 'NotFound: 404 for r.io/web:1' }),
  pod('released', { state: 'Released', by: 'p', failure: 'ArchPlacement p is being deleted' }),
  pod('before'),
  pod('other', { state: 'Placed', by: 'q', result: { architectures: ['amd64'], images: [] } }),
  pod('addon', { ns: 'kube-system' }),
];
const nodes: KubeObject[] = [
  { apiVersion: 'v1', kind: 'Node', metadata: { name: 'a', labels: { 'kubernetes.io/arch': 'amd64' } } },
  { apiVersion: 'v1', kind: 'Node', metadata: { name: 'b', labels: { 'kubernetes.io/arch': 'arm64' } } },
];
const namespaces = new Map([
  ['shop', {}],
  ['kube-system', {}],
]);

test("the pods it stands for, each as Berth recorded it; the pods it selects but never gated; another's and exempt ones not at all", () => {
  const { policies } = parsePolicies([policy('p'), policy('q', { priority: -1 })]);
  const said = explainArchPlacement('p', policies, pods, namespaces, nodes, 'berth-system');
  assert.deepEqual(
    (said.subjects ?? []).map((s) => `${s.in ? 'in' : 'out'} ${s.name}: ${s.why.join('; ')}`),
    [
      'in shop/placed: Placed on arm64, s390x',
      'in shop/nowhere: Placed on no architecture (none in common)',
      'in shop/gated: Gated',
      'in shop/failed: Failed (NotFound)',
      'in shop/released: Released',
      "out shop/before: selected, never gated: created before the policy, or while Berth's webhook was unavailable",
    ],
  );
  // Placed on architectures some node has (arm64) is fine; none in common is not.
  assert.deepEqual(said.lines, [
    '  1 placed pod(s) on none in common: no node has that architecture',
    '  1 pod(s) failed: NotFound',
  ]);
});

test('berth explain archplacement: -o json structure, conditions with since-when, counts; --pod one pod; invalid', async () => {
  const status = {
    observedGeneration: 2,
    gated: 1,
    placed: 2,
    failed: 1,
    conditions: [
      {
        type: 'Ready',
        status: 'False',
        reason: 'NoNodeOfArchitecture',
        message: 'no node has the architectures of 1 pod(s)',
        lastTransitionTime: '2026-11-27T12:00:00Z',
      },
    ],
  };
  const objects = [policy('p', {}, status), policy('bad', { mode: 'Sideways' })];
  const got: string[] = [];
  const client = {
    get: async (ref: ResourceRef, name: string, ns?: string) => {
      got.push(`${ref.kind} ${ns ?? ''}/${name}`);
      return ref.kind === 'Pod'
        ? pods.find((p) => p.metadata!.name === name)
        : objects.find((o) => o.metadata!.name === name);
    },
    list: async (ref: ResourceRef) => ({
      items:
        ref.kind === 'ArchPlacement'
          ? objects
          : ref.kind === 'Pod'
            ? pods
            : ref.kind === 'Node'
              ? nodes
              : ref.kind === 'Namespace'
                ? [...namespaces.keys()].map((name) => ({ metadata: { name } }))
                : [],
    }),
  } as unknown as KubeClient;
  const e = explainerOf('archp')!;
  const x = JSON.parse(
    JSON.stringify(await explanationOf(client, e, 'p', undefined, {}, 'berth-system')),
  ) as Awaited<ReturnType<typeof explanationOf>>;
  assert.deepEqual(Object.keys(x), ['kind', 'name', 'conditions', 'counts', 'subjects', 'lines']);
  assert.deepEqual(x.counts, { gated: 1, placed: 2, failed: 1 });
  assert.equal(x.conditions![0]!.lastTransitionTime, '2026-11-27T12:00:00Z');
  assert.equal(x.subjects!.length, 6);
  assert.deepEqual(explanationText(x, new Date('2026-11-27T15:00:00Z')).slice(0, 3), [
    'ArchPlacement p',
    '  Ready: False (NoNodeOfArchitecture) since 2026-11-27T12:00:00Z (3h ago): no node has the architectures of 1 pod(s)',
    '  counts: gated 1, placed 2, failed 1',
  ]);

  // --pod: that pod alone, read by name.
  const one = await explanationOf(client, e, 'p', undefined, {}, 'berth-system', { pod: 'shop/failed' });
  assert.deepEqual(one.subjects, [
    { kind: 'Pod', name: 'shop/failed', in: true, why: ['Failed (NotFound)'] },
  ]);
  assert.ok(got.includes('Pod shop/failed'), got.join());

  const bad = await explanationOf(client, e, 'bad', undefined, {}, 'berth-system');
  assert.equal(bad.subjects, undefined);
  assert.match(bad.lines[0]!, /^ {2}invalid, applies nothing: /);
  assert.deepEqual(bad.counts, {});
});
