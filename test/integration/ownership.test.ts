// test-driver: alone — it runs the labels, gates and agents controllers, which would act on the
// policies of other files running at the same time (and theirs on its).
//
// One owner per node key, and the loop breaker, against the real control plane with every
// capability in one manager: the fight (a rule writing a gate's gated-at) is refused as
// Invalid, ownership changes re-check policies at once, and a fight nobody could foresee (a rule
// and a gate feeding each other's inputs) is stopped by the loop breaker.
import type { PolicyKit } from '../../src/policy/kit.ts';
import assert from 'node:assert/strict';
import { berthClient, everyCapability, removeEverything } from '../helpers/berth.ts';
import { after, before, describe, test } from 'node:test';
import { AgentPlacement } from '../../src/agents/crd.ts';
import { installCrds } from '../../src/cli/install.ts';
import { NodeStartupGate } from '../../src/gates/crd.ts';
import { NodeLabelRule } from '../../src/labels/crd.ts';
import type { Condition } from '../../src/runtime/api/conditions.ts';
import type { Event } from '../../src/runtime/events/event.ts';
import { Manager } from '../../src/runtime/manager/manager.ts';
import { nodeWriteMetrics } from '../../src/policy/nodes/metrics.ts';
import { Resources, type KubeObject, type ResourceRef } from '../../src/runtime/api/meta.ts';
import { addNodes, createNamespace, deleteNamespace, testSandbox, uniqueName } from '../helpers/cluster.ts';
import { watchNodeKeys } from '../helpers/nodekeys.ts';
import { holdsFor, sleep, waitFor } from '../helpers/wait.ts';

const sandbox = testSandbox();
const client = sandbox.client();
const id = uniqueName('own');
const D = `${id}.example.com`;
const POOL = `${D}/pool`;
let ns: string;
let manager: Manager | undefined;
let kit: PolicyKit | undefined;
const nodes: string[] = [];
const created: { ref: ResourceRef; name: string }[] = [];

before(async () => {
  await installCrds(client);
  ns = await createNamespace(client, 'own');
  kit = await everyCapability(await berthClient(sandbox));
  manager = kit.manager;
});

after(async () => {
  await removeEverything(client, manager, nodes, created);
  await deleteNamespace(client, ns);
  client.close();
});

async function applyPolicy(ref: ResourceRef, name: string, spec: unknown): Promise<void> {
  if (!created.some((o) => o.name === name)) created.push({ ref, name });
  await client.apply(
    ref,
    { apiVersion: `${ref.group}/${ref.version}`, kind: ref.kind, metadata: { name }, spec },
    { fieldManager: 'test-author', force: true },
  );
}
const applyRule = (name: string, spec: unknown) => applyPolicy(NodeLabelRule.ref, name, spec);
const applyGate = (name: string, spec: unknown) => applyPolicy(NodeStartupGate.ref, name, spec);
const applyPlacement = (name: string, spec: unknown) => applyPolicy(AgentPlacement.ref, name, spec);

async function poolNode(pool: string): Promise<string> {
  const [name] = await addNodes(client, { prefix: uniqueName(pool), count: 1, labels: { [POOL]: pool } });
  nodes.push(name!);
  return name!;
}

const getNode = (name: string) => client.get(Resources.nodes, name);
const taintsOf = (n: KubeObject) =>
  (n['spec'] as { taints?: { key: string; value?: string }[] }).taints ?? [];
const gatedAt = (gate: string) => `${gate}.gates.berth.dev/gated-at`;
const never = () => ({ pods: [{ namespace: ns, selector: { matchLabels: { app: 'never' } } }] });

async function condition(ref: ResourceRef, name: string, type: string): Promise<Condition | undefined> {
  const obj = await client.get<KubeObject & { status?: { conditions?: Condition[] } }>(ref, name);
  return obj.status?.conditions?.find((c) => c.type === type);
}
const invalidWith = (ref: ResourceRef, name: string, message: string) =>
  waitFor(
    `${name} Invalid: ${message}`,
    async () => {
      const c = await condition(ref, name, 'Invalid');
      const ready = await condition(ref, name, 'Ready');
      return c?.status === 'True' && c.message.includes(message) && ready?.status === 'False' && c;
    },
    { observe: () => client.get(ref, name) },
  );
const readyAgain = (ref: ResourceRef, name: string) =>
  waitFor(`${name} Ready`, async () => (await condition(ref, name, 'Ready'))?.status === 'True', {
    observe: () => client.get(ref, name),
  });

async function events(name: string): Promise<Event[]> {
  const list = await client.list<Event>(Resources.events, { namespace: 'default' });
  return list.items.filter((e) => e.regarding?.name === name);
}
const warning = (name: string, reason: string, text: string) =>
  waitFor(
    `a ${reason} Warning on ${name}`,
    async () =>
      (await events(name)).find((e) => e.type === 'Warning' && e.reason === reason && e.note?.includes(text)),
    { observe: () => events(name) },
  );

