// The WorkloadDeployments federation writes into cells: whose a copy is, what it says, the namespaces
// made for them, and the copies no target wants (drained once their cities serve).
import { findCondition } from '../../runtime/api/conditions.ts';
import { apiVersionOf, type KubeObject } from '../../runtime/api/meta.ts';
import { WorkloadDeployment } from '../../workloads/crd.ts';
import {
  CITY_LABEL,
  PLACEMENT_LABEL,
  WORKLOAD_NAME_LABEL,
  WORKLOAD_NAMESPACE_LABEL,
  WORKLOAD_UID_LABEL,
  CELL_UID_LABEL,
  NAMESPACE_CREATED_LABEL,
  PLANE_LABEL,
  type WorkloadObject,
} from '../types.ts';
import { type DeploymentObject, type Placed, type Target, workloadKeyOf } from './placement.ts';
import type { Applied } from './rollout.ts';

/** Who writes a cell's copies: this plane (PLANE_LABEL, when it could be read) through the Cell of `cellUid`. */
export interface Writer {
  plane: string | undefined;
  cellUid: string | undefined;
}

/**
 * The copy was written by this plane: its PLANE_LABEL says so or, on a copy written before that
 * label, its CELL_UID_LABEL names the Cell this plane writes through now.
 */
export function writtenBy(d: KubeObject, writer: Writer): boolean {
  const labels = d.metadata?.labels;
  const plane = labels?.[PLANE_LABEL];
  if (plane !== undefined) return plane === writer.plane;
  return writer.cellUid !== undefined && labels?.[CELL_UID_LABEL] === writer.cellUid;
}

/** The labels that say which plane wrote an object into a cell, and through which Cell. */
const writerLabels = (writer: Writer): Record<string, string> => ({
  ...(writer.cellUid ? { [CELL_UID_LABEL]: writer.cellUid } : {}),
  ...(writer.plane ? { [PLANE_LABEL]: writer.plane } : {}),
});

/** A namespace Berth creates in a cell: marked, so that only such a one is ever deleted (namespaceToDelete). */
export const namespaceManifest = (name: string, writer: Writer): KubeObject => ({
  apiVersion: 'v1',
  kind: 'Namespace',
  metadata: { name, labels: { [NAMESPACE_CREATED_LABEL]: 'true', ...writerLabels(writer) } },
});

/**
 * Whether a namespace in a cell is to be deleted: this plane created it (marked, writtenBy), it
 * holds no WorkloadDeployment (federation's or anyone's), and no Workload maps there any more (the
 * Cell no longer lists it, or no Workload of the namespace is left that is not being deleted).
 */
export function namespaceToDelete(
  ns: KubeObject,
  writer: Writer,
  o: { deployments: number; served: boolean; workloads: number },
): boolean {
  return (
    ns.metadata?.labels?.[NAMESPACE_CREATED_LABEL] === 'true' &&
    !ns.metadata.deletionTimestamp &&
    writtenBy(ns, writer) &&
    o.deployments === 0 &&
    (!o.served || o.workloads === 0)
  );
}

/**
 * A copy that is `w`'s own: of this Workload's name and of this very Workload (its uid), or of an
 * earlier one of its name that this plane wrote. Another plane's Workload of the same name in a
 * cell they share is not.
 */
export const ownCopy = (d: DeploymentObject, w: WorkloadObject, writer: Writer): boolean =>
  workloadKeyOf(d) === `${w.metadata.namespace}/${w.metadata.name}` &&
  (d.metadata.labels?.[WORKLOAD_UID_LABEL] === w.metadata.uid || writtenBy(d, writer));

/**
 * Whose the copy at a name `w` would write is, when it is not `w`'s to write over: another
 * plane's, another Workload's whose names make the same one (`web-us` placed `east` and `web`
 * placed `us-east`), or no Workload's. A plane that cannot read its own identity takes a copy with a plane label
 * for another plane's unless it is of this very Workload.
 */
export function heldBy(d: KubeObject, w: WorkloadObject, writer: Writer): string | undefined {
  const labels = d.metadata?.labels;
  const plane = labels?.[PLANE_LABEL];
  if (plane !== undefined && plane !== writer.plane) {
    if (writer.plane !== undefined) return `another management plane's (${PLANE_LABEL}=${plane})`;
    if (labels?.[WORKLOAD_UID_LABEL] !== w.metadata.uid)
      return `perhaps another management plane's (${PLANE_LABEL}=${plane}; this plane cannot read its own identity)`;
  }
  const key = workloadKeyOf(d);
  // Made in the cell by hand, or by a part-1 user: the cell's other WorkloadDeployments show it.
  if (key === undefined) return "not a Workload's copy (it has none of federation's labels)";
  if (key !== `${w.metadata.namespace}/${w.metadata.name}`) return `Workload ${key}'s`;
  return undefined;
}

