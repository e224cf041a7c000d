// agents-finalizer (opt-in, per placement): holds an owner's deletion until no node carries its
// claim. It checks that the placement's owner kind is served and that Berth may watch and patch it,
// records on the placement what it holds, and puts the finalizer on owners and takes it off.
import { hasFinalizer } from '../../policy/finalizer.ts';
import { changed, deletionChanged, generationChanged, valueChanged } from '../../policy/predicates.ts';
import { interning } from '../../policy/intern.ts';
import { slimMetadata } from '../../policy/slim.ts';
import { Resources, type KubeObject, type ResourceRef } from '../../runtime/api/meta.ts';
import { keyOf, type Informer } from '../../runtime/cache/informer.ts';
import { applyTarget, isObjectGone } from '../../runtime/client/apply.ts';
import { deniedVerbs, UnknownKindError, type RestMapper } from '../../runtime/client/restmapper.ts';
import { Controller, type Reconciler, type Result } from '../../runtime/controller/controller.ts';
import { Trigger } from '../../runtime/controller/trigger.ts';
import { claimedOwners, type ParsedPlacement } from '../decide.ts';
import {
  holdOf,
  holdRecord,
  OWNER_HOLD_ANNOTATION,
  ownerFinalizerApplies,
  ownerFinalizerIntent,
  ownerHoldChange,
  recordedHold,
  sameHold,
  slimOwner,
  wantedHold,
  type FinalizerApply,
  type OwnerHold,
} from '../finalizers.ts';
import type { Agents, PlacementObject } from '../setup.ts';
import { FIELD_MANAGER, FINALIZER_FIELD_MANAGER, PLACEMENT_FINALIZER } from '../types.ts';
import { AgentPlacement } from '../crd.ts';
import { ownerKindProblems } from '../validate.ts';
import { nodeChanged } from './node.ts';
import type { StatusWriter } from './status.ts';

/** Whether a placement's owner kind (for its finalizer) can be used: served, and Berth may watch and patch it. */
export interface OwnerKind {
  /** "<apiVersion>/<kind>" as checked: a spec that names another kind is checked again. */
  id: string;
  ref?: ResourceRef;
  problem?: { reason: 'OwnerKindUnknown' | 'OwnerKindForbidden'; message: string };
  /** Checks failed in a row, for the backoff of the next one. */
  failures: number;
  /** When a CRD of the kind last appeared or changed (watchCrds), while that is recent (catchingUp). */
  crdSeenAt?: number;
}

export const ownerKindId = (p: ParsedPlacement): string => `${p.spec.owner.apiVersion}/${p.spec.owner.kind}`;
// Between checks of an owner kind that cannot be used. CRD events check at once; this bound covers
// kinds served by aggregated APIs, and RBAC changes, which send no event Berth watches.
const ownerKindRetryMs = (failures: number) => Math.min(1000 * 2 ** failures, 60_000);
// The apiserver serves a new CRD's kind a moment after the CRD's events (its discovery lags the
// Established condition, by seconds on a loaded apiserver): within this window of one, a miss is
// checked again every CRD_RECHECK_MS instead of on the backoff, so the kind is used once served.
const CRD_SERVED_WITHIN_MS = 10_000;
const CRD_RECHECK_MS = 250;
const catchingUp = (k: OwnerKind | undefined, now = Date.now()): boolean =>
  k?.problem?.reason === 'OwnerKindUnknown' &&
  k.crdSeenAt !== undefined &&
  now - k.crdSeenAt < CRD_SERVED_WITHIN_MS;
/** When an owner kind that cannot be used is checked again. */
export const ownerKindRecheckMs = (k: OwnerKind, now = Date.now()): number =>
  catchingUp(k, now) ? CRD_RECHECK_MS : ownerKindRetryMs(k.failures);

export class OwnerFinalizerReconciler implements Reconciler {
  private readonly a: Agents;
  private readonly status: StatusWriter;
  /** agents-finalizer's own keys: a placement's key queues its owners' keys. */
  private readonly trigger: Trigger;
  private readonly mapper: RestMapper;
  /** Owner kinds watched for the finalizer, by "apiVersion/kind". */
  private readonly ownerInformers = new Map<string, Informer<KubeObject>>();
  /** CRDs, watched once a placement has a finalizer: an owner kind that appears or goes is checked again. */
  private crds: Informer<KubeObject> | undefined;

