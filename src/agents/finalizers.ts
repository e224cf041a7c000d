// The finalizers agent placement puts on owners, decided without I/O. metadata.finalizers is a set
// under server-side apply: an entry stays while any field manager that applied it still does. So each
// placement applies its entry under a field manager of its own, and two placements on one owner (two
// agents of one Deployment, or two sharing a finalizer name) never take each other's entry off.
// Earlier versions applied every placement's entry under the one manager berth-agents-finalizer,
// each apply dropping the entry of the one before; that manager lets go of an entry only once a
// placement's own manager holds it too, or once it is released.
//
// A placement records on itself what it puts on owners (finalizer name, owner kind), before it puts
// it on any: when its spec changes, stops parsing, or it is deleted, the record says what to take
// back.
import { createHash } from 'node:crypto';
import { hasFinalizer } from '../policy/finalizer.ts';
import { interning } from '../policy/intern.ts';
import { slimMetadata } from '../policy/slim.ts';
import type { KubeObject } from '../runtime/api/meta.ts';
import { FINALIZER_FIELD_MANAGER, PLACEMENT_FINALIZER, type AgentPlacementSpec } from './types.ts';

/** The apiserver refuses a longer field manager. */
const FIELD_MANAGER_MAX = 128;
const PLACEMENT_MANAGER_PREFIX = `${FINALIZER_FIELD_MANAGER}/`;
const HASH_LENGTH = 16;

/**
 * The field manager of one placement's owner finalizer: `berth-agents-finalizer/<placement>`, or,
 * for a name too long for that, its start and a hash of all of it after a `+`, which no placement
 * name contains (a DNS subdomain), so no two placements ever share one.
 */
export function ownerFinalizerManager(placement: string): string {
  const room = FIELD_MANAGER_MAX - PLACEMENT_MANAGER_PREFIX.length;
  if (placement.length <= room) return PLACEMENT_MANAGER_PREFIX + placement;
  const hash = createHash('sha256').update(placement).digest('hex').slice(0, HASH_LENGTH);
  return `${PLACEMENT_MANAGER_PREFIX}${placement.slice(0, room - HASH_LENGTH - 1)}+${hash}`;
}

const isOwnerFinalizerManager = (m: string | undefined): m is string =>
  m === FINALIZER_FIELD_MANAGER || (m?.startsWith(PLACEMENT_MANAGER_PREFIX) ?? false);

interface FieldsEntry {
  manager?: string;
  operation?: string;
  subresource?: string;
  fieldsV1?: { 'f:metadata'?: { 'f:finalizers'?: Record<string, unknown> } };
}

const finalizerEntries = (obj: KubeObject): FieldsEntry[] =>
  ((obj.metadata?.managedFields ?? []) as FieldsEntry[]).filter(
    (e) => isOwnerFinalizerManager(e.manager) && e.operation === 'Apply' && !e.subresource,
  );

/** An owner as the owner informers keep it: identity, labels, annotations and finalizers, and who applied which finalizer. */
export const slimOwner = interning('agents-owner', (o: KubeObject): KubeObject => {
  const metadata = slimMetadata(o.metadata);
  const entries = finalizerEntries(o).map((e) => ({
    manager: e.manager,
    operation: e.operation,
    fieldsV1: { 'f:metadata': { 'f:finalizers': e.fieldsV1?.['f:metadata']?.['f:finalizers'] ?? {} } },
  }));
  if (entries.length) metadata.managedFields = entries;
  return { apiVersion: o.apiVersion, kind: o.kind, metadata };
});

/** The finalizers each of agent placement's field managers holds on an object by apply, from managedFields. */
export function ownerFinalizerHolders(obj: KubeObject): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (const e of finalizerEntries(obj)) {
    // A set's entries are keyed `v:<the value as JSON>`.
    const values = Object.keys(e.fieldsV1?.['f:metadata']?.['f:finalizers'] ?? {})
      .filter((k) => k.startsWith('v:'))
      .map((k) => JSON.parse(k.slice(2)) as unknown)
      .filter((v): v is string => typeof v === 'string');
    out.set(e.manager!, values);
  }
  return out;
}

/**
 * What a placement does with its finalizer on one owner: `hold` it (the owner lives and has
 * claims), `keep` what is there (neither add nor remove), or `release` it.
 */
export type OwnerFinalizerIntent = 'hold' | 'keep' | 'release';

/**
 * A living owner with claims is held (by a placement that is usable); one being deleted is
 * released once no claim is left. A finalizer never goes onto an object being deleted, and one
 * already on a living owner stays.
 */
export function ownerFinalizerIntent(
  owner: KubeObject,
  claimed: boolean,
  usable: boolean,
): OwnerFinalizerIntent {
  if (owner.metadata?.deletionTimestamp !== undefined) return claimed ? 'keep' : 'release';
  return claimed && usable ? 'hold' : 'keep';
}

/** One server-side apply of an object's finalizers: what `fieldManager` holds from then on. */
export interface FinalizerApply {
  fieldManager: string;
  finalizers: string[];
}