/** The WorkloadDeployment a target has in its cell, as server-side applied by `writer`. */
export function deploymentManifest(
  w: WorkloadObject,
  t: Target,
  applied: Applied,
  writer: Writer,
): DeploymentObject {
  return {
    apiVersion: apiVersionOf(WorkloadDeployment.ref),
    kind: WorkloadDeployment.kind,
    metadata: {
      name: t.name,
      namespace: w.metadata.namespace!,
      labels: {
        [WORKLOAD_NAMESPACE_LABEL]: w.metadata.namespace!,
        [WORKLOAD_NAME_LABEL]: w.metadata.name!,
        [WORKLOAD_UID_LABEL]: w.metadata.uid!,
        [PLACEMENT_LABEL]: t.placement,
        [CITY_LABEL]: t.city,
        ...writerLabels(writer),
      },
    },
    spec: {
      workloadRef: { name: w.metadata.name!, uid: w.metadata.uid!, templateHash: applied.hash },
      placement: t.placement,
      template: applied.template,
      replicas: t.replicas,
      instanceManagementPolicy: 'OrderedReady',
      progressDeadlineSeconds: 600,
    },
  };
}

/**
 * Of a cell's WorkloadDeployments of a Workload that is gone from the management plane, those to
 * delete: the ones this plane wrote (writtenBy), not being deleted already. One with neither label
 * (written before they existed) is not known to be ours.
 */
export function orphaned(ds: readonly DeploymentObject[], writer: Writer): DeploymentObject[] {
  return ds.filter((d) => writtenBy(d, writer) && !d.metadata.deletionTimestamp);
}

/** The WorkloadDeployments the federation made for this workload that no target wants (in listed cells only). */
export function unwanted(
  targetsNow: readonly Target[],
  placed: readonly Placed[],
  listed: ReadonlySet<string>,
): Placed[] {
  const wanted = new Set(targetsNow.filter((t) => t.cell).map((t) => `${t.cell}/${t.name}`));
  return placed.filter((d) => listed.has(d.cell) && !wanted.has(`${d.cell}/${d.object.metadata.name}`));
}

/** A WorkloadDeployment no target wants, kept until the cities of its placement serve. */
export interface Drain {
  placed: Placed;
  placement: string;
  city: string;
  /** The cities of its placement not Available yet. */
  waitingFor: string[];
  /** Its deletion was due, and its cell refused it (RBAC, an admission policy): what it answered. */
  refused?: string;
}

/**
 * Drain after ready: of the WorkloadDeployments no target wants, those to delete now (their
 * placement is gone or has no city left, or every city it has is Available) and those that keep
 * serving, Draining, until then.
 */
export function drains(
  targetsNow: readonly Target[],
  gone: readonly Placed[],
  available: (t: Target) => boolean,
): { remove: Placed[]; draining: Drain[] } {
  const remove: Placed[] = [];
  const draining: Drain[] = [];
  for (const d of gone) {
    const drain = drainOf(d);
    drain.waitingFor = targetsNow
      .filter((t) => t.placement === drain.placement && !available(t))
      .map((t) => t.city);
    if (drain.waitingFor.length) draining.push(drain);
    else remove.push(d);
  }
  return { remove, draining };
}

/** A WorkloadDeployment no target wants, as the status lists it while it still runs. */
export const drainOf = (d: Placed, refused?: string): Drain => ({
  placed: d,
  placement: d.object.metadata.labels?.[PLACEMENT_LABEL] ?? '',
  city: d.object.metadata.labels?.[CITY_LABEL] ?? '',
  waitingFor: [],
  ...(refused !== undefined ? { refused } : {}),
});

/** Whether a cell's WorkloadDeployment serves: it observed its spec and says Available. */
export function serves(d: DeploymentObject | undefined): boolean {
  return (
    d !== undefined &&
    d.status?.observedGeneration === d.metadata.generation &&
    findCondition(d.status?.conditions, 'Available')?.status === 'True'
  );
}
