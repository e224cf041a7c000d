// test-driver: alone — it runs the labels, gates and agents controllers, which would act on the
// policies of other files running at the same time (and theirs on its).
//
// Fuzz and abuse: seeded, generated NodeStartupGates, AgentPlacements and NodeLabelRules whose
// outputs collide with each other's keys and with what an admin put on the nodes, all at once,
// against every capability in one manager. Berth stays ready, every collision by construction is
// Invalid and nothing else is, no key of a node is written more often than the loop breaker
// allows, writes stop once things settle, and nothing foreign on a node changes.
import type { PolicyKit } from '../../src/policy/kit.ts';
import { berthClient, everyCapability, removeEverything } from '../helpers/berth.ts';
import { prng } from '../helpers/prng.ts';
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { AgentPlacement } from '../../src/agents/crd.ts';
import { installCrds } from '../../src/cli/install.ts';
import { EXEMPT_LABEL } from '../../src/gates/types.ts';
import { NodeStartupGate } from '../../src/gates/crd.ts';
import { NodeLabelRule } from '../../src/labels/crd.ts';
import type { Condition } from '../../src/runtime/api/conditions.ts';
import { Manager } from '../../src/runtime/manager/manager.ts';
import { nodeWriteMetrics } from '../../src/policy/nodes/metrics.ts';
import { Resources, type KubeObject, type ResourceRef } from '../../src/runtime/api/meta.ts';
import { createNodes } from '../../src/sandbox/nodes.ts';
import {
  createNamespace,
  deleteNamespace,
  podManifest,
  testSandbox,
  uniqueName,
} from '../helpers/cluster.ts';
import { nodeKeys, watchNodeKeys } from '../helpers/nodekeys.ts';
import { settles, sleep, waitFor } from '../helpers/wait.ts';

const SEEDS = [7, 18, 42, 99, 1234];
const sandbox = testSandbox();
const client = sandbox.client();
const id = uniqueName('abuse');
/** On every node of this file: what the node watch selects. */
const MARK = `${id}.example.com/abuse`;
let ns: string;
let manager: Manager | undefined;
let kit: PolicyKit | undefined;
let watch: Awaited<ReturnType<typeof watchNodeKeys>> | undefined;
const nodes: string[] = [];
const created: { ref: ResourceRef; name: string }[] = [];

type Taint = { key: string; value?: string; effect: 'NoSchedule' | 'PreferNoSchedule' };
type OwnedKey = { kind: 'label' | 'annotation' | 'taint'; key: string };
interface Policy {
  ref: ResourceRef;
  name: string;
  spec: Record<string, unknown>;
  /** By construction: Invalid because it writes another's key (or a gate's, for a gate). */
  invalid: boolean;
  why: string;
}
interface NodeDraft {
  /** Nodes are created one per group: the name is `<prefix>-0`. */
  prefix: string;
  name: string;
  /** Created before the policies (backfill territory) or after (the fallback's). */
  old: boolean;
  labels: Record<string, string>;
  annotations: Record<string, string>;
  taints: Taint[];
}

