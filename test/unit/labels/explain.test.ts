import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test, type TestContext } from 'node:test';
import { checkOwnership, placementClaims } from '../../../src/agents/decide.ts';
import { parsePlacements } from '../../../src/agents/parse.ts';
import { AGENT_KEYS } from '../../../src/agents/types.ts';
import { explainerOf, explainObject } from '../../../src/explain.ts';
import { gateKeyClaims, parseGates } from '../../../src/gates/decide/parse.ts';
import { GATE_KEYS } from '../../../src/gates/types.ts';
import { explainNodeLabels, explainRule, previewRules } from '../../../src/labels/explain.ts';
import { holdsBeside, holdsOf } from '../../../src/labels/files.ts';
import { scanRuleDir } from '../../../src/labels/files.ts';
import { FIELD_MANAGER, type Rule } from '../../../src/labels/types.ts';
import { KeyOwnership, type KeyPattern } from '../../../src/policy/nodes/ownership.ts';
import type { KubeObject, ResourceRef } from '../../../src/runtime/api/meta.ts';
import type { KubeClient } from '../../../src/runtime/client/client.ts';
import { gateObj } from '../gates/fixtures.ts';

/** A node carrying `owned`, set by Berth's field manager, and `others`, set by someone else. */
const node = (
  owned: Record<string, string>,
  others: Record<string, string> = {},
  name = 'n1',
): KubeObject => ({
  metadata: {
    name,
    labels: { ...others, ...owned },
    managedFields: [
      {
        manager: FIELD_MANAGER,
        operation: 'Apply',
        fieldsV1: {
          'f:metadata': { 'f:labels': Object.fromEntries(Object.keys(owned).map((k) => [`f:${k}`, {}])) },
        },
      },
    ],
  },
});

async function ruleDir(t: TestContext, files: Record<string, string>): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'berth-explain-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  for (const [path, content] of Object.entries(files)) {
    await mkdir(join(dir, path, '..'), { recursive: true });
    await writeFile(join(dir, path), content);
  }
  return dir;
}

/** A NodeLabelRule matching the nodes with a `pool` label, with these outputs. */
const rule = (name: string, outputs: Partial<Rule>): Rule => ({
  name: `nodelabelrule/${name}`,
  source: { kind: 'NodeLabelRule', name },
  allOf: [{ label: 'pool', operator: 'Exists' }],
  anyOf: [],
  labels: {},
  annotations: {},
  taints: [],
  ...outputs,
});

describe('berth rules test previews what Berth would write', () => {
  test("a label another manager set to another value is not Berth's to change; one it owns too stays when Berth lets go", () => {
    // tier=silver is kubectl's: a candidate setting gold is held back, as the controller would.
    const theirs = node({}, { pool: 'a', tier: 'silver' });
    assert.deepEqual(previewRules([theirs], [], [rule('gold', { labels: { tier: 'gold' } })]), []);
    // zone=a is Berth's and kubectl's: removing the rule leaves it on the node.
    const shared = node({ zone: 'a' }, { pool: 'a' });
    shared.metadata!.managedFields!.push({
      manager: 'kubectl',
      operation: 'Apply',
      fieldsV1: { 'f:metadata': { 'f:labels': { 'f:zone': {} } } },
    });
    assert.deepEqual(previewRules([shared], [rule('zone', { labels: { zone: 'a' } })], []), []);
    // Berth's alone: a loss.
    const mine = node({ zone: 'a' }, { pool: 'a' });
    assert.deepEqual(
      previewRules([mine], [rule('zone', { labels: { zone: 'a' } })], []).map((n) => n.changes.length),
      [1],
    );
  });
});

