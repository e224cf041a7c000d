// What the page shows of cells: the map of cells by city, each cell with what its probe found and
// the shares of the Workloads placed in it (PageView.cellShares, from federation's view).
import type { PageHooks, PageKind } from '../capability.ts';
import { conditionOf, readyOf, type WithStatus } from '../policy/view.ts';
import type { KubeObject } from '../runtime/api/meta.ts';
import type { CellRow, CellWorkload, CityRow } from '../ui/types.ts';
import { Cell, Location } from './crd.ts';

interface CellLike extends WithStatus {
  spec?: { locations?: string[]; unschedulable?: boolean };
  status?: WithStatus['status'] & { serverVersion?: string; lastContactTime?: string };
}

interface LocationLike extends KubeObject {
  spec?: { cityCode?: string; topology?: { region?: string; zone?: string }; class?: string };
}

function cellRow(obj: KubeObject, workloads: CellWorkload[] = []): CellRow {
  const o = obj as CellLike;
  return {
    name: o.metadata?.name ?? '',
    reachable: conditionOf(o, 'Reachable')?.status ?? 'Unknown',
    ...readyOf(o),
    cordoned: o.spec?.unschedulable === true,
    serverVersion: o.status?.serverVersion ?? '',
    lastContactTime: o.status?.lastContactTime ?? '',
    workloads,
  };
}

/**
 * The map of cells by city: every city a Cell or a Location names, sorted by code, with its
 * Locations and the cells serving it, each with the Workloads it runs for that city (`shares`, by
 * cell); cells that name no city last, under ''.
 */
export function cityRows(
  cells: KubeObject[],
  locations: KubeObject[],
  shares: Map<string, CellWorkload[]> = new Map(),
): CityRow[] {
  const cities = new Map<string, CityRow>();
  const city = (code: string) => {
    let c = cities.get(code);
    if (!c) cities.set(code, (c = { city: code, locations: [], cells: [] }));
    return c;
  };
  for (const l of locations as LocationLike[]) {
    const code = l.spec?.cityCode;
    if (!code) continue;
    const where = [l.spec?.topology?.region, l.spec?.topology?.zone, l.spec?.class]
      .filter(Boolean)
      .join(', ');
    city(code).locations.push({ name: l.metadata?.name ?? '', where });
  }
  for (const c of cells as CellLike[]) {
    const codes = c.spec?.locations?.length ? c.spec.locations : [''];
    const mine = shares.get(c.metadata?.name ?? '') ?? [];
    for (const code of codes)
      city(code).cells.push(cellRow(c, code ? mine.filter((w) => w.city === code) : mine));
  }
  const byName = <T extends { name: string }>(a: T, b: T) => (a.name < b.name ? -1 : 1);
  for (const c of cities.values()) {
    c.locations.sort(byName);
    c.cells.sort(byName);
  }
  return [...cities.values()].sort((a, b) =>
    a.city === b.city ? 0 : a.city === '' ? 1 : b.city === '' ? -1 : a.city < b.city ? -1 : 1,
  );
}

/** Cells and Locations change the map, and the policies list: not nodes or pods. */
const mapKind: PageKind = { sections: ['workloads', 'policies'] };

export const cellsPage: PageHooks = {
  kinds: { [Cell.kind]: mapKind, [Location.kind]: mapKind },
  view(ctx) {
    const cells = ctx.informer(Cell);
    const locations = ctx.informer(Location);
    return { cities: (shares) => cityRows(cells.list(), locations.list(), shares) };
  },
};
