// berth plan of ArchPlacements: which workloads' new pods a change gives to a policy and what they
// would get from their images' platforms (records first, a registry failure as onFailure says, what
// is not known as unknown), what deleting one undoes, and the warnings.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  planArchObjects,
  outcome,
  planArch,
  recordedImages,
  workloadsOf,
  type ArchWorld,
  type Read,
} from '../../../src/arch/plan.ts';
import { parsePolicies } from '../../../src/arch/decide/parse.ts';
import { type ArchPod } from '../../../src/arch/decide/pods.ts';
import {
  RESULT_ANNOTATION,
  SCHEDULING_GATE,
  STATE_LABEL,
  POLICY_ANNOTATION,
} from '../../../src/arch/types.ts';
import { InspectionError, type ImageInspector, type Inspection } from '../../../src/registry/types.ts';
import type { KubeObject, ResourceRef } from '../../../src/runtime/api/meta.ts';
import type { KubeClient } from '../../../src/runtime/client/client.ts';

const policy = (name: string, spec: Record<string, unknown> = {}): KubeObject => ({
  apiVersion: 'berth.dev/v1alpha1',
  kind: 'ArchPlacement',
  metadata: { name },
  spec,
});
const deployment = (ns: string, name: string, images: string[], labels: Record<string, string> = {}) => ({
  apiVersion: 'apps/v1',
  kind: 'Deployment',
  metadata: { namespace: ns, name },
  spec: {
    template: {
      metadata: { labels: { app: name, ...labels } },
      spec: { containers: images.map((image, i) => ({ name: `c${i}`, image })) },
    },
  },
});
const node = (name: string, arch: string): KubeObject => ({
  apiVersion: 'v1',
  kind: 'Node',
  metadata: { name, labels: { 'kubernetes.io/arch': arch } },
});
const inspection = (image: string, ...platforms: string[]): Inspection => ({
  image,
  reference: image,
  digest: 'sha256:0',
  platforms: platforms.map((p) => ({ os: 'linux', architecture: p })),
  registry: 'r',
  cached: true,
});
const images: Record<string, Read> = {
  'r.io/multi:v1': inspection('r.io/multi:v1', 'amd64', 'arm64'),
  'r.io/arm:v1': inspection('r.io/arm:v1', 'arm64'),
  'r.io/s390x:v1': inspection('r.io/s390x:v1', 's390x'),
  'r.io/gone:v1': new InspectionError('NotAnImage', 'r.io/gone:v1', 'not an image'),
  'r.io/slow:v1': new InspectionError('Unreachable', 'r.io/slow:v1', 'timed out', true),
};
const reads = (image: string) => images[image];

function world(over: Partial<ArchWorld> = {}): ArchWorld {
  return {
    current: [],
    workloads: workloadsOf([
      {
        kind: 'Deployment',
        items: [
          deployment('shop', 'web', ['r.io/multi:v1']),
          deployment('shop', 'worker', ['r.io/multi:v1', 'r.io/arm:v1']),
          deployment('kube-system', 'dns', ['r.io/multi:v1']),
        ],
      },
    ]),
    pods: [],
    nodes: [node('a', 'amd64'), node('b', 'arm64')],
    namespaces: new Map([['shop', {}]]),
    exempt: { berthNamespace: 'berth-system', servesWebhook: () => false },
    ...over,
  };
}

test('a new policy: each selected workload placed on what all its images support; exempt ones left out', () => {
  const part = planArch(world(), [policy('p')], false, reads);
  assert.deepEqual(
    part.effects.map((e) => `${e.op} ${e.kind} ${e.name}: ${e.what} (${e.by})`),
    [
      '+ Deployment shop/web: new pods: placed on amd64, arm64 (node affinity) (ArchPlacement p)',
      '+ Deployment shop/worker: new pods: placed on arm64 (node affinity) (ArchPlacement p)',
    ],
  );
  // Both workloads it may gate are selected: the warning says every new pod would be gated.
  assert.deepEqual(part.warnings, [
    'ArchPlacement p would gate the new pods of every workload it may (2) until their images are read',
  ]);
  assert.deepEqual(part.unknown, []);
});

