// A gated pod whose state label someone takes off leaves the controller's informer (it selects the
// label): the controller finds it again and labels it anew, so that it is placed. Against a
// stand-in apiserver: the informer's list and watch, GET, paged lists and JSON patches of pods.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setupArch } from '../../../src/arch/setup.ts';
import { relabelPatch, UNLABELLED_UNBOUND } from '../../../src/arch/decide/patches.ts';
import { type ArchPod } from '../../../src/arch/decide/pods.ts';
import { POLICY_ANNOTATION, SCHEDULING_GATE, STATE_LABEL } from '../../../src/arch/types.ts';
import { PolicyKit } from '../../../src/policy/kit.ts';
import type { ImageInspector } from '../../../src/registry/types.ts';
import type { JsonPatchOp } from '../../../src/runtime/api/jsonpatch.ts';
import { ApiError, type KubeClient } from '../../../src/runtime/client/client.ts';
import { rootLogger } from '../../../src/runtime/observability/log.ts';
import { Manager } from '../../../src/runtime/manager/manager.ts';
import { applyJsonPatch } from '../../helpers/jsonpatch.ts';
import { waitFor } from '../../helpers/wait.ts';

const gatedPod = (name: string, labelled = true, extra: Partial<ArchPod['spec']> = {}): ArchPod => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: {
    name,
    namespace: 'apps',
    resourceVersion: '1',
    labels: { app: 'web', ...(labelled ? { [STATE_LABEL]: 'Gated' } : {}) },
    annotations: { [POLICY_ANNOTATION]: 'web' },
  },
  spec: {
    containers: [{ name: 'c', image: 'web:1' }],
    schedulingGates: [{ name: SCHEDULING_GATE }],
    ...extra,
  },
});

type WatchEvent = { type: 'DELETED' | 'ADDED'; object: ArchPod };

/**
 * The pods as the apiserver keeps them. The informer's pod list and watch select the state label;
 * `events` feeds its watch. A paged list answers one pod a page.
 */
