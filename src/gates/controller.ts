// Startup gates: the reconcile loops. The node controller decides, per node, what every gate wants
// (taint on or off, its annotations) and writes it in one compare-and-swap patch. The status
// controller counts per gate, and keeps the gate's finalizer until no node carries anything of it.
// The webhook taints joining nodes at admission, so a gated node is never schedulable without it;
// another refuses pods that would skip the taint by naming a held node in spec.nodeName.
import type { PolicyKit } from '../policy/kit.ts';
import { finalizer } from '../policy/finalizer.ts';
import { PolicyStatusWriter, type StatusReport } from '../policy/status.ts';
import { Controller, type Result } from '../runtime/controller/controller.ts';
import type { EventRecorder } from '../runtime/events/recorder.ts';
import type { Informer } from '../runtime/cache/informer.ts';
import type { Logger } from '../runtime/observability/log.ts';
import type { Manager } from '../runtime/manager/manager.ts';
import { gateMetrics } from './metrics.ts';
import type { CasNodeWriter } from '../policy/nodes/cas.ts';
import {
  annotationsChanged,
  changed,
  conditionsChanged,
  deletionChanged,
  generationChanged,
  labelsChanged,
  onChanges,
  or,
  taintsChanged,
  valueChanged,
} from '../policy/predicates.ts';
import {
  nodeInformer,
  podInformer,
  podsOn,
  slimMetadata,
  slimPod,
  type SlimNode,
  type SlimPod,
} from '../policy/slim.ts';
import { missingTolerations } from './tolerate.ts';
import { admitPod } from './pods.ts';
import type { Toleration } from '../policy/nodes/taints.ts';
import { Resources, type KubeObject } from '../runtime/api/meta.ts';
import { isNotFound } from '../runtime/client/client.ts';
import { type AdmissionHandler } from '../runtime/webhook/admission.ts';
import type { WebhookSpec } from '../runtime/webhook/registration.ts';
import { nodeAdmission } from './webhook.ts';
import { unknownAfter } from './decide/order.ts';
import { type Gate, gateKeyClaims, type GateProblem, parseGates } from './decide/parse.ts';
import { decisionKeys, nodePatch } from './decide/patch.ts';
import { podReady } from './decide/requirements.ts';
import { decideGates, type GateDecision, leftOnNode } from './decide/state.ts';
import { gatesNamedOn, strayGate, unrecordedStray } from './decide/stray.ts';
import {
  EXEMPT_LABEL,
  FIELD_MANAGER,
  GATE_FINALIZER,
  GATE_KEYS,
  gateAnnotations,
  NodeStartupGate,
  type NodeStartupGateStatus,
} from './types.ts';

type GateObject = KubeObject & { spec?: unknown; status?: NodeStartupGateStatus };
type GateCount = 'nodes' | 'gated' | 'released' | 'timedOut' | 'wouldGate' | 'startedEarly';

/** What the node controller last decided for a node, per gate: for status, finalizers and events. */
interface NodeGateResult {
  state: GateDecision['state'];
  timedOut: boolean;
  /** Held: the pods no gate requires that run on the node ("namespace/name on node"). */
  startedEarly: string[];
}

export interface GatesControllerOptions {
  workers?: number;
  failurePolicy?: 'Fail' | 'Ignore';
  clock?: () => number;
}

export class GatesController {
  readonly pods: Informer<SlimPod>;
  readonly nodes: Informer<SlimNode>;
  readonly gateObjects: Informer<GateObject>;
  readonly daemonSets: Informer<KubeObject>;
  readonly nodeController: Controller;
  readonly status: PolicyStatusWriter<GateObject, NodeGateResult, GateCount>;
  readonly manager: Manager;
  readonly events: EventRecorder;
  readonly log: Logger;
  private readonly clock: () => number;
  private readonly failurePolicy: 'Fail' | 'Ignore';
  private readonly writer: CasNodeWriter;
  /**
   * Gates a read of the API found gone while nodes still carried their keys: name → when. A node
   * gated before that read was gated for the gate that is gone; one gated since, maybe for a new
   * gate of the same name the cache has not seen yet, is read for again.
   */
  private readonly gone = new Map<string, number>();
  /** The gates from the cache, parsed once per change of any of them. */
  readonly gates: () => { gates: Gate[]; problems: Map<string, GateProblem> };

