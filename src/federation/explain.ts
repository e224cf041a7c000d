// `berth explain workload`: where each placement × city of a Workload runs and what it waits for,
// read from the management plane as it is: the status the federation controller wrote, and the
// Cells and Locations it decides from. Writes nothing and reaches into no cell: each city names its
// cell and the WorkloadDeployment to explain there.
import type { KubeClient } from '../runtime/client/client.ts';
import { findCondition } from '../runtime/api/conditions.ts';
import type { KubeObject } from '../runtime/api/meta.ts';
import { selectorText } from '../policy/match/selector.ts';
import { type CellObject, type LocationObject } from '../cells/types.ts';
import { Cell, Location } from '../cells/crd.ts';
import { conditionLine, since } from '../policy/explain.ts';
import { deploymentName, type LabelledLocation, placementCities } from './decide/placement.ts';
import { FEDERATION_FINALIZER, type CityStatus, type WorkloadObject } from './types.ts';

export async function explainWorkload(client: KubeClient, object: KubeObject): Promise<string[]> {
  const [cells, locations] = await Promise.all([
    client.list<CellObject>(Cell.ref).then((l) => l.items),
    client.list<LocationObject>(Location.ref).then((l) => l.items),
  ]);
  return workloadLines(object as WorkloadObject, cells, locations, new Date());
}

/** What the cell serving a city says of itself, when it is not Reachable and Ready: every trouble, not the first. */
function cellTrouble(c: CellObject, now: Date): string | undefined {
  const name = c.metadata.name;
  const troubles = c.spec.unschedulable ? [`cell ${name} is cordoned (spec.unschedulable)`] : [];
  for (const type of ['Reachable', 'Ready']) {
    const k = findCondition(c.status?.conditions, type);
    if (!k) {
      troubles.push(`cell ${name} has not been probed yet (is the cells controller running?)`);
      break;
    }
    if (k.status !== 'True')
      troubles.push(
        `cell ${name}: ${type} ${k.status} (${k.reason}) ${since(k.lastTransitionTime, now)}${k.message ? `: ${k.message}` : ''}`,
      );
  }
  return troubles.length ? troubles.join('; ') : undefined;
}

const counted = (s: { readyReplicas?: number; desiredReplicas?: number; updatedReplicas?: number }) =>
  `${s.readyReplicas ?? 0} of ${s.desiredReplicas ?? 0} Ready, ${s.updatedReplicas ?? 0} up to date`;