const sameSet = (a: string[], b: string[]) => a.length === b.length && a.every((v) => b.includes(v));

/**
 * The applies, in order, that bring `placement`'s `finalizer` on `obj` where `intent` says, and
 * move the shared manager of earlier versions off every entry a placement's own manager holds too.
 * Empty when there is nothing to write.
 */
export function ownerFinalizerApplies(
  obj: KubeObject,
  placement: string,
  finalizer: string,
  intent: OwnerFinalizerIntent,
): FinalizerApply[] {
  const holders = ownerFinalizerHolders(obj);
  const mine = ownerFinalizerManager(placement);
  const have = holders.get(mine) ?? [];
  const shared = holders.get(FINALIZER_FIELD_MANAGER) ?? [];
  // An entry the shared manager holds for this placement becomes its own while it is on the object
  // (never on one being deleted, which refuses an entry it does not have: the cache may be behind).
  const takeOver =
    intent === 'keep' &&
    shared.includes(finalizer) &&
    hasFinalizer(obj, finalizer) &&
    obj.metadata?.deletionTimestamp === undefined;
  const want = intent === 'release' ? [] : intent === 'hold' || takeOver ? [finalizer] : have;
  const out: FinalizerApply[] = [];
  if (!sameSet(want, have)) out.push({ fieldManager: mine, finalizers: want });
  holders.set(mine, want);
  // First co-owned by a placement's manager, then let go: the entry never leaves the object meanwhile.
  const heldElsewhere = (v: string) =>
    [...holders].some(([m, values]) => m !== FINALIZER_FIELD_MANAGER && values.includes(v));
  const keep = shared.filter((v) => !heldElsewhere(v) && !(v === finalizer && intent === 'release'));
  if (keep.length < shared.length) out.push({ fieldManager: FINALIZER_FIELD_MANAGER, finalizers: keep });
  return out;
}

/** What a placement puts on owners: its finalizer, on objects of its owner kind. */
export interface OwnerHold {
  finalizer: string;
  apiVersion: string;
  kind: string;
}

/** On a placement: the OwnerHold it last recorded (JSON), written before it puts any finalizer on an owner. */
export const OWNER_HOLD_ANNOTATION = 'agents.berth.dev/owner-finalizer';

/** What the spec asks to put on owners, if anything. */
export function holdOf(spec: AgentPlacementSpec): OwnerHold | undefined {
  const { apiVersion, kind } = spec.owner;
  return spec.finalizer && apiVersion && kind
    ? { finalizer: spec.finalizer.name, apiVersion, kind }
    : undefined;
}

export const sameHold = (a: OwnerHold | undefined, b: OwnerHold | undefined): boolean =>
  a?.finalizer === b?.finalizer && a?.apiVersion === b?.apiVersion && a?.kind === b?.kind;

export const holdRecord = (h: OwnerHold): string =>
  JSON.stringify({ finalizer: h.finalizer, apiVersion: h.apiVersion, kind: h.kind });

/** The hold a placement recorded; undefined without a record, or with one that does not read as one. */
export function recordedHold(obj: KubeObject): OwnerHold | undefined {
  const text = obj.metadata?.annotations?.[OWNER_HOLD_ANNOTATION];
  if (text === undefined) return undefined;
  try {
    const r = JSON.parse(text) as Partial<Record<keyof OwnerHold, unknown>>;
    const { finalizer, apiVersion, kind } = r;
    return typeof finalizer === 'string' && typeof apiVersion === 'string' && typeof kind === 'string'
      ? { finalizer, apiVersion, kind }
      : undefined;
  } catch {
    return undefined;
  }
}

/** What the spec asks the placement to hold on owners now: nothing once it is being deleted, or when it no longer parses. */
export const wantedHold = (obj: KubeObject, spec: AgentPlacementSpec | undefined): OwnerHold | undefined =>
  obj.metadata?.deletionTimestamp === undefined && spec ? holdOf(spec) : undefined;

/**
 * What a placement takes back from every owner first (`release`: what it held and no longer
 * holds), and what it records from then on, with its own finalizer (`record`; none: both go). What
 * it holds is recorded once its owner kind is usable (until then no owner can get it, and a
 * placement finalizer could only hold up its deletion), and stays recorded while it is not.
 */
export function ownerHoldChange(
  obj: KubeObject,
  spec: AgentPlacementSpec | undefined,
  kindUsable: boolean,
): { release?: OwnerHold; record?: OwnerHold } {
  const hold = wantedHold(obj, spec);
  // Its own finalizer without a record: an earlier version put the spec's finalizer on owners.
  const held =
    recordedHold(obj) ?? (spec && hasFinalizer(obj, PLACEMENT_FINALIZER) ? holdOf(spec) : undefined);
  return {
    ...(held && !sameHold(held, hold) ? { release: held } : {}),
    ...(hold && (kindUsable || sameHold(held, hold)) ? { record: hold } : {}),
  };
}
