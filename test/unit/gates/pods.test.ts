// Pods and startup gates: the admission of pods created with spec.nodeName on a held node, the
// readiness modes of a requirement, and the pods that started on a node before its release.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { type Gate, parseGates } from '../../../src/gates/decide/parse.ts';
import { podDone, startedEarly } from '../../../src/gates/decide/requirements.ts';
import { decideGates } from '../../../src/gates/decide/state.ts';
import { admitPod, holdingGates, type PodAdmissionInput } from '../../../src/gates/pods.ts';
import type { SlimPod } from '../../../src/policy/slim.ts';
import { withSeed, type Prng } from '../../helpers/prng.ts';
import { cilium, gateObj, minutesAgo, node, NOW, pod, TAINT_KEY, workload } from './fixtures.ts';
import { MIRROR_POD_ANNOTATION } from '../../../src/policy/pods.ts';

const TAINT = { key: TAINT_KEY, value: 'wait', effect: 'NoSchedule' };
const { gates } = parseGates([
  gateObj('cni', {
    taint: TAINT,
    requirements: {
      pods: [
        { namespace: 'kube-system', daemonSet: 'cilium' },
        { namespace: 'warm', selector: { matchLabels: { app: 'prefetch' } } },
      ],
    },
  }),
]);
const cni = gates[0]!;
const held = node({ taints: [TAINT], annotations: { [cni.keys.gatedAt]: minutesAgo(1) } });

/** A pod created with spec.nodeName n1 in `ns`. */
const bound = (ns = 'shop', labels: Record<string, string> = { app: 'web' }): SlimPod =>
  pod('web-1', { namespace: ns, labels });

const input = (p: SlimPod, o: Partial<PodAdmissionInput> = {}): PodAdmissionInput => ({
  pod: p,
  tolerations: undefined,
  node: held,
  groups: ['system:authenticated'],
  daemonSetExists: () => false,
  ...o,
});

describe('holdingGates', () => {
  test('a gate holds a node with its gated-at and its taint, not with one of them', () => {
    assert.deepEqual(
      holdingGates(gates, held).map((g) => g.name),
      ['cni'],
    );
    assert.deepEqual(holdingGates(gates, node({ taints: [TAINT] })), [], 'a taint Berth did not put on');
    assert.deepEqual(holdingGates(gates, node({ annotations: { [cni.keys.gatedAt]: minutesAgo(1) } })), []);
  });

  test('not a gate in dry run, being deleted, not enforced, or with a PreferNoSchedule taint', () => {
    const variants: Gate[] = [
      { ...cni, spec: { ...cni.spec, dryRun: true } },
      { ...cni, deleting: true },
      { ...cni, enforced: false },
      { ...cni, spec: { ...cni.spec, taint: { ...cni.spec.taint, effect: 'PreferNoSchedule' } } },
    ];
    for (const g of variants) assert.deepEqual(holdingGates([g], held), [], JSON.stringify(g));
  });
});

