import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { deepFreeze } from '../../helpers/freeze.ts';
import { applyJsonPatch } from '../../helpers/jsonpatch.ts';
import { withSeed, type Prng } from '../../helpers/prng.ts';
import { MAX_PAUSED_MS, nextTry } from '../../../src/arch/decide/retries.ts';
import {
  MAX_POD_IMAGES,
  pullSecretRefs,
  tooManyImages,
  imagesText,
  intersection,
  podImages,
  type Placement,
  unlistedRegistry,
} from '../../../src/arch/decide/images.ts';
import {
  NO_COMMON_ARCHITECTURE,
  constrainsArch,
  gateExemption,
  webhookServiceNamespaces,
  type ArchPod,
  type NodeSelectorTerm,
} from '../../../src/arch/decide/pods.ts';
import { choosePolicy, namespaceDecides, parsePolicies } from '../../../src/arch/decide/policies.ts';
import {
  gatePod,
  nodesTainted,
  placePatch,
  releasePatch,
  unplacedRelease,
} from '../../../src/arch/decide/patches.ts';
import { nodeArchitectures, recordsPatch, report, standingOf } from '../../../src/arch/decide/status.ts';
import { podOs } from '../../../src/policy/pods.ts';
import {
  ARCH_LABEL,
  ARCH_TAINT,
  FAILURE_ANNOTATION,
  OS_LABEL,
  POLICY_ANNOTATION,
  RESULT_ANNOTATION,
  SCHEDULING_GATE,
  SKIP_ANNOTATION,
  STATE_LABEL,
  archPlacementSpec,
  type ArchPlacementSpec,
} from '../../../src/arch/types.ts';
import { InspectionError, type Inspection, type Platform } from '../../../src/registry/types.ts';

const BERTH = 'berth-system';
const ctx = { berthNamespace: BERTH, servesWebhook: (ns: string) => ns === 'cert-manager' };

function pod(spec: Partial<ArchPod['spec']> = {}, meta: ArchPod['metadata'] = {}): ArchPod {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name: 'p', namespace: 'apps', resourceVersion: '7', labels: { app: 'web' }, ...meta },
    spec: { containers: [{ name: 'c', image: 'web:1' }], ...spec },
  };
}

const spec = (s: Record<string, unknown> = {}): ArchPlacementSpec => archPlacementSpec.parse(s);

const platform = (p: string): Platform => {
  const [os, architecture, variant] = p.split('/') as [string, string, string | undefined];
  return variant ? { os, architecture, variant } : { os, architecture };
};
const inspection = (image: string, platforms: string[]): Inspection => ({
  image,
  reference: `registry.test/${image}`,
  digest: `sha256:${image.length.toString(16).padStart(64, '0')}`,
  platforms: platforms.map(platform),
  registry: 'registry.test',
  cached: false,
});

const apply = (p: ArchPod, ops: ReturnType<typeof placePatch>) => applyJsonPatch(p, ops) as ArchPod;
const terms = (p: ArchPod) =>
  p.spec.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms;

