// Where each placement × city of a Workload runs: the cells federation knows, the cities a placement
// names, and one cell per city (sticky; failover is opt-in).
import { findCondition, type Condition } from '../../runtime/api/conditions.ts';
import type { CustomObject } from '../../runtime/api/crd.ts';
import { isDnsLabel, type KubeObject } from '../../runtime/api/meta.ts';
import { clusterNameOf } from '../../cells/decide.ts';
import { berthNamespace, NAMESPACE } from '../../policy/namespace.ts';
import type { CellObject } from '../../cells/types.ts';
import { selectorMatches } from '../../policy/match/selector.ts';
import { deploymentNameProblem } from '../../workloads/decide/revisions.ts';
import type { WorkloadDeploymentSpec, WorkloadDeploymentStatus } from '../../workloads/types.ts';
import {
  CITY_LABEL,
  WORKLOAD_NAME_LABEL,
  WORKLOAD_NAMESPACE_LABEL,
  type Placement,
  type WorkloadObject,
} from '../types.ts';

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
      // A label value, and with the ordinal the instances' label: a short enough DNS label.
      const tooLong = deploymentNameProblem(name);
      if (tooLong || !isDnsLabel(name))
        t.problem = {
          reason: 'InvalidName',
          message: `${tooLong ?? `the WorkloadDeployment name ${name} is not a DNS label`}: shorten the workload or placement name`,
        };
      else if (refusal) t.problem = { reason: 'NamespaceRefused', message: refusal };
      else place(t, p, { cells: byName, namespace, locations, placed, now });
      out.push(t);
    }
  }
  return out;
}

/** What every target of a Workload is placed among. */
interface Ground {
  /** By name. */
  cells: readonly CellView[];
  namespace: string;
  locations: ReadonlySet<string>;
  placed: readonly Placed[];
  now: number;
}

/** Gives one target its cell (targets), or the problem that leaves it none, and when it fails over. */
function place(t: Target, p: Placement, { cells, namespace, locations, placed, now }: Ground): void {
  const { city, name } = t;
  const ofCity = cells.filter((c) => c.cities.includes(city));
  // A cell takes only the namespaces its Cell lists: none by default.
  const serving = ofCity.filter((c) => c.namespaces.includes(namespace));
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
  const unseen = serving.filter((c) => !c.listed && !(chosen?.listed && (failsOverAt(c) ?? Infinity) <= now));
  if (unseen.length && (!known || chosen !== known)) {
    const later = unseen.flatMap((c) => failsOverAt(c) ?? []).filter((at) => at > now);
    if (later.length) t.failoverAt = Math.min(t.failoverAt ?? Infinity, ...later);
    chosen = known;
  } else if (from) t.failedOverFrom = from;
  const problem = unplaced({ city, namespace, locations, sticky, chosen, ofCity, serving, unseen });
  if (problem) t.problem = problem;
  else if (chosen) t.cell = chosen.name;
}

/** Why a city has no cell, first reason first; undefined when `chosen` runs it. */
function unplaced(c: {
  city: string;
  namespace: string;
  locations: ReadonlySet<string>;
  sticky: Placed | undefined;
  chosen: CellView | undefined;
  ofCity: readonly CellView[];
  serving: readonly CellView[];
  unseen: readonly CellView[];
}): Problem | undefined {
  const { city, namespace, chosen, serving, unseen } = c;
  const probing = serving.filter((s) => s.probing && !s.unschedulable);
  if (!chosen && unseen.length)
    return {
      reason: unseen.some((s) => !s.reachable) ? 'CellUnreachable' : 'CellNotReady',
      message:
        `the WorkloadDeployments of ${unseen
          .map((s) =>
            s.reachable
              ? `cell ${s.name}`
              : `cell ${s.name} (unreachable since ${s.unreachableSince ?? 'unknown'})`,
          )
          .join(', ')} are not listed yet: ${city} may run there, ` +
        `so it is placed nowhere else until they are`,
    };
  if (!c.locations.has(city) && !c.sticky)
    return { reason: 'NoMatchingLocation', message: `no Location has city code ${city}` };
  if (!serving.length && c.ofCity.length)
    return {
      reason: 'NamespaceNotServed',
      message: `no cell of ${city} serves namespace ${namespace} (${c.ofCity.map((s) => s.name).join(', ')}): a Cell's spec.namespaces lists the namespaces it takes`,
    };
  // A cell not probed to an answer yet (a cell just joined, Berth just started) may be Ready in a
  // moment: a wait, not something the user must fix.
  if (!chosen && probing.length)
    return {
      reason: 'CellNotReady',
      message: `waiting for the first probe of ${probing.map((s) => `cell ${s.name}`).join(', ')}, which serves ${city}`,
    };
  if (!chosen)
    return {
      reason: 'NoMatchingLocation',
      message:
        `no Ready, schedulable cell serves ${city}` +
        (serving.length
          ? ` (${serving.map((s) => `${s.name}: ${s.unschedulable ? 'cordoned' : (s.notReady?.reason ?? 'Ready')}`).join(', ')})`
          : ''),
    };
  return undefined;
}

/** The one created last (by creationTimestamp; the first of equals). */
function newest(ds: readonly Placed[]): Placed | undefined {
  let best: Placed | undefined;
  for (const d of ds)
    if (!best || (d.object.metadata.creationTimestamp ?? '') > (best.object.metadata.creationTimestamp ?? ''))
      best = d;
  return best;
}
