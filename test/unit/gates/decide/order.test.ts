// Ordered gates (`after`): cycles found and made Invalid, unknown names, phases, and the release of
// a node held by every gate of a generated DAG, phase after phase, through the real patches.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { afterCycles, gatePhases, nodePhase, unknownAfter } from '../../../../src/gates/decide/order.ts';
import { type Gate, parseGates } from '../../../../src/gates/decide/parse.ts';
import { admitNode } from '../../../../src/gates/admit.ts';
import { nodePatch } from '../../../../src/gates/decide/patch.ts';
import { decideGates } from '../../../../src/gates/decide/state.ts';
import type { SlimNode } from '../../../../src/policy/slim.ts';
import { withSeed, type Prng } from '../../../helpers/prng.ts';
import { applyPatch, gateObj, node, NOW, type NodeOptions } from '../fixtures.ts';

/** A gate whose own requirement (the node Ready) holds on `readyNode`, waiting for `after`. */
const ordered = (name: string, after?: string[]) =>
  gateObj(name, {
    taint: { key: `startup.berth.dev/${name}` },
    requirements: { nodeConditions: [{ type: 'Ready' }] },
    ...(after ? { after } : {}),
  });
const READY = [{ type: 'Ready', status: 'True' }];

/** The node as admission leaves it: every selecting gate's taint and gated-at. */
function admitted(gates: Gate[], o: NodeOptions = {}): SlimNode {
  const { taints, annotations } = admitNode(gates, node(o), NOW);
  return node({ ...o, taints, annotations, conditions: READY });
}

describe('afterCycles', () => {
  test('a gate waiting for itself, a two-gate cycle, and a gate waiting for a cycle without being on it', () => {
    const cycles = afterCycles(
      new Map([
        ['self', ['self']],
        ['a', ['b']],
        ['b', ['a']],
        ['c', ['a']],
        ['d', []],
      ]),
    );
    assert.deepEqual(
      [...cycles],
      [
        ['self', 'after: the gate waits for itself (a cycle)'],
        ['a', 'after: gates a, b wait for each other (a cycle); none of them is enforced'],
        ['b', 'after: gates a, b wait for each other (a cycle); none of them is enforced'],
      ],
    );
  });

  test('names no gate has are not edges', () => {
    assert.deepEqual([...afterCycles(new Map([['a', ['ghost']]]))], []);
  });

  test('generated graphs: exactly the gates on a cycle, each with its cycle, as a transitive closure finds them', async () => {
    await withSeed('afterCycles', (r: Prng) => {
      for (let i = 0; i < 300; i++) {
        const n = 1 + r.int(8);
        const names = Array.from({ length: n }, (_, k) => `g${k}`);
        const edges = names.map(() => names.filter(() => r.chance(0.2)));
        const graph = new Map(names.map((g, k) => [g, [...edges[k]!, ...(r.chance(0.1) ? ['ghost'] : [])]]));
        // The oracle: Warshall's closure over the adjacency matrix.
        const reach = names.map((_, a) => names.map((b) => edges[a]!.includes(b)));
        for (let k = 0; k < n; k++)
          for (let a = 0; a < n; a++)
            for (let b = 0; b < n; b++) reach[a]![b] ||= reach[a]![k]! && reach[k]![b]!;
        const cycles = afterCycles(graph);
        for (let a = 0; a < n; a++) {
          const onCycle = reach[a]![a]!;
          assert.equal(cycles.has(names[a]!), onCycle, `${names[a]} in ${JSON.stringify([...graph])}`);
          if (!onCycle) continue;
          const members = names.filter((_, b) => reach[a]![b]! && reach[b]![a]!).sort();
          const message = cycles.get(names[a]!)!;
          if (members.length === 1) assert.match(message, /waits for itself/);
          else assert.ok(message.includes(`gates ${members.join(', ')} wait`), message);
        }
      }
    });
  });
});

describe('parseGates: after', () => {
  test('the gates of a cycle are Invalid and not enforced; a gate after them and the others stay enforced', () => {
    const { gates, problems } = parseGates([
      ordered('a', ['b']),
      ordered('b', ['a']),
      ordered('c', ['a']),
      ordered('d'),
    ]);
    assert.deepEqual(
      gates.map((g) => [g.name, g.enforced]),
      [
        ['a', false],
        ['b', false],
        ['c', true],
        ['d', true],
      ],
    );
    assert.deepEqual([...problems.keys()], ['a', 'b']);
    assert.equal(problems.get('a')!.reason, 'Invalid');
    // Not enforced, it gives back what it holds: a node it held loses its taint and gated-at.
    const held = admitted(parseGates([ordered('a')]).gates);
    const [d] = decideGates(gates.slice(0, 1), held, [], NOW);
    assert.equal(d!.state, 'NotSelected');
    assert.equal(d!.taint, false);
  });

  test('a cycle through a gate that loses a taint conflict is still a cycle', () => {
    const loser = gateObj('b', { taint: { key: 'startup.berth.dev/a' }, after: ['a'] });
    const { problems } = parseGates([ordered('a', ['b']), loser]);
    assert.match(problems.get('a')!.message, /cycle/);
    assert.match(problems.get('b')!.message, /cycle/);
  });

  test('unknownAfter: names no gate has (invalid gates whose taint does not parse included)', () => {
    const { gates } = parseGates([
      ordered('a', ['ghost', 'b', 'broken']),
      ordered('b'),
      gateObj('broken', { taint: { key: 'not valid!' } }),
    ]);
    assert.deepEqual(
      unknownAfter(
        gates.find((g) => g.name === 'a')!,
        gates,
      ),
      ['ghost', 'broken'],
    );
    assert.deepEqual(
      unknownAfter(
        gates.find((g) => g.name === 'b')!,
        gates,
      ),
      [],
    );
  });
});