function apiserver(pods: ArchPod[], listDelayMs = 0) {
  const stored = new Map(
    pods.map((p) => [`${p.metadata!.namespace}/${p.metadata!.name}`, structuredClone(p)]),
  );
  const patched: string[] = [];
  /** Every GET and every patch sent, whatever its answer. */
  const gets: string[] = [];
  const attempts: string[] = [];
  const queries: Record<string, unknown>[] = [];
  const pending: WatchEvent[] = [];
  let wake: (() => void) | undefined;
  let version = 10;
  let snapshot: ArchPod[] = [];
  const empty = { apiVersion: 'v1', kind: 'List', metadata: { resourceVersion: '1' }, items: [] };
  const client = {
    request: (_method: string, path: string, opts: { query?: Record<string, unknown> }) => {
      if (path !== '/api/v1/pods') return Promise.resolve(empty);
      assert.equal(opts.query?.['labelSelector'], STATE_LABEL);
      const items = [...stored.values()].filter((p) => p.metadata?.labels?.[STATE_LABEL] !== undefined);
      return Promise.resolve({ ...empty, items: structuredClone(items) });
    },
    async *stream(path: string, opts: { signal?: AbortSignal; query?: Record<string, unknown> }) {
      // An apiserver without WatchList: the informers list.
      if (opts.query?.['sendInitialEvents']) throw new ApiError(422, 'Invalid', 'no WatchList', {});
      const aborted = new Promise<void>((r) =>
        opts.signal?.addEventListener('abort', () => r(), { once: true }),
      );
      if (path !== '/api/v1/pods') return void (await aborted);
      while (!opts.signal?.aborted) {
        const ev = pending.shift();
        if (ev) yield ev;
        else await Promise.race([aborted, new Promise<void>((r) => (wake = r))]);
      }
    },
    get: (_ref: unknown, name: string, namespace: string) => {
      gets.push(`${namespace}/${name}`);
      const p = stored.get(`${namespace}/${name}`);
      return p
        ? Promise.resolve(structuredClone(p))
        : Promise.reject(new ApiError(404, 'NotFound', `pods "${name}" not found`, {}));
    },
    list: async (_ref: unknown, opts: { query: Record<string, unknown> }) => {
      await new Promise((r) => setTimeout(r, listDelayMs));
      queries.push(opts.query);
      const { fieldSelector, labelSelector } = opts.query;
      assert.deepEqual({ fieldSelector, labelSelector }, UNLABELLED_UNBOUND);
      // Pages of one list are of one snapshot, as the apiserver's continue tokens are.
      const at = Number(opts.query['continue'] ?? 0);
      if (at === 0)
        snapshot = [...stored.values()].filter(
          (p) => !p.spec.nodeName && p.metadata?.labels?.[STATE_LABEL] === undefined,
        );
      const matching = snapshot;
      const more = at + 1 < matching.length;
      return Promise.resolve({
        ...empty,
        metadata: { continue: more ? String(at + 1) : undefined },
        items: structuredClone(matching.slice(at, at + 1)),
      });
    },
    patch: (_ref: unknown, name: string, ops: JsonPatchOp[], opts: { namespace: string }) => {
      const key = `${opts.namespace}/${name}`;
      attempts.push(key);
      const p = stored.get(key);
      if (!p) return Promise.reject(new ApiError(404, 'NotFound', `pods "${name}" not found`, {}));
      try {
        const next = applyJsonPatch(p, ops) as ArchPod;
        next.metadata!.resourceVersion = String(++version);
        stored.set(key, next);
      } catch (e) {
        return Promise.reject(new ApiError(422, 'Invalid', String(e), {}));
      }
      patched.push(key);
      return Promise.resolve(structuredClone(stored.get(key)));
    },
    close: () => {},
  } as unknown as KubeClient;
  return {
    client,
    stored,
    patched,
    gets,
    attempts,
    queries,
    /** Someone else's write: the label taken off, or the pod deleted; the informer's watch says DELETED. */
    leave(key: string, how: 'unlabel' | 'delete') {
      const before = stored.get(key)!;
      if (how === 'delete') stored.delete(key);
      else {
        const after = structuredClone(before);
        delete after.metadata!.labels![STATE_LABEL];
        after.metadata!.resourceVersion = String(++version);
        stored.set(key, after);
      }
      // As the apiserver's watch cache does: the pod as last selected, at the new resourceVersion.
      pending.push({
        type: 'DELETED',
        object: { ...before, metadata: { ...before.metadata, resourceVersion: String(version) } },
      });
      wake?.();
    },
  };
}

const inspector = {
  cached: () => undefined,
  known: () => ({}),
  onLearn: () => {},
  inspect: () => Promise.reject(new Error('not in this test')),
} as unknown as ImageInspector;

/** The arch controller on `server` with only its regate controller running. */
async function regating(server: ReturnType<typeof apiserver>, run: () => Promise<void>) {
  const logger = rootLogger.child({}, { level: 'silent' });
  const manager = new Manager({
    client: server.client,
    metricsBindAddress: '0',
    healthBindAddress: '0',
    logger,
  });
  const arch = setupArch(new PolicyKit(manager), { inspector, berthNamespace: 'berth-system' });
  manager.cluster().start();
  await manager.cluster().waitForCacheSync();
  const stop = new AbortController();
  await arch.regateController.start(stop.signal);
  try {
    await run();
  } finally {
    stop.abort();
    await arch.regateController.stop();
    await manager.cluster().stop();
  }
}