  constructor(kit: PolicyKit, opts: GatesControllerOptions = {}) {
    const manager = kit.manager;
    this.manager = manager;
    this.log = manager.log.child({ capability: 'gates' });
    this.events = manager.recorder('gates');
    this.clock = opts.clock ?? Date.now;
    this.failurePolicy = opts.failurePolicy ?? 'Ignore';
    this.pods = podInformer(manager);
    this.nodes = nodeInformer(manager);
    this.writer = kit.casWriter(FIELD_MANAGER, this.nodes);
    this.gateObjects = manager.informer<GateObject>(NodeStartupGate.ref);
    this.gates = this.gateObjects.derive(parseGates);
    // What the gates own on nodes, kept current as gates come and go: other capabilities' policies
    // that would write those keys are Invalid.
    kit.keys.declare('gates', GATE_KEYS, (signal) => this.gateObjects.waitForSync(signal));
    const claim = () => kit.keys.claim('gates', gateKeyClaims(this.gates().gates));
    this.gateObjects.addEventHandler({
      onAdd: (g) => (this.gone.delete(g.metadata!.name!), claim()),
      onUpdate: claim,
      onDelete: claim,
    });
    // Only to tell a user whose gate waits for a DaemonSet that cannot run on gated nodes.
    this.daemonSets = manager.informer(Resources.daemonSets, {
      transform: { name: 'gates-daemonset', fn: slimDaemonSet },
    });

    const gateChanged = changed(generationChanged, deletionChanged);

    this.nodeController = new Controller({
      name: 'gates-node',
      workers: opts.workers ?? 16,
      logger: this.log,
      reconciler: { reconcile: (key) => this.reconcileNode(key) },
    })
      .watch(this.pods, (p) => p.spec.nodeName, { update: podChanged })
      .watch(this.nodes, (n) => n.metadata!.name!, { update: nodeChanged })
      .watch(this.gateObjects, () => this.nodes.keys(), { update: gateChanged });

    manager.add(this.nodeController);

    this.status = new PolicyStatusWriter(this, this.gateObjects, {
      name: 'gates-status',
      fieldManager: FIELD_MANAGER,
      delayMs: 200,
      objectChanged: gateChanged,
      report: (obj, standings) => this.report(obj, standings),
      // Things a user can fix, found when the gate is validated: an invalid or conflicting gate, or
      // required pods that could never run on a gated node.
      eventAction: 'Validate',
      warnings: [
        { type: 'Invalid', status: 'True' },
        { type: 'Conflicting', status: 'True' },
        { type: 'RequiredPodsSchedulable', status: 'False' },
        { type: 'AfterGatesFound', status: 'False' },
      ],
      // The gate's finalizer: deleting a gate takes its taint and annotations off every node first.
      reconcile: (obj, writeStatus) =>
        finalizer(
          {
            name: GATE_FINALIZER,
            client: manager.client(),
            ref: NodeStartupGate.ref,
            fieldManager: FIELD_MANAGER,
          },
          obj,
          { apply: writeStatus, cleanup: () => this.released(obj.metadata!.name!) },
        ),
    });
    this.status.controller
      // A node giving back a deleted gate's taint may be the last thing its finalizer waits for.
      .watch(this.nodes, () => this.deletingGates(), { update: nodeChanged })
      // A gate that comes, goes or changes is found or lost by the gates that wait for it, and
      // starts or stops a conflict with the others of its taint (the winner says so too). Gates are few.
      .watch(this.gateObjects, () => this.gateObjects.keys(), { update: gateChanged })
      .watch(this.daemonSets, () => this.gateObjects.keys());
  }

