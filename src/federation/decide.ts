// The pure decisions of federation: where each placement × city of a Workload runs (one cell,
// sticky), what its WorkloadDeployment there says, and the Workload's status rolled up from the
// cells' WorkloadDeployments. The controller (controller.ts) reads the caches and writes.
import { findCondition, type Condition } from '../runtime/api/conditions.ts';
import type { CustomObject } from '../runtime/api/crd.ts';
import { apiVersionOf, isDnsLabel, type KubeObject } from '../runtime/api/meta.ts';
import type { CellObject } from '../cells/types.ts';
import {
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
  type CityStatus,
  type PlacementStatus,
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
  /** Its WorkloadDeployments are in the cache (the cell is engaged and its informer has listed). */
  listed: boolean;
}

/** A Cell as federation sees it. */
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
    listed,
  };
}

/** A WorkloadDeployment of the federation's in a cell. */
export interface Placed {
  cell: string;
  object: DeploymentObject;
}

/** Why a placement × city has no cell (or cannot have a WorkloadDeployment). */
export interface Problem {
  reason: 'InvalidName' | 'NoMatchingLocation' | 'CellNotReady';
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
  /** A cell was chosen but its WorkloadDeployments are not listed yet: nothing is written until they are. */
  waiting?: string;
}

/** The name of a placement × city's WorkloadDeployment. */
export const deploymentName = (workload: string, placement: string, city: string): string =>
  `${workload}-${placement}-${city.toLowerCase()}`;

/** The key of a Workload that a federation WorkloadDeployment names in its labels. */
export function workloadKeyOf(d: KubeObject): string | undefined {
  const l = d.metadata?.labels;
  const ns = l?.[WORKLOAD_NAMESPACE_LABEL];
  const name = l?.[WORKLOAD_NAME_LABEL];
  return ns && name ? `${ns}/${name}` : undefined;
}

/**
 * Where each placement × city runs: in the cell its WorkloadDeployment is in while that cell exists
 * and serves the city (an unreachable or cordoned cell keeps it: failover is opt-in), else in the
 * first Ready, schedulable cell of the city by name; none, or no Location of the city: NoMatchingLocation
 * (CellNotReady while a cell of the city has not answered its first probe).
 */
export function targets(
  w: WorkloadObject,
  locations: ReadonlySet<string>,
  cells: readonly CellView[],
  placed: readonly Placed[],
): Target[] {
  const byName = [...cells].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const out: Target[] = [];
  for (const p of w.spec.placements) {
    for (const city of p.cityCodes) {
      const name = deploymentName(w.metadata.name!, p.name, city);
      const t: Target = { placement: p.name, city, name, replicas: p.scaleSettings.minReplicas };
      const serving = byName.filter((c) => c.cities.includes(city));
      // A label value and the instances' label: the name must be a DNS label.
      if (!isDnsLabel(name)) {
        t.problem = {
          reason: 'InvalidName',
          message: `the WorkloadDeployment name ${name} is longer than 63 characters: shorten the workload or placement name`,
        };
        out.push(t);
        continue;
      }
      const sticky = placed.find(
        (d) =>
          d.object.metadata.name === name &&
          d.object.metadata.labels?.[CITY_LABEL] === city &&
          serving.some((c) => c.name === d.cell),
      );
      const chosen = sticky
        ? serving.find((c) => c.name === sticky.cell)
        : serving.find((c) => c.ready && !c.unschedulable);
      const probing = serving.filter((c) => c.probing && !c.unschedulable);
      if (!locations.has(city) && !sticky)
        t.problem = { reason: 'NoMatchingLocation', message: `no Location has city code ${city}` };
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
      else {
        t.cell = chosen.name;
        if (!chosen.listed) t.waiting = `the WorkloadDeployments of cell ${chosen.name} are not listed yet`;
      }
      out.push(t);
    }
  }
  return out;
}

/** The WorkloadDeployment a target has in its cell, as server-side applied (spec from the Workload's template). */
export function deploymentManifest(w: WorkloadObject, t: Target, templateHash: string): DeploymentObject {
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
      },
    },
    spec: {
      workloadRef: { name: w.metadata.name!, uid: w.metadata.uid!, templateHash },
      placement: t.placement,
      template: w.spec.template,
      replicas: t.replicas,
      instanceManagementPolicy: 'OrderedReady',
      progressDeadlineSeconds: 600,
    },
  };
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

// ---------------------------------------------------------------------------------------------
// Status rollup

/** Reasons of federation itself, worst first; the cells' own reasons rank after them. */
export const FEDERATION_REASONS = ['InvalidName', 'NoMatchingLocation', 'CellUnreachable', 'CellNotReady'];

/** Reasons a user can fix upstream: a Warning event on the Workload. */
export const WORKLOAD_FIXABLE: ReadonlySet<string> = new Set(['InvalidName', 'NoMatchingLocation']);

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
  cells: ReadonlyMap<string, CellView>,
  deployment: (cell: string, name: string) => DeploymentObject | undefined,
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
  const fresh = d !== undefined && observed(d, t, hash);
  // A cell's counts count when it has observed what was applied; an unreachable cell's last known
  // counts are kept, marked with since when it is unreachable.
  const counted: CityStatus =
    d && (fresh || !cell.reachable)
      ? {
          ...base,
          replicas: d.status?.replicas ?? 0,
          readyReplicas: d.status?.readyReplicas ?? 0,
          updatedReplicas: fresh ? (d.status?.updatedReplicas ?? 0) : 0,
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
  if (t.waiting) return why('Provisioning', t.waiting);
  if (!d) return why('Provisioning', `not in cell ${cell.name} yet`);
  if (!fresh) return why('Provisioning', `cell ${cell.name} has not observed the applied spec yet`);
  const progressing = findCondition(d.status?.conditions, 'Progressing');
  const stuck =
    progressing?.status === 'False'
      ? { reason: progressing.reason, message: progressing.message }
      : undefined;
  const settled =
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
  if (!cell.ready)
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
): Rollup {
  const cities = targetsNow.map((t) => ({ t, r: cityRollup(t, hash, cells, deployment) }));
  const placements: PlacementStatus[] = w.spec.placements.map((p) => {
    const own = cities.filter((c) => c.t.placement === p.name).map((c) => c.r.status);
    return { name: p.name, cities: own, ...sum(own) };
  });
  const total = sum(placements);
  let worst: CityStatus | undefined;
  for (const { r } of cities)
    if (r.status.reason && (!worst || rank(r.status.reason, cellReasons) < rank(worst.reason!, cellReasons)))
      worst = r.status;
  const available: Verdict = worst
    ? {
        status: worst.reason === 'CellUnreachable' ? 'Unknown' : 'False',
        reason: worst.reason!,
        message: `${worst.city}: ${worst.message ?? worst.reason}`,
      }
    : {
        status: 'True',
        reason: 'Available',
        message: `${total.readyReplicas} of ${total.desiredReplicas} instances ready in ${cities.length} cities`,
      };
  const stuck = cities.find((c) => c.r.stuck);
  const progressing: Verdict = stuck
    ? {
        status: 'False',
        reason: stuck.r.stuck!.reason,
        message: `${stuck.t.city}: ${stuck.r.stuck!.message}`,
      }
    : cities.every((c) => c.r.settled)
      ? { status: 'True', reason: 'RolledOut', message: `every city runs the current template` }
      : {
          status: 'True',
          reason: 'Progressing',
          message: `${total.updatedReplicas} of ${total.desiredReplicas} instances on the current template`,
        };
  return { status: { ...total, placements }, available, progressing };
}
