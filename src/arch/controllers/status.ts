// arch-status: counts per ArchPlacement from what its pods carry, its conditions, and its
// finalizer, which releases a deleted policy's pods.
import { changed, deletionChanged, generationChanged, labelsChanged } from '../../policy/predicates.ts';
import { PolicyStatusWriter, type StatusReport } from '../../policy/status.ts';
import { keyOf } from '../../runtime/cache/informer.ts';
import type { Result } from '../../runtime/controller/controller.ts';
import type { Trigger } from '../../runtime/controller/trigger.ts';
import { gated } from '../decide/patches.ts';
import { nodeArchitectures, report, type Standing } from '../decide/status.ts';
import type { Arch, PolicyObject } from '../setup.ts';
import { ARCH_FINALIZER, FIELD_MANAGER } from '../types.ts';

type Count = 'gated' | 'placed' | 'failed';

/** A policy's changes that matter: its spec (a new generation) and its deletion. */
export const policyChanged = changed<PolicyObject>(generationChanged, deletionChanged);

/**
 * A policy's status from its pods' standings, recorded by arch-pod: so arch-pod stands for the node
 * loop whose first pass a status waits for, and the gated pods for its nodes.
 */
export class StatusWriter extends PolicyStatusWriter<PolicyObject, Standing, Count> {
  private readonly a: Arch;
  /** arch-pod's trigger: a deleted policy's gated pods go through it to be released. */
  private readonly pods: Trigger;

  constructor(a: Arch, pods: Trigger) {
    super({ manager: a.manager, nodes: a.pods, events: a.events, log: a.log }, a.policyObjects, {
      name: 'arch-status',
      fieldManager: FIELD_MANAGER,
      objectChanged: policyChanged,
      warnings: [
        { type: 'Invalid', status: 'True' },
        { type: 'ArchitecturesSchedulable', status: 'False' },
        { type: 'InspectionsFailing', status: 'True' },
      ],
      finalizer: ARCH_FINALIZER,
      admission: [a.admission],
    });
    this.a = a;
    this.pods = pods;
  }

  /** A deleted policy is released once no pod it gated still carries the gate. */
  protected override async cleanup(obj: PolicyObject): Promise<Result | 'released'> {
    const name = obj.metadata!.name!;
    const held = this.a.pods.byIndex('policy', name).filter(gated);
    if (held.length) {
      this.pods.send(held.map(keyOf));
      return { requeueAfterMs: 500 };
    }
    this.a.log.info({ policy: name }, 'ArchPlacement deleted: none of its pods is gated');
    return 'released';
  }

  protected report(obj: PolicyObject, standings: Standing[]): StatusReport<Count> {
    const name = obj.metadata!.name!;
    const error = this.a.parsed().errors.get(name);
    const r = report(standings, nodeArchitectures(this.a.nodes.list()));
    const unschedulable = [...r.unschedulable].map(([archs, n]) => `${n} pod(s) run only on ${archs}`);
    const failures = [...r.failures].map(([reason, n]) => `${n} pod(s): ${reason}`);
    const noNodes = unschedulable.length
      ? `no node has the architectures of ${unschedulable.join('; ')} (berth explain pod)`
      : '';
    return {
      counts: { gated: r.gated, placed: r.placed, failed: r.failed },
      conditions: [
        { type: 'Invalid', status: !!error, reason: error ? 'InvalidSpec' : 'Valid', message: error ?? '' },
        {
          type: 'ArchitecturesSchedulable',
          status: !noNodes,
          reason: noNodes ? 'NoNodeOfArchitecture' : 'Schedulable',
          message: noNodes,
        },
        {
          type: 'InspectionsFailing',
          status: failures.length > 0,
          reason: failures.length ? 'InspectionFailed' : 'Inspecting',
          message: failures.length ? `images could not be read: ${failures.join('; ')}` : '',
        },
        {
          type: 'Ready',
          status: !error && !noNodes,
          reason: error ? 'Invalid' : noNodes ? 'NoNodeOfArchitecture' : 'Placing',
          message: error ?? noNodes,
        },
      ],
    };
  }
}

/** The arch-status controller: its status writer, and the nodes whose architectures a policy's pods need. */
export function setupStatusWriter(a: Arch, pods: Trigger): StatusWriter {
  const status = new StatusWriter(a, pods);
  // Nodes coming and going change which placed pods have a node of their architectures.
  status.controller.watch(a.nodes, () => a.policyObjects.keys(), { update: changed(labelsChanged) });
  return status;
}
