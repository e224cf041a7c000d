import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { placementKeys } from '../../../src/agents/decide.ts';
import { AGENT_KEYS } from '../../../src/agents/types.ts';
import { agentPlacementSpec } from '../../../src/agents/crd.ts';
import { gateKeyClaims, parseGates } from '../../../src/gates/decide/parse.ts';
import { GATE_KEYS } from '../../../src/gates/types.ts';
import { outputKeys } from '../../../src/labels/decide/nodes.ts';
import type { Rule } from '../../../src/labels/types.ts';
import {
  KeyOwnership,
  overlaps,
  type KeyPattern,
  type OwnershipChange,
} from '../../../src/policy/nodes/ownership.ts';
import { gateObj } from '../gates/fixtures.ts';

const key = (kind: KeyPattern['kind'], k: string): KeyPattern => ({ kind, key: k });
const prefix = (kind: KeyPattern['kind'], p: string): KeyPattern => ({ kind, prefix: p });
const domain = (kind: KeyPattern['kind'], d: string): KeyPattern => ({ kind, subdomainsOf: d });

describe('overlaps', () => {
  const cases: [string, KeyPattern, KeyPattern, boolean][] = [
    ['the same key', key('label', 'a/b'), key('label', 'a/b'), true],
    ['another key', key('label', 'a/b'), key('label', 'a/c'), false],
    ['the same key of another kind', key('label', 'a/b'), key('annotation', 'a/b'), false],
    ['any kind covers every kind', key('taint', 'a/b'), key('any', 'a/b'), true],
    [
      'a key under a prefix',
      key('annotation', 'ate.dev/claim.123'),
      prefix('annotation', 'ate.dev/claim.'),
      true,
    ],
    [
      'a key beside a prefix',
      key('annotation', 'ate.dev/claims'),
      prefix('annotation', 'ate.dev/claim.'),
      false,
    ],
    ['nested prefixes', prefix('annotation', 'ate.dev/'), prefix('annotation', 'ate.dev/claim.'), true],
    ['disjoint prefixes', prefix('annotation', 'ate.dev/a'), prefix('annotation', 'ate.dev/b'), false],
    [
      'a key in a subdomain',
      key('annotation', 'w.gates.berth.dev/gated-at'),
      domain('any', 'gates.berth.dev'),
      true,
    ],
    [
      'a key in a deeper subdomain',
      key('label', 'a.w.gates.berth.dev/x'),
      domain('any', 'gates.berth.dev'),
      true,
    ],
    [
      'the domain itself is not a subdomain',
      key('label', 'gates.berth.dev/exempt'),
      domain('any', 'gates.berth.dev'),
      false,
    ],
    ['a lookalike domain', key('label', 'xgates.berth.dev/x'), domain('any', 'gates.berth.dev'), false],
    ['a key without a prefix', key('label', 'gates.berth.dev'), domain('any', 'gates.berth.dev'), false],
    [
      'a claim prefix in a subdomain',
      prefix('annotation', 'w.gates.berth.dev/claim.'),
      domain('any', 'gates.berth.dev'),
      true,
    ],
    [
      'a claim prefix without a domain part',
      prefix('annotation', 'w.gates'),
      domain('any', 'gates.berth.dev'),
      false,
    ],
    ['nested domains', domain('any', 'a.gates.berth.dev'), domain('any', 'gates.berth.dev'), true],
  ];
  for (const [what, a, b, want] of cases) {
    test(`${what}: ${want}`, () => {
      assert.equal(overlaps(a, b), want);
      assert.equal(overlaps(b, a), want, 'symmetric');
    });
  }
});

/** A registry as `berth run` builds it: the gates' and agents' declarations, and live gates. */
function registry() {
  const keys = new KeyOwnership();
  keys.declare('gates', GATE_KEYS);
  keys.declare('agents', AGENT_KEYS);
  return keys;
}
const warmup = parseGates([
  gateObj('warmup', { taint: { key: 'example.com/warming' }, completionAnnotation: 'startup.k8s.io/done' }),
]).gates;

const rule = (o: Partial<Rule>): Rule => ({
  name: 'nodelabelrule/r',
  source: { kind: 'NodeLabelRule', name: 'r' },
  allOf: [{ label: 'pool', operator: 'Exists' }],
  anyOf: [],
  labels: {},
  annotations: {},
  taints: [],
  ...o,
});
const placement = (name: string, label: string, claimPrefix: string) => ({
  name,
  spec: agentPlacementSpec.parse({
    podSelector: { matchLabels: { app: 'x' } },
    owner: { controllerRef: true },
    nodeLabel: { key: label },
    claimAnnotationPrefix: claimPrefix,
  }),
});