test('a gated pod that loses its state label is labelled again; one deleted, or ungated, is left alone', async () => {
  const server = apiserver([
    gatedPod('web-1'),
    gatedPod('web-2'),
    gatedPod('done', true, { schedulingGates: [] }),
  ]);
  await regating(server, async () => {
    // The leader's first sweep found nothing: what follows is the informer's doing.
    await waitFor('the first sweep', () => server.queries.length === 1 || undefined, { timeoutMs: 3000 });
    server.leave('apps/web-1', 'unlabel');
    server.leave('apps/web-2', 'delete');
    server.leave('apps/done', 'unlabel');
    await waitFor(
      'web-1 labelled again',
      () => server.stored.get('apps/web-1')?.metadata?.labels?.[STATE_LABEL] === 'Gated',
      {
        timeoutMs: 3000,
        intervalMs: 10,
      },
    );
    await waitFor('the deleted pod read again', () => server.gets.includes('apps/web-2') || undefined, {
      timeoutMs: 3000,
      intervalMs: 10,
    });
    assert.deepEqual(server.stored.get('apps/web-1')?.spec.schedulingGates, [{ name: SCHEDULING_GATE }]);
    assert.equal(server.stored.get('apps/web-1')?.metadata?.labels?.['app'], 'web', 'other labels kept');
  });
  assert.deepEqual(server.patched, ['apps/web-1']);
  assert.deepEqual(
    server.gets.sort(),
    ['apps/web-1', 'apps/web-2'],
    'each lost gated pod read again (done had no gate)',
  );
  assert.deepEqual(server.attempts, ['apps/web-1'], 'no patch for the deleted pod, nor the ungated one');
  assert.equal(
    server.stored.get('apps/done')?.metadata?.labels?.[STATE_LABEL],
    undefined,
    'ungated: left alone',
  );
});

test('a leader starting finds the gated pods that lost their label while no Berth watched, page by page', async () => {
  const server = apiserver([
    gatedPod('lost-1', false),
    gatedPod('pending', false, { schedulingGates: [{ name: 'other.example/wait' }] }),
    gatedPod('lost-2', false),
    gatedPod('held', true),
  ]);
  await regating(server, async () => {
    await waitFor('both labelled again', () => server.patched.length === 2 || undefined, {
      timeoutMs: 3000,
      intervalMs: 10,
    });
  });
  assert.deepEqual(server.patched.sort(), ['apps/lost-1', 'apps/lost-2']);
  assert.equal(server.queries.length, 3, 'one page per unlabelled unbound pod');
  assert.equal(server.queries[0]!['resourceVersion'], '0', "the first page from the apiserver's cache");
  assert.equal(server.queries[1]!['resourceVersion'], undefined, 'later pages by their continue token');
  assert.equal(server.stored.get('apps/pending')?.metadata?.labels?.[STATE_LABEL], undefined);
});

test('the label comes back only on a pod that still carries the gate, and the patch tests the gate', () => {
  const lost = gatedPod('p', false, { schedulingGates: [{ name: 'a/b' }, { name: SCHEDULING_GATE }] });
  const out = applyJsonPatch(lost, relabelPatch(lost)) as ArchPod;
  assert.equal(out.metadata?.labels?.[STATE_LABEL], 'Gated');
  assert.deepEqual(out.spec, lost.spec);
  const ungated = structuredClone(lost);
  ungated.spec.schedulingGates = [{ name: 'a/b' }];
  assert.throws(() => applyJsonPatch(ungated, relabelPatch(lost)), 'the gate went meanwhile');
  assert.deepEqual(relabelPatch(ungated), []);
  assert.deepEqual(relabelPatch(gatedPod('q', true)), [], 'labelled already');
  const bare = gatedPod('r', false);
  delete bare.metadata!.labels;
  assert.deepEqual((applyJsonPatch(bare, relabelPatch(bare)) as ArchPod).metadata?.labels, {
    [STATE_LABEL]: 'Gated',
  });
});

test('a sweep ends at the next page once its controller stops, so the Lease waits for no backlog', async () => {
  const server = apiserver(
    Array.from({ length: 50 }, (_, i) => gatedPod(`lost-${i}`, false)),
    20,
  );
  await regating(server, async () => {
    await waitFor('the first relabel', () => server.patched.length > 0 || undefined, {
      timeoutMs: 3000,
      intervalMs: 5,
    });
  });
  const stoppedAt = server.queries.length;
  await new Promise((r) => setTimeout(r, 200));
  assert.ok(stoppedAt < 10, `${stoppedAt} pages read before the stop`);
  assert.equal(server.queries.length, stoppedAt, 'no page read after the stop');
  assert.ok(server.patched.length < 50);
});
