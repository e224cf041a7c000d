// The pure decisions of federation: where each placement × city of a Workload runs (one cell,
// sticky), what its WorkloadDeployment there says, and the Workload's status rolled up from the
// cells' WorkloadDeployments. The controller (controller.ts) reads the caches and writes.
import { isDeepStrictEqual } from 'node:util';
import { findCondition, type Condition } from '../runtime/api/conditions.ts';
import type { CustomObject } from '../runtime/api/crd.ts';
import { apiVersionOf, isDnsLabel, type KubeObject } from '../runtime/api/meta.ts';
import { clusterNameOf, CORDONED } from '../cells/decide.ts';
import { berthNamespace, NAMESPACE } from '../policy/namespace.ts';
import type { CellObject } from '../cells/types.ts';
import { selectorMatches } from '../policy/match/selector.ts';
import { deploymentNameProblem } from '../workloads/decide.ts';
import {
  type InstanceTemplate,
  WorkloadDeployment,
  type WorkloadDeploymentSpec,
  type WorkloadDeploymentStatus,
} from '../workloads/types.ts';
import {
  CITY_LABEL,
  PLACEMENT_LABEL,
  WORKLOAD_NAME_LABEL,
  WORKLOAD_NAMESPACE_LABEL,
  WORKLOAD_UID_LABEL,
  CELL_UID_LABEL,
  NAMESPACE_CREATED_LABEL,
  PLANE_LABEL,
  type CityStatus,
  type Placement,
  type PlacementStatus,
  type Rollout,
  type RolloutCell,
  type RolloutStatus,
  type WorkloadObject,
  type WorkloadStatus,
} from './types.ts';

export type DeploymentObject = CustomObject<WorkloadDeploymentSpec, WorkloadDeploymentStatus>;

/** What federation knows of a cell: what it serves, whether it can take work, and whether its WorkloadDeployments are listed. */
export interface CellView {
  name: string;
  cities: string[];
  unschedulable: boolean;
  /** Reachable is not False. */
  reachable: boolean;
  /** Since when it is Reachable=False (the condition's transition time). */
  unreachableSince?: string;
  ready: boolean;
  /** Ready's reason and message when it is not Ready. */
  notReady?: { reason: string; message: string };
  /** Not probed to an answer yet (Ready absent or Unknown): it may be Ready in a moment. */
  probing: boolean;
  /**
   * Its WorkloadDeployments are known: in the cache (the cell is engaged and its informer has
   * listed). One not listed shows none, whatever it holds.
   */
  listed: boolean;
  /** The management plane's namespaces it serves (its Cell's spec.namespaces). */
  namespaces: readonly string[];
  /** Berth may create a namespace it serves and lacks. */
  createNamespaces: boolean;
}

/** A Cell as federation sees it; `listed`: its cluster's WorkloadDeployments are in the cache. */
export function cellView(cell: CellObject, listed: boolean): CellView {
  const conditions: Condition[] = cell.status?.conditions ?? [];
  const reachable = findCondition(conditions, 'Reachable');
  const ready = findCondition(conditions, 'Ready');
  return {
    name: cell.metadata.name!,
    cities: cell.spec.locations,
    unschedulable: cell.spec.unschedulable,
    reachable: reachable?.status !== 'False',
    ...(reachable?.status === 'False' ? { unreachableSince: reachable.lastTransitionTime } : {}),
    ready: ready?.status === 'True',
    probing: !ready || ready.status === 'Unknown',
    ...(ready && ready.status !== 'True'
      ? { notReady: { reason: ready.reason, message: ready.message } }
      : !ready
        ? { notReady: { reason: 'NotProbed', message: 'not probed yet' } }
        : {}),
    // One whose name can make no cluster was never engaged: it holds nothing of ours.
    listed: listed || !clusterNameOf(cell.metadata.name!),
    namespaces: cell.spec.namespaces,
    createNamespaces: cell.spec.createNamespaces,
  };
}

/**
 * Why no cell may take the Workloads of a namespace, whatever a Cell lists: the cluster's own
 * (`kube-*`, a prefix Kubernetes reserves, and `default`, where every cluster keeps what all its
 * users share) and Berth's, in the cell as here. Undefined when none.
 */
export function namespaceRefusal(namespace: string, own = berthNamespace()): string | undefined {
  const system = namespace === 'default' || namespace.startsWith('kube-');
  if (!system && namespace !== NAMESPACE && namespace !== own) return undefined;
  return `namespace ${namespace} is ${system ? 'a system namespace' : "Berth's own"}: no cell takes its Workloads (move the Workload to a namespace of its own)`;
}

