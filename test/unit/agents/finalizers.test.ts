import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  holdRecord,
  OWNER_HOLD_ANNOTATION,
  ownerFinalizerApplies,
  ownerFinalizerHolders,
  ownerFinalizerIntent,
  ownerFinalizerManager,
  ownerHoldChange,
  recordedHold,
  slimOwner,
  type OwnerFinalizerIntent,
  type OwnerHold,
} from '../../../src/agents/finalizers.ts';
import {
  FINALIZER_FIELD_MANAGER,
  PLACEMENT_FINALIZER,
  type AgentPlacementSpec,
} from '../../../src/agents/types.ts';
import { agentPlacementSpec } from '../../../src/agents/crd.ts';
import type { KubeObject } from '../../../src/runtime/api/meta.ts';

const LEGACY = FINALIZER_FIELD_MANAGER;
const F = 'ate.dev/release-node-claims';
const G = 'logs.dev/release';

/**
 * metadata.finalizers as the apiserver keeps it under server-side apply: a set whose entries each
 * field manager holds by applying them. An apply replaces what its manager holds; an entry leaves
 * the object when no manager holds it any more. An object being deleted refuses new entries.
 */
class Owner {
  readonly holders = new Map<string, string[]>();
  deleting = false;

  constructor(holders: Record<string, string[]> = {}) {
    for (const [m, values] of Object.entries(holders)) this.holders.set(m, values);
  }

  get finalizers(): string[] {
    return [...new Set([...this.holders.values()].flat())].sort();
  }

  apply(fieldManager: string, finalizers: string[]): void {
    const added = finalizers.filter((f) => !this.finalizers.includes(f));
    if (this.deleting && added.length)
      throw new Error(`no new finalizers on an object being deleted: ${added}`);
    this.holders.set(fieldManager, finalizers);
  }

  /** As the owner informer caches it. */
  get object(): KubeObject {
    return slimOwner.fn({
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: {
        name: 'pool',
        namespace: 'ate',
        uid: 'pool-uid',
        finalizers: this.finalizers,
        ...(this.deleting ? { deletionTimestamp: '2026-01-01T00:00:00Z' } : {}),
        managedFields: [
          ...[...this.holders].map(([manager, values]) => ({
            manager,
            operation: 'Apply',
            fieldsV1: {
              'f:metadata': {
                'f:finalizers': Object.fromEntries(values.map((v) => [`v:${JSON.stringify(v)}`, {}])),
              },
            },
          })),
          { manager: 'kube-controller-manager', operation: 'Update', fieldsV1: { 'f:spec': {} } },
        ],
      },
    });
  }

  /** One reconcile of `placement`'s finalizer: its applies, sent in order. */
  reconcile(placement: string, finalizer: string, intent: OwnerFinalizerIntent): number {
    const applies = ownerFinalizerApplies(this.object, placement, finalizer, intent);
    for (const a of applies) this.apply(a.fieldManager, a.finalizers);
    return applies.length;
  }
}

/** Reconciles every placement in turn until none writes: the writes it took. */
function settle(owner: Owner, placements: [string, string, OwnerFinalizerIntent][]): number {
  let writes = 0;
  for (let round = 0; round < 5; round++) {
    let wrote = 0;
    for (const [p, f, intent] of placements) wrote += owner.reconcile(p, f, intent);
    if (wrote === 0) return writes;
    writes += wrote;
  }
  assert.fail(`still writing after 5 rounds: ${JSON.stringify([...owner.holders])}`);
}

describe('owner finalizers: one field manager per placement', () => {
  test('two placements on one owner keep both entries, and settle (no write loop)', () => {
    const owner = new Owner();
    const writes = settle(owner, [
      ['atelet', F, 'hold'],
      ['logs', G, 'hold'],
    ]);
    assert.deepEqual(owner.finalizers, [F, G]);
    assert.equal(writes, 2, 'one write each, then nothing');
  });

  test("one releasing never takes the other's entry off, even when both use one finalizer name", () => {
    const owner = new Owner();
    settle(owner, [
      ['atelet', F, 'hold'],
      ['logs', G, 'hold'],
      ['metrics', F, 'hold'],
    ]);
    owner.deleting = true;
    // The pool's atelet pods are gone; its logs and metrics pods are not.
    owner.reconcile('atelet', F, 'release');
    assert.deepEqual(owner.finalizers, [F, G], 'metrics still holds F');
    owner.reconcile('metrics', F, 'release');
    assert.deepEqual(owner.finalizers, [G]);
    owner.reconcile('logs', G, 'release');
    assert.deepEqual(owner.finalizers, []);
  });

  test('keep neither adds nor removes; releasing what is not ours writes nothing', () => {
    const owner = new Owner({ 'someone-else': [F] });
    assert.equal(owner.reconcile('atelet', F, 'keep'), 0);
    assert.equal(owner.reconcile('atelet', F, 'release'), 0);
    assert.deepEqual(owner.finalizers, [F], "someone else's entry of the same name stays");
    assert.equal(owner.reconcile('atelet', F, 'hold'), 1);
    owner.deleting = true;
    owner.reconcile('atelet', F, 'release');
    assert.deepEqual(owner.finalizers, [F], 'still held by the other manager');
  });
});

