import assert from 'node:assert/strict';
import { test } from 'node:test';
import { finalizer, type FinalizerRef } from '../../../src/policy/finalizer.ts';
import { ApiError, type KubeClient } from '../../../src/runtime/client/client.ts';
import type { KubeObject, ResourceRef } from '../../../src/runtime/api/meta.ts';
import type { Result } from '../../../src/runtime/controller/controller.ts';

const ref: ResourceRef = {
  group: 'berth.dev',
  version: 'v1alpha1',
  resource: 'trials',
  kind: 'Trial',
  namespaced: false,
};
const NAME = 'berth.dev/hold';

const obj = (finalizers: string[], deleting: boolean): KubeObject => ({
  apiVersion: 'berth.dev/v1alpha1',
  kind: 'Trial',
  metadata: {
    name: 't',
    uid: 'u1',
    finalizers,
    ...(deleting ? { deletionTimestamp: '2026-01-01T00:00:00Z' } : {}),
  },
});

/**
 * A client that records the finalizers of every apply, and fails it with `fail` when given. Its
 * applies answer with `kept` still on the object, as the apiserver does with finalizers another
 * field manager holds too; patches are recorded.
 */
function client(fail?: () => Error, kept: string[] = [], patchFail?: () => Error) {
  const writes: {
    finalizers: string[] | undefined;
    fieldManager: string | undefined;
    uid: string | undefined;
  }[] = [];
  const patches: { name: string; patch: unknown; type: string | undefined }[] = [];
  const c = {
    apply: (_ref: ResourceRef, body: KubeObject, opts: { fieldManager?: string }) => {
      if (fail) return Promise.reject(fail());
      writes.push({
        finalizers: body.metadata?.finalizers,
        fieldManager: opts.fieldManager,
        uid: body.metadata?.uid,
      });
      const finalizers = [...kept, ...(body.metadata?.finalizers ?? [])];
      return Promise.resolve({ ...body, metadata: { ...body.metadata, finalizers } });
    },
    patch: (_ref: ResourceRef, name: string, patch: unknown, opts: { type?: string }) => {
      patches.push({ name, patch, type: opts.type });
      return patchFail ? Promise.reject(patchFail()) : Promise.resolve({});
    },
  } as unknown as KubeClient;
  const f: FinalizerRef = { name: NAME, client: c, ref, fieldManager: 'berth-test' };
  return { f, writes, patches };
}

test('a living object gets the finalizer first, under its own field manager, then apply runs', async () => {
  const { f, writes } = client();
  const order: string[] = [];
  const r = await finalizer(f, obj(['other/one'], false), {
    apply: async () => {
      order.push(`apply after ${writes.length} write(s)`);
      return { requeueAfterMs: 7 };
    },
    cleanup: async () => 'released',
  });
  assert.deepEqual(
    writes,
    [{ finalizers: [NAME], fieldManager: 'berth-test', uid: 'u1' }],
    'only its own entry, with the uid precondition',
  );
  assert.deepEqual(order, ['apply after 1 write(s)']);
  assert.deepEqual(r, { requeueAfterMs: 7 }, "apply's result is the reconcile's");
});

test('an object being deleted: cleanup, and the finalizer comes off only once cleanup released everything', async () => {
  const { f, writes } = client();
  const deleting = obj([NAME, 'other/one'], true);
  assert.deepEqual(await finalizer(f, deleting, { cleanup: async () => ({ requeueAfterMs: 500 }) }), {
    requeueAfterMs: 500,
  });
  assert.deepEqual(await finalizer(f, deleting, { cleanup: async () => ({}) }), {}, 'waits for an event');
  assert.deepEqual(writes, [], 'kept while cleanup is not done');
  assert.equal(await finalizer(f, deleting, { cleanup: async () => 'released' }), undefined);
  assert.deepEqual(writes, [{ finalizers: [], fieldManager: 'berth-test', uid: 'u1' }]);
});

