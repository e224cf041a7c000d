// Agent placement: the reconcile loops. The node controller keeps, on each node, one claim
// annotation per owner of the workload pods it hosts and the agent label while any claim exists.
// The status controller counts per AgentPlacement. The finalizer controller (opt-in) holds an
// owner's deletion until no node carries its claim.
import { applyStatus, hasFinalizer, isObjectGone, setFinalizer } from '../runtime/apply.ts';
import { conditionSetter, sameConditions, type Condition } from '../runtime/conditions.ts';
import { Controller, FirstPass, generationChanged, sameRecord, type Result } from '../runtime/controller.ts';
import { RestMapper } from '../runtime/discovery.ts';
import type { EventRecorder } from '../runtime/events.ts';
import { keyOf, type Informer } from '../runtime/informer.ts';
import { isNotFound } from '../runtime/kube.ts';
import type { Logger } from '../runtime/log.ts';
import type { Manager } from '../runtime/manager.ts';
import { BurstHold, NodeWriter } from '../runtime/nodeapply.ts';
import { slimMetadata, slimNode, slimPod, type SlimNode, type SlimPod } from '../runtime/transforms.ts';
import { Resources, type KubeObject, type OwnerReference, type ResourceRef } from '../runtime/types.ts';
import type { WebhookSpec } from '../runtime/webhooks.ts';
import { claimedOwners, decideNode, placementKeys, podFinished, type Placement } from './decide.ts';
import { podMutatingHandler } from './inject.ts';
import {
  AGENT_KEYS,
  AgentPlacement,
  FIELD_MANAGER,
  FINALIZER_FIELD_MANAGER,
  PLACEMENT_FINALIZER,
  type AgentPlacementStatus,
} from './types.ts';

type PlacementObject = KubeObject & { spec?: unknown; status?: AgentPlacementStatus };

/** What the node controller last decided per node, for status and explain. */
interface NodeResult {
  /** Placement → owner UIDs claimed on this node. */
  claims: Map<string, Set<string>>;
  labelled: Set<string>;
  /** Placements whose label key another placement or field manager holds with another value. */
  blocked: Map<string, string>;
}

const slimMeta = (o: KubeObject): KubeObject => ({
  apiVersion: o.apiVersion,
  kind: o.kind,
  metadata: slimMetadata(o.metadata),
});

export class AgentsController {
  readonly pods: Informer<SlimPod>;
  readonly nodes: Informer<SlimNode>;
  readonly placementObjects: Informer<PlacementObject>;
  readonly namespaces: Informer<KubeObject>;
  readonly replicaSets: Informer<KubeObject>;
  readonly jobs: Informer<KubeObject>;
  readonly nodeController: Controller;
  readonly statusController: Controller;
  readonly finalizerController: Controller;
  private readonly manager: Manager;
  private readonly writer: NodeWriter;
  private readonly burst: BurstHold;
  private readonly events: EventRecorder;
  private readonly log: Logger;
  private readonly mapper: RestMapper;
  private readonly results = new Map<string, NodeResult>();
  /** Owner kinds watched for the finalizer, by "apiVersion/kind". */
  private readonly ownerInformers = new Map<string, Informer<KubeObject>>();
  private readonly firstPass = new FirstPass();
  private readonly parsedPlacements: () => (Placement & { obj: PlacementObject })[];
  /** Bumped when what higher-ranked capabilities own changes: placements are checked again. */
  private ownershipVersion = 0;
  private checked:
    | {
        parsed: unknown;
        version: number;
        valid: (Placement & { obj: PlacementObject })[];
        invalid: Map<string, string>;
      }
    | undefined;