describe('KeyOwnership', () => {
  test('a rule may not write a gate annotation: the message names the gate, or the reserved domain', () => {
    const keys = registry();
    const r = rule({ annotations: { 'warmup.gates.berth.dev/gated-at': 'x', 'berth.dev/matched-by': 'y' } });
    assert.deepEqual(keys.violations('labels', outputKeys(r)), [
      'annotation warmup.gates.berth.dev/gated-at is owned by startup gates',
    ]);
    keys.claim('gates', gateKeyClaims(warmup));
    assert.deepEqual(keys.violations('labels', outputKeys(r)), [
      'annotation warmup.gates.berth.dev/gated-at is owned by NodeStartupGate warmup (startup gates)',
    ]);
  });

  test("a rule may not set a gate's taint (any effect) or completion annotation; the exempt label is an input, free", () => {
    const keys = registry();
    keys.claim('gates', gateKeyClaims(warmup));
    const r = rule({
      labels: { 'gates.berth.dev/exempt': 'true', 'example.com/warming': 'x' },
      annotations: { 'startup.k8s.io/done': 'now' },
      taints: [{ key: 'example.com/warming', effect: 'NoExecute' }],
    });
    assert.deepEqual(keys.violations('labels', outputKeys(r)), [
      'annotation startup.k8s.io/done is owned by NodeStartupGate warmup (startup gates)',
      'taint example.com/warming is owned by NodeStartupGate warmup (startup gates)',
    ]);
  });

  test("a rule may not write a placement's label or claims; a placement may not write a gate's keys", () => {
    const keys = registry();
    keys.claim('gates', gateKeyClaims(warmup));
    const ok = placement('atelet', 'ate.dev/atelet', 'ate.dev/claim.');
    const bad = placement('sneaky', 'warmup.gates.berth.dev/x', 'startup.k8s.');
    assert.deepEqual(
      keys.violations(
        'agents',
        placementKeys(ok).map((c) => c.pattern),
      ),
      [],
    );
    assert.deepEqual(
      keys.violations(
        'agents',
        placementKeys(bad).map((c) => c.pattern),
      ),
      [
        'label warmup.gates.berth.dev/x is owned by NodeStartupGate warmup (startup gates)',
        'annotations startup.k8s.* are owned by NodeStartupGate warmup (startup gates)',
      ],
    );
    keys.claim('agents', placementKeys(ok));
    const r = rule({ labels: { 'ate.dev/atelet': 'true' }, annotations: { 'ate.dev/claim.123': 'x' } });
    assert.deepEqual(keys.violations('labels', outputKeys(r)), [
      'label ate.dev/atelet is owned by AgentPlacement atelet (agent placement)',
      'annotation ate.dev/claim.123 is owned by AgentPlacement atelet (agent placement)',
    ]);
    // Gates outrank placements: a placement's claims never invalidate a gate.
    assert.deepEqual(keys.violations('gates', [key('annotation', 'ate.dev/claim.1')]), []);
  });

  test("the node writers' records outrank every capability", () => {
    const keys = registry();
    assert.deepEqual(keys.violations('gates', [key('annotation', 'berth-labels.nodes.berth.dev/taints')]), [
      "annotation berth-labels.nodes.berth.dev/taints is owned by Berth's node writers",
    ]);
  });

  test('watchers hear of a change of what a capability owns, and only of a change', () => {
    const keys = registry();
    const heard: OwnershipChange[] = [];
    keys.addEventHandler({ onUpdate: (c) => heard.push(c) });
    keys.claim('gates', gateKeyClaims(warmup));
    keys.claim('gates', gateKeyClaims(warmup));
    keys.claim('agents', []);
    keys.claim('gates', []);
    assert.deepEqual(heard, [
      { capability: 'gates', rank: 0 },
      { capability: 'agents', rank: 1 },
      { capability: 'gates', rank: 0 },
    ]);
    assert.deepEqual(
      keys.violations('labels', [key('taint', 'example.com/warming')]),
      [],
      'a deleted gate owns its taint no longer',
    );
  });

  test('synced once every capability that claims live keys has its policies cached', async () => {
    const keys = registry();
    let release!: () => void;
    const cached = new Promise<void>((r) => (release = r));
    keys.declare('gates', GATE_KEYS, () => cached);
    let synced = false;
    const waiting = keys.waitForSync().then(() => (synced = true));
    await new Promise((r) => setImmediate(r));
    assert.equal(synced, false);
    release();
    await waiting;
    assert.equal(synced, true);
  });
});