describe('gateExemption', () => {
  const cases: [string, ArchPod, string, RegExp][] = [
    ['kube-system', pod(), 'kube-system', /cluster add-ons/],
    ['any kube-* namespace', pod(), 'kube-public', /cluster add-ons/],
    ["Berth's namespace", pod(), BERTH, /Berth's own/],
    ['a namespace serving a webhook', pod(), 'cert-manager', /admission webhook/],
    ['nodeName', pod({ nodeName: 'n1' }), 'apps', /nodeName/],
    ['mirror pod', pod({}, { annotations: { 'kubernetes.io/config.mirror': 'x' } }), 'apps', /mirror/],
    [
      'DaemonSet pod',
      pod(
        {},
        {
          ownerReferences: [
            { apiVersion: 'apps/v1', kind: 'DaemonSet', name: 'd', uid: 'u', controller: true },
          ],
        },
      ),
      'apps',
      /DaemonSet/,
    ],
    ['opted out', pod({}, { annotations: { [SKIP_ANNOTATION]: 'true' } }), 'apps', /arch.berth.dev\/skip/],
    ['nodeSelector on arch', pod({ nodeSelector: { [ARCH_LABEL]: 'arm64' } }), 'apps', /already constrains/],
    [
      'every required term on arch',
      pod({
        affinity: {
          nodeAffinity: {
            requiredDuringSchedulingIgnoredDuringExecution: {
              nodeSelectorTerms: [
                { matchExpressions: [{ key: ARCH_LABEL, operator: 'In', values: ['amd64'] }] },
                {
                  matchExpressions: [
                    { key: 'zone', operator: 'Exists' },
                    { key: ARCH_LABEL, operator: 'NotIn', values: ['s390x'] },
                  ],
                },
              ],
            },
          },
        },
      }),
      'apps',
      /already constrains/,
    ],
  ];
  for (const [what, p, ns, reason] of cases)
    test(`never gates: ${what}`, () => assert.match(gateExemption(p, ns, ctx) ?? '', reason));

  test('gates the rest: a plain pod, an owner that is not a DaemonSet, skip=false, arch in only some terms', () => {
    assert.equal(gateExemption(pod(), 'apps', ctx), undefined);
    const rs = pod(
      {},
      {
        ownerReferences: [
          { apiVersion: 'apps/v1', kind: 'ReplicaSet', name: 'r', uid: 'u', controller: true },
        ],
      },
    );
    assert.equal(gateExemption(rs, 'apps', ctx), undefined);
    assert.equal(
      gateExemption(pod({}, { annotations: { [SKIP_ANNOTATION]: 'false' } }), 'apps', ctx),
      undefined,
    );
    const some = pod({
      affinity: {
        nodeAffinity: {
          requiredDuringSchedulingIgnoredDuringExecution: {
            nodeSelectorTerms: [
              { matchExpressions: [{ key: ARCH_LABEL, operator: 'In', values: ['amd64'] }] },
              { matchFields: [{ key: 'metadata.name', operator: 'In', values: ['n'] }] },
            ],
          },
        },
      },
    });
    assert.equal(constrainsArch(some), false);
    assert.equal(gateExemption(some, 'apps', ctx), undefined);
    assert.equal(
      constrainsArch(
        pod({
          affinity: {
            nodeAffinity: { requiredDuringSchedulingIgnoredDuringExecution: { nodeSelectorTerms: [] } },
          },
        }),
      ),
      false,
    );
  });
});

describe('policies', () => {
  const obj = (name: string, s: Record<string, unknown>, extra: Record<string, unknown> = {}) => ({
    apiVersion: 'berth.dev/v1alpha1',
    kind: 'ArchPlacement',
    metadata: { name, uid: name, generation: 1, ...extra },
    spec: s,
  });

  test('highest priority first, ties by name; invalid specs reported by name', () => {
    const { policies, errors } = parsePolicies([
      obj('b', { priority: 5 }),
      obj('a', { priority: 5 }),
      obj('z', { priority: 10 }),
      obj('low', {}),
      obj('bad', { mode: 'Sideways' }),
    ]);
    assert.deepEqual(
      policies.map((p) => p.name),
      ['z', 'a', 'b', 'low'],
    );
    assert.deepEqual([...errors.keys()], ['bad']);
    assert.equal(policies[3]!.spec.mode, 'NodeAffinity');
    assert.deepEqual(policies[3]!.spec.onFailure, { action: 'Release', retries: 3 });
  });

  test('the chosen policy: the first live one that selects the pod; protected namespaces only when named', () => {
    const { policies } = parsePolicies([
      obj('top', { priority: 9, podSelector: { matchLabels: { app: 'db' } } }),
      obj('gone', { priority: 8 }, { deletionTimestamp: '2026-01-01T00:00:00Z' }),
      obj('all', {}),
      obj('system', {
        priority: -1,
        namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'kube-system' } },
      }),
    ]);
    assert.equal(choosePolicy(policies, pod(), 'apps', {}, BERTH)?.name, 'all');
    assert.equal(choosePolicy(policies, pod({}, { labels: { app: 'db' } }), 'apps', {}, BERTH)?.name, 'top');
    assert.equal(
      choosePolicy(policies, pod(), 'kube-system', { 'kubernetes.io/metadata.name': 'kube-system' }, BERTH)
        ?.name,
      'system',
    );
    assert.equal(choosePolicy(policies.slice(0, 3), pod(), BERTH, {}, BERTH), undefined);
  });

  test("a namespace not known yet decides only when a namespaceSelector's policy would come first", () => {
    const team = { namespaceSelector: { matchLabels: { team: 'a' } } };
    const { policies } = parsePolicies([
      obj('db', { priority: 9, podSelector: { matchLabels: { app: 'db' } } }),
      obj('gone', { priority: 8, ...team }, { deletionTimestamp: '2026-01-01T00:00:00Z' }),
      obj('team', { priority: 5, ...team }),
      obj('all', {}),
    ]);
    assert.equal(namespaceDecides(policies, pod(), 'apps', BERTH), true, 'team before all');
    assert.equal(namespaceDecides(policies, pod({}, { labels: { app: 'db' } }), 'apps', BERTH), false);
    assert.equal(namespaceDecides(policies.slice(0, 2), pod(), 'apps', BERTH), false, 'only a deleting one');
    assert.equal(namespaceDecides(policies, pod(), 'kube-system', BERTH), false, 'protected');
  });
});

describe('the webhook gate', () => {
  test('adds the gate after the pod’s own, the state label and the policy; a second pass adds nothing', () => {
    const p = pod({ schedulingGates: [{ name: 'other.example/wait' }] });
    const policy = { name: 'arm-first', spec: spec(), deleting: false };
    const gatedPod = applyJsonPatch(p, gatePod(p, policy).patch) as ArchPod;
    assert.deepEqual(gatedPod.spec.schedulingGates, [
      { name: 'other.example/wait' },
      { name: SCHEDULING_GATE },
    ]);
    assert.equal(gatedPod.metadata?.labels?.[STATE_LABEL], 'Gated');
    assert.equal(gatedPod.metadata?.labels?.['app'], 'web');
    assert.equal(gatedPod.metadata?.annotations?.[POLICY_ANNOTATION], 'arm-first');
    assert.deepEqual(gatePod(gatedPod, policy).patch, []);
  });

  test('webhook configurations name the namespaces of their services, once each', () => {
    assert.deepEqual(
      webhookServiceNamespaces({
        webhooks: [
          { clientConfig: { service: { namespace: 'cert-manager' } } },
          { clientConfig: { service: { namespace: 'cert-manager' } } },
          { clientConfig: { url: 'https://x' } },
        ],
      }),
      ['cert-manager'],
    );
  });
});

