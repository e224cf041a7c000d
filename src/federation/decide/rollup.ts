// The Workload's status rolled up from the cells' WorkloadDeployments: counts, Available and
// Progressing.
import { isDeepStrictEqual } from 'node:util';
import { findCondition } from '../../runtime/api/conditions.ts';
import { CORDONED } from '../../cells/decide.ts';
import type { CityStatus, Placement, PlacementStatus, WorkloadObject, WorkloadStatus } from '../types.ts';
import type { DeploymentObject, CellView, Target } from './placement.ts';
import type { Drain } from './copies.ts';
import type { Applied } from './rollout.ts';

/**
 * A WorkloadDeployment not written: the cell refused it (CellRefused, with what it answered), or
 * its name there is another plane's or another Workload's copy (NameTaken, heldBy).
 */
export interface Refusal {
  reason: 'CellRefused' | 'NameTaken';
  message: string;
}

/** Reasons a user can fix upstream, worst first: a Warning event on the Workload. */
const FIXABLE_REASONS = [
  'InvalidName',
  'NamespaceRefused',
  'NoMatchingLocation',
  'NamespaceNotServed',
  'NameTaken',
  'CellRefused',
];
export const WORKLOAD_FIXABLE: ReadonlySet<string> = new Set(FIXABLE_REASONS);

/** Reasons of federation itself, worst first; the cells' own reasons rank after them. */
export const FEDERATION_REASONS = [...FIXABLE_REASONS, 'CellUnreachable', 'CellNotReady'];

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

/** A cell's counts of its WorkloadDeployment; its updated ones only when they are of the current template. */
const counts = (d: DeploymentObject, current: boolean) => ({
  replicas: d.status?.replicas ?? 0,
  readyReplicas: d.status?.readyReplicas ?? 0,
  updatedReplicas: current ? (d.status?.updatedReplicas ?? 0) : 0,
});

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
  // A cell's counts are what it reports, never less: right after a template change it has not
  // observed the new spec yet while its instances still serve (updated ones count only once it has);
  // an unreachable cell's last known counts are kept, marked with since when it is unreachable.
  const counted: CityStatus = d ? { ...base, ...counts(d, fresh && current) } : base;
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
  const available = findCondition(d.status?.conditions, 'Available');
  // Not observed yet, but Available as the cell last said: it serves, and only the rollout waits.
  if (!fresh && available?.status !== 'True')
    return why('Provisioning', `cell ${cell.name} has not observed the applied spec yet`);
  const progressing = fresh ? findCondition(d.status?.conditions, 'Progressing') : undefined;
  const stuck =
    progressing?.status === 'False'
      ? { reason: progressing.reason, message: progressing.message }
      : undefined;
  const settled =
    current &&
    d.status?.updatedReplicas === t.replicas &&
    d.status.replicas === t.replicas &&
    progressing?.status === 'True';
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
  const problems: Located[] = cities.flatMap(({ r }) =>
    r.status.reason
      ? [{ where: r.status.city, reason: r.status.reason, message: r.status.message ?? '' }]
      : [],
  );
  const placements = w.spec.placements.map((p) =>
    placementRollup(
      p,
      cities.filter((c) => c.t.placement === p.name).map((c) => c.r.status),
      o.draining ?? [],
      problems,
    ),
  );
  const total = sum(placements);
  let worst: Located | undefined;
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

/** A problem, named by where it is: a city, or a placement with none. */
interface Located {
  where: string;
  reason: string;
  message: string;
}

/** One placement's status: its cities (`own`) and those it still drains; adds its problems to `problems`. */
function placementRollup(
  p: Placement,
  own: CityStatus[],
  drains: readonly Drain[],
  problems: Located[],
): PlacementStatus {
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
  for (const d of drains)
    if (d.placement === p.name && !own.some((c) => c.city === d.city))
      byCity.set(d.city, [...(byCity.get(d.city) ?? []), d]);
  const draining = [...byCity].map(([city, ds]) => drainingCity(city, ds, problems));
  const all = [...own, ...draining];
  return { name: p.name, ...(none || {}), cities: all, ...sum(all) };
}

/** A city its placement no longer has, as the status lists it while its cells drain it. */
function drainingCity(city: string, ds: readonly Drain[], problems: Located[]): CityStatus {
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
