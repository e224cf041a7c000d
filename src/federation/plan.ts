// `berth plan` of Workloads, Cells and Locations on a management plane: where each placement × city
// would run (targets, as the federation controller decides), and in each cell the instances its
// WorkloadDeployment would create, delete or roll (the deployment controller's plan, stepped until
// it stops), granted or left waiting by the Quota of their namespace (decideGrants, as the quota
// controller here decides across cells). No cell is contacted: what runs in a cell is read from the
// mirrors of its Instances here and from each Workload's status (the cell of each city); each
// running federation controller is taken to have listed every cell. A new instance granted is
// taken to become Ready: whether a cell's nodes run it is the cell's to say.
import { findCondition } from '../runtime/api/conditions.ts';
import type { KubeObject, ResourceRef } from '../runtime/api/meta.ts';
import { type CellObject, type LocationObject } from '../cells/types.ts';
import { Cell, Location } from '../cells/crd.ts';
import { ofKind, emptyPart, replaced, type Named, type PlanContext, type PlanPart } from '../policy/plan.ts';
import type { QuotaObject } from '../workloads/decide/quota.ts';
import { templateHash } from '../workloads/decide/revisions.ts';
import { type InstanceObject, type InstanceTypeObject } from '../workloads/decide/instances.ts';
import {
  counted,
  instanceEffects,
  sizesAfter,
  stepDeployments,
  stepped,
  type Said,
  type Stepped,
} from '../workloads/plan.ts';
import type { InstanceTypeSize } from '../workloads/resources.ts';
import { DEPLOYMENT_LABEL, MIRROR_CELL_LABEL, MIRROR_LABEL, SOURCE_ANNOTATION } from '../workloads/types.ts';
import { Instance, InstanceType, Quota } from '../workloads/crd.ts';
import {
  cellView,
  deploymentName,
  targets,
  type DeploymentObject,
  type Placed,
  type Target,
} from './decide/placement.ts';
import { CITY_LABEL, WORKLOAD_NAME_LABEL, WORKLOAD_NAMESPACE_LABEL, type WorkloadObject } from './types.ts';
import { Workload } from './crd.ts';

/** What federation decides from: the management plane's Workloads, Cells and Locations. */
export interface Ground {
  workloads: WorkloadObject[];
  cells: CellObject[];
  locations: LocationObject[];
}

export interface Facts {
  before: Ground;
  after: Ground;
  /** The mirrors of the cells' Instances here. */
  mirrors: InstanceObject[];
  /** The Quotas here, when this plane grants across cells (its `quota` capability); else each cell grants. */
  quotas?: QuotaObject[];
  instanceType: (name: string) => InstanceTypeSize | undefined;
  now: number;
}

/** A Workload's WorkloadDeployment in one cell, as it is and as it would be, stepped to its end. */
interface Copy extends Stepped {
  workload: string;
  cell: string;
  city: string;
  /** Replicas and template now (undefined: no copy yet); after the change, Stepped's (0: drained). */
  was?: { replicas: number; hash: string };
}

const keyOf = (w: { metadata: { namespace?: string; name?: string } }) =>
  `${w.metadata.namespace}/${w.metadata.name}`;

/** Where `w` runs in `g`: targets, its status saying which cell holds each city now. */
function targetsIn(w: WorkloadObject | undefined, g: Ground, now: number): Target[] {
  if (!w || w.metadata.deletionTimestamp) return [];
  const placed: Placed[] = (w.status?.placements ?? []).flatMap((p) =>
    (p.cities ?? []).flatMap((c) =>
      c.cell
        ? [
            {
              cell: c.cell,
              object: {
                metadata: {
                  name: deploymentName(w.metadata.name!, p.name, c.city),
                  labels: { [CITY_LABEL]: c.city },
                },
              } as unknown as DeploymentObject,
            },
          ]
        : [],
    ),
  );
  return targets(
    w,
    new Set(g.locations.map((l) => l.spec.cityCode)),
    g.cells.map((c) => cellView(c, true)),
    placed,
    g.locations.map((l) => ({ city: l.spec.cityCode, labels: l.metadata.labels ?? {} })),
    now,
  );
}

