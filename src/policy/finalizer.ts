// One finalizer flow, in kube-rs's `finalizer()` shape (kube-runtime's finalizer.rs). What it
// guarantees, and what it asks of its caller:
//
// - Added before the first apply. A living object without the finalizer gets it first; `apply` runs
//   only on an object that carries it, so nothing `apply` does can outlive the object unreleased.
//   It is never added to an object being deleted (the apiserver refuses that, and nothing would take
//   it off again).
// - Removed after cleanup succeeds. Once the object is being deleted, `cleanup` runs, and the
//   finalizer comes off only when cleanup answers 'released'; any other answer (or a throw) keeps it
//   on, and the object, for the next reconcile. One that is on always comes off after a release,
//   even one Berth did not apply (a manifest or a restore carried it): no finalizer is stranded.
// - Cleanup is idempotent. It runs again on every reconcile until the finalizer is off, and again
//   after a release whose removal failed (an error, the object changed meanwhile): releasing what is
//   already released must answer 'released' again.
// - Cleanup tolerates `apply` never having run. The finalizer may be on an object `apply` never saw
//   through: added, then `apply` failed or the object was deleted first, or the finalizer came with
//   the object. Cleanup reads what is held from the cluster, not from what `apply` did.
// - One finalizer name per owner. The add is a server-side apply of `finalizers: [name]` alone
//   under the owner's field manager, so that manager owns exactly this entry and touches no other
//   finalizer; a second name (or any other field) applied by the same manager to the same object
//   would be taken off by the next apply. Each kind Berth finalizes has one name and one manager.
// - Conflicts. The writes carry the object's uid: an object deleted, or deleted and recreated
//   under its name, ends the flow quietly (nothing left to hold or release). Removing an entry
//   another manager also holds takes a JSON patch that tests the list first; when it changed
//   meanwhile (another finalizer came off) the reconcile is requeued, not failed. Any other error is
//   the caller's, and the controller retries it with backoff.
import { ApiError, type KubeClient } from '../runtime/client/client.ts';
import { applyTarget, isObjectGone } from '../runtime/client/apply.ts';
import { removeItem, type JsonPatchOp } from '../runtime/api/jsonpatch.ts';
import type { Result } from '../runtime/controller/controller.ts';
import type { KubeObject, ResourceRef } from '../runtime/api/meta.ts';

/** One finalizer on objects of one kind, written under its own field manager. */
export interface FinalizerRef {
  /** The finalizer, as `gates.berth.dev/release-nodes`. */
  name: string;
  client: KubeClient;
  ref: ResourceRef;
  /** Owns only this finalizer's entry, so that other finalizers on the object are never touched. */
  fieldManager: string;
}

export const hasFinalizer = (obj: KubeObject, name: string): boolean =>
  obj.metadata?.finalizers?.includes(name) ?? false;

/**
 * Adds or removes the finalizer by server-side apply: the field manager owns its own entry only.
 * 'changed': the finalizers changed between the apply and the patch that takes off an entry
 * another manager also holds (another finalizer came off meanwhile), so the patch did not apply.
 */
async function setFinalizer(f: FinalizerRef, obj: KubeObject, present: boolean): Promise<'changed' | void> {
  const body = applyTarget(f.ref, obj);
  body.metadata.finalizers = present ? [f.name] : [];
  const written = await f.client.apply(f.ref, body, { fieldManager: f.fieldManager });
  if (present) return;
  // The apply lets go of Berth's claim only: an entry another manager also applied (or wrote by
  // update) stays. The finalizer's name is Berth's all the same, and cleanup has released what it
  // guards, so it comes off by a patch that fails if the object or the list changed meanwhile.
  const patch = strayFinalizer(written, f.name);
  if (!patch) return;
  try {
    await f.client.patch(f.ref, obj.metadata!.name!, patch, {
      namespace: obj.metadata?.namespace,
      type: 'json',
    });
  } catch (e) {
    // A test of the patch failed: a race, not an error. The change's event brings the object back.
    if (e instanceof ApiError && e.status === 422) return 'changed';
    throw e;
  }
}

/** The patch that takes `name` off an object that still carries it after Berth let go of it. */
function strayFinalizer(obj: KubeObject, name: string): JsonPatchOp[] | undefined {
  const i = obj.metadata?.finalizers?.indexOf(name) ?? -1;
  if (i < 0) return undefined;
  return [
    { op: 'test', path: '/metadata/uid', value: obj.metadata!.uid },
    ...removeItem('/metadata/finalizers', i, name),
  ];
}

export interface FinalizerHandlers {
  /** The object lives and carries the finalizer: reconcile it. */
  apply?(): Promise<Result | void>;
  /**
   * The object is being deleted and carries the finalizer: release what it guards. 'released' takes
   * the finalizer off; a Result (an empty one waits for the next event) keeps it on for now.
   */
  cleanup(): Promise<Result | 'released'>;
}

export async function finalizer(
  f: FinalizerRef,
  obj: KubeObject,
  on: FinalizerHandlers,
): Promise<Result | void> {
  const present = hasFinalizer(obj, f.name);
  if (obj.metadata?.deletionTimestamp === undefined) {
    if (!present && (await write(f, obj, true)) === 'gone') return;
    return on.apply?.();
  }
  // Not ours to hold, or released already.
  if (!present) return;
  const cleaned = await on.cleanup();
  if (cleaned !== 'released') return cleaned;
  if ((await write(f, obj, false)) === 'changed') return { requeue: true };
}

/**
 * The finalizer written ('done'), the object gone meanwhile (nothing left to hold or release), or
 * its finalizers changed under the write ('changed', setFinalizer).
 */
async function write(
  f: FinalizerRef,
  obj: KubeObject,
  present: boolean,
): Promise<'done' | 'gone' | 'changed'> {
  try {
    return (await setFinalizer(f, obj, present)) ?? 'done';
  } catch (e) {
    if (isObjectGone(e)) return 'gone';
    throw e;
  }
}