describe('images and their architectures', () => {
  test(`a pod of more than ${MAX_POD_IMAGES} distinct images is Bounded, for good; repeats count once`, () => {
    const images = (n: number) =>
      Array.from({ length: n }, (_, i) => ({ image: `img${i}:1`, revalidate: false }));
    assert.equal(tooManyImages(images(MAX_POD_IMAGES)), undefined);
    assert.equal(tooManyImages([...images(MAX_POD_IMAGES), ...images(MAX_POD_IMAGES)]), undefined);
    const err = tooManyImages(images(MAX_POD_IMAGES + 1));
    assert.equal(err?.reason, 'Bounded');
    assert.equal(err?.transient, false);
    assert.match(err!.message, /names 33 images; Berth reads at most 32 for one pod/);
  });

  test('pullSecretRefs: the pod’s own, in its namespace, then the cluster-wide one', () => {
    const p = pod({ containers: [], imagePullSecrets: [{ name: 'a' }, { name: 'b' }] });
    assert.deepEqual(pullSecretRefs(p, 'team'), ['team/a', 'team/b']);
    assert.deepEqual(pullSecretRefs(p, 'team', 'berth/global'), ['team/a', 'team/b', 'berth/global']);
    assert.deepEqual(pullSecretRefs(p, 'team', 'no-namespace'), ['team/a', 'team/b']);
  });

  test('every image of containers and initContainers, once; Always on any container revalidates', () => {
    const p = pod({
      initContainers: [{ name: 'i', image: 'init:1', imagePullPolicy: 'IfNotPresent' }],
      containers: [
        { name: 'a', image: 'web:1' },
        { name: 'b', image: 'web:1', imagePullPolicy: 'Always' },
        { name: 'c', image: 'side:2' },
      ],
    });
    assert.deepEqual(podImages(p), [
      { image: 'init:1', revalidate: false },
      { image: 'web:1', revalidate: true },
      { image: 'side:2', revalidate: false },
    ]);
  });

  test("the seed's example: amd64-only and amd64+arm+ppc64le give amd64", () => {
    const got = intersection(pod(), [
      inspection('a', ['linux/amd64']),
      inspection('b', ['linux/amd64', 'linux/arm/v7', 'linux/ppc64le']),
    ]);
    assert.deepEqual(got, ['amd64']);
  });

  test('variants narrow nothing (the node label has none); other OSes count only for pods of that OS', () => {
    const images = [
      inspection('a', ['linux/arm/v6', 'linux/arm64/v8', 'windows/amd64']),
      inspection('b', ['linux/arm/v7', 'linux/arm64', 'windows/amd64']),
    ];
    assert.deepEqual(intersection(pod(), images), ['arm', 'arm64']);
    assert.deepEqual(intersection(pod({ os: { name: 'windows' } }), images), ['amd64']);
    assert.deepEqual(
      intersection(pod(), [inspection('a', ['linux/amd64']), inspection('b', ['linux/arm64'])]),
      [],
    );
  });

  test("the pod's OS: spec.os, else its nodeSelector, else one value every required term names, else linux", () => {
    const os = (values: string[], operator = 'In') => ({ key: OS_LABEL, operator, values });
    const required = (...t: NodeSelectorTerm[]) => ({
      affinity: {
        nodeAffinity: { requiredDuringSchedulingIgnoredDuringExecution: { nodeSelectorTerms: t } },
      },
    });
    assert.equal(podOs(pod()), 'linux');
    assert.equal(podOs(pod({ nodeSelector: { [OS_LABEL]: 'windows' } })), 'windows');
    assert.equal(
      podOs(pod({ os: { name: 'linux' }, nodeSelector: { [OS_LABEL]: 'windows' } })),
      'linux',
      'spec.os first',
    );
    const zone = { key: 'zone', operator: 'In', values: ['a'] };
    assert.equal(
      podOs(
        pod(required({ matchExpressions: [zone, os(['windows'])] }, { matchExpressions: [os(['windows'])] })),
      ),
      'windows',
    );
    for (const [what, t] of [
      ['a term without it', [{ matchExpressions: [os(['windows'])] }, { matchExpressions: [zone] }]],
      ['terms that differ', [{ matchExpressions: [os(['windows'])] }, { matchExpressions: [os(['linux'])] }]],
      ['more than one value', [{ matchExpressions: [os(['windows', 'linux'])] }]],
      ['NotIn', [{ matchExpressions: [os(['windows'], 'NotIn')] }]],
      ['no term', []],
    ] as [string, NodeSelectorTerm[]][])
      assert.equal(podOs(pod(required(...t))), 'linux', what);
  });

  test('a Windows pod that says so by selector only gets the Windows architectures, at admission too', () => {
    const images = [
      inspection('win', ['windows/amd64']),
      inspection('both', ['linux/arm64', 'windows/amd64']),
    ];
    const bySelector = pod({ nodeSelector: { [OS_LABEL]: 'windows' } });
    assert.deepEqual(intersection(bySelector, images), ['amd64']);
    const byTerm = pod({
      affinity: {
        nodeAffinity: {
          requiredDuringSchedulingIgnoredDuringExecution: {
            nodeSelectorTerms: [
              { matchExpressions: [{ key: OS_LABEL, operator: 'In', values: ['windows'] }] },
            ],
          },
        },
      },
    });
    assert.deepEqual(intersection(byTerm, images), ['amd64']);
    // The webhook decides with the same function: placed at once, never gated, never impossible.
    const { patch, placed } = gatePod(bySelector, { name: 'p', spec: spec(), deleting: false }, images);
    assert.deepEqual(placed, ['amd64']);
    assert.deepEqual(terms(apply(bySelector, patch)), [
      { matchExpressions: [{ key: ARCH_LABEL, operator: 'In', values: ['amd64'] }] },
    ]);
  });
});