describe('explain node: labels held for a rule file Berth cannot use', () => {
  test('a label kept only by a rejected rule file is held, with the file and its error, not removed', async (t) => {
    const dir = await ruleDir(t, {
      'accelerators/edgetpu': 'kkohtaka.org/edgetpu\nnot a key\n',
      'accelerators/gpu': 'nvidia.com/gpu.present\n',
    });
    const scan = await scanRuleDir(dir);
    const n = node(
      { 'accelerators/edgetpu': 'true', 'accelerators/gpu': 'true' },
      { 'nvidia.com/gpu.present': '' },
    );
    assert.deepEqual(
      holdsOf(scan).map((h) => [h.scope, h.file]),
      [[{ namespace: 'accelerators', label: 'edgetpu' }, join(dir, 'accelerators', 'edgetpu')]],
    );
    const lines = explainNodeLabels(n, scan.rules, holdsOf(scan));
    // The label a rule sets is backed by it; only the rejected file's is held.
    const held = lines.filter((l) => l.includes('held:'));
    assert.equal(held.length, 1, lines.join('\n'));
    assert.match(
      held[0]!,
      new RegExp(
        `^ {2}held: label accelerators/edgetpu=true stays though no rule sets it: rule file ${join(dir, 'accelerators', 'edgetpu')} cannot be used \\(line 2: "not a key" is not a valid label key`,
      ),
    );
    assert.match(held[0]!, /until the file is fixed or removed/);
    assert.doesNotMatch(lines.join('\n'), /will remove label accelerators\/edgetpu/);
    assert.doesNotMatch(lines.join('\n'), /not yet applied/);
  });

  test('a namespace directory Berth cannot use holds the labels under it, and says why', async (t) => {
    const outside = await ruleDir(t, { edgetpu: 'kkohtaka.org/edgetpu\n' });
    const dir = await ruleDir(t, { 'other.example.org/x': 'a\n' });
    await symlink(outside, join(dir, 'accelerators'));
    const scan = await scanRuleDir(dir);
    const n = node({ 'accelerators/edgetpu': 'true', 'other.example.org/x': 'true' }, { a: '' });
    const text = explainNodeLabels(n, scan.rules, holdsOf(scan)).join('\n');
    assert.match(
      text,
      /held: label accelerators\/edgetpu=true stays though no rule sets it: namespace directory \S+accelerators cannot be used \(is a symbolic link that leads out of the rule directory[^)]*\): Berth leaves the labels it set under it where they are until it can be read or is removed/,
    );
    assert.doesNotMatch(text, /held: label other\.example\.org/);
    assert.doesNotMatch(text, /will remove/);
  });

  test('without a hold, a label no rule sets is still to be removed', async (t) => {
    const dir = await ruleDir(t, { 'accelerators/gpu': 'nvidia.com/gpu.present\n' });
    const scan = await scanRuleDir(dir);
    assert.deepEqual(holdsOf(scan), []);
    const text = explainNodeLabels(node({ 'accelerators/edgetpu': 'true' }), scan.rules, holdsOf(scan)).join(
      '\n',
    );
    assert.match(text, /will remove label accelerators\/edgetpu \(no rule backs it any more\)/);
    assert.doesNotMatch(text, /held:/);
  });

  test('a path that vanished is gone, as the controller finds on its recheck: nothing is held', () => {
    const scan = {
      rules: [],
      errors: [],
      unsettled: [
        {
          scope: { namespace: 'accelerators', label: 'edgetpu' },
          file: 'labels/accelerators/edgetpu',
          vanished: true,
        },
      ],
    };
    assert.deepEqual(holdsOf(scan), []);
  });

  test('a file name is escaped in the held line', () => {
    const file = 'labels/accelerators/edge\ntpu';
    const text = explainNodeLabels(
      node({ 'accelerators/edgetpu': 'true' }),
      [],
      [
        {
          scope: { namespace: 'accelerators', label: 'edgetpu' },
          file,
          errors: [{ file, message: 'cannot read: permission denied' }],
        },
      ],
    );
    assert.ok(
      text.some((l) => l.includes('rule file labels/accelerators/edge\\u000atpu cannot be used')),
      text.join('\n'),
    );
  });
});

describe('rules test: labels held for a rule file Berth cannot use', () => {
  test('a candidate that fixes the file changes nothing where the label is held, and adds it where it is missing', async (t) => {
    const dir = await ruleDir(t, {
      'accelerators/edgetpu': 'kkohtaka.org/edgetpu\nnot a key\n',
      'accelerators/gpu': 'nvidia.com/gpu.present\n',
    });
    const fixed = await ruleDir(t, { 'accelerators/edgetpu': 'kkohtaka.org/edgetpu\n' });
    const scan = await scanRuleDir(dir);
    const candidates = (await scanRuleDir(fixed)).rules;
    const holds = holdsOf(scan);
    // Held and backed by the fix; backed by the fix only; held, but the fix does not back it.
    const nodes = [
      node({ 'accelerators/edgetpu': 'true' }, { 'kkohtaka.org/edgetpu': '' }, 'held'),
      node({}, { 'kkohtaka.org/edgetpu': '' }, 'new'),
      node({ 'accelerators/edgetpu': 'true' }, {}, 'stale'),
    ];
    const after = [...scan.rules, ...candidates];
    assert.deepEqual(holdsBeside(holds, candidates), [], 'the candidate stands in for the broken file');
    assert.deepEqual(
      previewRules(nodes, scan.rules, after, { before: holds, after: holdsBeside(holds, candidates) }),
      [
        {
          node: 'new',
          changes: [
            { kind: 'label', key: 'accelerators/edgetpu', after: 'true', rule: 'file:accelerators/edgetpu' },
          ],
        },
        {
          node: 'stale',
          changes: [
            {
              kind: 'label',
              key: 'accelerators/edgetpu',
              before: 'true',
              rule: `held: ${join(dir, 'accelerators', 'edgetpu')} cannot be used`,
            },
          ],
        },
      ],
    );
    // Without the holds, as before: the held node would gain the label it carries.
    assert.deepEqual(
      previewRules(nodes, scan.rules, after).map((n) => n.node),
      ['held', 'new'],
    );
  });

  test("a candidate for another file leaves the broken file's hold, and no rule lifts a directory's", async (t) => {
    const dir = await ruleDir(t, { 'accelerators/edgetpu': 'not a key\n' });
    const other = await ruleDir(t, { 'accelerators/gpu': 'nvidia.com/gpu.present\n' });
    const fixed = await ruleDir(t, { 'accelerators/edgetpu': 'kkohtaka.org/edgetpu\n' });
    const holds = holdsOf(await scanRuleDir(dir));
    const candidates = (await scanRuleDir(other)).rules;
    assert.equal(holds.length, 1);
    assert.deepEqual(holdsBeside(holds, candidates), holds);
    const held = node({ 'accelerators/edgetpu': 'true' });
    assert.deepEqual(previewRules([held], [], candidates, { before: holds, after: holds }), []);
    const dirHold = { ...holds[0]!, scope: { namespace: 'accelerators' } };
    assert.deepEqual(holdsBeside([dirHold], (await scanRuleDir(fixed)).rules), [dirHold]);
  });
});

