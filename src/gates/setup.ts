// What `berth run` builds for the gates: their controllers and webhooks (Capability.setup), loaded
// only when the gates run.
import type { CapabilityContext, Served } from '../capability.ts';
import type { PolicyKit } from '../policy/kit.ts';
import type { PolicyContext } from '../policy/reconciler.ts';
import { interning } from '../policy/intern.ts';
import { nodeInformer, podInformer, slimMetadata, type SlimPod } from '../policy/slim.ts';
import { Resources, type KubeObject } from '../runtime/api/meta.ts';
import type { Informer } from '../runtime/cache/informer.ts';
import type { WebhookSpec } from '../runtime/webhook/registration.ts';
import { NodeReconciler, setupNodeReconciler } from './controllers/node.ts';
import { setupStatusWriter } from './controllers/status.ts';
import { gateKeyClaims, parseGates, type Gate, type GateProblem } from './decide/parse.ts';
import { FIELD_MANAGER, GATE_KEYS, type NodeStartupGateStatus } from './types.ts';
import { NodeStartupGate } from './crd.ts';
import { NODE_WEBHOOK, nodeTerms, nodeWebhook, POD_WEBHOOK, podTerms, podWebhook } from './webhook.ts';
import { AdmissionScope, type ScopeTerm } from '../policy/admission.ts';

/** Capability.setup: the gates' controllers, and their webhooks to serve. */
export function setup({ kit, options }: CapabilityContext): Served {
  const gates = setupGates(kit, {
    workers: Number(options['gateWorkers'] ?? 16),
    failurePolicy: options['gatesFailurePolicy'] === 'Fail' ? 'Fail' : 'Ignore',
  });
  return { webhooks: [gates.nodeWebhook, gates.podWebhook] };
}

export type GateObject = KubeObject & { spec?: unknown; status?: NodeStartupGateStatus };

/** What the gates' controllers and webhooks share: built once, in setupGates. */
export interface Gates extends PolicyContext {
  readonly pods: Informer<SlimPod>;
  readonly gateObjects: Informer<GateObject>;
  /** Only to tell a user whose gate waits for a DaemonSet that cannot run on gated nodes. */
  readonly daemonSets: Informer<KubeObject>;
  /** The gates from the cache, parsed once per change of any of them. */
  readonly gates: () => { gates: Gate[]; problems: Map<string, GateProblem> };
  readonly clock: () => number;
  /** What each webhook is sent: the nodes an enforced gate selects; pods only while a gate can hold a node. */
  readonly admission: { nodes: AdmissionScope<GateObject>; pods: AdmissionScope<GateObject> };
}

export interface GatesOptions {
  workers?: number;
  failurePolicy?: 'Fail' | 'Ignore';
  clock?: () => number;
}

/** The gates' controllers (gates-node, gates-status) on the kit's manager, and their webhooks to serve. */
export function setupGates(
  kit: PolicyKit,
  opts: GatesOptions = {},
): Gates & { nodeWebhook: WebhookSpec; podWebhook: WebhookSpec } {
  const manager = kit.manager;
  const pods = podInformer(manager);
  const nodes = nodeInformer(manager);
  const writer = kit.casWriter(FIELD_MANAGER, nodes);
  const gateObjects = manager.informer<GateObject>(NodeStartupGate.ref);
  const gates = gateObjects.derive(parseGates);
  const log = manager.log.child({ capability: 'gates' });
  const scope = (webhook: string, terms: (gates: Gate[]) => ScopeTerm[]) =>
    new AdmissionScope({ webhook, objects: gateObjects, terms: () => terms(gates().gates), log });
  const g: Gates = {
    manager,
    pods,
    nodes,
    gateObjects,
    daemonSets: manager.informer(Resources.daemonSets, {
      transform: interning('gates-daemonset', slimDaemonSet),
    }),
    gates,
    events: manager.recorder('gates'),
    log,
    clock: opts.clock ?? Date.now,
    admission: { nodes: scope(NODE_WEBHOOK, nodeTerms), pods: scope(POD_WEBHOOK, podTerms) },
  };
  // What the gates own on nodes, kept current as gates come and go: other capabilities' policies
  // that would write those keys are Invalid.
  kit.keys.declare('gates', GATE_KEYS, (signal) => gateObjects.waitForSync(signal));
  const claim = () => kit.keys.claim('gates', gateKeyClaims(g.gates().gates));
  gateObjects.addEventHandler({ onAdd: claim, onUpdate: claim, onDelete: claim });

  // gates-node records each node's standings in the status writer, which waits for its first pass.
  const status = setupStatusWriter(g);
  setupNodeReconciler(g, new NodeReconciler(g, writer, status), {
    workers: opts.workers ?? 16,
    firstPass: status.firstPass,
  });
  const failurePolicy = opts.failurePolicy ?? 'Ignore';
  return { ...g, nodeWebhook: nodeWebhook(g, failurePolicy), podWebhook: podWebhook(g, failurePolicy) };
}

/** What the gates read of a DaemonSet: its identity and its pod template's labels and tolerations. */
function slimDaemonSet(obj: KubeObject): KubeObject {
  const template = (
    obj['spec'] as
      | { template?: { metadata?: { labels?: Record<string, string> }; spec?: { tolerations?: unknown[] } } }
      | undefined
  )?.template;
  return {
    apiVersion: 'apps/v1',
    kind: 'DaemonSet',
    metadata: slimMetadata(obj.metadata),
    spec: {
      template: {
        metadata: { labels: template?.metadata?.labels },
        spec: { tolerations: template?.spec?.tolerations },
      },
    },
  };
}