const placed = (architectures: string[]): Placement => ({
  kind: 'Placed',
  architectures,
  inspections: [
    inspection(
      'web:1',
      architectures.map((a) => `linux/${a}`),
    ),
  ],
});

describe('the placing patch', () => {
  test('no affinity yet: one required term, ours; the gate, and only it, comes off; result and state', () => {
    const p = pod({ schedulingGates: [{ name: SCHEDULING_GATE }, { name: 'other.example/wait' }] });
    const ops = placePatch(p, placed(['amd64', 'arm64']), spec());
    // Guarded on the images it read and the gates it rewrites, not on the resourceVersion (the
    // scheduler's SchedulingGated condition must not fail it).
    assert.deepEqual(
      ops.filter((o) => o.op === 'test'),
      [
        { op: 'test', path: '/spec/containers/0/image', value: p.spec.containers[0]!.image },
        { op: 'test', path: '/spec/schedulingGates', value: p.spec.schedulingGates },
      ],
    );
    assert.throws(() =>
      apply({ ...p, spec: { ...p.spec, containers: [{ name: 'c', image: 'other:2' }] } }, ops),
    );
    const out = apply(
      { ...p, status: { conditions: [{ type: 'PodScheduled', status: 'False' }] } } as typeof p,
      ops,
    );
    assert.deepEqual(terms(out), [
      { matchExpressions: [{ key: ARCH_LABEL, operator: 'In', values: ['amd64', 'arm64'] }] },
    ]);
    assert.deepEqual(out.spec.schedulingGates, [{ name: 'other.example/wait' }]);
    assert.equal(out.metadata?.labels?.[STATE_LABEL], 'Placed');
    const result = JSON.parse(out.metadata!.annotations![RESULT_ANNOTATION]!);
    assert.deepEqual(result.architectures, ['amd64', 'arm64']);
    assert.deepEqual(result.images[0].platforms, ['linux/amd64', 'linux/arm64']);
    assert.match(result.images[0].digest, /^sha256:/);
  });

  test('existing terms, matchFields-only ones included, each gain the requirement; nothing else changes', () => {
    const before: NodeSelectorTerm[] = [
      { matchExpressions: [{ key: 'zone', operator: 'In', values: ['a'] }] },
      { matchFields: [{ key: 'metadata.name', operator: 'In', values: ['n1'] }] },
    ];
    const p = pod({
      schedulingGates: [{ name: SCHEDULING_GATE }],
      affinity: {
        podAntiAffinity: { x: 1 },
        nodeAffinity: { requiredDuringSchedulingIgnoredDuringExecution: { nodeSelectorTerms: before } },
      },
    });
    const out = apply(p, placePatch(p, placed(['arm64']), spec()));
    const arch = { key: ARCH_LABEL, operator: 'In', values: ['arm64'] };
    assert.deepEqual(terms(out), [
      { matchExpressions: [...before[0]!.matchExpressions!, arch] },
      { matchFields: before[1]!.matchFields, matchExpressions: [arch] },
    ]);
    assert.deepEqual(out.spec.affinity?.['podAntiAffinity'], { x: 1 });
    assert.equal(out.spec.schedulingGates, undefined);
  });

  test('preferred terms for the preferred architectures that are supported, after the pod’s own', () => {
    const own = {
      weight: 3,
      preference: { matchExpressions: [{ key: 'disk', operator: 'In', values: ['ssd'] }] },
    };
    const p = pod({
      schedulingGates: [{ name: SCHEDULING_GATE }],
      affinity: { nodeAffinity: { preferredDuringSchedulingIgnoredDuringExecution: [own] } },
    });
    const s = spec({
      preferredArchitectures: [
        { architecture: 'arm64', weight: 80 },
        { architecture: 's390x', weight: 50 },
      ],
    });
    const out = apply(p, placePatch(p, placed(['amd64', 'arm64']), s));
    assert.deepEqual(out.spec.affinity?.nodeAffinity?.preferredDuringSchedulingIgnoredDuringExecution, [
      own,
      {
        weight: 80,
        preference: { matchExpressions: [{ key: ARCH_LABEL, operator: 'In', values: ['arm64'] }] },
      },
    ]);
  });

  test('none in common: an impossible requirement, on purpose', () => {
    const p = pod({ schedulingGates: [{ name: SCHEDULING_GATE }] });
    const out = apply(p, placePatch(p, placed([]), spec()));
    assert.deepEqual(terms(out), [
      { matchExpressions: [{ key: ARCH_LABEL, operator: 'In', values: [NO_COMMON_ARCHITECTURE] }] },
    ]);
  });

  test('Taints mode: tolerations of the architectures, none already tolerated twice, no affinity', () => {
    const p = pod({
      schedulingGates: [{ name: SCHEDULING_GATE }],
      tolerations: [{ key: ARCH_TAINT, operator: 'Equal', value: 'amd64', effect: 'NoSchedule' }],
    });
    const out = apply(p, placePatch(p, placed(['amd64', 'arm64']), spec({ mode: 'Taints' })));
    assert.deepEqual(out.spec.tolerations, [
      { key: ARCH_TAINT, operator: 'Equal', value: 'amd64', effect: 'NoSchedule' },
      { key: ARCH_TAINT, operator: 'Equal', value: 'arm64', effect: 'NoSchedule' },
    ]);
    assert.equal(out.spec.affinity, undefined);
    const any = pod({ schedulingGates: [{ name: SCHEDULING_GATE }], tolerations: [{ operator: 'Exists' }] });
    assert.deepEqual(
      apply(any, placePatch(any, placed(['arm64']), spec({ mode: 'Taints' }))).spec.tolerations,
      [{ operator: 'Exists' }],
    );
  });

  test('failure: released as it is, or placed on the fallback; the reason on the pod either way', () => {
    const p = pod({ schedulingGates: [{ name: SCHEDULING_GATE }] });
    const failed: Placement = { kind: 'Failed', reason: 'Unauthorized', message: 'registry.test/web: 401' };
    const released = apply(p, placePatch(p, failed, spec()));
    assert.equal(released.spec.affinity, undefined);
    assert.equal(released.spec.schedulingGates, undefined);
    assert.equal(released.metadata?.labels?.[STATE_LABEL], 'Failed');
    assert.equal(
      released.metadata?.annotations?.[FAILURE_ANNOTATION],
      'Unauthorized: registry.test/web: 401',
    );
    const fallback = apply(p, placePatch(p, { ...failed, fallback: 'amd64' }, spec()));
    assert.deepEqual(terms(fallback), [
      { matchExpressions: [{ key: ARCH_LABEL, operator: 'In', values: ['amd64'] }] },
    ]);
  });

  test('Taints mode, released unplaced: the pod tolerates the arch taint whatever its value, once', () => {
    const any = { key: ARCH_TAINT, operator: 'Exists', effect: 'NoSchedule' };
    const equal = { key: ARCH_TAINT, operator: 'Equal' as const, value: 'amd64', effect: 'NoSchedule' };
    const p = pod({ schedulingGates: [{ name: SCHEDULING_GATE }], tolerations: [equal] });
    const failed: Placement = { kind: 'Failed', reason: 'Unreachable', message: 'down' };
    const released = apply(p, placePatch(p, failed, spec({ mode: 'Taints' })));
    assert.deepEqual(released.spec.tolerations, [equal, any], 'one architecture is not anywhere');
    assert.equal(released.spec.affinity, undefined);
    const tolerant = pod({
      schedulingGates: [{ name: SCHEDULING_GATE }],
      tolerations: [{ operator: 'Exists' }],
    });
    assert.deepEqual(
      apply(tolerant, placePatch(tolerant, failed, spec({ mode: 'Taints' }))).spec.tolerations,
      [{ operator: 'Exists' }],
    );
    // Its policy deleted: released as it is, in its policy's mode.
    const gone = apply(p, releasePatch(p, 'ArchPlacement t is being deleted', spec({ mode: 'Taints' })));
    assert.deepEqual(gone.spec.tolerations, [equal, any]);
    // The fallback is a placement: its architecture only.
    const fallback = apply(p, placePatch(p, { ...failed, fallback: 'arm64' }, spec({ mode: 'Taints' })));
    assert.deepEqual(fallback.spec.tolerations, [equal, { ...equal, value: 'arm64' }]);
  });

  test('NodeAffinity mode while another policy keeps nodes tainted: released unplaced, the taint tolerated whatever its value; placed, the values of its architectures', () => {
    const p = pod({ schedulingGates: [{ name: SCHEDULING_GATE }] });
    const failed: Placement = { kind: 'Failed', reason: 'Unreachable', message: 'down' };
    assert.equal(apply(p, placePatch(p, failed, spec())).spec.tolerations, undefined);
    assert.equal(apply(p, releasePatch(p, 'gone')).spec.tolerations, undefined);
    const any = [{ key: ARCH_TAINT, operator: 'Exists', effect: 'NoSchedule' }];
    assert.deepEqual(apply(p, placePatch(p, failed, { ...spec(), archTainted: true })).spec.tolerations, any);
    assert.deepEqual(
      apply(p, releasePatch(p, 'gone', { mode: 'NodeAffinity', archTainted: true })).spec.tolerations,
      any,
    );
    // Placed by affinity, a pod gains the tolerations of its architectures only while nodes carry
    // the taint (else a Taints policy elsewhere would leave it unschedulable); so does a fallback.
    const tainted = apply(p, placePatch(p, placed(['amd64']), { ...spec(), archTainted: true }));
    assert.deepEqual(tainted.spec.tolerations, [
      { key: ARCH_TAINT, operator: 'Equal', value: 'amd64', effect: 'NoSchedule' },
    ]);
    assert.ok(tainted.spec.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution);
    assert.equal(apply(p, placePatch(p, placed(['amd64']), spec())).spec.tolerations, undefined);
    assert.deepEqual(
      apply(p, placePatch(p, { ...failed, fallback: 'arm64' }, { ...spec(), archTainted: true })).spec
        .tolerations,
      [{ key: ARCH_TAINT, operator: 'Equal', value: 'arm64', effect: 'NoSchedule' }],
    );
    const { policies } = parsePolicies([
      { metadata: { name: 'a', uid: 'a', generation: 1 }, spec: {} },
      { metadata: { name: 't', uid: 't', generation: 1, deletionTimestamp: 'x' }, spec: { mode: 'Taints' } },
    ]);
    assert.equal(nodesTainted(policies), false, 'a Taints policy being deleted takes its taints off');
    assert.equal(nodesTainted([...policies, { ...policies[1]!, deleting: false }]), true);
  });

  test('a policy gone: the gate comes off, nothing placed; a later success clears an old failure', () => {
    const p = pod(
      { schedulingGates: [{ name: SCHEDULING_GATE }] },
      { annotations: { [FAILURE_ANNOTATION]: 'old' } },
    );
    const out = apply(p, releasePatch(p, 'ArchPlacement x does not exist'));
    assert.equal(out.metadata?.labels?.[STATE_LABEL], 'Released');
    assert.equal(out.spec.affinity, undefined);
    const again = apply(p, placePatch(p, placed(['amd64']), spec()));
    assert.equal(again.metadata?.annotations?.[FAILURE_ANNOTATION], undefined);
  });
  test("uninstalling: Berth's label and annotations come off a placed pod, everyone else's stay", () => {
    const p = pod(
      {},
      {
        labels: { app: 'web', [STATE_LABEL]: 'Placed' },
        annotations: {
          [POLICY_ANNOTATION]: 'p',
          [RESULT_ANNOTATION]: '{}',
          [FAILURE_ANNOTATION]: 'old',
          mine: 'x',
        },
      },
    );
    const out = apply(p, recordsPatch(p));
    assert.deepEqual(out.metadata?.labels, { app: 'web' });
    assert.deepEqual(out.metadata?.annotations, { mine: 'x' });
    // Guarded: a record someone changed meanwhile fails the patch instead of being removed unseen.
    const changed = structuredClone(p);
    changed.metadata!.annotations![RESULT_ANNOTATION] = '{"architectures":[]}';
    assert.throws(() => applyJsonPatch(changed, recordsPatch(p)));
    assert.deepEqual(recordsPatch(pod()), [], 'nothing of Berth: nothing to send');
  });
});