  constructor(manager: Manager, opts: { workers?: number } = {}) {
    this.manager = manager;
    this.log = manager.log.child({ capability: 'agents' });
    this.events = manager.recorder('agents');
    this.mapper = new RestMapper(manager.client());
    this.pods = manager.informer<SlimPod>(Resources.pods, { transform: { name: 'slim-pod', fn: slimPod } });
    this.pods.addIndexer('nodeName', (p) => (p.spec.nodeName ? [p.spec.nodeName] : []));
    this.pods.addIndexer(
      'controllerUid',
      (p) => p.metadata?.ownerReferences?.filter((o) => o.controller).map((o) => o.uid) ?? [],
    );
    this.nodes = manager.informer<SlimNode>(Resources.nodes, {
      transform: { name: 'slim-node', fn: slimNode },
    });
    const workers = opts.workers ?? 16;
    // A node write takes some 60 ms, so the workers write about 16 nodes per second each: faster
    // changes would queue up anyway, and are better written once the burst is over.
    this.burst = new BurstHold({
      burstPerSecond: 16 * workers,
      maxHoldMs: 30_000,
      release: (names) => {
        for (const n of names) this.nodeController.queue.add(n);
      },
    });
    this.writer = new NodeWriter(() => manager.client(), FIELD_MANAGER, this.nodes, {
      breaker: manager.nodeWrites,
      burst: this.burst,
    });
    this.placementObjects = manager.informer<PlacementObject>(AgentPlacement.ref);
    this.parsedPlacements = this.placementObjects.derive((objs) =>
      objs.flatMap((obj) => {
        const parsed = AgentPlacement.parse({
          ...obj,
          apiVersion: AgentPlacement.apiVersion,
          kind: AgentPlacement.kind,
        });
        return parsed.success ? [{ name: obj.metadata!.name!, spec: parsed.data.spec, obj }] : [];
      }),
    );
    // One owner per key: a placement whose label or claims are a gate's keys is Invalid; the keys of
    // the others are this capability's, which derived-label rules may not write.
    manager.keys.declare('agents', AGENT_KEYS, (signal) => this.placementObjects.waitForSync(signal));
    const outranked = (c: { rank: number }) => c.rank < AGENT_KEYS.rank;
    const claim = () =>
      manager.keys.claim(
        'agents',
        this.placements().flatMap((p) => placementKeys(p)),
      );
    this.placementObjects.addEventHandler({ onAdd: claim, onUpdate: claim, onDelete: claim });
    manager.keys.addEventHandler({
      onUpdate: (c) => {
        if (!outranked(c)) return;
        this.ownershipVersion++;
        claim();
      },
    });
    const meta = { name: 'slim-meta', fn: slimMeta };
    this.namespaces = manager.informer(Resources.namespaces, { transform: meta });
    this.replicaSets = manager.informer(Resources.replicaSets, { transform: meta });
    this.jobs = manager.informer(
      { group: 'batch', version: 'v1', resource: 'jobs', kind: 'Job', namespaced: true },
      { transform: meta },
    );

    const nodesOfPods = (pods: SlimPod[]) => [
      ...new Set(pods.flatMap((p) => (p.spec.nodeName ? [p.spec.nodeName] : []))),
    ];
    const allNodes = () => this.nodes.keys();
    const ownerChanged = (a: KubeObject, b: KubeObject) =>
      a === b || !sameOwners(a.metadata?.ownerReferences, b.metadata?.ownerReferences);

    this.nodeController = new Controller({
      name: 'agents-node',
      workers,
      logger: this.log,
      reconciler: { reconcile: (key) => this.reconcileNode(key) },
    })
      .watch(
        this.pods,
        (p) => {
          this.burst.observe();
          return p.spec.nodeName;
        },
        { update: podChanged },
      )
      .watch(this.nodes, (n) => n.metadata!.name!, { update: nodeChanged })
      .watch(this.placementObjects, allNodes, generationChanged)
      .watch(manager.keys, (c) => (outranked(c) ? allNodes() : []))
      .watch(
        this.namespaces,
        (ns) => nodesOfPods(this.pods.list().filter((p) => p.metadata?.namespace === ns.metadata?.name)),
        {
          update: (a, b) =>
            a === b || JSON.stringify(a.metadata?.labels) !== JSON.stringify(b.metadata?.labels),
        },
      )
      // An adoption changes who owns the pods of a ReplicaSet or Job.
      .watch(this.replicaSets, (rs) => nodesOfPods(this.pods.byIndex('controllerUid', rs.metadata!.uid!)), {
        update: ownerChanged,
      })
      .watch(this.jobs, (j) => nodesOfPods(this.pods.byIndex('controllerUid', j.metadata!.uid!)), {
        update: ownerChanged,
      });

    this.statusController = new Controller({
      name: 'agents-status',
      workers: 2,
      logger: this.log,
      reconciler: { reconcile: (key) => this.reconcileStatus(key) },
    })
      .watch(this.placementObjects, (p) => p.metadata!.name!, generationChanged)
      .watch(manager.keys, (c) => (outranked(c) ? this.placementObjects.keys() : []));

    this.finalizerController = new Controller({
      name: 'agents-finalizer',
      workers: 4,
      logger: this.log,
      reconciler: { reconcile: (key) => this.reconcileOwner(key) },
    })
      .watch(this.placementObjects, (p) => p.metadata!.name!, generationChanged)
      // A claim that appears or goes changes whether its owner may be deleted.
      .watch(
        this.nodes,
        (n) =>
          this.finalizedPlacements().flatMap((p) =>
            claimedOwners(n, [p.spec.claimAnnotationPrefix]).map((uid) => `${p.name}/${uid}`),
          ),
        {
          update: nodeChanged,
        },
      );

    manager.add(this.nodeController);
    manager.add(this.statusController);
    manager.add(this.finalizerController);
  }

