import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { EventHandler } from '../../../src/runtime/cache/informer.ts';
import type { KubeObject } from '../../../src/runtime/api/meta.ts';
import { casPatch, CasNodeWriter } from '../../../src/policy/nodes/cas.ts';
import { WriteLoopBreaker, type NodeKey } from '../../../src/policy/nodes/loopbreaker.ts';
import { nodeWriteMetrics } from '../../../src/policy/nodes/metrics.ts';
import type { NodeTaint } from '../../../src/policy/nodes/write.ts';
import { nodeServer } from '../../helpers/fakeclient.ts';
import { withSeed, type Prng } from '../../helpers/prng.ts';

const FM = 'berth-cas-test';
const GATE: NodeTaint = { key: 'startup.berth.dev/cni', effect: 'NoSchedule' };
const ADMIN: NodeTaint = { key: 'dedicated', value: 'admin', effect: 'NoSchedule' };
const GATED_AT = 'cni.gates.berth.dev/gated-at';
const KEYS: NodeKey[] = [`taint ${GATE.key}`, `annotation ${GATED_AT}`];

const node = (annotations?: Record<string, string>, taints?: NodeTaint[]): KubeObject => ({
  apiVersion: 'v1',
  kind: 'Node',
  metadata: { name: 'n1', uid: 'u1', resourceVersion: '10', ...(annotations ? { annotations } : {}) },
  spec: taints ? { taints } : {},
});

const taintsOf = (n: KubeObject | undefined) => (n?.['spec'] as { taints?: NodeTaint[] }).taints;

/** A CAS writer on a fake apiserver, and the node informer's echo of what it writes. */
function setup(n: KubeObject, breaker = new WriteLoopBreaker()) {
  const server = nodeServer(n);
  let handler: EventHandler<KubeObject> | undefined;
  const writer = new CasNodeWriter<string>(
    () => server.client,
    FM,
    { addEventHandler: (h) => void (handler = h) },
    { breaker },
  );
  const echo = (o: KubeObject) => handler!.onUpdate!(o, o);
  return { server, writer, echo };
}

/** The gate's write: its taint on beside whatever the node has, and its gated-at annotation. */
const gate = (cached: KubeObject) =>
  casPatch(cached, [...(taintsOf(cached) ?? []), GATE], [[GATED_AT, 'now']]);

