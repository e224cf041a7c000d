// Agent placement: the reconcile loops. The node controller keeps, on each node, one claim
// annotation per owner of the workload pods it hosts and the agent label while any claim exists.
// The status controller counts per AgentPlacement what the nodes carry, and says why a placement
// is not Ready. The finalizer controller (opt-in) holds an owner's deletion until no node carries
// its claim.
import type { PolicyKit } from '../policy/kit.ts';
import { hasFinalizer } from '../policy/finalizer.ts';
import { namespaceLabelsByName } from '../policy/namespace.ts';
import { PolicyStatusWriter, type StatusReport } from '../policy/status.ts';
import { Controller, type Result } from '../runtime/controller/controller.ts';
import { deniedVerbs, UnknownKindError, type RestMapper } from '../runtime/client/restmapper.ts';
import type { EventRecorder } from '../runtime/events/recorder.ts';
import { keyOf, type Informer } from '../runtime/cache/informer.ts';
import { applyTarget, isObjectGone } from '../runtime/client/apply.ts';
import type { Logger } from '../runtime/observability/log.ts';
import type { Manager } from '../runtime/manager/manager.ts';
import type { ApplyNodeWriter } from '../policy/nodes/apply.ts';
import { WriteSpacing } from '../runtime/controller/spacing.ts';
import {
  annotationsChanged,
  changed,
  deletionChanged,
  generationChanged,
  labelsChanged,
  managedFieldsChanged,
  onChanges,
  or,
  ownersChanged,
  valueChanged,
} from '../policy/predicates.ts';
import {
  nodeInformer,
  podInformer,
  podsOn,
  slimMeta,
  slimMetadata,
  type SlimNode,
  type SlimPod,
} from '../policy/slim.ts';
import { Resources, type KubeObject, type ResourceRef } from '../runtime/api/meta.ts';
import type { WebhookSpec } from '../runtime/webhook/registration.ts';
import {
  checkOwnership,
  claimedOwners,
  claimKey,
  decideNode,
  parsePlacements,
  placementClaims,
  podFinished,
  usablePlacements,
  type ParseCache,
  type ParsedPlacement,
} from './decide.ts';
import {
  holdOf,
  holdRecord,
  OWNER_HOLD_ANNOTATION,
  ownerFinalizerApplies,
  ownerFinalizerIntent,
  planOwnerHold,
  recordedHold,
  sameHold,
  slimOwner,
  wantedHold,
  type FinalizerApply,
  type OwnerHold,
} from './finalizers.ts';
import { agentAdmission, type AgentAdmissionState } from './webhook.ts';
import { ownerKindProblems } from './validate.ts';
import {
  AGENT_KEYS,
  AgentPlacement,
  FIELD_MANAGER,
  FINALIZER_FIELD_MANAGER,
  PLACEMENT_FINALIZER,
  type AgentPlacementStatus,
} from './types.ts';

type PlacementObject = KubeObject & { spec?: unknown; status?: AgentPlacementStatus };

type PlacementCount = 'labelledNodes' | 'claims' | 'owners';

/**
 * What the node controller last found for a placement on a node, for its status: only what the
 * node carries counts, so a claim that was decided but not (yet) written is pending, never counted.
 */
interface PlacementStanding {
  /** Owner UIDs whose claims the node carries. */
  claims: Set<string>;
  /** The node carries its label. */
  labelled: boolean;
  /** Claims and label decided but not on the node yet (a write on its way, or waiting for the node's write spacing). */
  pending: number;
  /** Its label or a claim key is held with another value by another placement or field manager. */
  blocked: string | undefined;
  /** Owners that cannot have a claim (their UID makes no valid key), and why. */
  rejected: string[];
  /** The node's write failed (an admission policy, a node too large): why, until one succeeds. */
  failed: string | undefined;
}

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

// A busy node's claims wait at most this long after its last write, so that the changes of a burst
// go out together: every claim is on its node within this bound plus one write (decision 0005).
export const CLAIM_WRITE_INTERVAL_MS = 500;
// After a quiet spell two claim writes go at once: a pod replaced on a node (one goes, one comes) is
// two changes in quick succession, and the second need not wait out the interval (decision 0005).
export const CLAIM_WRITE_BURST = 2;

const ownerKindId = (p: ParsedPlacement): string => `${p.spec.owner.apiVersion}/${p.spec.owner.kind}`;
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