  constructor(a: Agents, status: StatusWriter, trigger: Trigger) {
    this.a = a;
    this.status = status;
    this.trigger = trigger;
    this.mapper = a.manager.cluster().mapper;
  }

  /**
   * Keys of the finalizer controller: "<placement>" keeps what the placement holds on owners (its
   * record, its own finalizer, the owner kind checked and watched), and "<placement>/<owner uid>"
   * one owner's finalizer.
   */
  reconcile(key: string): Promise<Result | void> {
    const [name, uid] = key.split('/');
    return uid ? this.reconcileOwner(name!, uid) : this.reconcilePlacement(name!);
  }

  /**
   * What the placement holds on owners. Whatever it held (as its record says) and no longer does
   * (its finalizer or owner kind changed, its spec no longer parses, it is being deleted) comes off
   * every owner first; then its record says what it holds, with its own finalizer on, or both go.
   * An invalid placement still holds what it held: it only lets go.
   */
  private async reconcilePlacement(name: string): Promise<Result | void> {
    const obj = this.a.placementObjects.get(name);
    const placement = this.a.parsed().find((p) => p.name === name);
    if (!obj) {
      this.a.ownerKinds.delete(name);
      return;
    }
    // Checked while it is being deleted too: its status says so until it is gone.
    const kind = placement && holdOf(placement.spec) ? await this.checkOwnerKind(placement) : undefined;
    if (!kind) this.a.ownerKinds.delete(name);
    const { release, record } = ownerHoldChange(obj, placement?.spec, kind?.ref !== undefined);
    if (release) await this.releaseOwners(name, release);
    if (!sameHold(recordedHold(obj), record) || hasFinalizer(obj, PLACEMENT_FINALIZER) !== !!record)
      await this.recordHold(obj, record);
    const hold = wantedHold(obj, placement?.spec);
    if (!hold || !kind || !placement) return;
    if (!kind.ref) return { requeueAfterMs: ownerKindRecheckMs(kind) };
    // Every owner it may have to act on: those claimed, and those carrying its finalizer.
    const owners = this.ownerInformer(kind.ref);
    await owners.waitForSync();
    const prefix = placement.spec.claimAnnotationPrefix;
    const uids = new Set([
      ...this.a.nodes.list().flatMap((n) => claimedOwners(n, prefix, FIELD_MANAGER)),
      ...owners.list().flatMap((o) => (hasFinalizer(o, hold.finalizer) ? [o.metadata!.uid!] : [])),
    ]);
    this.trigger.send([...uids].map((uid) => `${name}/${uid}`));
  }

  /**
   * One owner's finalizer: on while the owner lives and has claims, off once it is being deleted
   * and no node carries its claim any more. Only what the placement has recorded goes on an owner,
   * so that it can always be taken back.
   */
  private async reconcileOwner(name: string, uid: string): Promise<Result | void> {
    const placement = this.a.parsed().find((p) => p.name === name);
    const hold = placement && holdOf(placement.spec);
    const obj = placement?.obj;
    // A placement being deleted is taking its finalizer off every owner (reconcilePlacement).
    if (!hold || !obj || obj.metadata?.deletionTimestamp) return;
    if (!sameHold(recordedHold(obj), hold) || !hasFinalizer(obj, PLACEMENT_FINALIZER)) return;
    // Not checked yet, or unusable: the placement's own key queues its owners once it is usable.
    const kind = this.a.ownerKinds.get(name);
    if (!kind?.ref || kind.id !== ownerKindId(placement)) return;
    const informer = this.ownerInformer(kind.ref);
    await informer.waitForSync();
    const owner = informer.byIndex('uid', uid)[0];
    if (!owner) return;
    const claimed = this.a.nodesClaiming(placement.spec.claimAnnotationPrefix, uid).length > 0;
    const intent = ownerFinalizerIntent(owner, claimed, placement.problems.length === 0);
    const applies = ownerFinalizerApplies(owner, name, hold.finalizer, intent);
    if (intent === 'release' && applies.length)
      this.a.log.info({ owner: keyOf(owner), placement: name }, 'claims released; removing the finalizer');
    // A claim that goes queues its owner again.
    await this.applyFinalizers(kind.ref, owner, applies);
  }