test('a finalizer Berth did not apply (a manifest or a restore carried it) still comes off once released, by a guarded patch', async () => {
  // The apply lets go of Berth's claim, but the apiserver keeps the entry another manager holds.
  const { f, writes, patches } = client(undefined, ['other/one', NAME]);
  const deleting = obj(['other/one', NAME], true);
  assert.deepEqual(await finalizer(f, deleting, { cleanup: async () => ({}) }), {});
  assert.deepEqual(patches, [], 'nothing taken off before cleanup released');
  await finalizer(f, deleting, { cleanup: async () => 'released' });
  assert.equal(writes.length, 1);
  assert.deepEqual(patches, [
    {
      name: 't',
      type: 'json',
      patch: [
        { op: 'test', path: '/metadata/uid', value: 'u1' },
        { op: 'test', path: '/metadata/finalizers/1', value: NAME },
        { op: 'remove', path: '/metadata/finalizers/1' },
      ],
    },
  ]);
  // Berth's apply was enough: no patch.
  const plain = client(undefined, ['other/one']);
  await finalizer(plain.f, deleting, { cleanup: async () => 'released' });
  assert.deepEqual(plain.patches, []);
});

test('a finalizer list that changed under the guarded patch (another finalizer came off): a quiet requeue, not an error', async () => {
  const raced = client(
    undefined,
    ['other/one', NAME],
    () => new ApiError(422, 'Invalid', 'test operation failed', {}),
  );
  const deleting = obj(['other/one', NAME], true);
  assert.deepEqual(await finalizer(raced.f, deleting, { cleanup: async () => 'released' }), {
    requeue: true,
  });
  assert.equal(raced.patches.length, 1);
  // Any other refusal of the patch is the caller's.
  const denied = client(
    undefined,
    ['other/one', NAME],
    () => new ApiError(403, 'Forbidden', 'forbidden', {}),
  );
  await assert.rejects(finalizer(denied.f, deleting, { cleanup: async () => 'released' }), /forbidden/);
});

test('an object that went away meanwhile ends the flow quietly; other errors are the caller’s', async () => {
  const gone = client(() => new ApiError(404, 'NotFound', 'not found', {}));
  let applied = false;
  await finalizer(gone.f, obj([], false), {
    apply: async () => {
      applied = true;
    },
    cleanup: async () => 'released',
  });
  assert.equal(applied, false, 'nothing to reconcile on an object that is gone');
  await finalizer(gone.f, obj([NAME], true), { cleanup: async () => 'released' });
  const recreated = client(
    () => new ApiError(409, 'Conflict', 'Precondition failed: UID in precondition: u1', {}),
  );
  await finalizer(recreated.f, obj([NAME], true), { cleanup: async () => 'released' });

  const denied = client(() => new ApiError(403, 'Forbidden', 'forbidden', {}));
  await assert.rejects(finalizer(denied.f, obj([], false), { cleanup: async () => 'released' }), /forbidden/);
  await assert.rejects(
    finalizer(client().f, obj([NAME], true), {
      cleanup: () => Promise.reject(new Error('cleanup failed')),
    }),
    /cleanup failed/,
  );
});