  private deletingGates(): string[] {
    return this.gates()
      .gates.filter((g) => g.deleting)
      .map((g) => g.name);
  }

  /** Every gate's decision for a node, now: the cache's gates, and those gone from the API that left keys on it. */
  private decide(node: SlimNode, gates: Gate[]): GateDecision[] {
    return decideGates(gates, node, podsOn(this.pods, node.metadata!.name!), this.clock());
  }

  /**
   * The gates whose keys are on the node though the cache has no such gate, once a read of the API
   * says they are gone: a replica whose webhook had not yet seen a gate deleted tainted the node
   * for it, or someone removed a gate's finalizer. A gate the read finds is one the cache has yet to
   * see: its event brings the node back. `retryAfterMs` when a read failed.
   */
  private async strayGates(node: SlimNode): Promise<{ strays: Gate[]; retryAfterMs?: number }> {
    const strays: Gate[] = [];
    let retryAfterMs: number | undefined;
    for (const name of gatesNamedOn(node)) {
      if (this.gateObjects.get(name)) continue;
      const keys = gateAnnotations(name, {});
      const gatedAt = Date.parse(node.metadata?.annotations?.[keys.gatedAt] ?? '') || 0;
      const readAt = this.gone.get(name);
      // The webhook stamps gated-at with its replica's clock: a second's slack for skew.
      if (readAt === undefined || gatedAt > readAt - 1000) {
        const at = this.clock();
        try {
          await this.manager.client().get(NodeStartupGate.ref, name);
          continue;
        } catch (err) {
          if (!isNotFound(err)) {
            this.log.warn(
              { gate: name, node: node.metadata!.name, err },
              'cannot read a gate the node names',
            );
            retryAfterMs = 5000;
            continue;
          }
        }
        this.gone.set(name, at);
      }
      const stray = strayGate(name, node);
      if (stray) strays.push(stray);
      else this.events.event(node, 'Warning', 'UnknownTaint', 'Gate', unrecordedStray(name));
    }
    return { strays, ...(retryAfterMs !== undefined ? { retryAfterMs } : {}) };
  }

  private async reconcileNode(name: string): Promise<Result | void> {
    const node = this.nodes.get(name);
    if (!node) {
      this.writer.forget(name);
      this.status.set(name, undefined);
      return;
    }
    // Our last write has not come back through the watch yet: its event will bring us here again.
    if (this.writer.pending(node)) return;
    const { strays, retryAfterMs: strayRetryMs } = await this.strayGates(node);
    const gates = [...this.gates().gates, ...strays];
    // A gate's decision is one change (taint, gated-at, completion): written whole, or, when the
    // loop breaker holds any of its keys back, not at all until it lets go.
    const wanted = this.decide(node, gates);
    const keys = wanted.map((d) =>
      decisionKeys(
        node,
        gates.find((g) => g.name === d.gate)!,
        d,
      ),
    );
    const { held, retryAfterMs } = this.writer.hold(node, keys.flat());
    const decisions = wanted.map((d, i) => {
      if (!keys[i]!.some((k) => held.includes(k))) return d;
      const { event: _event, release: _release, ...rest } = d;
      return { ...rest, taint: undefined, annotations: {} };
    });
    const patch = nodePatch(node, gates, decisions);
    if (patch.length) {
      const written = await this.writer.write(
        node,
        keys.filter((_, i) => decisions[i] === wanted[i]).flat(),
        patch,
        true,
      );
      if (written.status === 'gone') return;
      // A test operation failed: the node changed since the cache saw it. Its event is on the way.
      if (written.status === 'conflict') {
        this.log.debug({ node: name, err: written.message }, 'node changed meanwhile; retrying');
        return { requeue: true };
      }
      for (const d of decisions) {
        if (d.event) this.events.event(node, d.event.type, d.event.reason, 'Gate', d.event.message);
        if (d.release && !strays.some((g) => g.name === d.gate))
          gateMetrics.duration.observe({ gate: d.gate, outcome: d.release.outcome }, d.release.heldSeconds);
        if (d.event || d.release)
          this.log.info({ node: name, gate: d.gate, state: d.state, why: d.why }, d.event?.message ?? d.why);
      }
    }
    const before = this.status.get(name);
    this.status.set(
      name,
      new Map(
        decisions.slice(0, decisions.length - strays.length).map((d) => [
          d.gate,
          {
            state: d.state,
            timedOut: d.timedOut,
            startedEarly: (d.startedEarly ?? []).map((p) => `${p} on ${name}`),
          },
        ]),
      ),
    );
    this.announceAdmissions(node, decisions, before);
    const after = decisions.flatMap((d) => (d.requeueAfterMs === undefined ? [] : [d.requeueAfterMs]));
    if (retryAfterMs !== undefined) after.push(retryAfterMs);
    if (strayRetryMs !== undefined) after.push(strayRetryMs);
    // A little past the deadline, so that the next look finds it passed.
    if (after.length) return { requeueAfterMs: Math.max(1, Math.min(...after)) + 50 };
  }

