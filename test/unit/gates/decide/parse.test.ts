import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { parseGates } from '../../../../src/gates/decide/parse.ts';
import { gateAnnotations } from '../../../../src/gates/types.ts';
import { gate, GATE_CREATED, gateObj, TAINT_KEY } from '../fixtures.ts';

const NAME_CHARS =
  "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

describe('parseGates', () => {
  test('a valid gate is enforced, with the defaults applied and its annotation keys', () => {
    const { gates, problems } = parseGates([gateObj('cni')]);
    assert.equal(problems.size, 0);
    assert.deepEqual(gates, [
      {
        name: 'cni',
        enforced: true,
        spec: {
          taint: { key: TAINT_KEY, effect: 'NoSchedule' },
          requirements: { pods: [{ namespace: 'kube-system', daemonSet: 'cilium' }] },
          nodeNamePods: 'Reject',
          minHoldSeconds: 0,
          mode: 'BootstrapOnly',
          backfill: false,
          dryRun: false,
        },
        keys: {
          gatedAt: 'cni.gates.berth.dev/gated-at',
          timedOutAt: 'cni.gates.berth.dev/timed-out-at',
          releasedByHandAt: 'cni.gates.berth.dev/released-by-hand-at',
          completedAt: 'cni.gates.berth.dev/completed-at',
          taint: 'cni.gates.berth.dev/taint',
        },
        createdAt: Date.parse(GATE_CREATED),
        deleting: false,
      },
    ]);
  });

  test('the apiVersion and kind of the object do not matter (they are the resource type)', () => {
    const obj = { ...gateObj('cni'), apiVersion: 'v1', kind: 'Whatever' };
    const { gates, problems } = parseGates([obj]);
    assert.equal(problems.size, 0);
    assert.equal(gates[0]!.enforced, true);
  });

  test('a custom completion annotation, deletion and a missing creationTimestamp', () => {
    const g = gate('cni', { completionAnnotation: 'example.com/cni-ready' });
    assert.equal(g.keys.completedAt, 'example.com/cni-ready');
    assert.equal(g.keys.gatedAt, 'cni.gates.berth.dev/gated-at');
    const { gates } = parseGates([
      gateObj('gone', {}, { deletionTimestamp: '2026-11-21T09:00:00Z', creationTimestamp: undefined }),
    ]);
    assert.equal(gates[0]!.deleting, true);
    assert.equal(gates[0]!.createdAt, 0);
  });

  test('gates come out sorted by name whatever the input order', () => {
    const { gates } = parseGates([
      gateObj('zeta', { taint: { key: 'z.example.com/t' } }),
      gateObj('alpha', { taint: { key: 'a.example.com/t' } }),
      gateObj('mid', { taint: { key: 'm.example.com/t' } }),
    ]);
    assert.deepEqual(
      gates.map((g) => g.name),
      ['alpha', 'mid', 'zeta'],
    );
    assert.ok(gates.every((g) => g.enforced));
  });

  test('an invalid taint key: Invalid, and no gate at all (nothing says what it held)', () => {
    const { gates, problems } = parseGates([gateObj('bad', { taint: { key: 'bad key!' } })]);
    assert.deepEqual(gates, []);
    assert.deepEqual(problems.get('bad'), {
      reason: 'Invalid',
      message: `invalid NodeStartupGate bad: spec.taint.key: taint key "bad key!": ${NAME_CHARS}`,
    });
  });

  test('an invalid readyAnnotation: Invalid, and a disarmed gate that still knows its taint', () => {
    const { gates, problems } = parseGates([
      gateObj('cni', {
        taint: { key: TAINT_KEY, value: 'waiting', effect: 'NoExecute' },
        completionAnnotation: 'example.com/cni-ready',
        requirements: {
          pods: [{ namespace: 'kube-system', daemonSet: 'cilium', readyAnnotation: 'not valid!' }],
        },
        mode: 'Continuous',
        minHoldSeconds: 30,
      }),
    ]);
    assert.deepEqual(problems.get('cni'), {
      reason: 'Invalid',
      message: `invalid NodeStartupGate cni: spec.requirements.pods[0].readyAnnotation: readyAnnotation "not valid!": ${NAME_CHARS}`,
    });
    assert.equal(gates.length, 1);
    assert.deepEqual(gates[0], {
      name: 'cni',
      enforced: false,
      spec: {
        requirements: {},
        minHoldSeconds: 0,
        nodeNamePods: 'Reject',
        mode: 'BootstrapOnly',
        backfill: false,
        dryRun: false,
        taint: { key: TAINT_KEY, value: 'waiting', effect: 'NoExecute' },
        completionAnnotation: 'example.com/cni-ready',
      },
      keys: {
        gatedAt: 'cni.gates.berth.dev/gated-at',
        timedOutAt: 'cni.gates.berth.dev/timed-out-at',
        releasedByHandAt: 'cni.gates.berth.dev/released-by-hand-at',
        completedAt: 'example.com/cni-ready',
        taint: 'cni.gates.berth.dev/taint',
      },
      createdAt: Date.parse(GATE_CREATED),
      deleting: false,
    });
  });

  test('other invalid specs are reported with the field path', () => {
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ minHoldSeconds: -1 }, /^invalid NodeStartupGate g: spec\.minHoldSeconds: /],
      [{ mode: 'Sometimes' }, /^invalid NodeStartupGate g: spec\.mode: /],
      [{ taint: { key: TAINT_KEY, effect: 'NoWay' } }, /^invalid NodeStartupGate g: spec\.taint\.effect: /],
      [
        { timeout: { seconds: 0, outcome: 'Release' } },
        /^invalid NodeStartupGate g: spec\.timeout\.seconds: /,
      ],
    ];
    for (const [spec, message] of cases) {
      const { gates, problems } = parseGates([gateObj('g', spec)]);
      assert.equal(problems.get('g')?.reason, 'Invalid', JSON.stringify(spec));
      assert.match(problems.get('g')!.message, message);
      // The taint still parses: a disarmed gate, never enforced.
      const disarmed = spec['taint'] ? [] : [false];
      assert.deepEqual(
        gates.map((g) => g.enforced),
        disarmed,
        JSON.stringify(spec),
      );
    }
  });

  test('selectors metav1 would refuse: Invalid (never "NotIn nothing holds every node"), disarmed, with the field', () => {
    const expr = (operator: string, values?: string[]) => ({
      matchExpressions: [{ key: 'pool', operator, ...(values ? { values } : {}) }],
    });
    const cases: [Record<string, unknown>, string][] = [
      [
        { nodeSelector: expr('NotIn', []) },
        'spec.nodeSelector.matchExpressions[0]: operator NotIn needs at least one value',
      ],
      [
        { nodeSelector: expr('In') },
        'spec.nodeSelector.matchExpressions[0]: operator In needs at least one value',
      ],
      [
        { excludeNodeSelectors: [{}, expr('Exists', ['x'])] },
        'spec.excludeNodeSelectors[1].matchExpressions[0]: operator Exists takes no values',
      ],
      [
        { nodeSelector: { matchLabels: { pool: 'not valid!' } } },
        'spec.nodeSelector.matchLabels["pool"] value "not valid!": must be empty or consist of',
      ],
      [
        { requirements: { pods: [{ namespace: 'kube-system', selector: expr('NotIn', []) }] } },
        'spec.requirements.pods[0].selector.matchExpressions[0]: operator NotIn needs at least one value',
      ],
    ];
    for (const [spec, message] of cases) {
      const { gates, problems } = parseGates([gateObj('g', spec)]);
      assert.equal(problems.get('g')?.reason, 'Invalid', JSON.stringify(spec));
      assert.ok(
        problems.get('g')!.message.startsWith(`invalid NodeStartupGate g: ${message}`),
        problems.get('g')!.message,
      );
      // Its taint is known: a disarmed gate, never enforced, that gives back what it held.
      assert.deepEqual(
        gates.map((g) => g.enforced),
        [false],
      );
    }
    // The same selectors, well formed, are fine.
    assert.equal(parseGates([gateObj('g', { nodeSelector: expr('NotIn', ['a']) })]).problems.size, 0);
  });

  test('a name too long for annotation keys: Invalid and left out, even with a valid spec', () => {
    const max = 'n'.repeat(237);
    const over = 'n'.repeat(238);
    assert.equal(gateAnnotations(max, {}).gatedAt.split('/')[0]!.length, 253);
    const { gates, problems } = parseGates([
      gateObj(max),
      gateObj(over, { taint: { key: 'o.example.com/t' } }),
    ]);
    assert.deepEqual(
      gates.map((g) => [g.name.length, g.enforced]),
      [[237, true]],
    );
    assert.deepEqual(problems.get(over), {
      reason: 'Invalid',
      message: 'the name is longer than 237 characters: its node annotations would not be valid keys',
    });
    assert.equal(problems.has(max), false);
  });

  test('two gates with the same taint key and effect: the first by name is enforced, both Conflicting', () => {
    // Given in reverse order: the outcome does not depend on the order events arrive in.
    const { gates, problems } = parseGates([gateObj('b-cni'), gateObj('a-cni')]);
    assert.deepEqual(
      gates.map((g) => [g.name, g.enforced]),
      [
        ['a-cni', true],
        ['b-cni', false],
      ],
    );
    const message = `gates a-cni and b-cni both use the taint ${TAINT_KEY}:NoSchedule; a-cni (first by name) is enforced`;
    assert.deepEqual(problems.get('a-cni'), { reason: 'Conflicting', message });
    assert.deepEqual(problems.get('b-cni'), { reason: 'Conflicting', message });
    assert.equal(problems.size, 2);
  });

  test('the same key with another effect, or another key, is no conflict', () => {
    const { gates, problems } = parseGates([
      gateObj('a', { taint: { key: TAINT_KEY, effect: 'NoSchedule' } }),
      gateObj('b', { taint: { key: TAINT_KEY, effect: 'NoExecute' } }),
      gateObj('c', { taint: { key: 'other.example.com/t', effect: 'NoSchedule' } }),
    ]);
    assert.equal(problems.size, 0);
    assert.deepEqual(
      gates.map((g) => g.enforced),
      [true, true, true],
    );
  });

  test('a taint value does not make two taints different', () => {
    const { gates, problems } = parseGates([
      gateObj('a', { taint: { key: TAINT_KEY, value: 'x' } }),
      gateObj('b', { taint: { key: TAINT_KEY, value: 'y' } }),
    ]);
    assert.equal(problems.get('b')?.reason, 'Conflicting');
    assert.deepEqual(
      gates.map((g) => g.enforced),
      [true, false],
    );
  });

  test('an invalid gate does not take part in conflicts', () => {
    const { gates, problems } = parseGates([
      gateObj('a', {
        requirements: { pods: [{ daemonSet: 'cilium', namespace: 'kube-system', readyAnnotation: '!' }] },
      }),
      gateObj('b'),
    ]);
    assert.equal(problems.get('a')?.reason, 'Invalid');
    assert.equal(problems.has('b'), false);
    assert.deepEqual(
      gates.map((g) => [g.name, g.enforced]),
      [
        ['a', false],
        ['b', true],
      ],
    );
  });
});