/** One seed's world: nodes with an admin's keys, and gates, placements and rules that collide. */
function generate(seed: number) {
  const r = prng(seed);
  const D = `${id}-s${seed}.example.com`;
  const POOL = `${D}/pool`;
  const free = [0, 1, 2, 3].map((i) => `${D}/k${i}`);
  const gateTaints = [0, 1, 2].map((i) => `${D}/t${i}`);
  const effects = ['NoSchedule', 'PreferNoSchedule'] as const;
  const nodeDrafts: NodeDraft[] = [0, 1, 2, 3].map((i) => ({
    prefix: `${id}-s${seed}-n${i}`,
    name: `${id}-s${seed}-n${i}-0`,
    old: i < 2,
    labels: { [MARK]: 'true', [POOL]: 'yes', [`${D}/f-label`]: `admin-${i}` },
    annotations: { [`${D}/f-ann`]: 'admin' },
    // An admin's taint: sometimes with the key a gate will use (never taken over), sometimes not.
    taints: r.chance(0.5)
      ? [{ key: r.pick(gateTaints), value: 'admin', effect: 'NoSchedule' }]
      : [{ key: `${D}/f-taint`, value: 'admin', effect: 'NoSchedule' }],
  }));

  const gates: Policy[] = [];
  const names = [0, 1, 2, 3, 4].map((i) => `${id}-s${seed}-g${i}`);
  for (const [i, name] of names.entries()) {
    const completion = r.pick(['default', 'default', 'own', 'other'] as const);
    const spec: Record<string, unknown> = {
      taint: {
        key: r.pick(gateTaints),
        ...(r.chance(0.5) ? { value: 'wait' } : {}),
        effect: r.pick(effects),
      },
      nodeSelector: { matchLabels: { [POOL]: 'yes' } },
      requirements: r.chance(0.7)
        ? { pods: [{ namespace: ns, selector: { matchLabels: { app: 'never' } } }] }
        : { nodeConditions: [{ type: 'Ready', status: 'True' }] },
      mode: r.pick(['BootstrapOnly', 'Continuous']),
      backfill: r.chance(0.5),
      dryRun: r.chance(0.1),
      minHoldSeconds: r.int(2),
      ...(r.chance(0.3) ? { timeout: { seconds: 2, outcome: r.pick(['Release', 'KeepTainted']) } } : {}),
      ...(r.chance(0.3) ? { excludeNodeSelectors: [{ matchLabels: { [r.pick(free)]: 'x' } }] } : {}),
      ...(completion === 'own' ? { completionAnnotation: `${D}/done${i}` } : {}),
      ...(completion === 'other'
        ? { completionAnnotation: `${r.pick(names.filter((n) => n !== name))}.gates.berth.dev/gated-at` }
        : {}),
    };
    gates.push({
      ref: NodeStartupGate.ref,
      name,
      spec,
      invalid: completion === 'other',
      why: 'is a key of another gate',
    });
  }
  const gateKeys = gates.flatMap((g) => {
    const keys: OwnedKey[] = [
      { kind: 'annotation', key: `${g.name}.gates.berth.dev/gated-at` },
      { kind: 'taint', key: (g.spec['taint'] as Taint).key },
    ];
    const completion = g.spec['completionAnnotation'] as string | undefined;
    if (completion && !g.invalid) keys.push({ kind: 'annotation', key: completion });
    return keys;
  });

  const placements: Policy[] = [0, 1].map((i) => {
    const label = r.chance(0.3) ? `${r.pick(names)}.gates.berth.dev/agent` : `${D}/agent${i}`;
    const ownDone = gateKeys.find((k) => k.key.startsWith(`${D}/done`));
    const prefix = r.chance(0.3)
      ? ownDone
        ? `${D}/done`
        : `${r.pick(names)}.gates.berth.dev/c.`
      : `${D}/claim${i}.`;
    return {
      ref: AgentPlacement.ref,
      name: `${id}-s${seed}-p${i}`,
      spec: {
        namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': ns } },
        podSelector: { matchLabels: { app: `s${seed}-w${i}` } },
        owner: { uidLabel: `${D}/uid` },
        nodeLabel: { key: label },
        claimAnnotationPrefix: prefix,
      },
      invalid: label.includes('.gates.berth.dev/') || !prefix.startsWith(`${D}/claim`),
      why: 'owned by',
    };
  });
  const placementKeys = placements
    .filter((p) => !p.invalid)
    .flatMap((p): OwnedKey[] => [
      { kind: 'label', key: (p.spec['nodeLabel'] as { key: string }).key },
      { kind: 'annotation', key: `${p.spec['claimAnnotationPrefix']}u1` },
    ]);
  const pods = placements.flatMap((p, i) =>
    [0, 1].map((j) =>
      podManifest({
        name: `s${seed}-w${i}-${j}`,
        namespace: ns,
        labels: { app: `s${seed}-w${i}`, [`${D}/uid`]: `u${j + 1}` },
        nodeName: nodeDrafts[j * 2]!.name,
        tolerations: [{ operator: 'Exists' }],
      }),
    ),
  );

  const rules: Policy[] = [0, 1, 2, 3, 4, 5, 6].map((i) => {
    const labels: Record<string, string> = {};
    const annotations: Record<string, string> = {};
    const taints: Taint[] = [];
    let invalid = false;
    for (let n = 1 + r.int(3); n > 0; n--) {
      const out = r.pick([
        'free-label',
        'free-annotation',
        'free-taint',
        'foreign-label',
        'exempt',
        'gate-key',
        'gate-domain',
        'placement-key',
      ] as const);
      // 'x' is what some gates exclude: a rule can take a node away from a gate.
      if (out === 'free-label') labels[r.pick(free)] = r.pick(['a', 'x']);
      else if (out === 'free-annotation') annotations[r.pick(free)] = `rule-${i}`;
      else if (out === 'free-taint')
        taints.push({ key: `${D}/rt${r.int(3)}`, value: 'r', effect: r.pick(effects) });
      else if (out === 'foreign-label') labels[`${D}/f-label`] = 'rule';
      else if (out === 'exempt') labels[EXEMPT_LABEL] = 'true';
      else if (out === 'gate-domain') {
        annotations[`${r.pick(names)}.gates.berth.dev/x`] = 'y';
        invalid = true;
      } else {
        const k = r.pick(out === 'gate-key' ? gateKeys : placementKeys.length ? placementKeys : gateKeys);
        if (k.kind === 'taint') taints.push({ key: k.key, effect: r.pick(effects) });
        else if (k.kind === 'label') labels[k.key] = 'true';
        else annotations[k.key] = 'rule';
        invalid = true;
      }
    }
    // Some rules react to what the gates do: inputs are anyone's. One that labels the nodes a gate
    // holds with the label the gate excludes starts a fight that only the loop breaker stops.
    const allOf: unknown[] = [{ label: POOL, operator: 'In', values: ['yes'] }];
    // An exempt node is never gated: only the first (busy) node is exempted, the others stay in play.
    if (EXEMPT_LABEL in labels)
      allOf.push({ label: 'kubernetes.io/hostname', operator: 'In', values: [nodeDrafts[0]!.name] });
    const excluding = gates.filter((g) => g.spec['excludeNodeSelectors']);
    if (excluding.length && r.chance(0.3)) {
      const g = r.pick(excluding);
      allOf.push({ annotation: `${g.name}.gates.berth.dev/gated-at`, operator: 'Exists' });
      const [{ matchLabels }] = g.spec['excludeNodeSelectors'] as [{ matchLabels: Record<string, string> }];
      Object.assign(labels, matchLabels);
    }
    const anyOf = r.chance(0.3)
      ? [
          { annotation: `${r.pick(names)}.gates.berth.dev/gated-at`, operator: 'Exists' },
          { label: r.pick(free), operator: 'DoesNotExist' },
        ]
      : undefined;
    const uniqueTaints = [...new Map(taints.map((t) => [`${t.key}:${t.effect}`, t])).values()];
    return {
      ref: NodeLabelRule.ref,
      name: `${id}-s${seed}-r${i}`,
      spec: {
        match: { allOf, ...(anyOf ? { anyOf } : {}) },
        ...(Object.keys(labels).length ? { labels } : {}),
        ...(Object.keys(annotations).length ? { annotations } : {}),
        ...(uniqueTaints.length ? { taints: uniqueTaints } : {}),
      },
      invalid,
      why: 'owned by',
    };
  });
  // And one fight for sure: a gate that excludes a label, a rule that sets it on the nodes the gate holds.
  const fighter = `${id}-s${seed}-fight`;
  gates.push({
    ref: NodeStartupGate.ref,
    name: fighter,
    spec: {
      taint: { key: `${D}/fight`, effect: 'NoSchedule' },
      nodeSelector: { matchLabels: { [POOL]: 'yes' } },
      excludeNodeSelectors: [{ matchLabels: { [`${D}/fight`]: 'x' } }],
      requirements: { pods: [{ namespace: ns, selector: { matchLabels: { app: 'never' } } }] },
    },
    invalid: false,
    why: '',
  });
  rules.push({
    ref: NodeLabelRule.ref,
    name: `${fighter}-back`,
    spec: {
      match: {
        allOf: [
          { label: POOL, operator: 'In', values: ['yes'] },
          { annotation: `${fighter}.gates.berth.dev/gated-at`, operator: 'Exists' },
        ],
      },
      labels: { [`${D}/fight`]: 'x' },
    },
    invalid: false,
    why: '',
  });
  return { nodeDrafts, gates, placements, rules, pods };
}

