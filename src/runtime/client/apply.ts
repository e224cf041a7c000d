// Server-side apply helpers. Each controller applies under its own fieldManager and includes only
// the fields it owns: the apiserver then removes exactly what that manager dropped, and never
// touches what another manager set.
import { isConflict, isNotFound, type KubeClient } from './client.ts';
import { apiVersionOf, type KubeObject, type ResourceRef } from '../api/meta.ts';

/**
 * The skeleton of an apply body for an object that exists: apiVersion, kind, name, namespace and
 * uid. The uid makes the apply fail with a conflict instead of recreating an object that was
 * deleted meanwhile (a node that left the cluster is never resurrected by a label write).
 */
export function applyTarget(
  ref: ResourceRef,
  obj: KubeObject,
): KubeObject & { metadata: NonNullable<KubeObject['metadata']> } {
  return {
    apiVersion: apiVersionOf(ref),
    kind: ref.kind,
    metadata: {
      name: obj.metadata!.name!,
      ...(obj.metadata?.namespace ? { namespace: obj.metadata.namespace } : {}),
      ...(obj.metadata?.uid ? { uid: obj.metadata.uid } : {}),
    },
  };
}

/**
 * Deletes exactly `obj` (its uid as precondition). The apiserver's answer when this call deleted it
 * (the object, now deleting, or a Status when it went at once); undefined when it was gone already
 * or another object of its name stands there now, which is not the caller's.
 */
export async function deleteExact(
  client: KubeClient,
  ref: ResourceRef,
  obj: KubeObject,
  opts: { propagationPolicy?: 'Foreground' | 'Background' | 'Orphan' } = {},
): Promise<KubeObject | undefined> {
  try {
    return (await client.delete(ref, obj.metadata!.name!, obj.metadata!.namespace, {
      apiVersion: 'v1',
      kind: 'DeleteOptions',
      ...opts,
      preconditions: { uid: obj.metadata!.uid },
    })) as KubeObject;
  } catch (e) {
    if (isNotFound(e) || isConflict(e)) return undefined;
    throw e;
  }
}

/** The object an apply targeted is gone: deleted, or deleted and recreated (the uid precondition failed). */
export const isObjectGone = (e: unknown): boolean =>
  isNotFound(e) ||
  (isConflict(e) && e instanceof Error && /uid mismatch|UID in precondition/i.test(e.message));

/** Applies `status` to the status subresource under fieldManager (force: status belongs to its controller). */
export function applyStatus<T extends KubeObject>(
  client: KubeClient,
  ref: ResourceRef,
  obj: KubeObject,
  status: unknown,
  fieldManager: string,
): Promise<T> {
  return client.apply<T>(
    ref,
    { ...applyTarget(ref, obj), status },
    { fieldManager, subresource: 'status', force: true },
  );
}
