import { ApiError } from '../../../../src/runtime/client/client.ts';
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { ownerKindRecheckMs } from '../../../../src/agents/controllers/owner-finalizer.ts';
import {
  holdRecord,
  OWNER_HOLD_ANNOTATION,
  ownerFinalizerManager,
  type OwnerHold,
} from '../../../../src/agents/finalizers.ts';
import { setupAgents } from '../../../../src/agents/setup.ts';
import { FIELD_MANAGER, FINALIZER_FIELD_MANAGER, PLACEMENT_FINALIZER } from '../../../../src/agents/types.ts';
import { PolicyKit } from '../../../../src/policy/kit.ts';
import type { KubeObject, ResourceRef } from '../../../../src/runtime/api/meta.ts';
import type { KubeClient } from '../../../../src/runtime/client/client.ts';
import { Manager } from '../../../../src/runtime/manager/manager.ts';

// ---- the finalizer controller against a stand-in apiserver (lists answered, watches silent, applies
// recorded): what it writes on owners and placements, and under which field manager.

const F = 'ate.dev/release-node-claims';
const G = 'logs.dev/release';
const PLACEMENT_CRD: KubeObject = {
  apiVersion: 'apiextensions.k8s.io/v1',
  kind: 'CustomResourceDefinition',
  metadata: { name: 'agentplacements.berth.dev' },
  spec: { group: 'berth.dev', names: { kind: 'AgentPlacement' } },
  status: { conditions: [{ type: 'Established', status: 'True' }] },
};

interface Applied {
  resource: string;
  name: string;
  fieldManager: string;
  finalizers: string[] | undefined;
  annotations: Record<string, string> | undefined;
}

/** An apiserver holding `objects` by resource; it serves ConfigMaps, allows every verb, and records applies. */
function apiserver(objects: Record<string, KubeObject[]>) {
  const applied: Applied[] = [];
  const client = {
    request: (method: string, path: string) => {
      if (method === 'POST') return Promise.resolve({ status: { allowed: true } });
      if (path === '/api/v1')
        return Promise.resolve({ resources: [{ name: 'configmaps', kind: 'ConfigMap', namespaced: true }] });
      const resource = path.split('/').at(-1)!;
      const items = structuredClone(
        resource === 'customresourcedefinitions' ? [PLACEMENT_CRD] : (objects[resource] ?? []),
      );
      return Promise.resolve({ apiVersion: 'v1', kind: 'List', metadata: { resourceVersion: '1' }, items });
    },
    // A watch that stays open and silent until it is stopped.
    async *stream(_path: string, opts: { signal?: AbortSignal; query?: Record<string, unknown> }) {
      // An apiserver without WatchList: the informers list.
      if (opts.query?.['sendInitialEvents']) throw new ApiError(422, 'Invalid', 'no WatchList', {});
      await new Promise((resolve) => opts.signal?.addEventListener('abort', resolve, { once: true }));
      yield* [];
    },
    apply: (ref: ResourceRef, body: KubeObject, opts: { fieldManager: string }) => {
      applied.push({
        resource: ref.resource,
        name: body.metadata!.name!,
        fieldManager: opts.fieldManager,
        finalizers: body.metadata?.finalizers,
        annotations: body.metadata?.annotations,
      });
      return Promise.resolve(body);
    },
    close: () => {},
  } as unknown as KubeClient;
  return { client, applied };
}

/** The agents controller on `server`, its finalizer controller running; `run` stops it after. */
async function finalizerController(
  objects: Record<string, KubeObject[]>,
  run: (applied: Applied[]) => Promise<void>,
) {
  const server = apiserver(objects);
  const manager = new Manager({ client: server.client, metricsBindAddress: '0', healthBindAddress: '0' });
  const agents = setupAgents(new PolicyKit(manager), { berthNamespace: 'berth-system' });
  manager.cluster().start();
  await manager.cluster().waitForCacheSync();
  const stop = new AbortController();
  await agents.finalizerController.start(stop.signal);
  try {
    await run(server.applied);
  } finally {
    stop.abort();
    await agents.finalizerController.stop();
    await manager.cluster().stop();
  }
}

/** Each write once: the watch is silent, so a key reconciled again from the same cache writes the same again. */
const distinct = (applied: Applied[]): Applied[] => [
  ...new Map(applied.map((a) => [JSON.stringify(a), a])).values(),
];

async function eventually(what: string, ok: () => boolean): Promise<void> {
  for (const deadline = Date.now() + 3000; Date.now() < deadline; await sleep(20)) if (ok()) return;
  assert.fail(`not within 3 s: ${what}`);
}

