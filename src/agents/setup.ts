// What `berth run` builds for agent placement: its controllers and webhook (Capability.setup),
// loaded only when agents run.
import type { CapabilityContext, Served } from '../capability.ts';
import type { PolicyKit } from '../policy/kit.ts';
import type { PolicyContext } from '../policy/reconciler.ts';
import { nodeInformer, podInformer, slimMeta, type SlimPod } from '../policy/slim.ts';
import { Resources, type KubeObject } from '../runtime/api/meta.ts';
import type { Informer } from '../runtime/cache/informer.ts';
import type { Controller } from '../runtime/controller/controller.ts';
import { WriteWindow } from '../runtime/controller/spacing.ts';
import type { WebhookSpec } from '../runtime/webhook/registration.ts';
import {
  AGENT_WORKERS,
  CLAIM_QUIET_MS,
  CLAIM_WRITE_WINDOW_MS,
  NodeReconciler,
  outranked,
  setupNodeReconciler,
} from './controllers/node.ts';
import { setupOwnerFinalizerReconciler, type OwnerKind } from './controllers/owner-finalizer.ts';
import { setupStatusWriter, type StatusWriter } from './controllers/status.ts';
import {
  checkOwnership,
  claimedOwners,
  placementClaims,
  usablePlacements,
  type ParsedPlacement,
} from './decide.ts';
import { parsePlacements, type ParseCache } from './parse.ts';
import { AGENT_KEYS, FIELD_MANAGER, type AgentPlacementStatus } from './types.ts';
import { AgentPlacement } from './crd.ts';
import { POD_WEBHOOK, podWebhook, waitsForAgent } from './webhook.ts';
import { AdmissionScope } from '../policy/admission.ts';

/** Capability.setup: the agents' controllers, and their Pod CREATE webhook to serve. */
export function setup({ kit, options, berthNamespace }: CapabilityContext): Served {
  const agents = setupAgents(kit, {
    workers: Number(options['agentWorkers'] ?? AGENT_WORKERS),
    berthNamespace,
  });
  return { webhooks: [agents.webhook] };
}

export type PlacementObject = KubeObject & { spec?: unknown; status?: AgentPlacementStatus };

/** What the agents' controllers and webhook share: built once, in setupAgents. */
export interface Agents extends PolicyContext {
  /** Who owns which node keys: a key a gate takes makes a placement Invalid. */
  readonly keys: PolicyKit['keys'];
  readonly berthNamespace: string;
  /** Indexed by the UIDs of their controllers ("controllerUid"): an adoption finds its pods. */
  readonly pods: Informer<SlimPod>;
  readonly placementObjects: Informer<PlacementObject>;
  readonly namespaces: Informer<KubeObject>;
  readonly replicaSets: Informer<KubeObject>;
  readonly jobs: Informer<KubeObject>;
  /** The placements from the cache, parsed once per change of any of them. */
  readonly parsedPlacements: () => ReturnType<typeof parsePlacements<PlacementObject>>;
  /**
   * Every placement that parses, usable or not: an invalid one still lets go of what it held. Its
   * problems include keys that a higher-ranked capability (a startup gate) owns.
   */
  parsed(): ParsedPlacement<PlacementObject>[];
  /** The usable placements, from the cache: they parse, and validatePlacement finds no problem. */
  placements(): ParsedPlacement<PlacementObject>[];
  /** Every node that carries a claim of this owner under this placement's prefix, as Berth wrote it, from the node cache. */
  nodesClaiming(prefix: string, uid: string): string[];
  /** Placement → its owner kind as agents-finalizer last checked it, for placements with a finalizer; agents-status reads it. */
  readonly ownerKinds: Map<string, OwnerKind>;
  /** The pods the webhook is sent: those of the usable placements with waitForAgent. */
  readonly admission: AdmissionScope<PlacementObject>;
}

export interface AgentsOptions {
  workers?: number;
  berthNamespace: string;
}

/**
 * The agents' controllers (agents-node, agents-status, agents-finalizer) on the kit's manager, and
 * the Pod CREATE webhook to serve.
 */