describe('ordered release', () => {
  const { gates } = parseGates([ordered('net'), ordered('warm', ['net']), ordered('check', ['warm', 'net'])]);
  const held = admitted(gates);

  test('phases: 1 without predecessors, one more than the latest predecessor', () => {
    assert.deepEqual(Object.fromEntries(gatePhases(gates)), { net: 1, warm: 2, check: 3 });
  });

  test('a later gate whose requirements hold waits, held, while an earlier one holds the node', () => {
    const [check, net, warm] = decideGates(gates, held, [], NOW);
    assert.equal(net!.state, 'Released');
    assert.equal(net!.taint, false);
    assert.deepEqual(
      { state: warm!.state, taint: warm!.taint, waitingFor: warm!.waitingFor, unmet: warm!.unmet },
      {
        state: 'Held',
        taint: true,
        waitingFor: ['net'],
        unmet: ['gate net to release the node first (after)'],
      },
    );
    assert.equal(warm!.why, 'waiting for gate net to release the node first');
    assert.deepEqual(check!.waitingFor, ['warm', 'net']);
    assert.equal(check!.why, 'waiting for gates warm, net to release the node first');
    // In the round that releases net, the gates after it still wait: no phase is current.
    assert.deepEqual(nodePhase(gates, [check!, net!, warm!]), {
      phase: 2,
      of: 3,
      now: [],
      next: ['check', 'warm'],
    });
  });

  test('nodePhase: the gates whose requirements count now, and those after them', () => {
    // net waits for its DaemonSet's pods: it holds the node, in phase 1 of 3.
    const waiting = parseGates([
      gateObj('net', { taint: { key: 'startup.berth.dev/net' } }),
      ordered('warm', ['net']),
      ordered('check', ['warm']),
    ]).gates;
    const decisions = decideGates(waiting, admitted(waiting), [], NOW);
    assert.deepEqual(nodePhase(waiting, decisions), {
      phase: 1,
      of: 3,
      now: ['net'],
      next: ['check', 'warm'],
    });
    assert.deepEqual(decisions[0]!.waitingFor, ['warm']);
  });

  test('the timeout counts while a gate waits for another: KeepTainted says what it waits for', () => {
    const { gates } = parseGates([
      gateObj('net', { taint: { key: 'startup.berth.dev/net' } }),
      gateObj('warm', {
        taint: { key: 'startup.berth.dev/warm' },
        after: ['net'],
        timeout: { seconds: 60, outcome: 'KeepTainted' },
      }),
    ]);
    const n = admitted(gates);
    const later = decideGates(gates, n, [], NOW + 120_000)[1]!;
    assert.equal(later.state, 'HeldTimedOut');
    assert.deepEqual(later.waitingFor, ['net']);
    assert.match(later.event!.message, /waiting for: gate net to release the node first/);
  });

  test('a predecessor that does not select the node, or does not hold it, is not waited for', () => {
    const { gates } = parseGates([
      gateObj('net', {
        taint: { key: 'startup.berth.dev/net' },
        nodeSelector: { matchLabels: { pool: 'gpu' } },
      }),
      ordered('warm', ['net']),
    ]);
    const [net, warm] = decideGates(gates, admitted(gates), [], NOW);
    assert.equal(net!.state, 'NotSelected');
    assert.equal(warm!.state, 'Released');
    assert.equal(warm!.taint, false);
  });

  test('no phase line when no gate holds the node', () => {
    assert.equal(nodePhase(gates, decideGates(gates, node({ conditions: READY }), [], NOW)), undefined);
  });

  test('generated DAGs: every gate comes off in the round of its phase, never before a predecessor', async () => {
    await withSeed('ordered release', (r: Prng) => {
      for (let i = 0; i < 150; i++) {
        const n = 1 + r.int(7);
        const names = Array.from({ length: n }, (_, k) => `p${k}`);
        // Edges only to earlier gates: a DAG. Shuffled names, so creation order says nothing.
        const after = names.map((_, k) => names.slice(0, k).filter(() => r.chance(0.35)));
        const objs = names.map((g, k) => ordered(g, after[k]!.length ? after[k] : undefined));
        for (let k = objs.length - 1; k > 0; k--) {
          const j = r.int(k + 1);
          [objs[k], objs[j]] = [objs[j]!, objs[k]!];
        }
        const { gates, problems } = parseGates(objs);
        assert.equal(problems.size, 0);
        // The oracle: longest path, in index order.
        const phase: number[] = [];
        for (let k = 0; k < n; k++)
          phase[k] = 1 + Math.max(0, ...after[k]!.map((p) => phase[names.indexOf(p)]!));
        assert.deepEqual(
          Object.fromEntries(gatePhases(gates)),
          Object.fromEntries(names.map((g, k) => [g, phase[k]])),
        );
        let current = admitted(gates);
        const releasedIn = new Map<string, number>();
        for (let round = 1; round <= n + 1 && releasedIn.size < n; round++) {
          const decisions = decideGates(gates, current, [], NOW + round * 1000);
          const patch = nodePatch(current, gates, decisions);
          current = applyPatch(current, patch);
          for (const d of decisions) if (d.release) releasedIn.set(d.gate, round);
          current.metadata!.resourceVersion = String(round + 100);
        }
        for (const [k, g] of names.entries())
          assert.equal(releasedIn.get(g), phase[k], `${g}: after ${after[k]}`);
        assert.deepEqual(current.spec.taints ?? [], [], 'every taint off at the end');
      }
    });
  });
});