export class AgentsController {
  readonly pods: Informer<SlimPod>;
  readonly nodes: Informer<SlimNode>;
  readonly placementObjects: Informer<PlacementObject>;
  readonly namespaces: Informer<KubeObject>;
  readonly replicaSets: Informer<KubeObject>;
  readonly jobs: Informer<KubeObject>;
  readonly nodeController: Controller;
  readonly status: PolicyStatusWriter<PlacementObject, PlacementStanding, PlacementCount>;
  readonly finalizerController: Controller;
  readonly manager: Manager;
  private readonly kit: PolicyKit;
  private readonly writer: ApplyNodeWriter;
  readonly events: EventRecorder;
  readonly log: Logger;
  private readonly mapper: RestMapper;
  /** Owner kinds watched for the finalizer, by "apiVersion/kind". */
  private readonly ownerInformers = new Map<string, Informer<KubeObject>>();
  /** Placement → its owner kind as last checked, for placements with a finalizer. */
  private readonly ownerKinds = new Map<string, OwnerKind>();
  /** CRDs, watched once a placement has a finalizer: an owner kind that appears or goes is checked again. */
  private crds: Informer<KubeObject> | undefined;
  private readonly parsedPlacements: () => ReturnType<typeof parsePlacements<PlacementObject>>;
  private readonly berthNamespace: string;
  /** Bumped when what higher-ranked capabilities own changes: placements are checked again. */
  private ownershipVersion = 0;
  private checked:
    | {
        from: ParsedPlacement<PlacementObject>[];
        version: number;
        parsed: ParsedPlacement<PlacementObject>[];
      }
    | undefined;