describe('parseGates: a completion annotation that is a gate key', () => {
  test("another gate's key, or this gate's own bookkeeping: Invalid, and the disarmed gate never claims it", () => {
    for (const [key, whose] of [
      ['other.gates.berth.dev/gated-at', 'another gate'],
      ['cni.gates.berth.dev/gated-at', 'this gate'],
      ['cni.gates.berth.dev/timed-out-at', 'this gate'],
    ] as const) {
      const { gates, problems } = parseGates([gateObj('cni', { completionAnnotation: key })]);
      assert.equal(problems.get('cni')?.reason, 'Invalid', key);
      assert.match(
        problems.get('cni')!.message,
        new RegExp(`completionAnnotation "${key}" is a key of ${whose}`),
      );
      assert.equal(gates[0]!.enforced, false);
      assert.equal(
        gates[0]!.keys.completedAt,
        'cni.gates.berth.dev/completed-at',
        'its default, not the key',
      );
    }
  });

  test('a key of its own under its prefix, or one outside the gates domain, is fine', () => {
    for (const key of ['cni.gates.berth.dev/ready-since', 'startup.k8s.io/completedAt']) {
      const { problems } = parseGates([gateObj('cni', { completionAnnotation: key })]);
      assert.deepEqual([...problems], [], key);
    }
  });
});