describe('after a failed inspection', () => {
  const now = 1_000_000;
  const ctx = { now, secretsMissing: false };
  const err = (reason: InspectionError['reason'], transient: boolean, retryAt?: number) =>
    new InspectionError(reason, 'web:1', 'x', transient, retryAt);

  test('transient: 1 s doubling, up to the retries; permanent: at once', () => {
    let r = { attempts: 0 };
    const waits: number[] = [];
    for (let step; (step = nextTry(err('Unreachable', true), r, 3, ctx)); r = step.retries)
      waits.push(step.afterMs);
    assert.deepEqual(waits, [1000, 2000, 4000]);
    assert.equal(nextTry(err('Malformed', false), { attempts: 0 }, 3, ctx), undefined);
    assert.equal(nextTry(err('Unauthorized', false), { attempts: 0 }, 3, ctx), undefined);
    assert.equal(nextTry(err('Unreachable', true), { attempts: 9 }, 10, ctx)?.afterMs, 30_000);
  });

  test('a registry that asked to wait is waited out as asked, without using a retry, for a bounded time', () => {
    const paused = nextTry(err('RateLimited', true, now + 30_000), { attempts: 2 }, 3, ctx);
    assert.deepEqual(paused, { afterMs: 30_000, retries: { attempts: 2, pausedSince: now } });
    // Pauses keep the first pause's time: waited out while they end within MAX_PAUSED_MS of it.
    const later = now + MAX_PAUSED_MS - 60_000;
    const again = nextTry(err('RateLimited', true, later + 60_000), paused!.retries, 3, {
      ...ctx,
      now: later,
    });
    assert.deepEqual(again, { afterMs: 60_000, retries: { attempts: 2, pausedSince: now } });
    // Beyond it, a pause counts as a retry like any transient failure, and the retries end.
    const beyond = nextTry(err('RateLimited', true, later + 60_001), paused!.retries, 3, {
      ...ctx,
      now: later,
    });
    assert.deepEqual(beyond, { afterMs: 4000, retries: { attempts: 3, pausedSince: now } });
    assert.equal(
      nextTry(err('RateLimited', true, later + 60_001), beyond!.retries, 3, { ...ctx, now: later }),
      undefined,
    );
    // No retries at all: the policy asked to act at once, pause or not.
    assert.equal(nextTry(err('RateLimited', true, now + 30_000), { attempts: 0 }, 0, ctx), undefined);
    // A pause already over: an ordinary retry.
    assert.deepEqual(nextTry(err('RateLimited', true, now), { attempts: 0 }, 3, ctx), {
      afterMs: 1000,
      retries: { attempts: 1 },
    });
  });

  test('refused or not found while a pull secret the pod names was missing: retried, the secret may come next', () => {
    const missing = { now, secretsMissing: true };
    for (const reason of ['Unauthorized', 'NotFound'] as const) {
      assert.deepEqual(nextTry(err(reason, false), { attempts: 0 }, 3, missing), {
        afterMs: 1000,
        retries: { attempts: 1 },
      });
      assert.equal(nextTry(err(reason, false), { attempts: 3 }, 3, missing), undefined);
    }
    assert.equal(nextTry(err('Malformed', false), { attempts: 0 }, 3, missing), undefined);
  });
});