const spec = (s: Record<string, unknown> = {}) => ({
  podSelector: { matchLabels: { app: 'ateom' } },
  owner: { uidLabel: 'ate.dev/pool-uid', apiVersion: 'v1', kind: 'ConfigMap' },
  nodeLabel: { key: 'ate.dev/atelet' },
  claimAnnotationPrefix: 'ate.dev/claim.',
  finalizer: { name: F },
  ...s,
});

/** An AgentPlacement as Berth left it: its record of what it holds on owners, and its own finalizer. */
const placement = (
  name: string,
  s: Record<string, unknown>,
  held?: OwnerHold,
  meta: Partial<KubeObject['metadata']> = {},
) => ({
  apiVersion: 'berth.dev/v1alpha1',
  kind: 'AgentPlacement',
  metadata: {
    name,
    uid: `${name}-uid`,
    generation: 1,
    ...(held
      ? { annotations: { [OWNER_HOLD_ANNOTATION]: holdRecord(held) }, finalizers: [PLACEMENT_FINALIZER] }
      : {}),
    ...meta,
  },
  spec: s,
});

const fieldsOf = (kind: 'finalizers' | 'annotations', values: string[]) =>
  kind === 'finalizers'
    ? {
        'f:metadata': {
          'f:finalizers': Object.fromEntries(values.map((v) => [`v:${JSON.stringify(v)}`, {}])),
        },
      }
    : { 'f:metadata': { 'f:annotations': Object.fromEntries(values.map((v) => [`f:${v}`, {}])) } };

/** A ConfigMap owner, with the finalizers each field manager applied. */
const owner = (name: string, holders: Record<string, string[]> = {}): KubeObject => ({
  apiVersion: 'v1',
  kind: 'ConfigMap',
  metadata: {
    name,
    namespace: 'ate',
    uid: `${name}-uid`,
    finalizers: [...new Set(Object.values(holders).flat())],
    managedFields: Object.entries(holders).map(([manager, values]) => ({
      manager,
      operation: 'Apply',
      fieldsV1: fieldsOf('finalizers', values),
    })),
  },
});

/** A node with claim annotations, each applied by its field manager. */
const claimed = (claims: Record<string, string>): KubeObject => {
  const byManager = new Map<string, string[]>();
  for (const [key, manager] of Object.entries(claims))
    byManager.set(manager, [...(byManager.get(manager) ?? []), key]);
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: {
      name: 'n1',
      uid: 'n1-uid',
      annotations: Object.fromEntries(Object.keys(claims).map((k) => [k, 'ConfigMap/ate'])),
      managedFields: [...byManager].map(([manager, keys]) => ({
        manager,
        operation: manager === FIELD_MANAGER ? 'Apply' : 'Update',
        fieldsV1: fieldsOf('annotations', keys),
      })),
    },
  };
};

const HELD: OwnerHold = { finalizer: F, apiVersion: 'v1', kind: 'ConfigMap' };
const MINE = ownerFinalizerManager('atelet');

test('a placement that stops asking for its finalizer takes it off every owner, then its record and own finalizer go', async () => {
  const edits: [string, Record<string, unknown>, Partial<KubeObject['metadata']>][] = [
    ['finalizer removed', spec({ finalizer: undefined }), {}],
    ['finalizer renamed', spec({ finalizer: { name: 'ate.dev/other' } }), {}],
    ['no longer parses, being deleted', { podSelector: {} }, { deletionTimestamp: '2026-01-01T00:00:00Z' }],
  ];
  for (const [what, s, meta] of edits)
    await finalizerController(
      {
        agentplacements: [placement('atelet', s, HELD, meta)],
        configmaps: [owner('pool', { [MINE]: [F], 'someone-else': ['example.com/keep'] })],
      },
      async (applied) => {
        await eventually(`${what}: the record rewritten`, () =>
          applied.some((a) => a.resource === 'agentplacements'),
        );
        const released = applied.findIndex((a) => a.resource === 'configmaps' && a.fieldManager === MINE);
        const recorded = applied.findIndex((a) => a.resource === 'agentplacements');
        assert.ok(
          released >= 0 && released < recorded,
          `${what}: released first (${JSON.stringify(applied)})`,
        );
        assert.deepEqual(applied[released]!.finalizers, [], what);
        assert.equal(applied[recorded]!.fieldManager, FINALIZER_FIELD_MANAGER, what);
        const renamed = what === 'finalizer renamed';
        assert.deepEqual(applied[recorded]!.finalizers, renamed ? [PLACEMENT_FINALIZER] : undefined, what);
        assert.deepEqual(
          applied[recorded]!.annotations,
          renamed
            ? { [OWNER_HOLD_ANNOTATION]: holdRecord({ ...HELD, finalizer: 'ate.dev/other' }) }
            : undefined,
          what,
        );
      },
    );
});