  /**
   * Checks that the placement's owner kind is served and that Berth may list, watch and patch it
   * (an informer it may not list would never sync, and /readyz would fail with it). A change of
   * the answer queues the status.
   */
  private async checkOwnerKind(p: ParsedPlacement<PlacementObject>): Promise<OwnerKind> {
    const id = ownerKindId(p);
    const old = this.a.ownerKinds.get(p.name);
    this.watchCrds();
    const same = old?.id === id;
    // Misses while discovery catches up with a CRD are not failures: the backoff starts after.
    const next = await this.lookupOwnerKind(
      holdOf(p.spec)!,
      same && old.problem && !catchingUp(old) ? old.failures + 1 : 0,
    );
    if (same && catchingUp(old) && next.problem) next.crdSeenAt = old.crdSeenAt;
    this.a.ownerKinds.set(p.name, next);
    if (old?.id !== next.id || old.problem?.message !== next.problem?.message)
      this.status.controller.queue.add(p.name);
    return next;
  }

  private async lookupOwnerKind(hold: OwnerHold, failures: number): Promise<OwnerKind> {
    const { apiVersion, kind } = hold;
    const id = `${apiVersion}/${kind}`;
    const unusable = (reason: 'OwnerKindUnknown' | 'OwnerKindForbidden', message: string): OwnerKind => ({
      id,
      failures,
      problem: { reason, message },
    });
    // Invalid already: asking the API would only fail.
    const invalid = ownerKindProblems(hold);
    if (invalid.length) return unusable('OwnerKindUnknown', invalid.join('; '));
    const unprotected = `the finalizer ${hold.finalizer} protects no owner`;
    let ref: ResourceRef;
    try {
      ref = await this.mapper.resolve(apiVersion, kind);
    } catch (e) {
      if (!(e instanceof UnknownKindError)) throw e;
      return unusable(
        'OwnerKindUnknown',
        `owner kind ${kind} (${apiVersion}) is not served by the API server: ${e.message} (is its CRD installed?); until it is, ${unprotected}`,
      );
    }
    const denied = await deniedVerbs(this.a.manager.client(), ref, ['list', 'watch', 'patch']);
    if (denied.length)
      return unusable(
        'OwnerKindForbidden',
        `Berth may not ${denied.join(', ')} ${ref.resource}${ref.group ? `.${ref.group}` : ''} (owner kind ${kind}): opt the kind into Berth's ClusterRole (berth manifests --finalizer-owner ${ref.resource}${ref.group ? `.${ref.group}` : ''}, Helm agents.finalizerOwners); until then ${unprotected}`,
      );
    return { id, ref, failures: 0 };
  }

  /** Watches CRDs (their group and kind only): a placement whose owner kind appears or goes is checked at once. */
  private watchCrds(): void {
    if (this.crds) return;
    this.crds = this.a.manager.informer(Resources.crds, { transform: interning('slim-crd', slimCrd) });
    // `fresh`: a CRD that appeared or changed since Berth listed them, whose kind the apiserver may
    // not serve yet; not one listed at start, a resync, or one that went.
    const changed = (crd: KubeObject, fresh: boolean) => {
      const spec = crd['spec'] as { group?: string; names?: { kind?: string } } | undefined;
      const group = spec?.group ?? '';
      const kind = spec?.names?.kind ?? '';
      this.mapper.forget(group, kind);
      for (const [name, k] of this.a.ownerKinds) {
        if (k.id.endsWith(`/${kind}`) && k.id.startsWith(`${group}/`)) {
          k.failures = 0;
          k.crdSeenAt = fresh ? Date.now() : undefined;
          this.trigger.send(name);
        }
      }
    };
    this.crds.addEventHandler({
      onAdd: (c) => changed(c, this.crds!.hasSynced()),
      onUpdate: (a, b) => changed(b, a !== b),
      onDelete: (c) => changed(c, false),
    });
  }

  /**
   * Records on the placement what it holds on owners, with its own finalizer (so that deleting it
   * first takes the owners' off), before any owner gets it; holding nothing, both go. One apply
   * under one field manager: the record never goes without the finalizer, nor comes without it.
   */
  private async recordHold(obj: PlacementObject, hold: OwnerHold | undefined): Promise<void> {
    const body = applyTarget(AgentPlacement.ref, obj);
    if (hold) {
      body.metadata.finalizers = [PLACEMENT_FINALIZER];
      body.metadata.annotations = { [OWNER_HOLD_ANNOTATION]: holdRecord(hold) };
    }
    try {
      await this.a.manager
        .client()
        .apply(AgentPlacement.ref, body, { fieldManager: FINALIZER_FIELD_MANAGER });
    } catch (e) {
      if (!isObjectGone(e)) throw e;
    }
  }