describe('CasNodeWriter', () => {
  test('a conflict is never sent again from the copy that failed it: the next write, from the fresh node, goes through', async () => {
    const { server, writer } = setup(node({}, []));
    const cached = server.node!;
    // An admin taints the node after the cache saw it.
    server.edit((n) => ((n['spec'] as { taints: NodeTaint[] }).taints = [ADMIN]));

    const r = await writer.write(cached, KEYS, gate(cached), 'gated');
    assert.equal(r.status, 'conflict');
    assert.deepEqual(taintsOf(server.node), [ADMIN], "the admin's taint is not lost");
    assert.equal(server.node!.metadata!.annotations![GATED_AT], undefined, 'nothing of the write applied');
    assert.equal(writer.pending(cached), undefined, 'no write went through: nothing to wait for');

    const fresh = server.node!;
    const again = await writer.write(fresh, KEYS, gate(fresh), 'gated');
    assert.equal(again.status, 'written');
    assert.deepEqual(taintsOf(server.node), [ADMIN, GATE]);
    assert.equal(server.node!.metadata!.annotations![GATED_AT], 'now');
    assert.equal(server.patches.length, 2);
  });

  test("a write is pending until the node informer's echo of it, and then no longer", async () => {
    const { server, writer, echo } = setup(node({}, []));
    const cached = server.node!;
    const r = await writer.write(cached, KEYS, gate(cached), 'gated');
    assert.equal(r.status, 'written');
    const written = r.status === 'written' ? r.node : undefined;
    assert.equal(written?.metadata?.resourceVersion, '11');
    assert.equal(writer.pending(cached), 'gated', 'the cache is older than the write: say what it was');
    echo(cached);
    assert.equal(writer.pending(cached), 'gated', 'an older event is not the echo');
    echo(written!);
    assert.equal(writer.pending(cached), undefined, 'echo seen: even a stale copy waits no longer');
    // `patch` sends the same way but expects nothing.
    const before = server.node!;
    const off = await writer.patch(before, KEYS, casPatch(before, [], [[GATED_AT, null]]));
    assert.equal(off.status, 'written');
    assert.equal(writer.pending(before), undefined);
  });

  test('a node deleted meanwhile is gone, and forgotten', async () => {
    const { server, writer } = setup(node({}, []));
    const cached = server.node!;
    assert.equal((await writer.write(cached, KEYS, gate(cached), 'gated')).status, 'written');
    server.remove();
    assert.deepEqual(await writer.write(cached, KEYS, gate(cached), 'again'), { status: 'gone' });
    assert.equal(writer.pending(cached), undefined, 'its expectation went with it');
  });

  test('every write passes the loop breaker under its field manager: counted, and held back once it loops', async () => {
    const t = { now: 1_000_000 };
    const breaker = new WriteLoopBreaker({ limit: 2, windowMs: 60_000, clock: () => t.now });
    const { server, writer } = setup(node({}, []), breaker);
    const counted = async () =>
      (await nodeWriteMetrics.writes.get()).values.find((v) => v.labels['field_manager'] === FM)?.value ?? 0;
    const before = await counted();
    for (const on of [true, false]) {
      const n = server.node!;
      assert.deepEqual(writer.hold(n, KEYS), { held: [] });
      await writer.write(n, KEYS, casPatch(n, on ? [GATE] : [], [[GATED_AT, on ? 'now' : null]]), 'x');
      t.now += 1_000;
    }
    assert.equal(await counted(), before + 2);
    const { held, retryAfterMs } = writer.hold(server.node!, KEYS);
    assert.deepEqual(held, KEYS);
    assert.equal(retryAfterMs, 58_000);
  });

  test('fuzz: whatever someone else changes between the cache and the write, their change is never lost', async () => {
    await withSeed('cas fuzz', async (r) => {
      for (let i = 0; i < 300; i++) await fuzzCase(r, i);
    });
  });
});

const FOREIGN_ANNOTATIONS = ['example.com/owner', 'example.com/team'];
const OWN_ANNOTATIONS = [GATED_AT, 'cni.gates.berth.dev/timed-out-at'];
const FOREIGN_TAINTS: NodeTaint[] = [ADMIN, { key: 'maintenance', effect: 'NoExecute' }];

/**
 * One case: a node (annotations and taints, or none at all), the writer's intent for its own keys
 * (set, remove or leave each annotation; its taint on or off), and a random change by someone else
 * between the cache and the write: to their own keys, to the node's taints, to one of the writer's
 * keys that it removes or leaves alone, or only to the status.
 */