export function setupAgents(
  kit: PolicyKit,
  opts: AgentsOptions,
): Agents & {
  nodeController: Controller;
  status: StatusWriter;
  finalizerController: Controller;
  webhook: WebhookSpec;
} {
  const manager = kit.manager;
  const pods = podInformer(manager);
  pods.addIndexer(
    'controllerUid',
    (p) => p.metadata?.ownerReferences?.filter((o) => o.controller).map((o) => o.uid) ?? [],
  );
  const nodes = nodeInformer(manager);
  const writer = kit.applyWriter(FIELD_MANAGER, nodes, {
    spacing: new WriteWindow(CLAIM_WRITE_WINDOW_MS, CLAIM_QUIET_MS),
    // Claims follow pods, never the node: only a claim someone else undid can be a fight.
    decidesFromNode: false,
  });
  const placementObjects = manager.informer<PlacementObject>(AgentPlacement.ref);
  const parseCache: ParseCache = new Map();
  const parsedPlacements = placementObjects.derive((objs) => parsePlacements(objs, parseCache));
  const parsed = ownedPlacements(kit, placementObjects, parsedPlacements);
  const log = manager.log.child({ capability: 'agents' });
  const placements = () => usablePlacements(parsed());
  const a: Agents = {
    manager,
    keys: kit.keys,
    berthNamespace: opts.berthNamespace,
    pods,
    nodes,
    placementObjects,
    namespaces: manager.informer(Resources.namespaces, { transform: slimMeta }),
    replicaSets: manager.informer(Resources.replicaSets, { transform: slimMeta }),
    jobs: manager.informer(
      { group: 'batch', version: 'v1', resource: 'jobs', kind: 'Job', namespaced: true },
      { transform: slimMeta },
    ),
    parsedPlacements,
    parsed,
    placements,
    nodesClaiming: (prefix, uid) =>
      nodes
        .list()
        .filter((n) => claimedOwners(n, prefix, FIELD_MANAGER).includes(uid))
        .map((n) => n.metadata!.name!),
    ownerKinds: new Map(),
    admission: new AdmissionScope({
      webhook: POD_WEBHOOK,
      objects: placementObjects,
      terms: () =>
        placements().flatMap((p) =>
          waitsForAgent(p)
            ? [{ namespaceSelector: p.spec.namespaceSelector, objectSelector: p.spec.podSelector }]
            : [],
        ),
      // A key a gate takes makes a placement unusable.
      watch: (changed) => kit.keys.addEventHandler({ onUpdate: changed }),
      log,
    }),
    events: manager.recorder('agents'),
    log,
  };
  // agents-node records each node's standings in the status writer, which waits for its first pass.
  const status = setupStatusWriter(a);
  const nodeController = setupNodeReconciler(a, new NodeReconciler(a, writer, status), {
    workers: opts.workers ?? AGENT_WORKERS,
    firstPass: status.firstPass,
  });
  const finalizerController = setupOwnerFinalizerReconciler(a, status);
  return { ...a, nodeController, status, finalizerController, webhook: podWebhook(a) };
}

/**
 * Every placement that parses, checked against the keys higher-ranked capabilities own (once per
 * change of either); and this capability's key claims, kept current as placements and ownership change.
 */
function ownedPlacements(
  kit: PolicyKit,
  placementObjects: Informer<PlacementObject>,
  parsedPlacements: Agents['parsedPlacements'],
): () => ParsedPlacement<PlacementObject>[] {
  /** Bumped when what higher-ranked capabilities own changes: placements are checked again. */
  let ownershipVersion = 0;
  let checked:
    | {
        from: ParsedPlacement<PlacementObject>[];
        version: number;
        parsed: ParsedPlacement<PlacementObject>[];
      }
    | undefined;
  const parsed = () => {
    const from = parsedPlacements().parsed;
    if (checked?.from !== from || checked.version !== ownershipVersion) {
      const parsed = checkOwnership(from, (keys) => kit.keys.violations('agents', keys));
      checked = { from, version: ownershipVersion, parsed };
    }
    return checked.parsed;
  };

  // One owner per key: a placement whose label or claims are a gate's keys is Invalid; the keys of
  // the others are this capability's, which derived-label rules may not write.
  kit.keys.declare('agents', AGENT_KEYS, (signal) => placementObjects.waitForSync(signal));
  const claim = () => kit.keys.claim('agents', placementClaims(parsed()));
  placementObjects.addEventHandler({ onAdd: claim, onUpdate: claim, onDelete: claim });
  kit.keys.addEventHandler({
    onUpdate: (c) => {
      if (!outranked(c)) return;
      ownershipVersion++;
      claim();
    },
  });
  return parsed;
}