  /** The valid placements, parsed from the cache (the CRD schema already rejected most mistakes). */
  placements(): (Placement & { obj: PlacementObject })[] {
    return this.checkedPlacements().valid;
  }

  /** The parsed placements, less those that would write keys a gate owns (with why). */
  private checkedPlacements() {
    const parsed = this.parsedPlacements();
    if (this.checked?.parsed !== parsed || this.checked.version !== this.ownershipVersion) {
      const invalid = new Map<string, string>();
      for (const p of parsed) {
        const why = this.manager.keys.violations(
          'agents',
          placementKeys(p).map((c) => c.pattern),
        );
        if (why.length) invalid.set(p.name, why.join('; '));
      }
      const valid = parsed.filter((p) => !invalid.has(p.name));
      this.checked = { parsed, version: this.ownershipVersion, valid, invalid };
    }
    return this.checked;
  }

  private finalizedPlacements() {
    return this.placements().filter((p) => p.spec.finalizer);
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
      this.pods.byIndex('nodeName', nodeName),
      this.placements().filter((p) => !p.obj.metadata?.deletionTimestamp),
      this.namespaceLabels,
      this.lookup,
    );
  }

  private async reconcileNode(name: string): Promise<Result | void> {
    const node = this.nodes.get(name);
    if (!node) {
      this.writer.forget(name);
      this.setResult(name, undefined);
      return;
    }
    const placements = this.placements();
    const decision = this.decide(name);
    const plan = await this.writer.sync(node, decision.desired);
    // The loop breaker held keys back: write them once it lets go.
    const retry = plan.retryAfterMs === undefined ? undefined : { requeueAfterMs: plan.retryAfterMs };
    const blocked = new Map<string, string>();
    const claims = new Map<string, Set<string>>();
    const labelled = new Set<string>();
    for (const [placement, r] of decision.placements) {
      claims.set(placement, new Set(r.claims.keys()));
      if (r.claims.size === 0) continue;
      const spec = placements.find((p) => p.name === placement)!.spec;
      if (!r.labelled)
        blocked.set(
          placement,
          `label ${spec.nodeLabel.key} on node ${name} is set to another value by another AgentPlacement`,
        );
      else if (plan.foreign.some((f) => f.kind === 'label' && f.key === spec.nodeLabel.key)) {
        blocked.set(
          placement,
          `label ${spec.nodeLabel.key} on node ${name} is set to another value by another field manager; Berth leaves it alone`,
        );
      } else labelled.add(placement);
    }
    this.setResult(name, { claims, labelled, blocked });
    return retry;
  }

  private setResult(name: string, r: NodeResult | undefined): void {
    const old = this.results.get(name);
    if (r) this.results.set(name, r);
    else this.results.delete(name);
    const touched = new Set<string>([...(old?.claims.keys() ?? []), ...(r?.claims.keys() ?? [])]);
    for (const p of touched) {
      const same =
        sameSet(old?.claims.get(p), r?.claims.get(p)) &&
        old?.labelled.has(p) === r?.labelled.has(p) &&
        old?.blocked.get(p) === r?.blocked.get(p);
      if (!same) this.statusController.queue.addAfter(p, 500);
    }
  }

  private async reconcileStatus(name: string): Promise<Result | void> {
    const obj = this.placementObjects.get(name);
    if (!obj) return;
    if (!this.firstPass.complete(this.nodeController, this.results.size, this.nodes.size))
      return { requeueAfterMs: 250 };
    const parsed = AgentPlacement.parse({
      ...obj,
      apiVersion: AgentPlacement.apiVersion,
      kind: AgentPlacement.kind,
    });
    let labelledNodes = 0;
    let claims = 0;
    const owners = new Set<string>();
    const blocked: string[] = [];
    for (const r of this.results.values()) {
      const c = r.claims.get(name);
      claims += c?.size ?? 0;
      for (const uid of c ?? []) owners.add(uid);
      if (r.labelled.has(name)) labelledNodes++;
      const b = r.blocked.get(name);
      if (b) blocked.push(b);
    }
    const generation = obj.metadata?.generation;
    const conds = conditionSetter(obj.status?.conditions as Condition[] | undefined, generation);
    const set = (type: string, status: boolean, reason: string, message: string) =>
      conds.set(type, status, reason, message);
    const invalid = parsed.success ? (this.checkedPlacements().invalid.get(name) ?? '') : parsed.error;
    set('Invalid', !!invalid, invalid ? 'InvalidSpec' : 'Valid', invalid);
    set(
      'Conflicting',
      blocked.length > 0,
      blocked.length ? 'LabelConflict' : 'NoConflict',
      blocked.slice(0, 3).join(' | '),
    );
    const ready = !invalid && blocked.length === 0;
    set(
      'Ready',
      ready,
      invalid ? 'Invalid' : blocked.length ? 'Conflicting' : 'Placed',
      invalid || `${claims} claims on ${labelledNodes} nodes from ${owners.size} owners`,
    );
    const status: AgentPlacementStatus = {
      ...(generation !== undefined ? { observedGeneration: generation } : {}),
      labelledNodes,
      claims,
      owners: owners.size,
      conditions: conds.conditions,
    };
    const old = obj.status;
    if (
      old?.observedGeneration === status.observedGeneration &&
      old?.labelledNodes === labelledNodes &&
      old?.claims === claims &&
      old?.owners === owners.size &&
      sameConditions(old?.conditions as Condition[] | undefined, conds.conditions)
    ) {
      return;
    }
    const was = (type: string) => (old?.conditions as Condition[] | undefined)?.find((c) => c.type === type);
    if (invalid && (was('Invalid')?.status !== 'True' || was('Invalid')?.message !== invalid))
      this.events.event(obj, 'Warning', 'InvalidSpec', 'Validate', invalid);
    const wasBlocked = was('Conflicting');
    if (
      blocked.length &&
      (wasBlocked?.status !== 'True' ||
        wasBlocked.message !== conds.conditions.find((c) => c.type === 'Conflicting')?.message)
    ) {
      this.events.event(obj, 'Warning', 'LabelConflict', 'Reconcile', blocked[0]!);
    }
    await applyStatus(this.manager.client(), AgentPlacement.ref, obj, status, FIELD_MANAGER);
  }

  /** Every node that carries a claim of this owner under this placement's prefix, from the node cache. */
  nodesClaiming(prefix: string, uid: string): string[] {
    return this.nodes
      .list()
      .filter((n) => claimedOwners(n, [prefix]).includes(uid))
      .map((n) => n.metadata!.name!);
  }

  /**
   * Keys of the finalizer controller: "<placement>" makes sure the owner kind is watched;
   * "<placement>/<owner uid>" adds the finalizer while the owner has claims and is not being
   * deleted, and removes it once it is being deleted and no node carries its claim any more.
   */
  private async reconcileOwner(key: string): Promise<void> {
    const [name, uid] = key.split('/');
    const placement = this.placements().find((p) => p.name === name);
    const finalizer = placement?.spec.finalizer?.name;
    if (!placement || !finalizer || !placement.spec.owner.apiVersion || !placement.spec.owner.kind) return;
    const ref = await this.mapper.resolve(placement.spec.owner.apiVersion, placement.spec.owner.kind);
    const informer = this.ownerInformer(ref);
    await informer.waitForSync();
    if (!uid) return this.reconcilePlacementCleanup(placement.obj, finalizer, ref, informer);
    const owner = informer.byIndex('uid', uid)[0];
    // A placement being deleted is taking its finalizers off (reconcilePlacementCleanup): never add one back.
    if (!owner || placement.obj.metadata?.deletionTimestamp) return;
    const claimed = this.nodesClaiming(placement.spec.claimAnnotationPrefix, uid).length > 0;
    const deleting = owner.metadata?.deletionTimestamp !== undefined;
    const has = hasFinalizer(owner, finalizer);
    try {
      if (!deleting && claimed && !has) {
        await setFinalizer(this.manager.client(), ref, owner, finalizer, true, FINALIZER_FIELD_MANAGER);
      } else if (deleting && !claimed && has) {
        await setFinalizer(this.manager.client(), ref, owner, finalizer, false, FINALIZER_FIELD_MANAGER);
        this.log.info({ owner: keyOf(owner), placement: name }, 'claims released; finalizer removed');
      }
    } catch (e) {
      if (!isObjectGone(e)) throw e;
    }
  }

  /**
   * A placement that puts finalizers on owners carries one of its own, so that deleting it first
   * takes its finalizer off every owner: no owner is left undeletable by a placement that is gone.
   */
  private async reconcilePlacementCleanup(
    obj: PlacementObject,
    finalizer: string,
    ref: ResourceRef,
    owners: Informer<KubeObject>,
  ): Promise<void> {
    const client = this.manager.client();
    if (obj.metadata?.deletionTimestamp === undefined) {
      if (!hasFinalizer(obj, PLACEMENT_FINALIZER)) {
        await setFinalizer(
          client,
          AgentPlacement.ref,
          obj,
          PLACEMENT_FINALIZER,
          true,
          FINALIZER_FIELD_MANAGER,
        );
      }
      return;
    }
    for (const owner of owners.list().filter((o) => hasFinalizer(o, finalizer))) {
      await setFinalizer(client, ref, owner, finalizer, false, FINALIZER_FIELD_MANAGER).catch(
        (e: unknown) => {
          if (!isNotFound(e)) throw e;
        },
      );
    }
    if (hasFinalizer(obj, PLACEMENT_FINALIZER)) {
      await setFinalizer(
        client,
        AgentPlacement.ref,
        obj,
        PLACEMENT_FINALIZER,
        false,
        FINALIZER_FIELD_MANAGER,
      );
    }
  }

  /** An informer on an owner kind, indexed by uid; its owners' events reach the finalizer controller. */
  private ownerInformer(ref: ResourceRef): Informer<KubeObject> {
    const key = `${ref.group}/${ref.version}/${ref.kind}`;
    let inf = this.ownerInformers.get(key);
    if (!inf) {
      inf = this.manager.informer(ref, { transform: { name: 'slim-meta', fn: slimMeta } });
      inf.addIndexer('uid', (o) => (o.metadata?.uid ? [o.metadata.uid] : []));
      const enqueue = (o: KubeObject) => {
        for (const p of this.placements()) {
          const uid = o.metadata?.uid;
          const finalizer = p.spec.finalizer?.name;
          if (!uid || !finalizer || p.spec.owner.kind !== ref.kind) continue;
          if (hasFinalizer(o, finalizer) || this.nodesClaiming(p.spec.claimAnnotationPrefix, uid).length) {
            this.finalizerController.queue.add(`${p.name}/${uid}`);
          }
        }
      };
      inf.addEventHandler({ onAdd: enqueue, onUpdate: (_a, b) => enqueue(b) });
      this.ownerInformers.set(key, inf);
    }
    return inf;
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
      handler: podMutatingHandler({
        placements: () => this.placements(),
        namespaceLabels: this.namespaceLabels,
        logger: this.log,
      }),
      rules: [{ operations: ['CREATE'], apiGroups: [''], apiVersions: ['v1'], resources: ['pods'] }],
      failurePolicy: 'Ignore',
      timeoutSeconds: 2,
    };
  }
}