describe('owner finalizers: upgrading from the one shared field manager', () => {
  // Every order of the two placements' reconciles, every intent a living owner can have.
  const intents: OwnerFinalizerIntent[] = ['hold', 'keep'];
  for (const lastWriter of [F, G])
    for (const a of intents)
      for (const b of intents)
        for (const order of [
          ['atelet', 'logs'],
          ['logs', 'atelet'],
        ] as const)
          test(`the shared manager last wrote ${lastWriter}; atelet ${a}s, logs ${b}s; ${order.join(' first, then ')}`, () => {
            const owner = new Owner({ [LEGACY]: [lastWriter] });
            const intent = { atelet: a, logs: b };
            const finalizer = { atelet: F, logs: G };
            const present = () => new Set(owner.finalizers);
            // What must never leave the object: what is on it, and what a placement holds.
            const mustStay = new Set([lastWriter]);
            for (let round = 0; round < 3; round++)
              for (const p of order) {
                owner.reconcile(p, finalizer[p], intent[p]);
                if (intent[p] === 'hold') mustStay.add(finalizer[p]);
                for (const f of mustStay) assert.ok(present().has(f), `${f} dropped after ${p}`);
              }
            assert.equal(
              owner.holders.get(LEGACY)?.length ?? 0,
              0,
              'the shared manager holds nothing any more',
            );
            assert.equal(
              settle(
                owner,
                order.map((p) => [p, finalizer[p], intent[p]]),
              ),
              0,
              'settled',
            );
          });

  test('an owner being deleted: the entry stays while claimed, and goes when released', () => {
    const owner = new Owner({ [LEGACY]: [F] });
    owner.deleting = true;
    assert.equal(owner.reconcile('atelet', F, 'keep'), 0, 'nothing written while it waits');
    assert.deepEqual(owner.finalizers, [F]);
    owner.reconcile('atelet', F, 'release');
    assert.deepEqual(owner.finalizers, []);
  });
});

test('field managers: one per placement, deterministic, within the apiserver limit of 128', () => {
  assert.equal(ownerFinalizerManager('atelet'), 'berth-agents-finalizer/atelet');
  const long = (c: string) => `${c}.${'x'.repeat(240)}`;
  const names = ['atelet', 'x'.repeat(104), 'x'.repeat(105), long('a'), long('b'), 'a'.repeat(253)].map(
    ownerFinalizerManager,
  );
  assert.equal(new Set(names).size, names.length);
  for (const n of names) assert.ok(n.length <= 128 && n.startsWith('berth-agents-finalizer/'), n);
  assert.equal(ownerFinalizerManager(long('a')), names[3], 'deterministic');
  assert.notEqual(ownerFinalizerManager('atelet'), FINALIZER_FIELD_MANAGER);
});

test('intent: a finalizer goes on a living claimed owner, and off one being deleted once unclaimed', () => {
  const living: KubeObject = { metadata: { name: 'o' } };
  const deleting: KubeObject = { metadata: { name: 'o', deletionTimestamp: '2026-01-01T00:00:00Z' } };
  assert.equal(ownerFinalizerIntent(living, true, true), 'hold');
  assert.equal(ownerFinalizerIntent(living, true, false), 'keep', 'an invalid placement only lets go');
  assert.equal(ownerFinalizerIntent(living, false, true), 'keep');
  assert.equal(ownerFinalizerIntent(deleting, true, true), 'keep');
  assert.equal(ownerFinalizerIntent(deleting, false, true), 'release');
});

test('the owner cache keeps who applied which finalizer, and nothing else of managedFields', () => {
  const slim = new Owner({ [LEGACY]: [F], [ownerFinalizerManager('logs')]: [G] }).object;
  assert.deepEqual(
    slim.metadata?.managedFields?.map((e) => (e as { manager: string }).manager),
    [LEGACY, 'berth-agents-finalizer/logs'],
  );
  assert.deepEqual(
    [...ownerFinalizerHolders(slim)],
    [
      [LEGACY, [F]],
      ['berth-agents-finalizer/logs', [G]],
    ],
  );
});

