// `berth explain cell` and `berth explain location`: whether a cell answers (Reachable and Ready,
// since when, its last contact) and what it serves (cities, namespaces); which cells serve a city.
// Read from the management plane as it is; reaches into no cell.
import { findCondition } from '../runtime/api/conditions.ts';
import type { KubeClient } from '../runtime/client/client.ts';
import type { KubeObject } from '../runtime/api/meta.ts';
import { age, since, type Said, type Subject } from '../policy/explain.ts';
import { type CellObject, type LocationObject } from './types.ts';
import { Cell, Location } from './crd.ts';

/** How a cell answers, in one line: Reachable and Ready, and its last contact. */
function standing(c: CellObject, now: Date): string {
  const conditions = ['Reachable', 'Ready'].map((type) => {
    const k = findCondition(c.status?.conditions, type);
    return k
      ? `${type} ${k.status} (${k.reason}) ${since(k.lastTransitionTime, now)}`
      : `${type} not probed yet`;
  });
  const contact = c.status?.lastContactTime;
  return `${conditions.join(', ')}; last contact ${contact ? `${contact} (${age(contact, now)} ago)` : 'never'}${c.spec.unschedulable ? '; cordoned' : ''}`;
}

/** A Cell: its last contact and version, and each Location by whether it serves that city. */
export function explainCell(cell: CellObject, locations: LocationObject[], now: Date): Said {
  const serves = new Set(cell.spec.locations);
  const subjects: Subject[] = locations.map((l) => ({
    kind: 'Location',
    name: l.metadata.name ?? '',
    in: serves.has(l.spec.cityCode),
    why: [`city ${l.spec.cityCode}`],
  }));
  const named = new Set(locations.map((l) => l.spec.cityCode));
  const s = cell.status;
  return {
    subjects,
    lines: [
      `  ${standing(cell, now)}`,
      `  version ${s?.serverVersion ?? '(unknown)'}; Berth's kinds ${s?.crdsInstalled === undefined ? 'not checked yet' : s.crdsInstalled ? 'installed' : 'NOT installed'} in the cell`,
      `  kubeconfig from Secret ${cell.spec.kubeconfigSecretRef.namespace}/${cell.spec.kubeconfigSecretRef.name} (key ${cell.spec.kubeconfigSecretRef.key})`,
      `  serves cities ${cell.spec.locations.join(', ') || '(none)'}; namespaces ${cell.spec.namespaces.join(', ') || '(none: nothing is written into the cell)'}${cell.spec.createNamespaces ? ', created when missing' : ''}`,
      ...cell.spec.locations.filter((c) => !named.has(c)).map((c) => `  city ${c}: no Location names it`),
    ],
  };
}

/** A Location: the cells that serve its city, each with how it answers. */
export function explainLocation(location: LocationObject, cells: CellObject[], now: Date): Said {
  const city = location.spec.cityCode;
  const subjects: Subject[] = cells.map((c) => ({
    kind: 'Cell',
    name: c.metadata.name ?? '',
    in: c.spec.locations.includes(city),
    why: c.spec.locations.includes(city)
      ? [standing(c, now)]
      : [`serves ${c.spec.locations.join(', ') || 'no city'}`],
  }));
  const t = location.spec.topology;
  return {
    subjects,
    lines: [
      `  city ${city}${t?.region ? `, region ${t.region}` : ''}${t?.zone ? `, zone ${t.zone}` : ''}${location.spec.class ? `, class ${location.spec.class}` : ''}`,
      ...(subjects.some((s) => s.in) ? [] : ['  no Cell serves this city: a Workload placed here waits']),
    ],
  };
}

export async function explainCellObject(client: KubeClient, object: KubeObject): Promise<Said> {
  const locations = (await client.list<LocationObject>(Location.ref)).items;
  return explainCell(object as CellObject, locations, new Date());
}

export async function explainLocationObject(client: KubeClient, object: KubeObject): Promise<Said> {
  const cells = (await client.list<CellObject>(Cell.ref)).items;
  return explainLocation(object as LocationObject, cells, new Date());
}