/** A WorkloadDeployment of the federation's in a cell. */
export interface Placed {
  cell: string;
  object: DeploymentObject;
}

/** Why a placement × city has no cell (or cannot have a WorkloadDeployment). */
export interface Problem {
  reason:
    | 'InvalidName'
    | 'NamespaceRefused'
    | 'NoMatchingLocation'
    | 'NamespaceNotServed'
    | 'CellUnreachable'
    | 'CellNotReady';
  message: string;
}

/** One placement × city: its WorkloadDeployment's name and the cell it runs in, or why it has none. */
export interface Target {
  placement: string;
  city: string;
  name: string;
  replicas: number;
  /** The cell it runs in. */
  cell?: string;
  /** No cell: why. */
  problem?: Problem;
  /** Failed over from this unreachable cell (its WorkloadDeployment there goes once it answers). */
  failedOverFrom?: string;
  /**
   * Its cell (or a cell not listed that holds it back) is unreachable and the placement fails over:
   * when (ms since the epoch).
   */
  failoverAt?: number;
}

/** The name of a placement × city's WorkloadDeployment. */
export const deploymentName = (workload: string, placement: string, city: string): string =>
  `${workload}-${placement}-${city.toLowerCase()}`;

/**
 * The key of a Workload that a federation WorkloadDeployment names in its labels. Federation writes
 * a Workload's copies only into the cell namespace of its own name, so labels naming another
 * namespace name no Workload: whoever may write a cell's namespace must not send its instances'
 * mirrors (or deletions) to a management namespace of their choosing.
 */
export function workloadKeyOf(d: KubeObject): string | undefined {
  const l = d.metadata?.labels;
  const ns = l?.[WORKLOAD_NAMESPACE_LABEL];
  const name = l?.[WORKLOAD_NAME_LABEL];
  return ns && name && ns === d.metadata?.namespace ? `${ns}/${name}` : undefined;
}

/** A Location as a placement's selector sees it. */
export interface LabelledLocation {
  city: string;
  labels: Record<string, string>;
}

/**
 * A placement's cities: its cityCodes as written, then the cities of the Locations its
 * locationSelector matches, by city code.
 */
export function placementCities(p: Placement, locations: readonly LabelledLocation[]): string[] {
  const named = p.cityCodes ?? [];
  if (!p.locationSelector) return named;
  const selected = locations
    .filter((l) => selectorMatches(p.locationSelector, l.labels))
    .map((l) => l.city)
    .filter((c) => !named.includes(c));
  return [...named, ...[...new Set(selected)].sort()];
}

/**
 * Where each placement × city runs: in the cell its WorkloadDeployment is in while that cell exists
 * and serves the city (an unreachable or cordoned cell keeps it), else in the first Ready,
 * schedulable cell of the city by name; none, or no Location of the city: NoMatchingLocation
 * (CellNotReady while a cell of the city has not answered its first probe). Failover is opt-in: a
 * placement with `failover` leaves a cell unreachable for afterSeconds (at `now`) for the first
 * Ready, schedulable, reachable other cell of the city. Two cells holding it (after a failover, the
 * old one answering again): the one created last keeps it, the other is drained. A city is placed
 * anew (or failed over) only once every cell serving it is listed: one that is not may hold it
 * (CellUnreachable, or CellNotReady while it lists), save a cell a failover would leave anyway.
 */
