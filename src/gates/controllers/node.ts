// gates-node: decides, per node, what every gate wants (taint on or off, its annotations) and writes
// it in one compare-and-swap patch; what it decided is each gate's standing on that node, for
// gates-status (controllers/status.ts).
import type { CasNodeWriter } from '../../policy/nodes/cas.ts';
import {
  annotationsChanged,
  changed,
  conditionsChanged,
  deletionChanged,
  generationChanged,
  labelsChanged,
  taintsChanged,
  valueChanged,
} from '../../policy/predicates.ts';
import { podsOn, type SlimNode, type SlimPod } from '../../policy/slim.ts';
import { isNotFound } from '../../runtime/client/client.ts';
import { PolicyNodeReconciler } from '../../policy/reconciler.ts';
import { Controller, type FirstPass, type Result } from '../../runtime/controller/controller.ts';
import { type Gate } from '../decide/parse.ts';
import { decisionKeys, nodePatch } from '../decide/patch.ts';
import { podReady } from '../decide/requirements.ts';
import { decideGates, type GateDecision } from '../decide/state.ts';
import { gatesNamedOn, strayGate, unrecordedStray } from '../decide/stray.ts';
import type { Gates } from '../setup.ts';
import { gateMetrics } from '../metrics.ts';
import { gateAnnotations } from '../types.ts';
import { NodeStartupGate } from '../crd.ts';
import type { NodeGateResult, StatusWriter } from './status.ts';

export class NodeReconciler extends PolicyNodeReconciler<Gates, CasNodeWriter, StatusWriter> {
  /**
   * Gates a read of the API found gone while nodes still carried their keys: name → when. A node
   * gated before that read was gated for the gate that is gone; one gated since, maybe for a new
   * gate of the same name the cache has not seen yet, is read for again.
   */
  private readonly gone = new Map<string, number>();

  constructor(g: Gates, writer: CasNodeWriter, status: StatusWriter) {
    super(g, writer, status);
    g.gateObjects.addEventHandler({ onAdd: (o) => this.gone.delete(o.metadata!.name!) });
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
      if (this.ctx.gateObjects.get(name)) continue;
      const keys = gateAnnotations(name, {});
      const gatedAt = Date.parse(node.metadata?.annotations?.[keys.gatedAt] ?? '') || 0;
      const readAt = this.gone.get(name);
      // The webhook stamps gated-at with its replica's clock: a second's slack for skew.
      if (readAt === undefined || gatedAt > readAt - 1000) {
        const at = this.ctx.clock();
        try {
          await this.ctx.manager.client().get(NodeStartupGate.ref, name);
          continue;
        } catch (err) {
          if (!isNotFound(err)) {
            this.ctx.log.warn(
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
      else this.ctx.events.event(node, 'Warning', 'UnknownTaint', 'Gate', unrecordedStray(name));
    }
    return { strays, ...(retryAfterMs !== undefined ? { retryAfterMs } : {}) };
  }

  protected async reconcileNode(node: SlimNode, name: string): Promise<Result | void> {
    // Our last write has not come back through the watch yet: its event will bring us here again.
    if (this.writer.pending(node)) return;
    const { strays, retryAfterMs: strayRetryMs } = await this.strayGates(node);
    const gates = [...this.ctx.gates().gates, ...strays];
    // A gate's decision is one change (taint, gated-at, completion): written whole, or, when the
    // loop breaker holds any of its keys back, not at all until it lets go.
    const wanted = decideGates(gates, node, podsOn(this.ctx.pods, name), this.ctx.clock());
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
        this.ctx.log.debug({ node: name, err: written.message }, 'node changed meanwhile; retrying');
        return { requeue: true };
      }
      for (const d of decisions) {
        if (d.event) this.ctx.events.event(node, d.event.type, d.event.reason, 'Gate', d.event.message);
        if (d.release && !strays.some((g) => g.name === d.gate))
          gateMetrics.duration.observe({ gate: d.gate, outcome: d.release.outcome }, d.release.heldSeconds);
        if (d.event || d.release)
          this.ctx.log.info(
            { node: name, gate: d.gate, state: d.state, why: d.why },
            d.event?.message ?? d.why,
          );
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
      this.ctx.events.event(
        node,
        'Normal',
        'Gated',
        'Gate',
        `gate ${d.gate}: tainted at admission; waiting for: ${d.unmet.join('; ')}`,
      );
    }
  }
}

/**
 * The gates-node controller: a node's own changes, and those of the pods on it, bring it back; a
 * gate's change brings every node. Its first pass is the one its status writer waits for.
 */
export function setupNodeReconciler(
  g: Gates,
  reconciler: NodeReconciler,
  opts: { workers: number; firstPass: FirstPass },
): Controller {
  const controller = new Controller({ name: 'gates-node', logger: g.log, reconciler, ...opts })
    .watch(g.pods, (p) => p.spec.nodeName, { update: podChanged })
    .watch(g.nodes, (n) => n.metadata!.name!, { update: nodeChanged })
    .watch(g.gateObjects, () => g.nodes.keys(), { update: gateChanged });
  g.manager.add(controller);
  return controller;
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
export const nodeChanged = changed<SlimNode>(
  labelsChanged,
  annotationsChanged,
  taintsChanged,
  conditionsChanged,
);

/** A gate's changes that matter: its spec (a new generation) and its deletion. */
export const gateChanged = changed(generationChanged, deletionChanged);