/** berth_node_writes_total and berth_node_write_loops_total of this process, by field manager. */
async function metric(which: 'writes' | 'loops'): Promise<Record<string, number>> {
  const m = await nodeWriteMetrics[which].get();
  return Object.fromEntries(m.values.map((v) => [String(v.labels['field_manager']), v.value]));
}
const delta = (a: Record<string, number>, b: Record<string, number>, fm: string) =>
  (b[fm] ?? 0) - (a[fm] ?? 0);

describe('one owner per key', () => {
  test("the issue's fight: a rule writing a gate's gated-at is Invalid, names the gate, and nothing loops", async () => {
    const gate = `${id}-warm`;
    await applyGate(gate, {
      taint: { key: `${D}/warm`, effect: 'NoSchedule' },
      nodeSelector: { matchLabels: { [POOL]: 'issue' } },
      requirements: never(),
    });
    const node = await poolNode('issue');
    // The webhook is not running: the controller gates the new idle node (the fallback).
    const stamp = await waitFor('the node held by the gate', async () => {
      const n = await getNode(node);
      const stamp = n.metadata?.annotations?.[gatedAt(gate)];
      return stamp !== undefined && taintsOf(n).some((t) => t.key === `${D}/warm`) && stamp;
    });
    const before = await metric('writes');

    const rule = `${id}-issue`;
    await applyRule(rule, {
      match: { allOf: [{ label: POOL, operator: 'In', values: ['issue'] }] },
      annotations: { [gatedAt(gate)]: '2020-01-01T00:00:00Z', [`${D}/note`]: 'x' },
    });
    const owner = `annotation ${gatedAt(gate)} is owned by NodeStartupGate ${gate} (startup gates)`;
    await invalidWith(NodeLabelRule.ref, rule, owner);
    await warning(rule, 'InvalidRule', owner);
    await holdsFor(
      'the gate keeps holding the node, and the rule writes nothing',
      async () => {
        const n = await getNode(node);
        return (
          n.metadata?.annotations?.[gatedAt(gate)] === stamp &&
          n.metadata?.annotations?.[`${D}/note`] === undefined &&
          taintsOf(n).some((t) => t.key === `${D}/warm`)
        );
      },
      3000,
    );
    const after = await metric('writes');
    assert.equal(delta(before, after, 'berth-labels'), 0, 'no label writes');
    assert.equal(delta(before, after, 'berth-gates'), 0, 'no gate writes');
    assert.equal((await events(node)).filter((e) => e.reason === 'Released').length, 0, 'never released');
  });

  test("a gate created with a rule's taint key makes the rule Invalid at once; the rule's taint is not taken over, and comes back with the gate gone", async () => {
    const node = await poolNode('taint');
    const key = `${D}/shared`;
    const rule = `${id}-taint`;
    await applyRule(rule, {
      match: { allOf: [{ label: POOL, operator: 'In', values: ['taint'] }] },
      labels: { [`${D}/kept`]: 'yes' },
      taints: [{ key, value: 'rule', effect: 'NoSchedule' }],
    });
    const ruleTaint = async () => {
      const n = await getNode(node);
      return (
        taintsOf(n).some((t) => t.key === key && t.value === 'rule') &&
        n.metadata?.labels?.[`${D}/kept`] === 'yes'
      );
    };
    await waitFor("the rule's taint and label on the node", ruleTaint);
    await readyAgain(NodeLabelRule.ref, rule);

    const gate = `${id}-shared`;
    const started = Date.now();
    await applyGate(gate, {
      taint: { key, value: 'gate', effect: 'NoSchedule' },
      nodeSelector: { matchLabels: { [POOL]: 'taint' } },
      requirements: never(),
      backfill: true,
    });
    const owner = `taint ${key} is owned by NodeStartupGate ${gate} (startup gates)`;
    await invalidWith(NodeLabelRule.ref, rule, owner);
    const tookMs = Date.now() - started;
    assert.ok(tookMs < 5000, `the rule was found Invalid ${tookMs} ms after the gate appeared`);
    await warning(rule, 'InvalidRule', owner);
    // The Invalid rule gives its outputs back; the backfill gate then holds the idle node with its own taint.
    await waitFor(
      "one taint with the key, the gate's, held",
      async () => {
        const n = await getNode(node);
        const mine = taintsOf(n).filter((t) => t.key === key);
        return (
          mine.length === 1 &&
          mine[0]!.value === 'gate' &&
          n.metadata?.annotations?.[gatedAt(gate)] !== undefined &&
          n.metadata?.labels?.[`${D}/kept`] === undefined
        );
      },
      { observe: () => getNode(node) },
    );

    await client.delete(NodeStartupGate.ref, gate);
    await readyAgain(NodeLabelRule.ref, rule);
    await waitFor(
      "the gate's taint gone, the rule's back",
      async () => {
        const n = await getNode(node);
        return (
          (await ruleTaint()) &&
          taintsOf(n).filter((t) => t.key === key).length === 1 &&
          !n.metadata?.annotations?.[gatedAt(gate)]
        );
      },
      { observe: () => getNode(node) },
    );
  });

  test("placements: claims under a gate's domain are Invalid; a rule writing a placement's label is Invalid until the placement goes", async () => {
    const spec = (label: string, prefix: string) => ({
      namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': ns } },
      podSelector: { matchLabels: { app: 'worker' } },
      owner: { uidLabel: `${D}/pool-uid` },
      nodeLabel: { key: label },
      claimAnnotationPrefix: prefix,
    });
    const sneaky = `${id}-sneaky`;
    await applyPlacement(sneaky, spec(`${D}/sneaky`, 'x.gates.berth.dev/claim.'));
    const reserved = 'annotations x.gates.berth.dev/claim.* are owned by startup gates';
    await invalidWith(AgentPlacement.ref, sneaky, reserved);
    await warning(sneaky, 'InvalidSpec', reserved);

    const placement = `${id}-agent`;
    await applyPlacement(placement, spec(`${D}/agent`, `${D}/claim.`));
    const rule = `${id}-agent-label`;
    await applyRule(rule, {
      match: { allOf: [{ label: POOL, operator: 'Exists' }] },
      labels: { [`${D}/agent`]: 'true' },
    });
    await invalidWith(
      NodeLabelRule.ref,
      rule,
      `label ${D}/agent is owned by AgentPlacement ${placement} (agent placement)`,
    );
    await client.delete(AgentPlacement.ref, placement);
    await readyAgain(NodeLabelRule.ref, rule);
  });
});