  /** A node its webhook tainted at admission: the Gated event, once, when the controller first sees it held. */
  private announceAdmissions(
    node: SlimNode,
    decisions: GateDecision[],
    before: ReadonlyMap<string, NodeGateResult> | undefined,
  ): void {
    if (!this.status.firstPassDone()) return;
    for (const d of decisions) {
      if (d.state !== 'Held' || d.event || before?.has(d.gate)) continue;
      this.events.event(
        node,
        'Normal',
        'Gated',
        'Gate',
        `gate ${d.gate}: tainted at admission; waiting for: ${d.unmet.join('; ')}`,
      );
    }
  }

  /** A deleted gate is released once the cache shows no node with anything of it left on it. */
  private async released(name: string): Promise<Result | 'released'> {
    if (!this.status.firstPassDone()) return { requeueAfterMs: 250 };
    const gate = this.gates().gates.find((g) => g.name === name);
    if (gate && this.nodes.list().some((n) => leftOnNode(gate, n))) return { requeueAfterMs: 500 };
    this.log.info({ gate: name }, 'gate deleted: its taints and annotations are off every node');
    for (const state of ['gated', 'released', 'timed_out']) gateMetrics.nodes.remove({ gate: name, state });
    return 'released';
  }

  private report(obj: GateObject, standings: NodeGateResult[]): StatusReport<GateCount> {
    const name = obj.metadata!.name!;
    const { gates, problems } = this.gates();
    const gate = gates.find((g) => g.name === name);
    const problem = problems.get(name);
    let nodes = 0;
    let gated = 0;
    let timedOut = 0;
    let wouldGate = 0;
    const early: string[] = [];
    for (const s of standings) {
      if (s.state === 'NotSelected') continue;
      nodes++;
      early.push(...s.startedEarly);
      if (s.state === 'Held' || s.state === 'HeldTimedOut') gated++;
      if (s.state === 'WouldGate') wouldGate++;
      if (s.timedOut) timedOut++;
    }
    const released = nodes - gated;
    gateMetrics.nodes.set({ gate: name, state: 'gated' }, gated);
    gateMetrics.nodes.set({ gate: name, state: 'released' }, released);
    gateMetrics.nodes.set({ gate: name, state: 'timed_out' }, timedOut);

    const invalid = problem?.reason === 'Invalid' ? problem.message : '';
    const conflicting = problem?.reason === 'Conflicting' ? problem.message : '';
    const unschedulable = gate?.enforced ? this.unschedulableRequirements(gate) : [];
    const enforced = !!gate?.enforced;
    const dryRun = gate?.spec.dryRun ?? false;
    const unknown = gate?.enforced ? unknownAfter(gate, gates) : [];
    return {
      counts: {
        nodes,
        gated,
        released,
        timedOut,
        wouldGate: dryRun ? wouldGate : undefined,
        startedEarly: early.length,
      },
      conditions: [
        { type: 'Invalid', status: !!invalid, reason: invalid ? 'InvalidSpec' : 'Valid', message: invalid },
        {
          type: 'Conflicting',
          status: !!conflicting,
          reason: conflicting ? 'TaintConflict' : 'NoConflict',
          message: conflicting,
        },
        {
          type: 'RequiredPodsSchedulable',
          status: unschedulable.length === 0,
          reason: unschedulable[0]?.reason ?? 'Schedulable',
          message: unschedulable.map((u) => u.message).join('; '),
        },
        {
          type: 'AfterGatesFound',
          status: unknown.length === 0,
          reason: unknown.length ? 'UnknownGate' : 'Found',
          message: unknown.length
            ? `after names ${unknown.join(', ')}, which no valid gate has: this gate does not wait for ${unknown.length > 1 ? 'them' : 'it'}`
            : '',
        },
        {
          type: 'StartedEarly',
          status: early.length > 0,
          reason: early.length ? 'PodsRanBeforeRelease' : 'None',
          message: early.length
            ? `${early.length} pod${early.length > 1 ? 's' : ''} no gate requires run on nodes this gate holds: ${early.slice(0, 5).join(', ')}${early.length > 5 ? ` and ${early.length - 5} more` : ''}`
            : '',
        },
        {
          type: 'Ready',
          status: enforced && !dryRun && unschedulable.length === 0,
          reason: invalid
            ? 'Invalid'
            : !enforced
              ? 'Conflicting'
              : dryRun
                ? 'DryRun'
                : (unschedulable[0]?.reason ?? 'Enforcing'),
          message:
            invalid ||
            (!enforced
              ? conflicting
              : dryRun
                ? `dry run: would hold ${wouldGate} of ${nodes} nodes`
                : `holding ${gated} of ${nodes} nodes${timedOut ? `, ${timedOut} timed out` : ''}${unschedulable.length ? `; ${unschedulable[0]!.message}` : ''}`),
        },
      ],
    };
  }