test('applied as it is: no change; deleted: its workloads lose it, its gated pods are released', () => {
  const gatedPod: ArchPod = {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      namespace: 'shop',
      name: 'web-1',
      labels: { [STATE_LABEL]: 'Gated' },
      annotations: { [POLICY_ANNOTATION]: 'p' },
    },
    spec: {
      containers: [{ name: 'c', image: 'r.io/multi:v1' }],
      schedulingGates: [{ name: SCHEDULING_GATE }],
    },
  };
  const w = world({ current: [policy('p')], pods: [gatedPod] });
  assert.deepEqual(planArch(w, [policy('p')], false, reads).effects, []);
  const gone = planArch(w, [policy('p')], true, reads);
  assert.deepEqual(
    gone.effects.map((e) => `${e.op} ${e.kind} ${e.name}: ${e.what}`),
    [
      '- Deployment shop/web: new pods: no longer gated or placed',
      '- Deployment shop/worker: new pods: no longer gated or placed',
      '- Pod shop/web-1: gate removed: released unplaced',
    ],
  );
  assert.deepEqual(gone.warnings, []);
});

test('a policy that selects one workload, by pod labels; no node of its only architecture: a warning', () => {
  const w = world({
    workloads: workloadsOf([
      {
        kind: 'Deployment',
        items: [deployment('shop', 'ibm', ['r.io/s390x:v1']), deployment('shop', 'web', ['r.io/multi:v1'])],
      },
    ]),
  });
  const part = planArch(w, [policy('p', { podSelector: { matchLabels: { app: 'ibm' } } })], false, reads);
  assert.deepEqual(
    part.effects.map((e) => `${e.name}: ${e.what}`),
    ['shop/ibm: new pods: placed on s390x (node affinity)'],
  );
  assert.deepEqual(part.warnings, [
    'Deployment shop/ibm: no node has an architecture its images support (s390x): its new pods would stay Pending',
  ]);
});

test('an image that cannot be read: onFailure decides; a transient failure or an unread image is unknown', () => {
  const pod = (image: string) =>
    workloadsOf([{ kind: 'Deployment', items: [deployment('shop', 'x', [image])] }])[0]!.pod;
  const [release] = parsePolicies([policy('p')]).policies;
  const [fallback] = parsePolicies([
    policy('f', { onFailure: { action: 'Fallback', fallbackArchitecture: 'amd64' } }),
  ]).policies;
  const [listed] = parsePolicies([policy('l', { registries: ['ghcr.io'] })]).policies;
  assert.deepEqual(outcome(pod('r.io/gone:v1'), release!, reads), {
    text: 'gated, then released unplaced (NotAnImage: not an image)',
  });
  assert.deepEqual(outcome(pod('r.io/gone:v1'), fallback!, reads), {
    architectures: ['amd64'],
    text: 'placed on the fallback amd64 (NotAnImage: not an image)',
  });
  assert.match(
    (outcome(pod('r.io/multi:v1'), listed!, reads) as { text: string }).text,
    /RegistryNotAllowed/,
  );
  assert.deepEqual(outcome(pod('r.io/slow:v1'), release!, reads), {
    unknown: 'r.io/slow:v1: Unreachable: timed out',
  });
  assert.match((outcome(pod('r.io/never:v1'), release!, reads) as { unknown: string }).unknown, /not read/);
  const part = planArch(
    world({
      workloads: workloadsOf([{ kind: 'Deployment', items: [deployment('shop', 'x', ['r.io/slow:v1'])] }]),
    }),
    [policy('p')],
    false,
    reads,
  );
  assert.deepEqual(part.effects, []);
  assert.match(
    part.unknown[0]!,
    /^Deployment shop\/x: new pods selected by ArchPlacement p, their images unknown/,
  );
});

test('Taints mode: every node gains its architecture taint, and loses it when the policy goes', () => {
  const taints = policy('t', { mode: 'Taints' });
  const on = planArch(world(), [taints], false, reads);
  assert.deepEqual(
    on.effects.filter((e) => e.kind === 'Node').map((e) => `${e.op} ${e.name} ${e.what}`),
    ['+ a taint arch.berth.dev/arch=amd64:NoSchedule', '+ b taint arch.berth.dev/arch=arm64:NoSchedule'],
  );
  assert.match(on.effects[0]!.what, /placed on amd64, arm64 \(tolerations of their arch taints\)/);
  const off = planArch(world({ current: [taints] }), [taints], true, reads);
  assert.deepEqual(
    off.effects.filter((e) => e.kind === 'Node').map((e) => `${e.op} ${e.name}`),
    ['- a', '- b'],
  );
});