  constructor(kit: PolicyKit, opts: { workers?: number; berthNamespace: string }) {
    const manager = kit.manager;
    this.kit = kit;
    this.manager = manager;
    this.berthNamespace = opts.berthNamespace;
    this.log = manager.log.child({ capability: 'agents' });
    this.events = manager.recorder('agents');
    this.mapper = manager.cluster().mapper;
    this.pods = podInformer(manager);
    this.pods.addIndexer(
      'controllerUid',
      (p) => p.metadata?.ownerReferences?.filter((o) => o.controller).map((o) => o.uid) ?? [],
    );
    this.nodes = nodeInformer(manager);
    const workers = opts.workers ?? 16;
    this.writer = kit.applyWriter(FIELD_MANAGER, this.nodes, {
      spacing: new WriteSpacing(CLAIM_WRITE_INTERVAL_MS, CLAIM_WRITE_BURST),
      // Claims follow pods, never the node: only a claim someone else undid can be a fight.
      decidesFromNode: false,
    });
    this.placementObjects = manager.informer<PlacementObject>(AgentPlacement.ref);
    const parseCache: ParseCache = new Map();
    this.parsedPlacements = this.placementObjects.derive((objs) => parsePlacements(objs, parseCache));
    // One owner per key: a placement whose label or claims are a gate's keys is Invalid; the keys of
    // the others are this capability's, which derived-label rules may not write.
    kit.keys.declare('agents', AGENT_KEYS, (signal) => this.placementObjects.waitForSync(signal));
    const outranked = (c: { rank: number }) => c.rank < AGENT_KEYS.rank;
    const claim = () => kit.keys.claim('agents', placementClaims(this.parsed()));
    this.placementObjects.addEventHandler({ onAdd: claim, onUpdate: claim, onDelete: claim });
    kit.keys.addEventHandler({
      onUpdate: (c) => {
        if (!outranked(c)) return;
        this.ownershipVersion++;
        claim();
      },
    });
    this.namespaces = manager.informer(Resources.namespaces, { transform: slimMeta });
    this.replicaSets = manager.informer(Resources.replicaSets, { transform: slimMeta });
    this.jobs = manager.informer(
      { group: 'batch', version: 'v1', resource: 'jobs', kind: 'Job', namespaced: true },
      { transform: slimMeta },
    );

    const nodesOfPods = (pods: SlimPod[]) => [
      ...new Set(pods.flatMap((p) => (p.spec.nodeName ? [p.spec.nodeName] : []))),
    ];
    const allNodes = () => this.nodes.keys();
    const ownerChanged = changed(ownersChanged);

    this.nodeController = new Controller({
      name: 'agents-node',
      workers,
      logger: this.log,
      reconciler: { reconcile: (key) => this.reconcileNode(key) },
    })
      .watch(this.pods, (p) => p.spec.nodeName, { update: podChanged })
      .watch(this.nodes, (n) => n.metadata!.name!, { update: nodeChanged })
      .watch(this.placementObjects, allNodes, { update: changed(generationChanged) })
      .watch(kit.keys, (c) => (outranked(c) ? allNodes() : []))
      .watch(
        this.namespaces,
        (ns) => nodesOfPods(this.pods.list().filter((p) => p.metadata?.namespace === ns.metadata?.name)),
        { update: changed(labelsChanged) },
      )
      // An adoption changes who owns the pods of a ReplicaSet or Job.
      .watch(this.replicaSets, (rs) => nodesOfPods(this.pods.byIndex('controllerUid', rs.metadata!.uid!)), {
        update: ownerChanged,
      })
      .watch(this.jobs, (j) => nodesOfPods(this.pods.byIndex('controllerUid', j.metadata!.uid!)), {
        update: ownerChanged,
      });

    manager.add(this.nodeController);

    this.status = new PolicyStatusWriter(this, this.placementObjects, {
      name: 'agents-status',
      fieldManager: FIELD_MANAGER,
      report: (obj, standings) => this.report(obj, standings),
      // Things a user can fix: a placement that is unusable, conflicts, or rejects claims.
      warnings: [
        { type: 'Invalid', status: 'True' },
        { type: 'OwnerKindResolved', status: 'False' },
        { type: 'Conflicting', status: 'True' },
        { type: 'Ready', status: 'False', reason: 'ClaimsRejected' },
      ],
    });
    this.status.controller.watch(kit.keys, (c) => (outranked(c) ? this.placementObjects.keys() : []));

    this.finalizerController = new Controller({
      name: 'agents-finalizer',
      workers: 4,
      logger: this.log,
      reconciler: { reconcile: (key) => this.reconcileFinalizers(key) },
    })
      // Its spec, its deletion, and its record coming back (its owners act on it only then).
      .watch(this.placementObjects, (p) => p.metadata!.name!, {
        update: changed(
          generationChanged,
          deletionChanged,
          valueChanged((p) => p.metadata?.annotations?.[OWNER_HOLD_ANNOTATION]),
          valueChanged((p) => hasFinalizer(p, PLACEMENT_FINALIZER)),
        ),
      })
      // A claim that appears or goes changes whether its owner may be deleted.
      .watch(
        this.nodes,
        (n) =>
          this.parsed()
            .filter((p) => p.spec.finalizer)
            .flatMap((p) =>
              claimedOwners(n, p.spec.claimAnnotationPrefix, FIELD_MANAGER).map((uid) => `${p.name}/${uid}`),
            ),
        {
          update: nodeChanged,
        },
      );

    manager.add(this.finalizerController);
  }

  /** The usable placements, from the cache: they parse, and validatePlacement finds no problem. */
  placements(): ParsedPlacement<PlacementObject>[] {
    return usablePlacements(this.parsed());
  }

  /**
   * Every placement that parses, usable or not: an invalid one still lets go of what it held. Its
   * problems include keys that a higher-ranked capability (a startup gate) owns.
   */
  private parsed(): ParsedPlacement<PlacementObject>[] {
    const from = this.parsedPlacements().parsed;
    if (this.checked?.from !== from || this.checked.version !== this.ownershipVersion) {
      const parsed = checkOwnership(from, (keys) => this.kit.keys.violations('agents', keys));
      this.checked = { from, version: this.ownershipVersion, parsed };
    }
    return this.checked.parsed;
  }

  private lookup = (
    apiVersion: string,
    kind: string,
    namespace: string,
    name: string,
  ): KubeObject | undefined => {
    if (apiVersion === 'apps/v1' && kind === 'ReplicaSet')
      return this.replicaSets.get(`${namespace}/${name}`);
    if (apiVersion === 'batch/v1' && kind === 'Job') return this.jobs.get(`${namespace}/${name}`);
    return undefined;
  };

  private namespaceLabels = (ns: string) => this.namespaces.get(ns)?.metadata?.labels;

  /** The claims a node should carry; a placement being deleted claims nothing any more. */
  decide(nodeName: string) {
    return decideNode(
      podsOn(this.pods, nodeName),
      this.placements().filter((p) => !p.obj.metadata?.deletionTimestamp),
      this.namespaceLabels,
      this.lookup,
      this.berthNamespace,
    );
  }