/** The mirrors of a workload's instances, by `cell/deployment`. */
function mirrorsOf(key: string, mirrors: readonly InstanceObject[]): Map<string, InstanceObject[]> {
  const out = new Map<string, InstanceObject[]>();
  for (const m of mirrors) {
    const l = m.metadata.labels ?? {};
    if (`${l[WORKLOAD_NAMESPACE_LABEL]}/${l[WORKLOAD_NAME_LABEL]}` !== key) continue;
    const at = `${l[MIRROR_CELL_LABEL]}/${l[DEPLOYMENT_LABEL]}`;
    out.set(at, [...(out.get(at) ?? []), m]);
  }
  return out;
}

/**
 * A workload's copies: those it has (its status and mirrors) and those `after` places, in cells that
 * stay; the targets placed nowhere go to `unplaced`, with the workload's key.
 */
function copiesOf(key: string, f: Facts, unplaced: [string, Target][]): Copy[] {
  const [namespace, workload] = key.split('/') as [string, string];
  const before = f.before.workloads.find((w) => keyOf(w) === key);
  const after = f.after.workloads.find((w) => keyOf(w) === key);
  const staying = new Set(f.after.cells.map((c) => c.metadata.name));
  const mirrored = mirrorsOf(key, f.mirrors);
  const copies = new Map<string, Copy>();
  const copy = (cell: string, city: string, name: string): Copy => {
    const at = `${cell}/${name}`;
    let c = copies.get(at);
    if (!c) {
      const instances = (mirrored.get(at) ?? []).map((m) => ({
        ...m,
        metadata: { ...m.metadata, name: sourceName(m), uid: counted(m, f.instanceType).candidate.uid },
      }));
      c = { ...stepped(namespace, name, cell, instances), workload, cell, city };
      copies.set(at, c);
    }
    return c;
  };
  const beforeHash = before ? templateHash(before.spec.template) : '';
  for (const t of targetsIn(before, f.before, f.now))
    if (t.cell) copy(t.cell, t.city, t.name).was = { replicas: t.replicas, hash: beforeHash };
  for (const [at] of mirrored) {
    const [cell, name] = at.split('/') as [string, string];
    const city = mirrored.get(at)![0]!.metadata.labels?.[CITY_LABEL] ?? '';
    const c = copy(cell, city, name);
    c.was ??= { replicas: c.states.length, hash: c.states[0]?.hash ?? '' };
  }
  const hash = after ? templateHash(after.spec.template) : '';
  for (const t of targetsIn(after, f.after, f.now)) {
    if (!t.cell) {
      unplaced.push([key, t]);
      continue;
    }
    const c = copy(t.cell, t.city, t.name);
    c.replicas = t.replicas;
    c.hash = hash;
    c.template = after!.spec.template;
  }
  // A cell no longer here is no longer reached: what runs there is left as it is.
  return [...copies.values()].filter((c) => staying.has(c.cell));
}

const sourceName = (m: InstanceObject) => m.metadata.annotations?.[SOURCE_ANNOTATION] ?? m.metadata.name!;

/**
 * The effects of a change on the Workloads `keys` (NAMESPACE/NAME), credited to `by`: their
 * WorkloadDeployments and instances per cell and city, the quota each new instance is granted or
 * waits for, and the warnings of a change that removes every instance or leaves instances waiting.
 */