export function targets(
  w: WorkloadObject,
  locations: ReadonlySet<string>,
  cells: readonly CellView[],
  placed: readonly Placed[],
  labelled: readonly LabelledLocation[] = [],
  now = Date.now(),
): Target[] {
  const byName = [...cells].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const namespace = w.metadata.namespace!;
  const refusal = namespaceRefusal(namespace);
  const out: Target[] = [];
  for (const p of w.spec.placements) {
    for (const city of placementCities(p, labelled)) {
      const name = deploymentName(w.metadata.name!, p.name, city);
      const t: Target = { placement: p.name, city, name, replicas: p.scaleSettings.minReplicas };
      const ofCity = byName.filter((c) => c.cities.includes(city));
      // A cell takes only the namespaces its Cell lists: none by default.
      const serving = ofCity.filter((c) => c.namespaces.includes(namespace));
      // A label value, and with the ordinal the instances' label: a short enough DNS label.
      const tooLong = deploymentNameProblem(name);
      if (tooLong || !isDnsLabel(name)) {
        t.problem = {
          reason: 'InvalidName',
          message: `${tooLong ?? `the WorkloadDeployment name ${name} is not a DNS label`}: shorten the workload or placement name`,
        };
        out.push(t);
        continue;
      }
      if (refusal) {
        t.problem = { reason: 'NamespaceRefused', message: refusal };
        out.push(t);
        continue;
      }
      const sticky = newest(
        placed.filter(
          (d) =>
            d.object.metadata.name === name &&
            d.object.metadata.labels?.[CITY_LABEL] === city &&
            serving.some((c) => c.name === d.cell),
        ),
      );
      const kept = sticky && serving.find((c) => c.name === sticky.cell);
      // Where a copy is known to run (a cell not listed shows none).
      const known = kept?.listed ? kept : undefined;
      let chosen = kept ?? serving.find((c) => c.ready && !c.unschedulable);
      const failsOverAt = (c: CellView) =>
        p.failover && !c.reachable && c.unreachableSince
          ? Date.parse(c.unreachableSince) + p.failover.afterSeconds * 1000
          : undefined;
      const due = kept ? failsOverAt(kept) : undefined;
      let from: string | undefined;
      if (kept && due !== undefined) {
        const other = serving.find((c) => c !== kept && c.ready && c.reachable && !c.unschedulable);
        if (due > now) t.failoverAt = due;
        else if (other) {
          from = kept.name;
          chosen = other;
        }
      }
      // A cell not listed (Berth just started, its kubeconfig changed, it does not answer) may hold
      // this city: placing it anew elsewhere would run it twice, then drain the one that serves. One
      // unreachable past its failover time does not hold it back: a failover would leave it anyway.
      const unseen = serving.filter(
        (c) => !c.listed && !(chosen?.listed && (failsOverAt(c) ?? Infinity) <= now),
      );
      if (unseen.length && (!known || chosen !== known)) {
        const later = unseen.flatMap((c) => failsOverAt(c) ?? []).filter((at) => at > now);
        if (later.length) t.failoverAt = Math.min(t.failoverAt ?? Infinity, ...later);
        chosen = known;
      } else if (from) t.failedOverFrom = from;
      const probing = serving.filter((c) => c.probing && !c.unschedulable);
      if (!chosen && unseen.length)
        t.problem = {
          reason: unseen.some((c) => !c.reachable) ? 'CellUnreachable' : 'CellNotReady',
          message:
            `the WorkloadDeployments of ${unseen
              .map((c) =>
                c.reachable
                  ? `cell ${c.name}`
                  : `cell ${c.name} (unreachable since ${c.unreachableSince ?? 'unknown'})`,
              )
              .join(', ')} are not listed yet: ${city} may run there, ` +
            `so it is placed nowhere else until they are`,
        };
      else if (!locations.has(city) && !sticky)
        t.problem = { reason: 'NoMatchingLocation', message: `no Location has city code ${city}` };
      else if (!serving.length && ofCity.length)
        t.problem = {
          reason: 'NamespaceNotServed',
          message: `no cell of ${city} serves namespace ${namespace} (${ofCity.map((c) => c.name).join(', ')}): a Cell's spec.namespaces lists the namespaces it takes`,
        };
      // A cell not probed to an answer yet (a cell just joined, Berth just started) may be Ready in a
      // moment: a wait, not something the user must fix.
      else if (!chosen && probing.length)
        t.problem = {
          reason: 'CellNotReady',
          message: `waiting for the first probe of ${probing.map((c) => `cell ${c.name}`).join(', ')}, which serves ${city}`,
        };
      else if (!chosen)
        t.problem = {
          reason: 'NoMatchingLocation',
          message:
            `no Ready, schedulable cell serves ${city}` +
            (serving.length
              ? ` (${serving.map((c) => `${c.name}: ${c.unschedulable ? 'cordoned' : (c.notReady?.reason ?? 'Ready')}`).join(', ')})`
              : ''),
        };
      else t.cell = chosen.name;
      out.push(t);
    }
  }
  return out;
}

/** What a target's WorkloadDeployment runs: the Workload's template, or the old one it keeps until its turn in a rollout. */
export interface Applied {
  hash: string;
  template: InstanceTemplate;
}

/** The one created last (by creationTimestamp; the first of equals). */
function newest(ds: readonly Placed[]): Placed | undefined {
  let best: Placed | undefined;
  for (const d of ds)
    if (!best || (d.object.metadata.creationTimestamp ?? '') > (best.object.metadata.creationTimestamp ?? ''))
      best = d;
  return best;
}

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

// ---------------------------------------------------------------------------------------------
// Deletion

/** The cells that hold a deleting Workload back, and what its Released=False condition says. */
export interface DeletionHold {
  cells: string[];
  reason: 'CellUnreachable' | 'CellNotReady';
  message: string;
}