/** The lines about one Workload: its conditions, its rollout, and each placement × city. */
export function workloadLines(
  w: WorkloadObject,
  cells: readonly CellObject[],
  locations: readonly LocationObject[],
  now: Date,
): string[] {
  const ns = w.metadata.namespace!;
  const status = w.status;
  const out: string[] = [];
  if (status?.observedGeneration !== w.metadata.generation)
    out.push(
      `  not seen yet: generation ${w.metadata.generation ?? '?'}, the status is of ${status?.observedGeneration ?? 'none'} (Berth's federation controller is not running here, or catching up)`,
    );
  if (w.metadata.deletionTimestamp)
    out.push(
      `  being deleted ${since(w.metadata.deletionTimestamp, now)}: ${
        w.metadata.finalizers?.includes(FEDERATION_FINALIZER)
          ? `its WorkloadDeployments go from every cell first (finalizer ${FEDERATION_FINALIZER})`
          : 'nothing of Berth holds it'
      }`,
    );
  for (const type of ['Available', 'Progressing', 'Released']) {
    const c = findCondition(status?.conditions, type);
    if (c) out.push(conditionLine(c, now));
  }
  out.push(`  in total: ${counted(status ?? {})}`);

  const rollout = w.spec.rollout;
  if (rollout?.type === 'Progressive') {
    const r = status?.rollout;
    out.push(
      `  rollout: Progressive, ${rollout.maxConcurrency} cell(s) at a time, each Available ${rollout.minSuccessTime} s before the next${rollout.progressDeadline !== undefined ? `, ${rollout.progressDeadline} s each at most` : ''}, ${rollout.maxFailures} failure(s) tolerated${r ? `: ${r.updatedCells ?? 0} of ${r.totalCells ?? 0} cells on template ${r.templateHash}` : ''}`,
    );
    for (const c of r?.cells ?? [])
      out.push(`    ${c.name}: ${c.state} ${since(c.since, now)}${c.message ? `: ${c.message}` : ''}`);
    if (r?.soakingUntil) out.push(`    soaking until ${r.soakingUntil}`);
  }

  const labelled: LabelledLocation[] = locations.map((l) => ({
    city: l.spec.cityCode,
    labels: l.metadata.labels ?? {},
  }));
  const located = new Set(locations.map((l) => l.spec.cityCode));
  for (const p of w.spec.placements) {
    const ps = status?.placements?.find((s) => s.name === p.name);
    const by = [
      ...(p.cityCodes ? [`cities ${p.cityCodes.join(', ')}`] : []),
      ...(p.locationSelector ? [`Locations ${selectorText(p.locationSelector)}`] : []),
    ].join(' and ');
    const cities = placementCities(p, labelled);
    out.push(
      `  placement ${p.name} (${by}): ${p.scaleSettings.minReplicas} instance(s) in each of ${cities.length ? cities.join(', ') : 'no city'}${ps ? `; ${counted(ps)}` : ''}${ps?.reason ? `; ${ps.reason}: ${ps.message ?? ''}` : ''}`,
    );
    const recorded = new Map((ps?.cities ?? []).map((c) => [c.city, c]));
    // The cities it names now, then those the status still has (a city removed, draining).
    for (const city of [...new Set([...cities, ...recorded.keys()])])
      out.push(
        ...cityLines(ns, w.metadata.name!, p.name, city, recorded.get(city), cities, cells, located, now),
      );
  }
  return out;
}

function cityLines(
  ns: string,
  workload: string,
  placement: string,
  city: string,
  s: CityStatus | undefined,
  named: readonly string[],
  cells: readonly CellObject[],
  located: ReadonlySet<string>,
  now: Date,
): string[] {
  const serving = cells.filter((c) => c.spec.locations.includes(city));
  const out: string[] = [];
  const gone = named.includes(city) ? '' : ' (no longer placed here: drained once the placement serves)';
  if (!s) {
    out.push(`    ${city}${gone}: not in the status yet`);
  } else {
    out.push(
      `    ${city}${gone}: ${s.cell ? `cell ${s.cell}, ` : ''}${counted(s)}${s.reason ? `; ${s.reason}: ${s.message ?? ''}` : ''}`,
    );
  }
  const cell = s?.cell ? cells.find((c) => c.metadata.name === s.cell) : undefined;
  if (s?.cell && !cell) out.push(`      its Cell ${s.cell} is gone`);
  const trouble = cell && cellTrouble(cell, now);
  if (trouble) out.push(`      ${trouble}`);
  if (!s?.cell) {
    // The status says it once it is written.
    if (!s && !located.has(city)) out.push(`      no Location has city code ${city}`);
    out.push(
      serving.length
        ? `      cells serving ${city}: ${serving.map((c) => `${c.metadata.name} (${c.spec.namespaces.includes(ns) ? (cellTrouble(c, now) ?? 'Reachable and Ready') : `namespace ${ns} is not in its spec.namespaces`})`).join('; ')}`
        : `      no Cell serves ${city}: berth cells join NAME --kubeconfig FILE --location ${city}`,
    );
  } else if (s.reason === 'NameTaken') {
    // The WorkloadDeployment of that name in the cell is another's: explaining it explains nothing of this one.
    out.push(
      `      nothing of this Workload to explain in cell ${s.cell}: the WorkloadDeployment ${deploymentName(workload, placement, city)} there is another's`,
    );
  } else {
    const secret = cell?.spec.kubeconfigSecretRef;
    out.push(
      `      in the cell: berth explain wd ${ns}/${deploymentName(workload, placement, city)} --kubeconfig FILE${secret ? ` (FILE: key ${secret.key} of Secret ${secret.namespace}/${secret.name})` : ''}`,
    );
  }
  return out;
}