describe('the loop breaker', () => {
  test('a fight nobody could foresee (a rule reacting to a gate that excludes its label) is stopped, with a Warning and a metric', async () => {
    const gate = `${id}-fight`;
    const stop = `${D}/stop`;
    await applyGate(gate, {
      taint: { key: `${D}/fight`, effect: 'NoSchedule' },
      nodeSelector: { matchLabels: { [POOL]: 'fight' } },
      excludeNodeSelectors: [{ matchLabels: { [stop]: 'true' } }],
      requirements: never(),
    });
    // Reads the gate's annotation (inputs are anyone's) and writes a key nobody owns: valid.
    const rule = `${id}-fight`;
    await applyRule(rule, {
      match: {
        allOf: [
          { label: POOL, operator: 'In', values: ['fight'] },
          { annotation: gatedAt(gate), operator: 'Exists' },
        ],
      },
      labels: { [stop]: 'true' },
    });
    const writes = await metric('writes');
    const loops = await metric('loops');
    const keys = await watchNodeKeys(client, `${POOL}=fight`);
    const started = Date.now();
    // Held → the rule labels it → the gate no longer selects it, releases → the label goes → held ...
    const node = await poolNode('fight');
    const trip = await warning(node, 'WriteLoop', 'two policies are likely fighting');
    const trippedMs = Date.now() - started;
    const { limit } = kit!.nodeWrites;
    // Each side writes its own keys: whichever reaches the limit first stops, and that stops both.
    assert.match(trip.note ?? '', /times within 60s \((berth-gates|berth-labels)\)/);
    const tripped = await metric('loops');
    assert.ok(
      delta(loops, tripped, 'berth-gates') + delta(loops, tripped, 'berth-labels') >= 1,
      JSON.stringify(tripped),
    );
    // Stopped: nothing more is written, where the fight wrote as fast as the watch came back.
    const stopped = await metric('writes');
    await sleep(3000);
    const later = await metric('writes');
    const fight = ['berth-gates', 'berth-labels'].map((fm) => delta(writes, stopped, fm));
    assert.deepEqual(
      ['berth-gates', 'berth-labels'].map((fm) => delta(stopped, later, fm)),
      [0, 0],
      `no writes after the trip (the fight wrote ${fight.join(' + ')} in ${trippedMs} ms)`,
    );
    // No key of the node was written more than `limit` times: the breaker's bound, whoever wrote.
    const worst = keys.most(kit!.nodeWrites.windowMs);
    await keys.stop();
    assert.ok(worst.count <= limit, `${worst.key} changed ${worst.count} times, limit ${limit}`);
    assert.ok(worst.count >= limit / 2, `a fight it was: ${worst.key} changed ${worst.count} times`);
  });
});