/**
 * The cells that may hold a WorkloadDeployment of a deleting Workload that cannot be deleted now;
 * undefined when none does. A listed cell is known: an unreachable one holds the Workload while it
 * has one there (`copies`). One not listed shows none, so it holds the Workload when its status
 * names the cell, or the cell serves a city its placements or its status name: but not when the
 * cell has been Reachable=False since before the Workload was created (nothing is written into an
 * unreachable cell, so none of this Workload's is there). A cell that is none of these (one whose
 * Secret went, in cities the Workload never had) holds nothing: it must not hold every deletion.
 */
export function deletionHold(
  w: WorkloadObject,
  status: WorkloadStatus | undefined,
  cells: readonly CellView[],
  copies: (cell: string) => number,
  labelled: readonly LabelledLocation[] = [],
): DeletionHold | undefined {
  // The status keeps what the placements had when last reconciled (a city since removed, its cell).
  const recorded = (status?.placements ?? []).flatMap((p) => p.cities ?? []);
  const cities = new Set([
    ...w.spec.placements.flatMap((p) => placementCities(p, labelled)),
    ...recorded.map((c) => c.city),
  ]);
  const named = new Set(recorded.flatMap((c) => c.cell ?? []));
  const created = Date.parse(w.metadata.creationTimestamp ?? '');
  const holding = cells.filter((c) => {
    if (c.listed) return !c.reachable && copies(c.name) > 0;
    if (named.has(c.name)) return true;
    // NaN (no time known) compares false: such a cell may hold it.
    if (Date.parse(c.unreachableSince ?? '') < created) return false;
    return c.cities.some((city) => cities.has(city));
  });
  if (!holding.length) return undefined;
  const why = (c: CellView) =>
    c.listed
      ? `unreachable since ${c.unreachableSince ?? 'unknown'}`
      : c.reachable
        ? 'its WorkloadDeployments not listed yet; it may hold some'
        : // Ready repeats Reachable's reason and message: SecretMissing says which Secret, say.
          `${c.notReady?.reason ?? 'unreachable'} since ${c.unreachableSince ?? 'unknown'}: ${c.notReady?.message ?? ''}; it may hold some`;
  return {
    cells: holding.map((c) => c.name),
    reason: holding.some((c) => !c.reachable) ? 'CellUnreachable' : 'CellNotReady',
    message:
      `waiting to delete this workload's WorkloadDeployments in ${holding.map((c) => `cell ${c.name} (${why(c)})`).join(', ')}: ` +
      `each is deleted once its cell answers and lists them`,
  };
}

// ---------------------------------------------------------------------------------------------
// Progressive rollout across cells

/** How a target is named in a rollout's status: <placement>/<city>. */
export const rolloutName = (t: Pick<Target, 'placement' | 'city'>): string => `${t.placement}/${t.city}`;

export interface RolloutPlan {
  /** What each target's WorkloadDeployment runs, by target name (only targets with a cell, listed). */
  applied: Map<string, Applied>;
  /** Where a progressive rollout stands (absent for All). */
  status?: RolloutStatus;
  /** Progressing while a progressive rollout runs or stopped; otherwise the cells' rollup says. */
  progressing?: Verdict;
  /** When a soak ends or a deadline passes. */
  requeueAfterMs?: number;
}

/**
 * The rollout of the Workload's template across its targets. All: every target gets it. Progressive:
 * a target with no WorkloadDeployment yet gets it at once; one that runs another template keeps it
 * until its turn (placement order, then city order), when fewer than maxConcurrency started targets
 * are updating or soaking; none starts once more than maxFailures have failed. Derived from the
 * cells' WorkloadDeployments (their applied hash and conditions); what they cannot say (when a cell
 * started, when it became Available) comes from the previous status of the same template.
 */