describe('admitPod', () => {
  test('refused on a held node: the message names the gate, the node, the taint and what to do', () => {
    const v = admitPod(gates, input(bound()));
    assert.equal(v.allowed, false);
    assert.deepEqual(v.warnings, []);
    assert.equal(
      v.message,
      'pod shop/web-1 sets spec.nodeName, which skips the scheduler and its taints: NodeStartupGate cni holds node n1 ' +
        `(taint ${TAINT_KEY}=wait:NoSchedule) until its initialisation is done. Leave spec.nodeName unset (a ` +
        'nodeSelector or affinity waits for the release), tolerate the taint, or create the pod once the node is released',
    );
  });

  test('admitted: tolerating the taint (exactly, by key, or everything), or a required pod of the gate', () => {
    for (const t of [
      { key: TAINT_KEY, operator: 'Equal' as const, value: 'wait', effect: 'NoSchedule' },
      { key: TAINT_KEY, operator: 'Exists' as const },
      { operator: 'Exists' as const },
    ])
      assert.equal(admitPod(gates, input(bound(), { tolerations: [t] })).allowed, true, JSON.stringify(t));
    assert.equal(
      admitPod(
        gates,
        input(bound(), { tolerations: [{ key: TAINT_KEY, value: 'other', effect: 'NoSchedule' }] }),
      ).allowed,
      false,
      'a toleration of another value does not tolerate it',
    );
    assert.equal(admitPod(gates, input(bound('warm', { app: 'prefetch' }))).allowed, true, 'a required pod');
    assert.equal(
      admitPod(gates, input(bound('shop', { app: 'prefetch' }))).allowed,
      false,
      'wrong namespace',
    );
  });

  test('admitted: kube-system, a DaemonSet pod whose DaemonSet exists, a mirror pod from a kubelet', () => {
    assert.equal(admitPod(gates, input(bound('kube-system'))).allowed, true);
    const ds = pod('agent-x', { namespace: 'shop', owner: { kind: 'DaemonSet', name: 'agent' } });
    const exists = (ns: string, name: string, uid: string) =>
      ns === 'shop' && name === 'agent' && uid === 'uid-agent';
    assert.equal(admitPod(gates, input(ds, { daemonSetExists: exists })).allowed, true);
    assert.equal(admitPod(gates, input(ds)).allowed, false, 'an owner reference alone proves nothing');
    const mirror = pod('etcd-n1', { namespace: 'shop', annotations: { [MIRROR_POD_ANNOTATION]: 'abc' } });
    assert.equal(admitPod(gates, input(mirror, { groups: ['system:nodes'] })).allowed, true);
    assert.equal(admitPod(gates, input(mirror)).allowed, false, 'the mirror annotation from anyone else');
  });

  test('admitted: a node not held, not in the cache, or no nodeName', () => {
    assert.equal(admitPod(gates, input(bound(), { node: node() })).allowed, true);
    assert.equal(admitPod(gates, input(bound(), { node: undefined })).allowed, true);
    const unbound = bound();
    delete unbound.spec.nodeName;
    assert.equal(admitPod(gates, input(unbound)).allowed, true);
  });

  test('Warn: admitted with a warning per gate; a Reject gate beside it still refuses', () => {
    const { gates: two } = parseGates([
      gateObj('cni', { taint: TAINT, nodeNamePods: 'Warn' }),
      gateObj('warm', { taint: { key: 'startup.berth.dev/warm' } }),
    ]);
    const both = node({
      taints: [TAINT, { key: 'startup.berth.dev/warm', effect: 'NoSchedule' }],
      annotations: { [two[0]!.keys.gatedAt]: minutesAgo(1), [two[1]!.keys.gatedAt]: minutesAgo(1) },
    });
    const warning = `pod shop/web-1 sets spec.nodeName, so it skips the taint: NodeStartupGate cni holds node n1 (taint ${TAINT_KEY}=wait:NoSchedule) until its initialisation is done`;
    assert.deepEqual(admitPod(two.slice(0, 1), input(bound(), { node: both })), {
      allowed: true,
      warnings: [warning],
    });
    const v = admitPod(two, input(bound(), { node: both }));
    assert.equal(v.allowed, false);
    assert.deepEqual(v.warnings, [warning]);
    assert.match(v.message!, /NodeStartupGate warm holds node n1/);
    assert.doesNotMatch(v.message!, /NodeStartupGate cni/);
  });

  test('generated pods: refused exactly when some Reject gate holds the node and the pod neither tolerates it nor is required nor exempt', async () => {
    await withSeed('admitPod', (r: Prng) => {
      const keys = ['a', 'b', 'c'].map((k) => `startup.berth.dev/${k}`);
      for (let i = 0; i < 300; i++) {
        const { gates } = parseGates(
          keys.map((key, k) =>
            gateObj(`g${k}`, {
              taint: { key },
              nodeNamePods: r.pick(['Reject', 'Warn']),
              requirements: { pods: [{ namespace: 'warm', selector: { matchLabels: { app: `init${k}` } } }] },
            }),
          ),
        );
        const holding = gates.filter(() => r.chance(0.5));
        const n = node({
          taints: holding.map((g) => ({ key: g.spec.taint.key, effect: 'NoSchedule' })),
          annotations: Object.fromEntries(holding.map((g) => [g.keys.gatedAt, minutesAgo(1)])),
        });
        const tolerated = keys.filter(() => r.chance(0.3));
        const ns = r.pick(['warm', 'shop', 'kube-system']);
        const app = r.pick(['init0', 'init1', 'init2', 'web']);
        const v = admitPod(
          gates,
          input(pod('p', { namespace: ns, labels: { app } }), {
            node: n,
            tolerations: tolerated.map((key) => ({ key, operator: 'Exists' })),
          }),
        );
        const bypassed = holding.filter(
          (g) =>
            ns !== 'kube-system' &&
            !tolerated.includes(g.spec.taint.key) &&
            !(ns === 'warm' && app === `init${gates.indexOf(g)}`),
        );
        const refusing = bypassed.filter((g) => g.spec.nodeNamePods === 'Reject');
        const case_ = JSON.stringify({ holding: holding.map((g) => g.name), tolerated, ns, app });
        assert.equal(v.allowed, refusing.length === 0, case_);
        assert.equal(v.warnings.length, bypassed.length - refusing.length, case_);
      }
    });
  });
});

