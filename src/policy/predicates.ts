// Update predicates built from what they compare, after controller-runtime's predicate package:
// each leaf says which part of an object changed (labels, annotations, owners, spec, deletion,
// taints, conditions, node info, Berth's managed fields), and or/and/not combine them. A watch
// passes `changed(...)` as its update predicate: the informer's resync, or any of the changes named.
import { isDeepStrictEqual } from 'node:util';
import type { KubeObject, OwnerReference } from '../runtime/api/meta.ts';
import type { TaintLike } from './nodes/taints.ts';

/** Compares an object's old and new version: true lets the update through to the work queue. */
export type UpdatePredicate<T> = (oldObj: T, newObj: T) => boolean;

export const or =
  <T>(...ps: UpdatePredicate<T>[]): UpdatePredicate<T> =>
  (a, b) =>
    ps.some((p) => p(a, b));

export const and =
  <T>(...ps: UpdatePredicate<T>[]): UpdatePredicate<T> =>
  (a, b) =>
    ps.every((p) => p(a, b));

export const not =
  <T>(p: UpdatePredicate<T>): UpdatePredicate<T> =>
  (a, b) =>
    !p(a, b);

/** The informer's resync, onUpdate(obj, obj): the safety net that reconciles every object now and then. */
export const resync: UpdatePredicate<unknown> = (a, b) => a === b;

/** The resync, or an update where any of `changes` holds: what Berth's watches let through. */
export const changed = <T>(...changes: UpdatePredicate<T>[]): UpdatePredicate<T> => or(resync, ...changes);

/**
 * The handlers that call `fn` when an object comes, goes, or changes as `update` says (a resync
 * is no change): for what derives a value from a whole cache, say a webhook thread's state.
 */
export const onChanges = <T>(update: UpdatePredicate<T>, fn: () => void) => ({
  onAdd: fn,
  onUpdate: (a: T, b: T) => {
    if (a !== b && update(a, b)) fn();
  },
  onDelete: fn,
});

/** An update where `read` gives another value (compared with ===). */
export const valueChanged =
  <T>(read: (obj: T) => unknown): UpdatePredicate<T> =>
  (a, b) =>
    read(a) !== read(b);

function sameRecord(a: Record<string, string> | undefined, b: Record<string, string> | undefined): boolean {
  const ka = Object.keys(a ?? {});
  if (ka.length !== Object.keys(b ?? {}).length) return false;
  return ka.every((k) => b?.[k] === a?.[k]);
}

/** An update where the map `read` gives has other entries (an absent map is an empty one). */
export const recordChanged =
  <T>(read: (obj: T) => Record<string, string> | undefined): UpdatePredicate<T> =>
  (a, b) =>
    !sameRecord(read(a), read(b));

/** The spec changed: the apiserver bumps metadata.generation on spec writes, not on status or metadata. */
export const generationChanged = valueChanged((o: KubeObject) => o.metadata?.generation);

/** Deletion began: the apiserver set deletionTimestamp (finalizers or a grace period hold the object). */
export const deletionChanged = valueChanged((o: KubeObject) => o.metadata?.deletionTimestamp);

export const labelsChanged = recordChanged((o: KubeObject) => o.metadata?.labels);

export const annotationsChanged = recordChanged((o: KubeObject) => o.metadata?.annotations);

const sameOwner = (o: OwnerReference, p: OwnerReference) =>
  o.uid === p.uid &&
  o.name === p.name &&
  o.kind === p.kind &&
  o.apiVersion === p.apiVersion &&
  !o.controller === !p.controller;

/** Its owners changed (an adoption, an orphaning), in order and each by identity and controller flag. */
export const ownersChanged: UpdatePredicate<KubeObject> = (a, b) => {
  const x = a.metadata?.ownerReferences ?? [];
  const y = b.metadata?.ownerReferences ?? [];
  return x.length !== y.length || x.some((o, i) => !sameOwner(o, y[i]!));
};

/** The managedFields entries changed: who owns which field (a cache keeps Berth's own, see slimNode). */
export const managedFieldsChanged: UpdatePredicate<KubeObject> = (a, b) =>
  !isDeepStrictEqual(a.metadata?.managedFields ?? [], b.metadata?.managedFields ?? []);

/** A node's taints changed: any taint added, removed, reordered or altered. */
export const taintsChanged: UpdatePredicate<{ spec?: { taints?: TaintLike[] } }> = (a, b) =>
  !isDeepStrictEqual(a.spec?.taints ?? [], b.spec?.taints ?? []);

interface StatusCondition {
  type: string;
  status: string;
  reason?: string;
  message?: string;
}

/**
 * What a status condition says changed: its type, status, reason or message, in order. Heartbeat
 * and transition times are left out: a kubelet's heartbeat would make every node update count.
 */
export const conditionsChanged: UpdatePredicate<{ status?: { conditions?: StatusCondition[] } }> = (a, b) => {
  const x = a.status?.conditions ?? [];
  const y = b.status?.conditions ?? [];
  return (
    x.length !== y.length ||
    x.some((c, i) => {
      const d = y[i]!;
      return c.type !== d.type || c.status !== d.status || c.reason !== d.reason || c.message !== d.message;
    })
  );
};

/** A node's status.nodeInfo changed (architecture, kernel, kubelet version…). */
export const nodeInfoChanged = recordChanged(
  (n: { status?: { nodeInfo?: Record<string, string> } }) => n.status?.nodeInfo,
);