export function planFederation(f: Facts, keys: readonly string[], by: string): PlanPart {
  const part = emptyPart();
  const unplaced: [string, Target][] = [];
  const copies = keys.flatMap((k) => copiesOf(k, f, unplaced));
  for (const [k, t] of unplaced) {
    const line = `Workload ${k} placement ${t.placement} city ${t.city}: ${t.problem?.reason}: ${t.problem?.message}`;
    if (t.problem?.reason === 'CellNotReady' || t.problem?.reason === 'CellUnreachable')
      part.unknown.push(line);
    else part.warnings.push(`would run nowhere: ${line}`);
  }
  for (const k of keys) {
    const w = f.after.workloads.find((x) => keyOf(x) === k);
    const rolled = copies.some(
      (c) => `${c.namespace}/${c.workload}` === k && c.was && c.replicas && c.was.hash !== c.hash,
    );
    if (w?.spec.rollout?.type === 'Progressive' && rolled)
      part.unknown.push(
        `Workload ${k} rolls out Progressive: its cells take turns, each once the ones before are Available (what the cells report); the plan gives where it ends`,
      );
    for (const t of targetsIn(w, f.after, f.now))
      if (t.failoverAt !== undefined)
        part.unknown.push(
          `Workload ${k} ${t.placement}/${t.city}: its cell does not answer; it fails over at ${new Date(t.failoverAt).toISOString()} unless the cell answers first`,
        );
  }
  const verdicts = stepDeployments(copies, { ...f, counted: f.mirrors }, part);
  for (const c of copies) effectsOf(c, verdicts, by, part);
  for (const k of keys) {
    const of = copies.filter((c) => `${c.namespace}/${c.workload}` === k);
    const had = of.reduce((n, c) => n + c.start.size, 0);
    if (had && of.every((c) => c.states.length === 0))
      part.warnings.push(
        `Workload ${k} would lose every instance (${had}, in cell(s) ${[...new Set(of.map((c) => c.cell))].join(', ')})`,
      );
  }
  const stale = f.mirrors.filter((m) => findCondition(m.status?.conditions, 'Mirrored')?.status === 'False');
  for (const cell of new Set(stale.map((m) => m.metadata.labels?.[MIRROR_CELL_LABEL])))
    if (copies.some((c) => c.cell === cell))
      part.unknown.push(
        `cell ${cell} does not answer: its instances are planned from their last mirrored state`,
      );
  return part;
}

/** A copy's effects: its WorkloadDeployment, then each instance made, rolled or deleted. */
function effectsOf(c: Copy, said: Said, by: string, part: PlanPart): void {
  const where = `in cell ${c.cell} (city ${c.city})`;
  const wd = `${c.namespace}/${c.name}`;
  if (!c.was && c.replicas)
    part.effects.push({
      kind: 'WorkloadDeployment',
      name: wd,
      op: '+',
      what: `${where}: ${c.replicas} instance(s)`,
      by,
    });
  else if (c.was && !c.replicas && c.hash === '')
    part.effects.push({ kind: 'WorkloadDeployment', name: wd, op: '-', what: `deleted ${where}`, by });
  else if (c.was && (c.was.replicas !== c.replicas || c.was.hash !== c.hash))
    part.effects.push({
      kind: 'WorkloadDeployment',
      name: wd,
      op: '~',
      what: `${where}: ${[...(c.was.replicas !== c.replicas ? [`replicas ${c.was.replicas} -> ${c.replicas}`] : []), ...(c.was.hash !== c.hash ? [`template -> ${c.hash}`] : [])].join(', ')}`,
      by,
    });
  instanceEffects(c, said, { where, by, owner: `Workload ${c.namespace}/${c.workload}` }, part);
}

/**
 * The management plane as it is, and as the whole change would leave it (its Workloads, Cells,
 * Locations and Quotas, whatever kind is being planned: a Workload hangs on the Locations beside it).
 */
async function factsOf(ctx: PlanContext): Promise<Facts> {
  const list = <T extends KubeObject>(ref: ResourceRef, query?: Record<string, string>) =>
    ctx.client.list<T>(ref, query ? { query } : {}).then((l) => l.items);
  const grants = ((ctx.options['controllers'] as string[] | undefined) ?? []).includes('quota');
  const [workloads, cells, locations, mirrors, quotas, types] = await Promise.all([
    list<WorkloadObject>(Workload.ref),
    list<CellObject>(Cell.ref),
    list<LocationObject>(Location.ref),
    list<InstanceObject>(Instance.ref, { labelSelector: `${MIRROR_LABEL}=true` }),
    grants ? list<QuotaObject>(Quota.ref) : Promise.resolve(undefined),
    list<InstanceTypeObject>(InstanceType.ref),
  ]);
  const now = Date.now();
  const swap = <T extends Named>(current: T[], changed: T[]) => replaced(current, changed, ctx.deleting, now);
  const sizes = sizesAfter(ctx, types);
  return {
    before: { workloads, cells, locations },
    after: {
      workloads: swap(workloads, parsed(ctx.all, Workload)),
      cells: swap(cells, parsed(ctx.all, Cell)),
      locations: swap(locations, parsed(ctx.all, Location)),
    },
    mirrors,
    ...(quotas
      ? {
          quotas: swap(
            quotas as (QuotaObject & Named)[],
            ofKind(ctx.all, 'Quota', true) as (QuotaObject & Named)[],
          ),
        }
      : {}),
    instanceType: (n) => sizes.get(n),
    now,
  };
}