describe('readiness', () => {
  const annotated = (phase: string, ready: boolean) =>
    pod('p', { phase, ready, annotations: { 'example.com/done': 'true' } });
  const plain = (phase: string, ready: boolean) => pod('p', { phase, ready });

  test('Annotation: only the annotation counts, Ready or Succeeded without it does not', () => {
    assert.equal(podDone(plain('Running', true), 'example.com/done', 'Annotation'), false);
    assert.equal(podDone(plain('Succeeded', false), 'example.com/done', 'Annotation'), false);
    assert.equal(podDone(annotated('Running', false), 'example.com/done', 'Annotation'), true);
    assert.equal(podDone(annotated('Pending', false), 'example.com/done', 'Annotation'), true);
  });

  test('Ready: the annotation does not count; Either: both do (the default with an annotation)', () => {
    assert.equal(podDone(annotated('Running', false), 'example.com/done', 'Ready'), false);
    assert.equal(podDone(plain('Running', true), 'example.com/done', 'Ready'), true);
    for (const mode of ['Either', undefined] as const) {
      assert.equal(podDone(annotated('Running', false), 'example.com/done', mode), true);
      assert.equal(podDone(plain('Running', true), 'example.com/done', mode), true);
      assert.equal(podDone(plain('Running', false), 'example.com/done', mode), false);
    }
  });

  test('a gate in Annotation mode names the missing annotation', () => {
    const { gates } = parseGates([
      gateObj('warm', {
        taint: { key: 'startup.berth.dev/warm' },
        requirements: {
          pods: [
            {
              namespace: 'kube-system',
              daemonSet: 'cilium',
              readyAnnotation: 'example.com/done',
              readiness: 'Annotation',
            },
          ],
        },
      }),
    ]);
    const n = node({
      taints: [{ key: 'startup.berth.dev/warm', effect: 'NoSchedule' }],
      annotations: { [gates[0]!.keys.gatedAt]: minutesAgo(1) },
    });
    const [d] = decideGates(gates, n, [cilium(true)], NOW);
    assert.equal(d!.state, 'Held');
    assert.deepEqual(d!.unmet, [
      'pods of DaemonSet kube-system/cilium: kube-system/cilium-x7k2p (Running) without example.com/done=true',
    ]);
  });
});

describe('startedEarly', () => {
  test('started pods no gate requires; not pending, deleted, mirror or required ones', () => {
    const pods = [
      cilium(true),
      workload(),
      pod('proxy-1', { owner: { kind: 'DaemonSet', name: 'kube-proxy' }, phase: 'Running' }),
      pod('job-1', { namespace: 'shop', phase: 'Succeeded' }),
      pod('queued', { namespace: 'shop', phase: 'Pending' }),
      pod('gone', { namespace: 'shop', phase: 'Running', deleting: true }),
      pod('etcd-n1', { owner: { kind: 'Node', name: 'n1' }, phase: 'Running' }),
      pod('prefetch-1', { namespace: 'warm', labels: { app: 'prefetch' }, phase: 'Running' }),
    ];
    assert.deepEqual(startedEarly(gates, pods), [
      'shop/web-6d4cf56db6-abcde',
      'kube-system/proxy-1',
      'shop/job-1',
    ]);
  });

  test('listed on the decisions of the gates that hold the node, not on the others', () => {
    const [d] = decideGates(gates, held, [workload()], NOW);
    assert.equal(d!.state, 'Held');
    assert.deepEqual(d!.startedEarly, ['shop/web-6d4cf56db6-abcde']);
    const [free] = decideGates(gates, node(), [cilium(true), workload()], NOW);
    assert.equal(free!.state, 'Released');
    assert.equal(free!.startedEarly, undefined);
  });
});