test('a new placement records what it holds before any owner gets it', async () => {
  await finalizerController(
    {
      agentplacements: [placement('atelet', spec())],
      configmaps: [owner('pool')],
      nodes: [claimed({ 'ate.dev/claim.pool-uid': FIELD_MANAGER })],
    },
    async (applied) => {
      await eventually('the record', () => applied.some((a) => a.resource === 'agentplacements'));
      assert.deepEqual(applied[0], {
        resource: 'agentplacements',
        name: 'atelet',
        fieldManager: FINALIZER_FIELD_MANAGER,
        finalizers: [PLACEMENT_FINALIZER],
        annotations: { [OWNER_HOLD_ANNOTATION]: holdRecord(HELD) },
      });
      await sleep(200);
      // The record has not come back through the (silent) watch: no owner is touched yet.
      assert.deepEqual(
        applied.filter((a) => a.resource === 'configmaps'),
        [],
      );
    },
  );
});

test('only claims Berth wrote hold an owner: one someone else set never does', async () => {
  await finalizerController(
    {
      agentplacements: [placement('atelet', spec(), HELD)],
      configmaps: [owner('ours'), owner('theirs')],
      nodes: [
        claimed({ 'ate.dev/claim.ours-uid': FIELD_MANAGER, 'ate.dev/claim.theirs-uid': 'kubectl-edit' }),
      ],
    },
    async (applied) => {
      await eventually('the finalizer on the owner Berth claims for', () =>
        applied.some((a) => a.name === 'ours'),
      );
      await sleep(200);
      assert.deepEqual(
        distinct(applied).map((a) => [a.name, a.fieldManager, a.finalizers]),
        [['ours', MINE, [F]]],
      );
    },
  );
});

test('two placements on one owner each hold their own entry; the shared manager of earlier versions lets go only after', async () => {
  const logs: OwnerHold = { finalizer: G, apiVersion: 'v1', kind: 'ConfigMap' };
  await finalizerController(
    {
      agentplacements: [
        placement('atelet', spec(), HELD),
        placement(
          'logs',
          spec({
            claimAnnotationPrefix: 'logs.dev/claim.',
            nodeLabel: { key: 'logs.dev/agent' },
            finalizer: { name: G },
          }),
          logs,
        ),
      ],
      // The last write of the shared manager: logs' entry (atelet's was dropped by it).
      configmaps: [owner('pool', { [FINALIZER_FIELD_MANAGER]: [G] })],
      nodes: [claimed({ 'ate.dev/claim.pool-uid': FIELD_MANAGER, 'logs.dev/claim.pool-uid': FIELD_MANAGER })],
    },
    async (applied) => {
      await eventually('three writes', () => applied.length >= 3);
      await sleep(200);
      const writes = distinct(applied).map((a) => [a.fieldManager, a.finalizers]);
      assert.equal(writes.length, 3, JSON.stringify(writes));
      assert.deepEqual(writes.filter(([m]) => m !== FINALIZER_FIELD_MANAGER).sort(), [
        [MINE, [F]],
        [ownerFinalizerManager('logs'), [G]],
      ]);
      const coOwned = writes.findIndex(([m]) => m === ownerFinalizerManager('logs'));
      const letGo = writes.findIndex(([m]) => m === FINALIZER_FIELD_MANAGER);
      assert.ok(
        coOwned >= 0 && letGo > coOwned,
        `the shared manager lets go after: ${JSON.stringify(writes)}`,
      );
      assert.deepEqual(writes[letGo]![1], []);
    },
  );
});

test('an owner kind not served yet is checked again soon while its CRD is new, then on the backoff', () => {
  const now = 1_000_000;
  const missing = {
    id: 'example.com/v1/Ghost',
    failures: 0,
    problem: { reason: 'OwnerKindUnknown' as const, message: '' },
  };
  assert.equal(ownerKindRecheckMs({ ...missing, crdSeenAt: now - 1000 }, now), 250, 'discovery catching up');
  assert.equal(
    ownerKindRecheckMs({ ...missing, crdSeenAt: now - 11_000 }, now),
    1000,
    'a CRD that never served',
  );
  const forbidden = { ...missing, problem: { reason: 'OwnerKindForbidden' as const, message: '' } };
  assert.equal(
    ownerKindRecheckMs({ ...forbidden, crdSeenAt: now - 1000 }, now),
    1000,
    'served: RBAC, not discovery',
  );
  assert.equal(ownerKindRecheckMs(missing, now), 1000, 'no CRD seen: the backoff');
  assert.equal(ownerKindRecheckMs({ ...missing, failures: 3 }, now), 8000);
  assert.equal(ownerKindRecheckMs({ ...missing, failures: 20 }, now), 60_000, 'capped');
});