export function rolloutPlan(p: {
  rollout: Rollout | undefined;
  template: InstanceTemplate;
  hash: string;
  targets: readonly Target[];
  deployment: (t: Target) => DeploymentObject | undefined;
  previous: RolloutStatus | undefined;
  now: number;
}): RolloutPlan {
  const current: Applied = { hash: p.hash, template: p.template };
  const placeable = p.targets.filter((t) => t.cell);
  const applied = new Map<string, Applied>();
  if (p.rollout?.type !== 'Progressive') {
    for (const t of placeable) applied.set(t.name, current);
    return { applied };
  }
  const cfg = p.rollout;
  const nowIso = new Date(p.now).toISOString();
  const before = new Map(
    p.previous?.templateHash === p.hash ? (p.previous.cells ?? []).map((c) => [c.name, c]) : [],
  );
  const records = new Map<string, RolloutCell>();
  const pending: Target[] = [];
  const wakeups: number[] = [];
  for (const t of placeable) {
    const d = p.deployment(t);
    const old = d?.spec.workloadRef?.templateHash;
    if (d && old && old !== p.hash) {
      pending.push(t);
      applied.set(t.name, { hash: old, template: d.spec.template });
      continue;
    }
    applied.set(t.name, current);
    const cell = judge(t, d, before.get(rolloutName(t)), p.hash, cfg, p.now, nowIso);
    records.set(cell.name, cell);
    if (cell.state === 'Soaking') wakeups.push(Date.parse(cell.since) + cfg.minSuccessTime * 1000);
    if (cell.state === 'Updating' && cfg.progressDeadline !== undefined)
      wakeups.push(Date.parse(cell.since) + cfg.progressDeadline * 1000);
  }
  // A target whose cell is not known now (not listed yet after a restart or a new kubeconfig,
  // unreachable) keeps what it last was: a failure must not lift, nor a running turn free its
  // place, because the cell cannot say so for a moment.
  const unknown = p.targets.filter((t) => !t.cell && before.has(rolloutName(t)));
  for (const t of unknown) records.set(rolloutName(t), before.get(rolloutName(t))!);
  const total = placeable.length + unknown.length;
  const all = [...records.values()];
  const failed = all.filter((c) => c.state === 'Failed');
  const stopped = failed.length > cfg.maxFailures;
  let active = all.filter((c) => c.state === 'Updating' || c.state === 'Soaking').length;
  const waiting: Target[] = [];
  for (const t of pending) {
    if (stopped || active >= cfg.maxConcurrency) {
      waiting.push(t);
      continue;
    }
    applied.set(t.name, current);
    // Started before, its cell not showing it yet: it keeps its start.
    const since = startedAt(before.get(rolloutName(t)), nowIso);
    records.set(rolloutName(t), { name: rolloutName(t), state: 'Updating', since });
    if (cfg.progressDeadline !== undefined) wakeups.push(Date.parse(since) + cfg.progressDeadline * 1000);
    active++;
  }
  const cells = p.targets.flatMap((t) => records.get(rolloutName(t)) ?? []);
  const updated = cells.filter((c) => c.state === 'Updated').length;
  const soaking = cells.filter((c) => c.state === 'Soaking');
  const soakingUntil = soaking.length
    ? new Date(Math.max(...soaking.map((c) => Date.parse(c.since) + cfg.minSuccessTime * 1000))).toISOString()
    : undefined;
  const status: RolloutStatus = {
    templateHash: p.hash,
    cells,
    updatedCells: updated,
    totalCells: total,
    ...(soakingUntil ? { soakingUntil } : {}),
  };
  const later = wakeups.filter((at) => at > p.now);
  const requeue = later.length ? { requeueAfterMs: Math.min(...later) - p.now } : {};
  const head = `${updated} of ${total} cells updated to template ${p.hash}`;
  if (stopped)
    return {
      applied,
      status,
      ...requeue,
      progressing: {
        status: 'False',
        reason: 'RolloutStopped',
        message:
          `${head}; stopped after ${failed.length} failed (maxFailures ${cfg.maxFailures}): ` +
          failed.map((c) => `${c.name} ${c.reason}: ${c.message}`).join('; ') +
          (waiting.length ? `; ${waiting.map(rolloutName).join(', ')} keep the old template` : ''),
      },
    };
  const busy = cells.filter((c) => c.state === 'Updating' || c.state === 'Soaking');
  if (!busy.length && !waiting.length) return { applied, status, ...requeue };
  const why = busy.map((c) =>
    c.state === 'Soaking'
      ? `${c.name} to soak until ${new Date(Date.parse(c.since) + cfg.minSuccessTime * 1000).toISOString()}`
      : `${c.name} to become Available`,
  );
  return {
    applied,
    status,
    ...requeue,
    progressing: {
      status: 'True',
      reason: 'RollingOut',
      message:
        `${head}, waiting for ${why.join(', ')}` +
        (waiting.length ? `; next: ${waiting.map(rolloutName).join(', ')}` : ''),
    },
  };
}

const startedAt = (before: RolloutCell | undefined, nowIso: string): string =>
  before && (before.state === 'Updating' || before.state === 'Failed') ? before.since : nowIso;