describe('what a placement holds on owners, recorded on itself', () => {
  const spec = (s: Record<string, unknown> = {}): AgentPlacementSpec =>
    agentPlacementSpec.parse({
      podSelector: { matchLabels: { app: 'ateom' } },
      owner: { uidLabel: 'ate.dev/pool-uid', apiVersion: 'ate.dev/v1', kind: 'WorkerPool' },
      nodeLabel: { key: 'ate.dev/atelet' },
      claimAnnotationPrefix: 'ate.dev/claim.',
      finalizer: { name: F },
      ...s,
    });
  const held: OwnerHold = { finalizer: F, apiVersion: 'ate.dev/v1', kind: 'WorkerPool' };
  const placement = (
    o: { record?: OwnerHold; finalizer?: boolean; deleting?: boolean } = {},
  ): KubeObject => ({
    metadata: {
      name: 'atelet',
      ...(o.record ? { annotations: { [OWNER_HOLD_ANNOTATION]: holdRecord(o.record) } } : {}),
      ...(o.finalizer ? { finalizers: [PLACEMENT_FINALIZER] } : {}),
      ...(o.deleting ? { deletionTimestamp: '2026-01-01T00:00:00Z' } : {}),
    },
  });
  const recorded = placement({ record: held, finalizer: true });

  test('a new placement records what it holds once its owner kind is usable, and not before', () => {
    assert.deepEqual(ownerHoldChange(placement(), spec(), true), { record: held });
    assert.deepEqual(
      ownerHoldChange(placement(), spec(), false),
      {},
      'no placement finalizer to hold its deletion up',
    );
    assert.deepEqual(ownerHoldChange(recorded, spec(), true), { record: held }, 'as it is: nothing to do');
    assert.deepEqual(ownerHoldChange(placement(), spec({ finalizer: undefined }), true), {});
  });

  test('an edit releases what it held: the finalizer removed or renamed, the owner kind changed', () => {
    const renamed = { ...held, finalizer: 'ate.dev/other' };
    const moved = { ...held, apiVersion: 'ate.dev/v2', kind: 'Pool' };
    assert.deepEqual(ownerHoldChange(recorded, spec({ finalizer: undefined }), true), { release: held });
    assert.deepEqual(ownerHoldChange(recorded, spec({ finalizer: { name: 'ate.dev/other' } }), true), {
      release: held,
      record: renamed,
    });
    const v2 = spec({ owner: { uidLabel: 'ate.dev/pool-uid', apiVersion: 'ate.dev/v2', kind: 'Pool' } });
    assert.deepEqual(ownerHoldChange(recorded, v2, true), { release: held, record: moved });
    assert.deepEqual(ownerHoldChange(recorded, v2, false), { release: held }, 'the new kind not usable yet');
  });

  test('a spec that no longer parses, or a placement being deleted, releases what the record says', () => {
    assert.deepEqual(ownerHoldChange(recorded, undefined, false), { release: held });
    assert.deepEqual(
      ownerHoldChange(placement({ record: held, finalizer: true, deleting: true }), spec(), true),
      {
        release: held,
      },
    );
    // Its own finalizer removed by hand: the record still says what to take back.
    assert.deepEqual(ownerHoldChange(placement({ record: held, deleting: true }), undefined, false), {
      release: held,
    });
    assert.deepEqual(
      ownerHoldChange(placement({ deleting: true }), spec(), true),
      {},
      'it never held anything',
    );
  });

  test('a record stays while the owner kind cannot be used: its finalizers are still on the owners', () => {
    assert.deepEqual(ownerHoldChange(recorded, spec(), false), { record: held });
  });

  test("an earlier version's placement (its finalizer, no record) held what its spec says", () => {
    const legacy = placement({ finalizer: true });
    assert.deepEqual(ownerHoldChange(legacy, spec(), false), { record: held });
    assert.deepEqual(
      ownerHoldChange({ ...legacy, metadata: { ...legacy.metadata, deletionTimestamp: 'x' } }, spec(), true),
      {
        release: held,
      },
    );
  });

  test('a record that does not read as one is no record', () => {
    const broken = (text: string): KubeObject => ({
      metadata: { annotations: { [OWNER_HOLD_ANNOTATION]: text } },
    });
    assert.deepEqual(recordedHold(placement({ record: held })), held);
    for (const text of ['', '{', '[]', '{"finalizer":1,"apiVersion":"v1","kind":"ConfigMap"}'])
      assert.equal(recordedHold(broken(text)), undefined, text);
  });
});