  /** The DaemonSets the gate waits for that are missing, or whose pods could never start on a gated node. */
  private unschedulableRequirements(gate: Gate): { reason: string; message: string }[] {
    const out: { reason: string; message: string }[] = [];
    for (const r of gate.spec.requirements.pods ?? []) {
      if (!r.daemonSet) continue;
      const ds = this.daemonSets.get(`${r.namespace}/${r.daemonSet}`);
      if (!ds)
        out.push({
          reason: 'DaemonSetNotFound',
          message: `DaemonSet ${r.namespace}/${r.daemonSet} does not exist`,
        });
      else if (missingTolerations(ds, [gate]).length)
        out.push({
          reason: 'MissingToleration',
          message:
            `DaemonSet ${r.namespace}/${r.daemonSet} does not tolerate the taint ${gate.spec.taint.key}, so it never runs on a gated node: ` +
            `berth gates tolerate ${r.daemonSet} -n ${r.namespace}`,
        });
    }
    return out;
  }

  /** The Node CREATE admission handler: adds the taint and gated-at annotation of every gate that selects the node. */
  /**
   * The Pod CREATE admission handler: refuses (or warns about) a pod whose spec.nodeName names a
   * node a gate holds, from the caches alone (the apiserver waits for this answer).
   */
  podAdmissionHandler(): AdmissionHandler {
    return (req) => {
      const obj = req.object;
      if (!obj || req.operation !== 'CREATE') return { allowed: true };
      const slim = slimPod(obj);
      const pod: SlimPod = { ...slim, metadata: { ...slim.metadata, namespace: req.namespace } };
      const node = pod.spec.nodeName ? this.nodes.get(pod.spec.nodeName) : undefined;
      const verdict = admitPod(this.gates().gates, {
        pod,
        tolerations: (obj['spec'] as { tolerations?: Toleration[] } | undefined)?.tolerations,
        node,
        groups: req.userInfo.groups,
        daemonSetExists: (ns, name, uid) => this.daemonSets.get(`${ns}/${name}`)?.metadata?.uid === uid,
      });
      if (node && !req.dryRun) {
        for (const w of verdict.warnings) this.events.event(node, 'Warning', 'NodeNameBypass', 'Admit', w);
      }
      if (verdict.allowed) {
        if (verdict.warnings.length) this.log.info({ node: pod.spec.nodeName }, verdict.warnings.join('; '));
        return verdict.warnings.length ? { allowed: true, warnings: verdict.warnings } : { allowed: true };
      }
      this.log.info({ node: pod.spec.nodeName }, verdict.message!);
      return {
        allowed: false,
        status: { code: 403, reason: 'Forbidden', message: verdict.message! },
        ...(verdict.warnings.length ? { warnings: verdict.warnings } : {}),
      };
    };
  }