/** A started target's turn: failed, Available on the new template (soaking, then updated), or updating. */
function judge(
  t: Target,
  d: DeploymentObject | undefined,
  before: RolloutCell | undefined,
  hash: string,
  cfg: Rollout,
  now: number,
  nowIso: string,
): RolloutCell {
  const name = rolloutName(t);
  const started = startedAt(before, nowIso);
  const fresh =
    d !== undefined &&
    d.spec.workloadRef?.templateHash === hash &&
    d.spec.replicas === t.replicas &&
    d.status?.observedGeneration === d.metadata.generation;
  const progressing = fresh ? findCondition(d.status?.conditions, 'Progressing') : undefined;
  // Failed stays failed until the cell has seen what it is now asked (a scale, say) and says otherwise.
  if (!fresh && before?.state === 'Failed') return before;
  if (progressing?.status === 'False')
    return {
      name,
      state: 'Failed',
      since: started,
      reason: progressing.reason,
      message: progressing.message,
    };
  if (fresh && serves(d) && d.status?.updatedReplicas === t.replicas) {
    const at = before && (before.state === 'Soaking' || before.state === 'Updated') ? before.since : nowIso;
    return {
      name,
      state: Date.parse(at) + cfg.minSuccessTime * 1000 <= now ? 'Updated' : 'Soaking',
      since: at,
    };
  }
  if (cfg.progressDeadline !== undefined && Date.parse(started) + cfg.progressDeadline * 1000 <= now)
    return {
      name,
      state: 'Failed',
      since: started,
      reason: 'ProgressDeadlineExceeded',
      message: `not Available on the new template within ${cfg.progressDeadline}s`,
    };
  return { name, state: 'Updating', since: started };
}

// ---------------------------------------------------------------------------------------------
// Status rollup

/**
 * A WorkloadDeployment not written: the cell refused it (CellRefused, with what it answered), or
 * its name there is another plane's or another Workload's copy (NameTaken, heldBy).
 */
export interface Refusal {
  reason: 'CellRefused' | 'NameTaken';
  message: string;
}

/** Reasons of federation itself, worst first; the cells' own reasons rank after them. */
export const FEDERATION_REASONS = [
  'InvalidName',
  'NamespaceRefused',
  'NoMatchingLocation',
  'NamespaceNotServed',
  'NameTaken',
  'CellRefused',
  'CellUnreachable',
  'CellNotReady',
];

/** Reasons a user can fix upstream: a Warning event on the Workload. */
export const WORKLOAD_FIXABLE: ReadonlySet<string> = new Set([
  'InvalidName',
  'NamespaceRefused',
  'NoMatchingLocation',
  'NamespaceNotServed',
  'NameTaken',
  'CellRefused',
]);

export interface Verdict {
  status: 'True' | 'False' | 'Unknown';
  reason: string;
  message: string;
}

export interface Rollup {
  status: Omit<WorkloadStatus, 'conditions' | 'observedGeneration'>;
  available: Verdict;
  progressing: Verdict;
}

interface CityRollup {
  status: CityStatus;
  /** The cell's WorkloadDeployment has observed what was applied and rolled it out. */
  settled: boolean;
  /** The cell's WorkloadDeployment stopped progressing: why. */
  stuck?: { reason: string; message: string };
}

/** Whether a cell's WorkloadDeployment has observed the spec federation applied. */
function observed(d: DeploymentObject, t: Target, hash: string): boolean {
  return (
    d.spec.workloadRef?.templateHash === hash &&
    d.spec.replicas === t.replicas &&
    d.status?.observedGeneration !== undefined &&
    d.status.observedGeneration === d.metadata.generation
  );
}