describe('explain node: a rule that would write a key another capability owns', () => {
  const warmup = gateObj('warmup', { taint: { key: 'example.com/warming' } });
  /** An AgentPlacement object: its label, and its claim annotations under `prefix`. */
  const placementObj = (name: string, label: string, prefix: string): KubeObject => ({
    metadata: { name, uid: `${name}-uid`, generation: 1 },
    spec: {
      podSelector: { matchLabels: { app: name } },
      owner: { controllerRef: true },
      nodeLabel: { key: label },
      claimAnnotationPrefix: prefix,
    },
  });
  const atelet = placementObj('atelet', 'ate.dev/atelet', 'ate.dev/claim.');
  const rules = [
    rule('gated', { annotations: { 'warmup.gates.berth.dev/gated-at': 'now' } }),
    rule('gpu', { labels: { 'example.com/gpu': 'true' } }),
    rule('pool-agent', { labels: { 'ate.dev/atelet': 'true' } }),
    rule('warming', { taints: [{ key: 'example.com/warming', effect: 'NoSchedule' }] }),
  ];
  // Berth set the placement's label through a rule before the placement came: it gives it back.
  const n = node({ 'ate.dev/atelet': 'true' }, { pool: 'user' });

  /** What the controllers claim from these gates and placements, in a registry as `berth run` declares it. */
  function owners(): (keys: KeyPattern[]) => string[] {
    const keys = new KeyOwnership();
    keys.declare('gates', GATE_KEYS);
    keys.declare('agents', AGENT_KEYS);
    keys.claim('gates', gateKeyClaims(parseGates([warmup]).gates));
    const placements = checkOwnership(parsePlacements([atelet]).parsed, (k) => keys.violations('agents', k));
    keys.claim('agents', placementClaims(placements));
    return (k) => keys.violations('labels', k);
  }

  test("a rule writing a gate's taint or annotation, or a placement's label, is refused with its owner and sets nothing", () => {
    const lines = explainNodeLabels(n, rules, [], owners());
    const text = lines.join('\n');
    assert.equal(
      lines[0],
      `Derived labels (field manager ${FIELD_MANAGER}): 1 of 1 rules match (3 more refused)`,
    );
    assert.deepEqual(
      lines.filter((l) => l.includes('refused:')),
      [
        '  refused: nodelabelrule/gated (NodeLabelRule gated) sets nothing: annotation warmup.gates.berth.dev/gated-at is owned by NodeStartupGate warmup (startup gates)',
        '  refused: nodelabelrule/pool-agent (NodeLabelRule pool-agent) sets nothing: label ate.dev/atelet is owned by AgentPlacement atelet (agent placement)',
        '  refused: nodelabelrule/warming (NodeLabelRule warming) sets nothing: taint example.com/warming is owned by NodeStartupGate warmup (startup gates)',
      ],
    );
    assert.doesNotMatch(text, /sets (taint example\.com\/warming|annotation warmup|label ate\.dev)/);
    assert.doesNotMatch(text, /will set (taint example\.com\/warming|annotation warmup)/);
    // As the controller does: what a refused rule had set goes.
    assert.match(text, /will remove label ate\.dev\/atelet \(no rule backs it any more\)/);
    assert.match(text, /sets label example\.com\/gpu=true/);
  });

  test('a rule that writes no owned key is shown as before', () => {
    const gpu = rules.filter((r) => r.name === 'nodelabelrule/gpu');
    assert.deepEqual(explainNodeLabels(n, gpu, [], owners()), explainNodeLabels(n, gpu));
  });

  test('berth explain node reads the owners from the API as the controllers claim them, gates before placements', async () => {
    // sneaky's claims are the gate's completion annotation: it is Invalid, and its label is anyone's.
    const gate = gateObj('warmup', {
      taint: { key: 'example.com/warming' },
      completionAnnotation: 'startup.example.com/done',
    });
    const sneaky = placementObj('sneaky', 'sneaky.dev/agent', 'startup.example.com/');
    const ruleObj = (name: string, spec: Record<string, unknown>) => ({
      metadata: { name },
      spec: { match: { allOf: [{ label: 'pool', operator: 'Exists' }] }, ...spec },
    });
    const objects: Record<string, KubeObject[]> = {
      nodestartupgates: [gate],
      agentplacements: [atelet, sneaky],
      nodelabelrules: [
        ruleObj('gpu', { labels: { 'example.com/gpu': 'true' } }),
        ruleObj('pool-agent', { labels: { 'ate.dev/atelet': 'true' } }),
        ruleObj('sneaky-label', { labels: { 'sneaky.dev/agent': 'true' } }),
        ruleObj('warming', { taints: [{ key: 'example.com/warming', effect: 'NoSchedule' }] }),
      ],
    };
    const client = {
      get: async () => n,
      list: async (ref: ResourceRef) => ({ items: objects[ref.resource] ?? [] }),
    } as unknown as KubeClient;
    const lines = await explainObject(client, explainerOf('node')!, 'n1', undefined, {}, 'berth-system');
    assert.deepEqual(
      lines.filter((l) => l.includes('refused:')),
      [
        '  refused: nodelabelrule/pool-agent (NodeLabelRule pool-agent) sets nothing: label ate.dev/atelet is owned by AgentPlacement atelet (agent placement)',
        '  refused: nodelabelrule/warming (NodeLabelRule warming) sets nothing: taint example.com/warming is owned by NodeStartupGate warmup (startup gates)',
      ],
    );
    const text = lines.join('\n');
    assert.match(text, /sets label example\.com\/gpu=true/);
    assert.match(text, /sets label sneaky\.dev\/agent=true/);
    // The agents' own section says so too: sneaky applies nothing, for the gate's key.
    assert.match(text, /\n {2}sneaky: invalid, applies nothing: .*are owned by NodeStartupGate warmup/);

    // A Berth run without gates (--controllers labels,agents): nothing claims the gate's keys, so
    // the rule writing its taint applies, and sneaky claims its label.
    const withoutGates = await explainObject(
      client,
      explainerOf('node')!,
      'n1',
      undefined,
      { controllers: ['labels', 'agents'] },
      'berth-system',
    );
    assert.deepEqual(
      withoutGates.filter((l) => l.includes('refused:')),
      [
        '  refused: nodelabelrule/pool-agent (NodeLabelRule pool-agent) sets nothing: label ate.dev/atelet is owned by AgentPlacement atelet (agent placement)',
        '  refused: nodelabelrule/sneaky-label (NodeLabelRule sneaky-label) sets nothing: label sneaky.dev/agent is owned by AgentPlacement sneaky (agent placement)',
      ],
    );
    assert.match(withoutGates.join('\n'), /sets taint example\.com\/warming/);
    // The gates are not explained, as they do nothing to the node; they are named as not run.
    assert.equal(withoutGates.at(-1), 'Not run by this Berth (--controllers): gates');
    assert.ok(lines.some((l) => l.startsWith('  warmup (taint')));
    assert.ok(!withoutGates.some((l) => l.startsWith('  warmup (taint')));
  });
});

describe('explain nodelabelrule', () => {
  test('each node in (the term that holds, what it sets, a key lost to another rule) or out (the term that fails)', () => {
    const nodes = [node({}, { pool: 'a' }, 'n1'), node({}, {}, 'n2')];
    const rules = [
      rule('a-first', { labels: { tier: 'one' } }),
      rule('b-mine', { labels: { tier: 'two', mine: 'yes' } }),
    ];
    const said = explainRule('b-mine', nodes, rules);
    assert.deepEqual(said.subjects, [
      {
        kind: 'Node',
        name: 'n1',
        in: true,
        why: [
          'matched: allOf label pool Exists (node: "a")',
          'sets label mine=yes',
          'loses label tier to nodelabelrule/a-first (rules apply in name order)',
        ],
      },
      { kind: 'Node', name: 'n2', in: false, why: ['allOf label pool Exists (node: absent) does not hold'] },
    ]);
  });

  test('a rule refused for a key another capability owns acts on no node', () => {
    const said = explainRule('r', [node({})], [rule('r', { labels: { k: 'v' } })], () => [
      'k is owned by gates',
    ]);
    assert.deepEqual(said, { lines: ['  refused: sets nothing on any node: k is owned by gates'] });
  });
});