  /** Takes what `hold` says off every owner of its kind that carries it. */
  private async releaseOwners(placement: string, hold: OwnerHold): Promise<void> {
    const kind = await this.lookupOwnerKind(hold, 0);
    // A kind the API does not serve has no objects, so none carries the finalizer.
    if (kind.problem?.reason === 'OwnerKindUnknown') return;
    if (!kind.ref)
      throw new Error(
        `the finalizer ${hold.finalizer} stays on ${hold.kind} owners: ${kind.problem!.message}`,
      );
    const owners = this.ownerInformer(kind.ref);
    await owners.waitForSync();
    for (const owner of owners.list().filter((o) => hasFinalizer(o, hold.finalizer)))
      await this.applyFinalizers(
        kind.ref,
        owner,
        ownerFinalizerApplies(owner, placement, hold.finalizer, 'release'),
      );
  }

  /** Sends the applies, in order; an owner that went away meanwhile holds nothing any more. */
  private async applyFinalizers(
    ref: ResourceRef,
    owner: KubeObject,
    applies: FinalizerApply[],
  ): Promise<void> {
    for (const a of applies) {
      const body = applyTarget(ref, owner);
      body.metadata.finalizers = a.finalizers;
      try {
        await this.a.manager.client().apply(ref, body, { fieldManager: a.fieldManager });
      } catch (e) {
        if (isObjectGone(e)) return;
        throw e;
      }
    }
  }

  /** An informer on an owner kind, indexed by uid; its owners' events reach the finalizer controller. */
  private ownerInformer(ref: ResourceRef): Informer<KubeObject> {
    const key = `${ref.group}/${ref.version}/${ref.kind}`;
    let inf = this.ownerInformers.get(key);
    if (!inf) {
      inf = this.a.manager.informer(ref, { transform: slimOwner });
      inf.addIndexer('uid', (o) => (o.metadata?.uid ? [o.metadata.uid] : []));
      // An owner of the initial list, or resynced, is queued low: a change elsewhere goes first.
      const enqueue = (o: KubeObject, low?: boolean) => {
        for (const p of this.a.parsed()) {
          const uid = o.metadata?.uid;
          const finalizer = p.spec.finalizer?.name;
          if (!uid || !finalizer || p.spec.owner.kind !== ref.kind) continue;
          if (hasFinalizer(o, finalizer) || this.a.nodesClaiming(p.spec.claimAnnotationPrefix, uid).length)
            this.trigger.send(`${p.name}/${uid}`, low ? { priority: 'low' } : undefined);
        }
      };
      inf.addEventHandler({ onAdd: enqueue, onUpdate: (a, b) => enqueue(b, a === b) });
      this.ownerInformers.set(key, inf);
    }
    return inf;
  }
}

/**
 * The agents-finalizer controller: a placement's spec, deletion and record, its owners' events
 * (ownerInformer) and the claims on nodes bring back its keys.
 */
export function setupOwnerFinalizerReconciler(a: Agents, status: StatusWriter): Controller {
  const trigger = new Trigger();
  const controller = new Controller({
    name: 'agents-finalizer',
    workers: 4,
    logger: a.log,
    reconciler: new OwnerFinalizerReconciler(a, status, trigger),
  })
    .reconcileOn(trigger)
    // Its spec, its deletion, and its record coming back (its owners act on it only then).
    .watch(a.placementObjects, (p) => p.metadata!.name!, {
      update: changed(
        generationChanged,
        deletionChanged,
        valueChanged((p) => p.metadata?.annotations?.[OWNER_HOLD_ANNOTATION]),
        valueChanged((p) => hasFinalizer(p, PLACEMENT_FINALIZER)),
      ),
    })
    // A claim that appears or goes changes whether its owner may be deleted.
    .watch(
      a.nodes,
      (n) =>
        a
          .parsed()
          .filter((p) => p.spec.finalizer)
          .flatMap((p) =>
            claimedOwners(n, p.spec.claimAnnotationPrefix, FIELD_MANAGER).map((uid) => `${p.name}/${uid}`),
          ),
      {
        update: nodeChanged,
      },
    );
  a.manager.add(controller);
  return controller;
}

/** A CRD reduced to what names its kind. */
const slimCrd = (o: KubeObject): KubeObject => {
  const spec = o['spec'] as { group?: string; names?: { kind?: string } } | undefined;
  return {
    apiVersion: o.apiVersion,
    kind: o.kind,
    metadata: slimMetadata(o.metadata),
    spec: { group: spec?.group, names: { kind: spec?.names?.kind } },
  };
};
