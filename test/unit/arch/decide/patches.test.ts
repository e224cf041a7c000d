import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { deepFreeze } from '../../../../src/policy/intern.ts';
import { applyJsonPatch } from '../../../helpers/jsonpatch.ts';
import { withSeed, type Prng } from '../../../helpers/prng.ts';
import { intersection, type Placement } from '../../../../src/arch/decide/images.ts';
import {
  NO_COMMON_ARCHITECTURE,
  webhookServiceNamespaces,
  type ArchPod,
  type NodeSelectorTerm,
} from '../../../../src/arch/decide/pods.ts';
import { parsePolicies } from '../../../../src/arch/decide/parse.ts';
import {
  gatePod,
  nodesTainted,
  placePatch,
  releasePatch,
  unplacedRelease,
} from '../../../../src/arch/decide/patches.ts';
import { recordsPatch } from '../../../../src/arch/decide/status.ts';
import {
  ARCH_LABEL,
  ARCH_TAINT,
  FAILURE_ANNOTATION,
  POLICY_ANNOTATION,
  RESULT_ANNOTATION,
  SCHEDULING_GATE,
  STATE_LABEL,
} from '../../../../src/arch/types.ts';
import { type Inspection } from '../../../../src/registry/types.ts';
import { apply, inspection, placed, pod, spec, terms } from './fixtures.ts';

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