describe('standing and report', () => {
  const at = (labels: Record<string, string>, annotations: Record<string, string>, gates?: string[]) =>
    pod(gates ? { schedulingGates: gates.map((name) => ({ name })) } : {}, { labels, annotations });

  test('read back from the pod: a gate wins over the label; results and reasons parsed', () => {
    const a = { [POLICY_ANNOTATION]: 'p' };
    assert.deepEqual(standingOf(at({ [STATE_LABEL]: 'Placed' }, a, [SCHEDULING_GATE])), {
      policy: 'p',
      standing: { state: 'Gated' },
    });
    assert.deepEqual(
      standingOf(
        at({ [STATE_LABEL]: 'Placed' }, { ...a, [RESULT_ANNOTATION]: '{"architectures":["arm64"]}' }),
      ),
      { policy: 'p', standing: { state: 'Placed', architectures: ['arm64'] } },
    );
    assert.deepEqual(standingOf(at({ [STATE_LABEL]: 'Placed' }, { ...a, [RESULT_ANNOTATION]: 'not json' })), {
      policy: 'p',
      standing: { state: 'Placed', architectures: [] },
    });
    assert.deepEqual(
      standingOf(at({ [STATE_LABEL]: 'Failed' }, { ...a, [FAILURE_ANNOTATION]: 'NotFound: x' })),
      {
        policy: 'p',
        standing: { state: 'Failed', reason: 'NotFound' },
      },
    );
    assert.equal(standingOf(at({ [STATE_LABEL]: 'Whatever' }, a)), undefined);
    assert.equal(standingOf(at({ [STATE_LABEL]: 'Placed' }, {})), undefined);
  });

  test('counts, failures by reason, and placed pods no node can run', () => {
    const nodes = nodeArchitectures([
      { metadata: { name: 'a', labels: { [ARCH_LABEL]: 'amd64' } } },
      { metadata: { name: 'b' }, status: { nodeInfo: { architecture: 'arm64' } } },
    ]);
    assert.deepEqual([...nodes].sort(), ['amd64', 'arm64']);
    const r = report(
      [
        { state: 'Gated' },
        { state: 'Placed', architectures: ['arm64', 's390x'] },
        { state: 'Placed', architectures: ['s390x'] },
        { state: 'Placed', architectures: [] },
        { state: 'Failed', reason: 'NotFound' },
        { state: 'Failed', reason: 'NotFound' },
        { state: 'Released' },
      ],
      nodes,
    );
    assert.deepEqual([r.gated, r.placed, r.failed], [1, 3, 2]);
    assert.deepEqual(
      [...r.unschedulable],
      [
        ['s390x', 1],
        ['none in common', 1],
      ],
    );
    assert.deepEqual([...r.failures], [['NotFound', 2]]);
  });
});