function cityRollup(
  t: Target,
  hash: string,
  applied: string,
  cells: ReadonlyMap<string, CellView>,
  deployment: (cell: string, name: string) => DeploymentObject | undefined,
  refused?: Refusal,
): CityRollup {
  const base: CityStatus = {
    city: t.city,
    ...(t.cell ? { cell: t.cell } : {}),
    replicas: 0,
    readyReplicas: 0,
    updatedReplicas: 0,
    desiredReplicas: t.replicas,
  };
  if (t.problem) return { status: { ...base, ...t.problem }, settled: false };
  const cell = cells.get(t.cell!)!;
  const d = deployment(cell.name, t.name);
  const fresh = d !== undefined && observed(d, t, applied);
  // Not its turn in a rollout yet: it runs the old template, counted, none of it updated.
  const current = applied === hash;
  // A cell's counts count when it has observed what was applied; an unreachable cell's last known
  // counts are kept, marked with since when it is unreachable.
  const counted: CityStatus =
    d && (fresh || !cell.reachable)
      ? {
          ...base,
          replicas: d.status?.replicas ?? 0,
          readyReplicas: d.status?.readyReplicas ?? 0,
          updatedReplicas: fresh && current ? (d.status?.updatedReplicas ?? 0) : 0,
        }
      : base;
  const why = (reason: string, message: string): CityRollup => ({
    status: { ...counted, reason, message },
    settled: false,
  });
  if (!cell.reachable)
    return why(
      'CellUnreachable',
      `cell ${cell.name} is unreachable since ${cell.unreachableSince ?? 'unknown'}; last known counts`,
    );
  // The cell answered the write with a refusal (RBAC, an admission policy, a missing namespace), or
  // its name is another's there: something to fix, where a write not observed yet is only a wait.
  if ((!d || !fresh) && refused !== undefined)
    return why(
      refused.reason,
      refused.reason === 'CellRefused'
        ? `cell ${cell.name} refused the WorkloadDeployment: ${refused.message}`
        : `cell ${cell.name}: ${refused.message}`,
    );
  if (!d) return why('Provisioning', `not in cell ${cell.name} yet`);
  if (!fresh) return why('Provisioning', `cell ${cell.name} has not observed the applied spec yet`);
  const progressing = findCondition(d.status?.conditions, 'Progressing');
  const stuck =
    progressing?.status === 'False'
      ? { reason: progressing.reason, message: progressing.message }
      : undefined;
  const settled =
    current &&
    d.status?.updatedReplicas === t.replicas &&
    d.status.replicas === t.replicas &&
    progressing?.status === 'True';
  const available = findCondition(d.status?.conditions, 'Available');
  if (available?.status !== 'True')
    return {
      ...why(
        available?.reason ?? 'Provisioning',
        `cell ${cell.name}: ${available?.message ?? 'not available yet'}`,
      ),
      settled,
      ...(stuck ? { stuck } : {}),
    };
  // Ready in a cell that is not Ready (its CRDs went, say): it serves, but no new work goes there.
  // A cordoned cell is one its operator keeps new work from, on purpose: what runs there is
  // available as before.
  if (!cell.ready && cell.notReady?.reason !== CORDONED)
    return {
      ...why('CellNotReady', `cell ${cell.name} is not Ready: ${cell.notReady?.message ?? ''}`),
      settled,
      ...(stuck ? { stuck } : {}),
    };
  return { status: counted, settled, ...(stuck ? { stuck } : {}) };
}

const rank = (reason: string, cellReasons: readonly string[]): number => {
  const f = FEDERATION_REASONS.indexOf(reason);
  if (f >= 0) return f;
  const c = cellReasons.indexOf(reason);
  return FEDERATION_REASONS.length + (c < 0 ? cellReasons.length : c);
};

const sum = (
  xs: readonly {
    replicas?: number;
    readyReplicas?: number;
    updatedReplicas?: number;
    desiredReplicas?: number;
  }[],
) => ({
  replicas: xs.reduce((n, x) => n + (x.replicas ?? 0), 0),
  readyReplicas: xs.reduce((n, x) => n + (x.readyReplicas ?? 0), 0),
  updatedReplicas: xs.reduce((n, x) => n + (x.updatedReplicas ?? 0), 0),
  desiredReplicas: xs.reduce((n, x) => n + (x.desiredReplicas ?? 0), 0),
});

/**
 * The Workload's status from its targets and the cells' WorkloadDeployments: counts per city,
 * placement and in total; Available with the worst actionable reason (federation's own first, then
 * the cells' in `cellReasons` order: part 1's BLOCKING_REASONS), Unknown when the worst is an
 * unreachable cell; Progressing False when a cell's rollout stopped.
 */