// Every combination of: being deleted, carrying the finalizer, and what cleanup says; another
// manager holds the finalizer too, so letting go of it takes the guarded patch.
test('generated: never added to an object being deleted, never removed before cleanup released, never left when it did', async () => {
  let cases = 0;
  for (const deleting of [false, true])
    for (const present of [false, true])
      for (const outcome of ['released', 'requeue', 'wait'] as const) {
        const { f, writes, patches } = client(undefined, [NAME]);
        const calls: string[] = [];
        const o = obj(present ? ['other/one', NAME] : ['other/one'], deleting);
        const result = await finalizer(f, o, {
          apply: async () => {
            calls.push('apply');
          },
          cleanup: async (): Promise<Result | 'released'> => {
            calls.push('cleanup');
            return outcome === 'released' ? 'released' : outcome === 'requeue' ? { requeueAfterMs: 9 } : {};
          },
        });
        const what = JSON.stringify({ deleting, present, outcome });
        const added = writes.filter((w) => w.finalizers?.includes(NAME)).length;
        const removed = writes.filter((w) => w.finalizers?.length === 0).length;
        assert.ok(writes.length <= 1, `${what}: one write at most`);
        if (deleting) {
          assert.equal(added, 0, `${what}: never added while deleting`);
          assert.ok(!calls.includes('apply'), `${what}: no apply while deleting`);
          assert.deepEqual(calls, present ? ['cleanup'] : [], `${what}: cleanup only of its own finalizer`);
          assert.equal(
            removed,
            present && outcome === 'released' ? 1 : 0,
            `${what}: removed exactly when released`,
          );
          if (present && outcome !== 'released') assert.ok(result, `${what}: cleanup's result returned`);
        } else {
          assert.equal(removed, 0, `${what}: never removed from a living object`);
          assert.deepEqual(calls, ['apply'], `${what}: apply, never cleanup`);
          assert.equal(added, present ? 0 : 1, `${what}: added when missing`);
        }
        assert.equal(
          patches.length,
          deleting && present && outcome === 'released' ? 1 : 0,
          `${what}: patched off exactly when released (never from a living object)`,
        );
        cases++;
      }
  assert.equal(cases, 12);
});

test('cleanup runs again after a release whose removal failed: it must be idempotent', async () => {
  // The removal fails once (the apiserver is briefly away), then goes through.
  let failures = 1;
  const { f, writes } = client();
  const apply = f.client.apply.bind(f.client);
  f.client.apply = ((...args: Parameters<KubeClient['apply']>) =>
    failures-- > 0
      ? Promise.reject(new ApiError(500, 'InternalError', 'etcd away', {}))
      : apply(...args)) as never;
  const deleting = obj([NAME], true);
  let cleanups = 0;
  const on = {
    cleanup: async (): Promise<'released'> => {
      cleanups++;
      return 'released';
    },
  };
  await assert.rejects(
    finalizer(f, deleting, on),
    /etcd away/,
    'the failed removal is the caller’s to retry',
  );
  assert.equal(cleanups, 1);
  assert.equal(await finalizer(f, deleting, on), undefined);
  assert.equal(cleanups, 2, 'nothing remembers the earlier release: cleanup runs again');
  assert.deepEqual(writes, [{ finalizers: [], fieldManager: 'berth-test', uid: 'u1' }]);
});

test('cleanup runs on an object whose apply never went through (added, then apply failed, then deleted)', async () => {
  const { f, writes } = client();
  const calls: string[] = [];
  const on = {
    apply: async () => {
      calls.push('apply');
      throw new Error('apply failed');
    },
    cleanup: async (): Promise<'released'> => {
      calls.push('cleanup');
      return 'released';
    },
  };
  await assert.rejects(finalizer(f, obj([], false), on), /apply failed/);
  assert.deepEqual(
    writes.map((w) => w.finalizers),
    [[NAME]],
    'the finalizer went on before apply',
  );
  // The object is deleted before any apply succeeded: its finalizer is on, and cleanup runs.
  await finalizer(f, obj([NAME], true), on);
  assert.deepEqual(calls, ['apply', 'cleanup']);
  assert.deepEqual(
    writes.map((w) => w.finalizers),
    [[NAME], []],
  );
});

test('a conflict that is not the object gone (another manager’s field) is the caller’s, the finalizer left as it was', async () => {
  const conflict = client(
    () => new ApiError(409, 'Conflict', 'Apply failed with 1 conflict: conflict with "kubectl"', {}),
  );
  let applied = false;
  await assert.rejects(
    finalizer(conflict.f, obj([], false), {
      apply: async () => {
        applied = true;
      },
      cleanup: async () => 'released',
    }),
    /conflict with/,
  );
  assert.equal(applied, false, 'apply waits until the finalizer is on');
  let cleaned = 0;
  await assert.rejects(
    finalizer(conflict.f, obj([NAME], true), {
      cleanup: async () => {
        cleaned++;
        return 'released';
      },
    }),
    /conflict with/,
  );
  assert.equal(cleaned, 1, 'released, but the finalizer stays until its removal goes through');
});