  private async reconcileNode(name: string): Promise<Result | void> {
    const node = this.nodes.get(name);
    if (!node) {
      this.writer.forget(name);
      this.status.set(name, undefined);
      return;
    }
    const placements = this.placements();
    const decision = this.decide(name);
    // A write the apiserver refuses is still a standing (so status is written, and says so), then retried.
    const plan = await this.writer.trySync(node, decision.desired);
    const failed = plan.refused?.message;
    // Claims wait for the node's write spacing, or the loop breaker held keys back: sync again then.
    const retry = plan.retryAfterMs === undefined ? undefined : { requeueAfterMs: plan.retryAfterMs };
    const foreign = new Set(plan.foreign.map((f) => `${f.kind}/${f.key}`));
    // The node as cached: a write just made comes back through the informer and is counted then.
    const labels = node.metadata?.labels ?? {};
    const annotations = node.metadata?.annotations ?? {};
    const standings = new Map<string, PlacementStanding>();
    for (const [placement, r] of decision.placements) {
      const spec = placements.find((p) => p.name === placement)!.spec;
      const s: PlacementStanding = {
        claims: new Set(),
        labelled: false,
        pending: 0,
        blocked: undefined,
        rejected: r.rejected,
        // Its failure if the write was for it: claims to put on, or its label or claims to take off.
        failed:
          failed &&
          (r.claims.size > 0 ||
            labels[spec.nodeLabel.key] !== undefined ||
            Object.keys(annotations).some((k) => k.startsWith(spec.claimAnnotationPrefix)))
            ? failed
            : undefined,
      };
      for (const [uid, c] of r.claims) {
        const key = claimKey(spec, uid);
        if (annotations[key] === c.owner.description) s.claims.add(uid);
        else if (foreign.has(`annotation/${key}`))
          s.blocked = `annotation ${key} on node ${name} is set to another value by another field manager; Berth leaves it alone`;
        else s.pending++;
      }
      if (r.claims.size > 0) {
        const { key, value } = spec.nodeLabel;
        if (!r.labelled)
          s.blocked = `label ${key} on node ${name} is set to another value by another AgentPlacement`;
        else if (foreign.has(`label/${key}`))
          s.blocked = `label ${key} on node ${name} is set to another value by another field manager; Berth leaves it alone`;
        else if (labels[key] === value) s.labelled = true;
        else s.pending++;
      }
      standings.set(placement, s);
    }
    this.status.set(name, standings);
    if (plan.refused) {
      this.events.event(node, 'Warning', 'WriteFailed', 'Place', plan.refused.message);
      throw plan.refused.error;
    }
    return retry;
  }

  private report(
    obj: PlacementObject,
    standings: PlacementStanding[],
  ): StatusReport<PlacementCount> | Result {
    const name = obj.metadata!.name!;
    const placement = this.parsed().find((p) => p.name === name);
    const invalid = (
      placement ? placement.problems : [this.parsedPlacements().errors.get(name) ?? 'does not parse']
    )
      .join('; ')
      .slice(0, 2000);
    let ownerKind: OwnerKind | undefined;
    if (placement?.spec.finalizer && !invalid) {
      ownerKind = this.ownerKinds.get(name);
      // Until the finalizer controller has checked the owner kind, Ready would be a guess.
      if (ownerKind?.id !== ownerKindId(placement)) return { requeueAfterMs: 250 };
    }
    let labelledNodes = 0;
    let claims = 0;
    let pending = 0;
    const owners = new Set<string>();
    const blocked: string[] = [];
    const rejected: string[] = [];
    const failed: string[] = [];
    for (const s of standings) {
      claims += s.claims.size;
      for (const uid of s.claims) owners.add(uid);
      if (s.labelled) labelledNodes++;
      pending += s.pending;
      if (s.blocked) blocked.push(s.blocked);
      if (s.failed) failed.push(s.failed);
      rejected.push(...s.rejected);
    }
    const problem = ownerKind?.problem;
    const more = (list: string[]) => (list.length > 1 ? ` (+${list.length - 1} more)` : '');
    const placed = `${claims} claims on ${labelledNodes} nodes from ${owners.size} owners`;
    const [reason, message] = invalid
      ? ['Invalid', invalid]
      : problem
        ? [problem.reason, `${problem.message}; ${placed}`]
        : failed.length
          ? ['WriteFailed', `${failed[0]}${more(failed)}; ${placed}`]
          : blocked.length
            ? ['Conflicting', placed]
            : rejected.length
              ? ['ClaimsRejected', `${rejected[0]}${more(rejected)}`]
              : pending
                ? ['Progressing', `${placed}; ${pending} claims and labels not written yet`]
                : ['Placed', placed];
    return {
      counts: { labelledNodes, claims, owners: owners.size },
      conditions: [
        { type: 'Invalid', status: !!invalid, reason: invalid ? 'InvalidSpec' : 'Valid', message: invalid },
        {
          type: 'OwnerKindResolved',
          status: !problem,
          reason: problem?.reason ?? (placement?.spec.finalizer && !invalid ? 'Resolved' : 'NoFinalizer'),
          message: problem?.message ?? '',
        },
        {
          type: 'Conflicting',
          status: blocked.length > 0,
          reason: blocked.length ? 'OutputConflict' : 'NoConflict',
          message: blocked.slice(0, 3).join(' | '),
        },
        { type: 'Ready', status: reason === 'Placed', reason, message },
      ],
    };
  }