/** The objects of a kind in the change as federation reads them; those it refuses, as errors in `part`. */
function parsed<T>(
  objects: KubeObject[],
  kind: {
    kind: string;
    ref: ResourceRef;
    parse(o: unknown): { success: true; data: T } | { success: false; error: string };
  },
  part?: PlanPart,
): T[] {
  return ofKind(objects, kind.kind, kind.ref.namespaced).flatMap((o) => {
    const r = kind.parse(o);
    if (r.success) return [r.data];
    part?.errors.push(r.error);
    return [];
  });
}

export async function planWorkloads(ctx: PlanContext): Promise<PlanPart> {
  const head = emptyPart();
  const ws = parsed(ctx.objects, Workload, head);
  const f = await factsOf(ctx);
  return merge(head, ...ws.map((w) => planFederation(f, [keyOf(w)], `Workload ${keyOf(w)}`)));
}

/** The Workloads a Cell or Location change moves, but those of the change itself (planned as Workloads). */
function movedBesides(ctx: PlanContext, f: Facts): string[] {
  const own = new Set(
    ofKind(ctx.all, 'Workload', true).map((o) => `${o.metadata?.namespace}/${o.metadata?.name}`),
  );
  return moved(f).filter((k) => !own.has(k));
}

export async function planCells(ctx: PlanContext): Promise<PlanPart> {
  const head = emptyPart();
  const cs = parsed(ctx.objects, Cell, head);
  const f = await factsOf(ctx);
  for (const c of cs) {
    const was = f.before.cells.find((x) => x.metadata.name === c.metadata.name);
    const running = f.mirrors.filter((m) => m.metadata.labels?.[MIRROR_CELL_LABEL] === c.metadata.name);
    if (ctx.deleting && was && running.length)
      head.warnings.push(
        `Cell ${c.metadata.name} would be removed with ${running.length} running instance(s): Berth no longer reaches it, so its WorkloadDeployments and instances are left running there, unmanaged, and their mirrors here are deleted`,
      );
    if (ctx.deleting)
      for (const m of running)
        head.effects.push({
          kind: 'Instance',
          name: keyOf(m),
          op: '-',
          what: `mirror of ${sourceName(m)} in cell ${c.metadata.name}`,
          by: `Cell ${c.metadata.name}`,
        });
  }
  // The Locations beside them move the same Workloads: credited to both, planned once, here.
  const by = [
    ...cs.map((c) => `Cell ${c.metadata.name}`),
    ...parsed(ctx.all, Location).map((l) => `Location ${l.metadata.name}`),
  ];
  return merge(head, planFederation(f, movedBesides(ctx, f), by.join(', ')));
}

export async function planLocations(ctx: PlanContext): Promise<PlanPart> {
  const head = emptyPart();
  const ls = parsed(ctx.objects, Location, head);
  // Cells in the same change plan what both move (planCells).
  if (ctx.all.some((o) => o.kind === 'Cell')) return head;
  const f = await factsOf(ctx);
  return merge(
    head,
    planFederation(f, movedBesides(ctx, f), ls.map((l) => `Location ${l.metadata.name}`).join(', ')),
  );
}

/** The Workloads whose placement × cities would move to other cells (or none), or change in number. */
function moved(f: Facts): string[] {
  const where = (w: WorkloadObject, g: Ground) =>
    targetsIn(w, g, f.now)
      .map((t) => `${t.name}@${t.cell ?? t.problem?.reason}`)
      .sort()
      .join(' ');
  return f.before.workloads.filter((w) => where(w, f.before) !== where(w, f.after)).map(keyOf);
}

function merge(...parts: PlanPart[]): PlanPart {
  const out = emptyPart();
  for (const p of parts) {
    out.effects.push(...p.effects);
    out.warnings.push(...p.warnings);
    out.unknown.push(...new Set(p.unknown.filter((u) => !out.unknown.includes(u))));
    out.errors.push(...p.errors);
  }
  return out;
}