export function rollup(
  w: WorkloadObject,
  targetsNow: readonly Target[],
  hash: string,
  cells: ReadonlyMap<string, CellView>,
  deployment: (cell: string, name: string) => DeploymentObject | undefined,
  cellReasons: readonly string[],
  o: {
    applied?: ReadonlyMap<string, Applied>;
    draining?: readonly Drain[];
    progressing?: Verdict;
    /** Each WorkloadDeployment not written just now, by name, and why. */
    refused?: ReadonlyMap<string, Refusal>;
  } = {},
): Rollup {
  const cities = targetsNow.map((t) => ({
    t,
    r: cityRollup(t, hash, o.applied?.get(t.name)?.hash ?? hash, cells, deployment, o.refused?.get(t.name)),
  }));
  // Problems named by where they are: a city, or a placement with none.
  const problems: { where: string; reason: string; message: string }[] = cities.flatMap(({ r }) =>
    r.status.reason
      ? [{ where: r.status.city, reason: r.status.reason, message: r.status.message ?? '' }]
      : [],
  );
  const placements: PlacementStatus[] = w.spec.placements.map((p) => {
    const own = cities.filter((c) => c.t.placement === p.name).map((c) => c.r.status);
    // Only a selector can leave a placement with no city (cityCodes has at least one).
    const none = !own.length &&
      p.locationSelector && {
        reason: 'NoMatchingLocation',
        message: 'its locationSelector matches no Location',
      };
    if (none) problems.push({ where: `placement ${p.name}`, ...none });
    // Still serving until the cities of its placement are Available (one in a city that is also
    // wanted, in another cell, is not listed twice: the city is the list's key; nor are two cells
    // draining one city, after a failover).
    const byCity = new Map<string, Drain[]>();
    for (const d of o.draining ?? [])
      if (d.placement === p.name && !own.some((c) => c.city === d.city))
        byCity.set(d.city, [...(byCity.get(d.city) ?? []), d]);
    const draining: CityStatus[] = [...byCity].map(([city, ds]) => {
      const cells = ds.map((d) => d.placed.cell).sort();
      // The same for every one of the placement.
      const { waitingFor } = ds[0]!;
      // Still running where it should be gone: something to fix, not a wait.
      const refusal = ds.find((d) => d.refused !== undefined);
      const refused = refusal && {
        reason: 'CellRefused',
        message: `removed from the placement; cell ${refusal.placed.cell} refused its deletion: ${refusal.refused}`,
      };
      if (refused) problems.push({ where: city, ...refused });
      return {
        city,
        cell: cells[0]!,
        replicas: ds.reduce((n, d) => n + (d.placed.object.status?.replicas ?? 0), 0),
        readyReplicas: ds.reduce((n, d) => n + (d.placed.object.status?.readyReplicas ?? 0), 0),
        updatedReplicas: 0,
        desiredReplicas: 0,
        ...(refused ?? {
          reason: 'Draining',
          message:
            `removed from the placement${cells.length > 1 ? ` (in cells ${cells.join(', ')})` : ''}; ` +
            `deleted once ${waitingFor.join(', ')} ${waitingFor.length > 1 ? 'are' : 'is'} Available`,
        }),
      };
    });
    const all = [...own, ...draining];
    return { name: p.name, ...(none || {}), cities: all, ...sum(all) };
  });
  const total = sum(placements);
  let worst: (typeof problems)[number] | undefined;
  for (const q of problems)
    if (!worst || rank(q.reason, cellReasons) < rank(worst.reason, cellReasons)) worst = q;
  const available: Verdict = worst
    ? {
        status: worst.reason === 'CellUnreachable' ? 'Unknown' : 'False',
        reason: worst.reason,
        message: `${worst.where}: ${worst.message || worst.reason}`,
      }
    : {
        status: 'True',
        reason: 'Available',
        message: `${total.readyReplicas} of ${total.desiredReplicas} instances ready in ${cities.length} cities`,
      };
  const stuck = cities.find((c) => c.r.stuck);
  const progressing: Verdict =
    o.progressing ??
    (stuck
      ? {
          status: 'False',
          reason: stuck.r.stuck!.reason,
          message: `${stuck.t.city}: ${stuck.r.stuck!.message}`,
        }
      : cities.every((c) => c.r.settled) && !o.draining?.length
        ? { status: 'True', reason: 'RolledOut', message: `every city runs the current template` }
        : {
            status: 'True',
            reason: 'Progressing',
            message: `${total.updatedReplicas} of ${total.desiredReplicas} instances on the current template`,
          });
  return { status: { ...total, placements }, available, progressing };
}

/**
 * Whether the Workload's status says, for its current generation, that every instance runs its
 * current template and is Ready, and the Workload is Available: its placement or rollout is done.
 */
export function rolledOut(w: WorkloadObject): boolean {
  const s = w.status;
  return (
    s !== undefined &&
    s.observedGeneration === w.metadata.generation &&
    (s.desiredReplicas ?? 0) > 0 &&
    s.readyReplicas === s.desiredReplicas &&
    s.updatedReplicas === s.desiredReplicas &&
    findCondition(s.conditions, 'Available')?.status === 'True'
  );
}

/**
 * Whether a Workload's new status differs from the old only in counts and messages (a cell's
 * instances coming up one by one): such a write may wait for the status's write spacing. A new
 * generation, a condition's status or reason, a city's cell or reason, the rollout, or every
 * instance Ready at last (or no longer) is written at once.
 */
export function countsOnly(old: WorkloadStatus | undefined, next: WorkloadStatus): boolean {
  const shape = (s: WorkloadStatus | undefined) => ({
    allReady: (s?.desiredReplicas ?? 0) > 0 && s?.readyReplicas === s?.desiredReplicas,
    observedGeneration: s?.observedGeneration,
    rollout: s?.rollout,
    placements: s?.placements?.map((p) => ({
      name: p.name,
      reason: p.reason,
      cities: p.cities?.map((c) => ({ city: c.city, cell: c.cell, reason: c.reason })),
    })),
    conditions: s?.conditions?.map((c) => ({ type: c.type, status: c.status, reason: c.reason })),
  });
  return isDeepStrictEqual(shape(old), shape(next));
}