  /** Every node that carries a claim of this owner under this placement's prefix, as Berth wrote it, from the node cache. */
  nodesClaiming(prefix: string, uid: string): string[] {
    return this.nodes
      .list()
      .filter((n) => claimedOwners(n, prefix, FIELD_MANAGER).includes(uid))
      .map((n) => n.metadata!.name!);
  }

  /**
   * Keys of the finalizer controller: "<placement>" keeps what the placement holds on owners (its
   * record, its own finalizer, the owner kind checked and watched), and "<placement>/<owner uid>"
   * one owner's finalizer.
   */
  private reconcileFinalizers(key: string): Promise<Result | void> {
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
    const obj = this.placementObjects.get(name);
    const placement = this.parsed().find((p) => p.name === name);
    if (!obj) {
      this.ownerKinds.delete(name);
      return;
    }
    // Checked while it is being deleted too: its status says so until it is gone.
    const kind = placement && holdOf(placement.spec) ? await this.checkOwnerKind(placement) : undefined;
    if (!kind) this.ownerKinds.delete(name);
    const { release, record } = planOwnerHold(obj, placement?.spec, kind?.ref !== undefined);
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
      ...this.nodes.list().flatMap((n) => claimedOwners(n, prefix, FIELD_MANAGER)),
      ...owners.list().flatMap((o) => (hasFinalizer(o, hold.finalizer) ? [o.metadata!.uid!] : [])),
    ]);
    for (const uid of uids) this.finalizerController.queue.add(`${name}/${uid}`);
  }

  /**
   * One owner's finalizer: on while the owner lives and has claims, off once it is being deleted
   * and no node carries its claim any more. Only what the placement has recorded goes on an owner,
   * so that it can always be taken back.
   */
  private async reconcileOwner(name: string, uid: string): Promise<Result | void> {
    const placement = this.parsed().find((p) => p.name === name);
    const hold = placement && holdOf(placement.spec);
    const obj = placement?.obj;
    // A placement being deleted is taking its finalizer off every owner (reconcilePlacement).
    if (!hold || !obj || obj.metadata?.deletionTimestamp) return;
    if (!sameHold(recordedHold(obj), hold) || !hasFinalizer(obj, PLACEMENT_FINALIZER)) return;
    // Not checked yet, or unusable: the placement's own key queues its owners once it is usable.
    const kind = this.ownerKinds.get(name);
    if (!kind?.ref || kind.id !== ownerKindId(placement)) return;
    const informer = this.ownerInformer(kind.ref);
    await informer.waitForSync();
    const owner = informer.byIndex('uid', uid)[0];
    if (!owner) return;
    const claimed = this.nodesClaiming(placement.spec.claimAnnotationPrefix, uid).length > 0;
    const intent = ownerFinalizerIntent(owner, claimed, placement.problems.length === 0);
    const applies = ownerFinalizerApplies(owner, name, hold.finalizer, intent);
    if (intent === 'release' && applies.length)
      this.log.info({ owner: keyOf(owner), placement: name }, 'claims released; removing the finalizer');
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
    const old = this.ownerKinds.get(p.name);
    this.watchCrds();
    const same = old?.id === id;
    // Misses while discovery catches up with a CRD are not failures: the backoff starts after.
    const next = await this.lookupOwnerKind(
      holdOf(p.spec)!,
      same && old.problem && !catchingUp(old) ? old.failures + 1 : 0,
    );
    if (same && catchingUp(old) && next.problem) next.crdSeenAt = old.crdSeenAt;
    this.ownerKinds.set(p.name, next);
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
    const denied = await deniedVerbs(this.manager.client(), ref, ['list', 'watch', 'patch']);
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
    this.crds = this.manager.informer(Resources.crds, { transform: { name: 'slim-crd', fn: slimCrd } });
    // `fresh`: a CRD that appeared or changed since Berth listed them, whose kind the apiserver may
    // not serve yet; not one listed at start, a resync, or one that went.
    const changed = (crd: KubeObject, fresh: boolean) => {
      const spec = crd['spec'] as { group?: string; names?: { kind?: string } } | undefined;
      const group = spec?.group ?? '';
      const kind = spec?.names?.kind ?? '';
      this.mapper.forget(group, kind);
      for (const [name, k] of this.ownerKinds) {
        if (k.id.endsWith(`/${kind}`) && k.id.startsWith(`${group}/`)) {
          k.failures = 0;
          k.crdSeenAt = fresh ? Date.now() : undefined;
          this.finalizerController.queue.add(name);
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
      await this.manager.client().apply(AgentPlacement.ref, body, { fieldManager: FINALIZER_FIELD_MANAGER });
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
        await this.manager.client().apply(ref, body, { fieldManager: a.fieldManager });
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
      inf = this.manager.informer(ref, { transform: slimOwner });
      inf.addIndexer('uid', (o) => (o.metadata?.uid ? [o.metadata.uid] : []));
      const enqueue = (o: KubeObject) => {
        for (const p of this.parsed()) {
          const uid = o.metadata?.uid;
          const finalizer = p.spec.finalizer?.name;
          if (!uid || !finalizer || p.spec.owner.kind !== ref.kind) continue;
          if (hasFinalizer(o, finalizer) || this.nodesClaiming(p.spec.claimAnnotationPrefix, uid).length)
            this.finalizerController.queue.add(`${p.name}/${uid}`);
        }
      };
      inf.addEventHandler({ onAdd: enqueue, onUpdate: (_a, b) => enqueue(b) });
      this.ownerInformers.set(key, inf);
    }
    return inf;
  }

  private admissionState(): AgentAdmissionState {
    return {
      placements: this.placements().flatMap((p) =>
        p.spec.waitForAgent && !p.obj.metadata?.deletionTimestamp ? [{ name: p.name, spec: p.spec }] : [],
      ),
      berthNamespace: this.berthNamespace,
      namespaceLabels: namespaceLabelsByName(this.namespaces),
    };
  }

  /**
   * The Pod CREATE webhook that adds the wait-for-agent init container. failurePolicy Ignore: an
   * unavailable Berth must never block pod creation; such a pod just starts without waiting.
   */
  webhook(): WebhookSpec {
    return {
      name: 'pods.agents.berth.dev',
      path: '/agents/mutate-pod',
      kind: 'mutating',
      // In the webhook thread, from the placements as this controller parses them.
      handler: agentAdmission.fed(
        () => this.admissionState(),
        // Only what admission reads: a placement's status changes with every node it claims.
        (changed) => {
          this.placementObjects.addEventHandler(onChanges(or(generationChanged, deletionChanged), changed));
          // A key a gate takes makes a placement Invalid, so unusable.
          this.kit.keys.addEventHandler({ onUpdate: changed });
          this.namespaces.addEventHandler(onChanges(labelsChanged, changed));
        },
      ),
      rules: [{ operations: ['CREATE'], apiGroups: [''], apiVersions: ['v1'], resources: ['pods'] }],
      failurePolicy: 'Ignore',
      timeoutSeconds: 2,
    };
  }
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

/**
 * Pod changes that can change a node's claims: not the status updates of a pod starting, which
 * are most of a pod's events.
 */
export const podChanged = changed<SlimPod>(
  valueChanged((p) => p.spec.nodeName),
  valueChanged(podFinished),
  labelsChanged,
  ownersChanged,
);

/** Node changes that matter: its labels and annotations (claims), and what Berth owns. */
const nodeChanged = changed<SlimNode>(labelsChanged, annotationsChanged, managedFieldsChanged);