// Generated pods and images: the patch always applies to the version read, keeps every term the
// pod had (now requiring the intersection too), takes off Berth's gate only, and the intersection
// is exactly the architectures every image has for the pod's OS.
const ARCHS = ['amd64', 'arm64', 'arm', 'ppc64le', 's390x', 'riscv64'];
const OSES = ['linux', 'linux', 'linux', 'windows'];

function randomPod(r: Prng): ArchPod {
  const requirement = () => ({
    key: r.pick(['zone', 'disk', 'pool']),
    operator: r.pick(['In', 'NotIn', 'Exists']),
    values: [r.pick(['a', 'b', 'c'])],
  });
  const term = (): NodeSelectorTerm => {
    const t: NodeSelectorTerm = {};
    if (r.chance(0.7)) t.matchExpressions = Array.from({ length: 1 + r.int(3) }, requirement);
    if (!t.matchExpressions || r.chance(0.3))
      t.matchFields = [{ key: 'metadata.name', operator: 'In', values: [`n${r.int(9)}`] }];
    return t;
  };
  const gates = [
    ...Array.from({ length: r.int(3) }, (_, i) => ({ name: `other.example/g${i}` })),
    { name: SCHEDULING_GATE },
  ];
  if (r.chance(0.5)) gates.reverse();
  const spec: Partial<ArchPod['spec']> = { schedulingGates: gates };
  if (r.chance(0.6))
    spec.affinity = {
      nodeAffinity: {
        requiredDuringSchedulingIgnoredDuringExecution: {
          nodeSelectorTerms: Array.from({ length: 1 + r.int(3) }, term),
        },
        ...(r.chance(0.4)
          ? {
              preferredDuringSchedulingIgnoredDuringExecution: [
                { weight: 1 + r.int(100), preference: term() },
              ],
            }
          : {}),
      },
    };
  if (r.chance(0.2)) spec.os = { name: 'windows' };
  return pod(spec);
}

const randomImages = (r: Prng): Inspection[] =>
  Array.from({ length: 1 + r.int(4) }, (_, i) =>
    inspection(
      `img${i}`,
      Array.from({ length: r.int(5) }, () => `${r.pick(OSES)}/${r.pick(ARCHS)}${r.chance(0.2) ? '/v8' : ''}`),
    ),
  );

