// gates-status: counts per gate from the nodes' standings (controllers/node.ts), its conditions,
// and the gate's finalizer, kept until no node carries anything of the gate.
import { PolicyStatusWriter, type StatusReport } from '../../policy/status.ts';
import type { Result } from '../../runtime/controller/controller.ts';
import { unknownAfter } from '../decide/order.ts';
import { type Gate } from '../decide/parse.ts';
import { type GateDecision, leftOnNode } from '../decide/state.ts';
import type { GateObject, Gates } from '../setup.ts';
import { gateMetrics } from '../metrics.ts';
import { missingTolerations } from '../tolerate.ts';
import { FIELD_MANAGER, GATE_FINALIZER } from '../types.ts';
import { gateChanged, nodeChanged } from './node.ts';

type GateCount = 'nodes' | 'gated' | 'released' | 'timedOut' | 'wouldGate' | 'startedEarly';

/** What the node controller last decided for a node, per gate: for status, finalizers and events. */
export interface NodeGateResult {
  state: GateDecision['state'];
  timedOut: boolean;
  /** Held: the pods no gate requires that run on the node ("namespace/name on node"). */
  startedEarly: string[];
}

/** A gate's status from its standings, and its release once deleted. */
export class StatusWriter extends PolicyStatusWriter<GateObject, NodeGateResult, GateCount> {
  private readonly g: Gates;

  constructor(g: Gates) {
    super(g, g.gateObjects, {
      name: 'gates-status',
      fieldManager: FIELD_MANAGER,
      delayMs: 200,
      objectChanged: gateChanged,
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
      finalizer: GATE_FINALIZER,
      admission: [g.admission.nodes, g.admission.pods],
    });
    this.g = g;
  }

  /** A deleted gate is released once the cache shows no node with anything of it left on it. */
  protected override async cleanup(obj: GateObject): Promise<Result | 'released'> {
    if (!this.firstPassDone()) return { requeueAfterMs: 250 };
    const name = obj.metadata!.name!;
    const gate = this.g.gates().gates.find((g) => g.name === name);
    if (gate && this.g.nodes.list().some((n) => leftOnNode(gate, n))) return { requeueAfterMs: 500 };
    this.g.log.info({ gate: name }, 'gate deleted: its taints and annotations are off every node');
    for (const state of ['gated', 'released', 'timed_out']) gateMetrics.nodes.remove({ gate: name, state });
    return 'released';
  }

  protected report(obj: GateObject, standings: NodeGateResult[]): StatusReport<GateCount> {
    const name = obj.metadata!.name!;
    const { gates, problems } = this.g.gates();
    const gate = gates.find((g) => g.name === name);
    const problem = problems.get(name);
    const { nodes, gated, timedOut, wouldGate, early } = tally(standings);
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
      const ds = this.g.daemonSets.get(`${r.namespace}/${r.daemonSet}`);
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
}

/** The gates-status controller: its status writer, the gates' finalizer, and what else a status reads. */
export function setupStatusWriter(g: Gates): StatusWriter {
  const status = new StatusWriter(g);
  status.controller
    // A node giving back a deleted gate's taint may be the last thing its finalizer waits for.
    .watch(g.nodes, () => deletingGates(g.gates().gates), { update: nodeChanged })
    // A gate that comes, goes or changes is found or lost by the gates that wait for it, and
    // starts or stops a conflict with the others of its taint (the winner says so too). Gates are few.
    .watch(g.gateObjects, () => g.gateObjects.keys(), { update: gateChanged })
    .watch(g.daemonSets, () => g.gateObjects.keys());
  return status;
}

const deletingGates = (gates: Gate[]): string[] => gates.filter((g) => g.deleting).map((g) => g.name);

/** The gate's nodes by standing, over the nodes it selects, and the pods that started early on them. */
function tally(standings: NodeGateResult[]) {
  const t = { nodes: 0, gated: 0, timedOut: 0, wouldGate: 0, early: [] as string[] };
  for (const s of standings) {
    if (s.state === 'NotSelected') continue;
    t.nodes++;
    t.early.push(...s.startedEarly);
    if (s.state === 'Held' || s.state === 'HeldTimedOut') t.gated++;
    if (s.state === 'WouldGate') t.wouldGate++;
    if (s.timedOut) t.timedOut++;
  }
  return t;
}
