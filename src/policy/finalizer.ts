// One finalizer flow, in kube-rs's `finalizer()` shape. While an object lives, its finalizer goes on
// first, then `apply` runs; once it is being deleted, `cleanup` runs, and the finalizer comes off
// only when cleanup has released everything it guards. A finalizer is never added to an object being
// deleted (the apiserver refuses that, and nothing would take it off again), and one that is on is
// always taken off by the cleanup that follows: none is stranded.
import type { KubeClient } from '../runtime/client/client.ts';
import { applyTarget, isObjectGone } from '../runtime/client/apply.ts';
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

/** Adds or removes the finalizer by server-side apply: the field manager owns its own entry only. */
export function setFinalizer(f: FinalizerRef, obj: KubeObject, present: boolean): Promise<KubeObject> {
  const body = applyTarget(f.ref, obj);
  body.metadata.finalizers = present ? [f.name] : [];
  return f.client.apply(f.ref, body, { fieldManager: f.fieldManager });
}

export interface FinalizerHandlers {
  /** The object lives and carries the finalizer (or, not `needed`, may lack it): reconcile it. */
  apply?(): Promise<Result | void>;
  /**
   * The object is being deleted and carries the finalizer: release what it guards. 'released' takes
   * the finalizer off; a Result (an empty one waits for the next event) keeps it on for now.
   */
  cleanup(): Promise<Result | 'released'>;
  /** Whether a living object needs the finalizer (default: always). One already on stays. */
  needed?: boolean;
}

export async function finalizer(
  f: FinalizerRef,
  obj: KubeObject,
  on: FinalizerHandlers,
): Promise<Result | void> {
  const present = hasFinalizer(obj, f.name);
  if (obj.metadata?.deletionTimestamp === undefined) {
    if (!present && on.needed !== false && !(await write(f, obj, true))) return;
    return on.apply?.();
  }
  // Not ours to hold, or released already.
  if (!present) return;
  const cleaned = await on.cleanup();
  if (cleaned !== 'released') return cleaned;
  await write(f, obj, false);
}

/** Whether the object is still there: one that went away meanwhile has nothing left to hold or release. */
async function write(f: FinalizerRef, obj: KubeObject, present: boolean): Promise<boolean> {
  try {
    await setFinalizer(f, obj, present);
    return true;
  } catch (e) {
    if (isObjectGone(e)) return false;
    throw e;
  }
}