test('generated pods: the patch keeps every term, adds the intersection to each, removes only its gate', async () => {
  const CASES = 2000;
  await withSeed('arch placePatch', (r) => {
    for (let n = 0; n < CASES; n++) {
      // Frozen: the pod is an informer's or a review's object, which a decision must leave as it is.
      const p = deepFreeze(randomPod(r));
      const images = randomImages(r);
      const common = intersection(p, images);
      const os = p.spec.os?.name ?? 'linux';
      // The model: an architecture is common when every image lists it for the pod's OS.
      for (const a of ARCHS)
        assert.equal(
          common.includes(a),
          images.every((i) => i.platforms.some((x) => x.os === os && x.architecture === a)),
          `case ${n}: ${a}`,
        );
      const s = spec({
        mode: r.chance(0.2) ? 'Taints' : 'NodeAffinity',
        preferredArchitectures: r.chance(0.5)
          ? [{ architecture: r.pick(ARCHS), weight: 1 + r.int(100) }]
          : undefined,
      });
      const out = apply(p, placePatch(p, { kind: 'Placed', architectures: common, inspections: images }, s));
      const others = p.spec.schedulingGates!.filter((g) => g.name !== SCHEDULING_GATE);
      assert.deepEqual(out.spec.schedulingGates ?? [], others, `case ${n}: gates`);
      if (s.mode === 'Taints' && common.length) {
        assert.deepEqual(terms(out), terms(p), `case ${n}: Taints mode leaves the affinity`);
        for (const a of common)
          assert.ok(
            out.spec.tolerations?.some((t) => t.key === ARCH_TAINT && t.value === a),
            `case ${n}: tolerates ${a}`,
          );
        continue;
      }
      const before = terms(p) ?? [{}];
      const after = terms(out)!;
      assert.equal(after.length, before.length, `case ${n}: no term added or lost`);
      const values = common.length ? common : [NO_COMMON_ARCHITECTURE];
      after.forEach((t, i) => {
        const b = before[i]!;
        assert.deepEqual(t.matchFields, b.matchFields, `case ${n}: matchFields kept`);
        assert.deepEqual(
          t.matchExpressions,
          [...(b.matchExpressions ?? []), { key: ARCH_LABEL, operator: 'In', values }],
          `case ${n}`,
        );
      });
      const preferred =
        out.spec.affinity?.nodeAffinity?.preferredDuringSchedulingIgnoredDuringExecution ?? [];
      const own = p.spec.affinity?.nodeAffinity?.preferredDuringSchedulingIgnoredDuringExecution ?? [];
      assert.deepEqual(preferred.slice(0, own.length), own, `case ${n}: own preferred terms kept first`);
      for (const t of preferred.slice(own.length))
        assert.ok(
          common.includes(t.preference.matchExpressions![0]!.values![0]!),
          `case ${n}: preferred only among supported`,
        );
    }
  });
});

test('a pod released unplaced says why: its policy gone, going, or not named at all', () => {
  assert.equal(unplacedRelease('web', undefined), 'ArchPlacement web does not exist: released unplaced');
  assert.equal(
    unplacedRelease('web', { deleting: true }),
    'ArchPlacement web is being deleted: released unplaced',
  );
  // Its label and annotation both taken off, the regate controller labelled it again.
  assert.equal(
    unplacedRelease(undefined, undefined),
    `no ${POLICY_ANNOTATION} annotation names its ArchPlacement: released unplaced`,
  );
});

test("messages name each image's architectures for the pod's OS, not another's", () => {
  const image = (name: string, platforms: string[]): Inspection => ({
    image: name,
    reference: `r/${name}`,
    digest: 'sha256:ab',
    platforms: platforms.map((p) => ({ os: p.split('/')[0]!, architecture: p.split('/')[1]! })),
    registry: 'r',
    cached: true,
  });
  const images = [image('a', ['linux/amd64']), image('b', ['windows/amd64', 'linux/arm64', 'linux/amd64'])];
  assert.equal(imagesText(images, 'linux'), 'a (amd64), b (amd64, arm64)');
  assert.equal(imagesText(images, 'windows'), 'a (none for windows), b (amd64)');
});

describe('unlistedRegistry', () => {
  const listing = (registries?: string[]) => ({
    name: 'only-ours',
    spec: spec(registries ? { registries } : {}),
    deleting: false,
  });
  const naming = (...images: string[]) =>
    pod({ containers: images.map((image, i) => ({ name: `c${i}`, image })) });

  test('no list: every registry; a list: the first image of another registry, as a refusal', () => {
    assert.equal(unlistedRegistry(naming('127.0.0.1:5000/x:1'), listing()), undefined);
    const listed = listing(['ghcr.io', '*.corp.example', 'docker.io']);
    assert.equal(
      unlistedRegistry(naming('nginx', 'ghcr.io/a/b:1', 'r.eu.corp.example/c:2'), listed),
      undefined,
    );
    const err = unlistedRegistry(naming('ghcr.io/a/b:1', '127.0.0.1:5000/x:1', '10.0.0.1/y:1'), listed);
    assert.ok(err instanceof InspectionError);
    assert.equal(err.reason, 'RegistryNotAllowed');
    assert.equal(err.transient, false);
    assert.equal(err.image, '127.0.0.1:5000/x:1');
    assert.match(err.message, /^127\.0\.0\.1:5000 is not among the registries ArchPlacement only-ours lists/);
  });

  test('an image that is no reference is left to its inspection', () => {
    assert.equal(unlistedRegistry(naming('Not A Reference'), listing(['ghcr.io'])), undefined);
  });

  test('the list is validated as registries, never as patterns to compile', () => {
    assert.throws(() => spec({ registries: ['(a+)+$'] }));
    assert.throws(() => spec({ registries: ['*.*.example'] }));
    assert.deepEqual(spec({ registries: ['[::1]:5000', 'reg.internal:5000'] }).registries, [
      '[::1]:5000',
      'reg.internal:5000',
    ]);
  });
});