before(async () => {
  await installCrds(client);
  ns = await createNamespace(client, 'abuse');
  kit = await everyCapability(await berthClient(sandbox));
  manager = kit.manager;
});

after(async () => {
  await watch?.stop();
  await removeEverything(client, manager, nodes, created);
  await deleteNamespace(client, ns);
  client.close();
});

const apply = async (p: Policy) => {
  created.push({ ref: p.ref, name: p.name });
  await client.apply(
    p.ref,
    {
      apiVersion: `${p.ref.group}/${p.ref.version}`,
      kind: p.ref.kind,
      metadata: { name: p.name },
      spec: p.spec,
    },
    { fieldManager: 'test-author', force: true },
  );
};

const conditions = async (p: Policy) =>
  (await client.get<KubeObject & { status?: { conditions?: Condition[] } }>(p.ref, p.name)).status
    ?.conditions;

test(`generated gates, placements and rules colliding in ${SEEDS.length} seeded worlds`, async (t) => {
  const worlds = SEEDS.map(generate);
  const policies = worlds.flatMap((w) => [...w.gates, ...w.placements, ...w.rules]);
  const limit = kit!.nodeWrites.limit;

  // Every change of every key of this file's nodes, as the apiserver reports them.
  watch = await watchNodeKeys(client, MARK);
  const loops = async () => (await nodeWriteMetrics.loops.get()).values.reduce((sum, v) => sum + v.value, 0);
  const loopsBefore = await loops();
  // The event loop stays free: a timer that should fire every 50 ms, and how late it ever was.
  let lag = 0;
  let last = performance.now();
  const timer = setInterval(() => {
    const now = performance.now();
    lag = Math.max(lag, now - last - 50);
    last = now;
  }, 50);

  try {
    const drafts = worlds.flatMap((w) => w.nodeDrafts);
    const create = (d: NodeDraft) =>
      createNodes(client, [
        { prefix: d.prefix, count: 1, labels: d.labels, annotations: d.annotations, taints: d.taints },
      ]);
    nodes.push(...drafts.map((d) => d.name));
    for (const d of drafts.filter((d) => d.old)) await create(d);
    await waitFor('the old nodes', async () => {
      const l = await client.list(Resources.nodes, { query: { labelSelector: MARK } });
      return l.items.length === drafts.filter((d) => d.old).length;
    });
    await sleep(1100); // the policies are newer than the old nodes (one-second timestamps)
    const canary = `${id}-canary`;
    const canaryRule: Policy = {
      ref: NodeLabelRule.ref,
      name: canary,
      spec: {
        match: { allOf: [{ label: MARK, operator: 'Exists' }] },
        labels: { [`${id}.example.com/canary`]: 'yes' },
      },
      invalid: false,
      why: '',
    };
    for (const p of [...policies, canaryRule]) await apply(p);
    for (const w of worlds) for (const p of w.pods) await client.create(Resources.pods, p);
    for (const d of drafts.filter((d) => !d.old)) await create(d);

    // Other policies keep working: the canary reaches every node.
    await waitFor(
      'the canary label on every node',
      async () => {
        const l = await client.list(Resources.nodes, {
          query: { labelSelector: `${MARK},${id}.example.com/canary=yes` },
        });
        return l.items.length === drafts.length;
      },
      { timeoutMs: 30_000 },
    );

    // Every collision made by construction is Invalid, saying whose key it is; nothing else is.
    for (const p of policies) {
      const invalid = await waitFor(
        `${p.ref.kind} ${p.name} ${p.invalid ? 'Invalid' : 'not Invalid'}`,
        async () => {
          const c = (await conditions(p))?.find((x) => x.type === 'Invalid');
          return c && (c.status === 'True') === p.invalid && c;
        },
        { timeoutMs: 20_000, observe: () => client.get(p.ref, p.name) },
      );
      if (p.invalid) assert.match(invalid.message, new RegExp(p.why), `${p.name}: ${invalid.message}`);
    }
    assert.ok(manager!.hasSynced(), 'ready: every cache synced');

    // Settled: Berth writes (almost) nothing more. The loop breaker has stopped any fight.
    const snapshot = async () => {
      const m = await nodeWriteMetrics.writes.get();
      return m.values.reduce((sum, v) => sum + v.value, 0);
    };
    // Settled first (no node write for 2 s: a fight never settles), however long catching up took here.
    const quietFrom = await settles('Berth node writes', snapshot, { quietMs: 2000, timeoutMs: 30_000 });
    await sleep(4000);
    const quiet = (await snapshot()) - quietFrom;
    assert.ok(quiet <= 2, `${quiet} node writes in 4 s after settling`);

    // No key of any node changed more often than the loop breaker allows within its window.
    const worst = watch.most(kit!.nodeWrites.windowMs);
    assert.ok(worst.count <= limit, `${worst.key} changed ${worst.count} times within a window`);

    // Nothing foreign changed: every key the admin set is there with its value.
    for (const d of drafts) {
      const have = nodeKeys(await client.get(Resources.nodes, d.name));
      for (const [k, v] of Object.entries(d.labels))
        assert.equal(have.get(`label ${k}`), v, `${d.name} label ${k}`);
      for (const [k, v] of Object.entries(d.annotations))
        assert.equal(have.get(`annotation ${k}`), v, `${d.name} annotation ${k}`);
      for (const x of d.taints)
        assert.equal(have.get(`taint ${x.key}:${x.effect}`), x.value, `${d.name} taint ${x.key}`);
    }
    assert.ok(lag < 1000, `the event loop was ${Math.round(lag)} ms late at worst`);
    const trips = (await loops()) - loopsBefore;
    assert.ok(trips >= SEEDS.length, `${trips} loop breaker trips: every seed's fight was stopped`);
    const count = (kind: string, invalid: boolean) =>
      policies.filter((p) => p.ref.kind === kind && p.invalid === invalid).length;
    t.diagnostic(
      `${policies.length} generated policies (${SEEDS.length} seeds): ` +
        ['NodeStartupGate', 'AgentPlacement', 'NodeLabelRule']
          .map((k) => `${count(k, false) + count(k, true)} ${k}s (${count(k, true)} colliding)`)
          .join(', ') +
        `; ${drafts.length} nodes; ${[...watch.changes.values()].reduce((s, x) => s + x.length, 0)} key changes; ` +
        `${trips} loop breaker trips; worst event-loop delay ${Math.round(lag)} ms`,
    );
  } finally {
    clearInterval(timer);
  }
});