  /**
   * The Pod CREATE webhook, for pods created with spec.nodeName only (the match condition keeps the
   * apiserver from calling it for any other). It shares the Node webhook's failurePolicy: Ignore
   * admits such pods while Berth is down, Fail refuses them (kube-system and Berth's namespace
   * excepted), so a strict cluster is strict about both doors.
   */
  podWebhook(): WebhookSpec {
    return {
      name: 'pods.gates.berth.dev',
      path: '/gates/validate-pod',
      kind: 'validating',
      handler: this.podAdmissionHandler(),
      rules: [{ operations: ['CREATE'], apiGroups: [''], apiVersions: ['v1'], resources: ['pods'] }],
      failurePolicy: this.failurePolicy,
      matchConditions: [
        { name: 'node-name-set', expression: "has(object.spec.nodeName) && object.spec.nodeName != ''" },
      ],
      timeoutSeconds: 2,
    };
  }

  /**
   * The Node CREATE webhook. failurePolicy Ignore (the default) keeps nodes joining while Berth is
   * down, and the controller's fallback taints such a node afterwards if it is still idle; Fail is
   * strict (no node joins ungated) and needs the nodes Berth itself runs on labelled exempt, which
   * the objectSelector keeps away from the webhook altogether.
   */
  webhook(): WebhookSpec {
    return {
      name: 'nodes.gates.berth.dev',
      path: '/gates/mutate-node',
      kind: 'mutating',
      // In the webhook thread, from the gates as this controller parses them.
      handler: nodeAdmission.fed(
        () => this.gates().gates,
        // A gate's status changes with every node it holds; admission reads its spec and deletion.
        (changed) =>
          this.gateObjects.addEventHandler(onChanges(or(generationChanged, deletionChanged), changed)),
      ),
      rules: [{ operations: ['CREATE'], apiGroups: [''], apiVersions: ['v1'], resources: ['nodes'] }],
      failurePolicy: this.failurePolicy,
      objectSelector: { matchExpressions: [{ key: EXEMPT_LABEL, operator: 'NotIn', values: ['true'] }] },
      timeoutSeconds: 2,
    };
  }
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

/** Pod changes that can change a gate's decision: its node, phase, readiness, labels, annotations, deletion. */
const podChanged = changed<SlimPod>(
  valueChanged((p) => p.spec.nodeName),
  valueChanged((p) => p.status.phase),
  deletionChanged,
  valueChanged(podReady),
  labelsChanged,
  annotationsChanged,
);

/** Node changes that matter: labels, annotations, taints and conditions. */
const nodeChanged = changed<SlimNode>(labelsChanged, annotationsChanged, taintsChanged, conditionsChanged);