test('records answer only for their own namespace; an invalid policy is an error; finished and owned jobs are not workloads', () => {
  const placed: ArchPod = {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      namespace: 'shop',
      name: 'p',
      annotations: {
        [RESULT_ANNOTATION]: JSON.stringify({
          architectures: ['arm64'],
          images: [{ image: 'i:1', digest: 'sha256:1', platforms: ['linux/arm64/v8'] }],
        }),
      },
    },
    spec: { containers: [] },
  };
  const known = recordedImages([
    placed,
    { ...placed, metadata: { namespace: 'x', annotations: { [RESULT_ANNOTATION]: '{' } } },
  ]);
  assert.deepEqual([...known.keys()], ['shop/i:1']);
  assert.deepEqual(known.get('shop/i:1')!.platforms, [{ os: 'linux', architecture: 'arm64', variant: 'v8' }]);

  const bad = planArch(world(), [policy('bad', { mode: 'Sideways' })], false, reads);
  assert.equal(bad.errors.length, 1);
  assert.match(bad.errors[0]!, /^ArchPlacement bad would be Invalid/);

  const job = (name: string, extra: object) => ({
    metadata: { namespace: 'shop', name, ...extra },
    spec: { template: { spec: { containers: [{ name: 'c', image: 'i:1' }] } } },
  });
  const listed = workloadsOf([
    {
      kind: 'Job',
      items: [
        job('run', {}),
        { ...job('done', {}), status: { conditions: [{ type: 'Complete', status: 'True' }] } },
        job('cron-1', {
          ownerReferences: [
            { apiVersion: 'batch/v1', kind: 'CronJob', name: 'cron', uid: 'u', controller: true },
          ],
        }),
      ],
    },
  ]);
  assert.deepEqual(
    listed.map((w) => w.id),
    ['Job shop/run'],
  );
});

test("the images read: Berth's records of the workload's own namespace first, the registry only for the rest of the workloads the change touches", async () => {
  const record = (ns: string): ArchPod => ({
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      namespace: ns,
      name: 'placed',
      labels: { [STATE_LABEL]: 'Placed' },
      annotations: {
        [RESULT_ANNOTATION]: JSON.stringify({
          architectures: ['arm64'],
          images: [{ image: 'r.io/web:1', digest: 'sha256:1', platforms: ['linux/arm64'] }],
        }),
      },
    },
    spec: { containers: [] },
  });
  const listed: Record<string, KubeObject[]> = {
    Deployment: [
      deployment('shop', 'web', ['r.io/web:1']),
      deployment('lab', 'web', ['r.io/web:1']),
      deployment('other', 'untouched', ['r.io/other:1']),
    ],
    Pod: [record('shop')],
    Node: [node('a', 'amd64'), node('b', 'arm64')],
    Namespace: ['shop', 'lab', 'other'].map((name) => ({
      apiVersion: 'v1',
      kind: 'Namespace',
      metadata: { name },
    })),
  };
  const client = {
    list: async (ref: ResourceRef) => ({ items: listed[ref.kind] ?? [] }),
  } as unknown as KubeClient;
  const asked: string[] = [];
  const inspector = {
    inspect: async (image: string) => {
      asked.push(image);
      return inspection(image, 'amd64', 'arm64');
    },
  } as unknown as ImageInspector;
  const part = await planArchObjects(
    {
      client,
      objects: [policy('p', { podSelector: { matchLabels: { app: 'web' } } })],
      all: [],
      deleting: false,
      options: {},
      berthNamespace: 'berth-system',
      keys: () => Promise.reject(new Error('not asked')),
    },
    inspector,
  );
  // shop's record answers shop's workload; lab's is read (a record answers only its own namespace).
  assert.deepEqual(asked, ['r.io/web:1']);
  assert.deepEqual(
    part.effects.map((e) => `${e.name}: ${e.what}`),
    [
      'shop/web: new pods: placed on arm64 (node affinity)',
      'lab/web: new pods: placed on amd64, arm64 (node affinity)',
    ],
  );
});