const sameSet = (a: Set<string> | undefined, b: Set<string> | undefined) =>
  (a?.size ?? 0) === (b?.size ?? 0) && [...(a ?? [])].every((x) => b?.has(x));

const sameOwners = (a: OwnerReference[] | undefined, b: OwnerReference[] | undefined) =>
  (a?.length ?? 0) === (b?.length ?? 0) &&
  (a ?? []).every((o, i) => {
    const p = b![i]!;
    return (
      o.uid === p.uid &&
      o.name === p.name &&
      o.kind === p.kind &&
      o.apiVersion === p.apiVersion &&
      !o.controller === !p.controller
    );
  });

/**
 * Pod changes that can change a node's claims: not the status updates of a pod starting, which
 * are most of a pod's events.
 */
export const podChanged = (a: SlimPod, b: SlimPod): boolean =>
  a === b ||
  a.spec.nodeName !== b.spec.nodeName ||
  podFinished(a) !== podFinished(b) ||
  !sameRecord(a.metadata?.labels, b.metadata?.labels) ||
  !sameOwners(a.metadata?.ownerReferences, b.metadata?.ownerReferences);

/** Node changes that matter: its labels and annotations (claims), and what Berth owns. */
const nodeChanged = (a: SlimNode, b: SlimNode) =>
  a === b ||
  !sameRecord(a.metadata?.labels, b.metadata?.labels) ||
  !sameRecord(a.metadata?.annotations, b.metadata?.annotations) ||
  JSON.stringify(a.metadata?.managedFields) !== JSON.stringify(b.metadata?.managedFields);