async function fuzzCase(r: Prng, i: number): Promise<void> {
  const annotations = r.chance(0.2)
    ? undefined
    : Object.fromEntries(
        [...FOREIGN_ANNOTATIONS, ...OWN_ANNOTATIONS]
          .filter(() => r.chance(0.5))
          .map((k) => [k, `v${r.int(3)}`]),
      );
  const taints = r.chance(0.2) ? undefined : [...FOREIGN_TAINTS, GATE].filter(() => r.chance(0.5));
  const { server, writer } = setup(node(annotations, taints));
  const cached = server.node!;

  const intent = new Map(OWN_ANNOTATIONS.map((k) => [k, r.pick(['set', 'remove', 'leave'] as const)]));
  const taintOn = r.pick([true, false, undefined]);
  const theirs = new Map<string, string | undefined>();
  let theirTaints: NodeTaint[] | undefined;
  const edits = r.int(4);
  for (let e = 0; e < edits; e++) {
    const kind = r.int(4);
    server.edit((n) => {
      if (kind === 0) {
        const ann = (n.metadata!.annotations ??= {});
        const k = r.pick(FOREIGN_ANNOTATIONS);
        const v = r.chance(0.3) ? undefined : `theirs${r.int(3)}`;
        if (v === undefined) delete ann[k];
        else ann[k] = v;
        theirs.set(k, v);
      } else if (kind === 1) {
        const t = r.pick(FOREIGN_TAINTS);
        const spec = n['spec'] as { taints?: NodeTaint[] };
        const rest = (spec.taints ?? []).filter((x) => x.key !== t.key);
        spec.taints = r.chance(0.5) ? [...rest, t] : rest;
        theirTaints = spec.taints.filter((x) => x.key !== GATE.key);
      } else if (kind === 2) {
        const k = r.pick(OWN_ANNOTATIONS);
        if (intent.get(k) === 'set') return;
        const ann = (n.metadata!.annotations ??= {});
        ann[k] = `theirs${r.int(3)}`;
        theirs.set(k, ann[k]);
      }
      // kind 3: only the status changed, which still makes a new resourceVersion.
    });
  }

  const build = (from: KubeObject) => {
    const have = taintsOf(from) ?? [];
    const next =
      taintOn === true && !have.some((t) => t.key === GATE.key)
        ? [...have, GATE]
        : taintOn === false && have.some((t) => t.key === GATE.key)
          ? have.filter((t) => t.key !== GATE.key)
          : undefined;
    const ops = [...intent].flatMap(([k, what]): [string, string | null][] =>
      what === 'set' ? [[k, 'mine']] : what === 'remove' ? [[k, null]] : [],
    );
    return casPatch(from, next, ops);
  };

  // `decided`: keys the writer removes having seen their value (on the fresh node, after a conflict).
  const check = (what: string, decided: (k: string) => boolean = () => false) => {
    const now = server.node!;
    const ann = now.metadata?.annotations ?? {};
    for (const [k, v] of theirs) if (!decided(k)) assert.equal(ann[k], v, `case ${i}, ${what}: their ${k}`);
    if (theirTaints)
      assert.deepEqual(
        (taintsOf(now) ?? []).filter((t) => t.key !== GATE.key),
        theirTaints,
        `case ${i}, ${what}: their taints`,
      );
  };
  const intended = (what: string) => {
    const now = server.node!;
    const ann = now.metadata?.annotations ?? {};
    for (const [k, want] of intent) {
      if (want === 'set') assert.equal(ann[k], 'mine', `case ${i}, ${what}: ${k} set`);
      // A key the writer's copy did not have is not removed from a write that never saw it.
      if (want === 'remove' && (what === 'retry' || !theirs.has(k)))
        assert.equal(k in ann, false, `case ${i}, ${what}: ${k} removed`);
    }
    if (taintOn !== undefined)
      assert.equal(
        (taintsOf(now) ?? []).some((t) => t.key === GATE.key),
        taintOn,
        `case ${i}, ${what}: own taint`,
      );
  };

  const before = server.node!;
  const ops = build(cached);
  const first = ops.length ? await writer.write(cached, KEYS, ops, 'first') : undefined;
  check('first write');
  if (first?.status === 'conflict') {
    assert.deepEqual(server.node, before, `case ${i}: a conflicting write applies nothing`);
    assert.equal(writer.pending(cached), undefined);
    const fresh = server.node!;
    const retry = build(fresh);
    if (retry.length) assert.equal((await writer.write(fresh, KEYS, retry, 'retry')).status, 'written');
    check('retry', (k) => intent.get(k) === 'remove');
  } else if (first) assert.equal(first.status, 'written', `case ${i}`);
  if (edits === 0) assert.notEqual(first?.status, 'conflict', `case ${i}: nobody else wrote`);
  intended(first?.status === 'conflict' ? 'retry' : 'first write');
}
