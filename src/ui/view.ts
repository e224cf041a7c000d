// What the page shows, as pure functions of cached objects: one row per node (what Berth derived
// and from which rule, the startup gates' state, architecture, pool), the policies with their counts
// and conditions, the pods Berth holds and why, the workloads and their instances. No I/O here: the
// state (state.ts) feeds these from the informer caches and the tests feed them objects.
import { type Gate } from '../gates/decide/parse.ts';
import { decideGates } from '../gates/decide/state.ts';
import { decide, type Output } from '../labels/decide/nodes.ts';
import { nodeView } from '../labels/match.ts';
import type { Rule } from '../labels/types.ts';
import { nodeState, taintId } from '../policy/nodes/plan.ts';
import { conditionTone } from '../policy/status.ts';
import { isBerthManager, type SlimNode, type SlimPod } from '../policy/slim.ts';
import type { KubeObject } from '../runtime/api/meta.ts';
import type {
  CellRow,
  CellWorkload,
  CityRow,
  ConditionView,
  Derived,
  EventRow,
  GateRow,
  HeldPod,
  InstanceRow,
  NodePage,
  NodeQuery,
  NodeRow,
  PolicyRow,
  WorkloadRow,
} from './types.ts';

export interface NodeInputs {
  gates: Gate[];
  /** The NodeLabelRules (rule files are not cached: their labels show without a rule name). */
  rules: Rule[];
  /** Labels that name a node's pool, first present wins. */
  poolLabels: string[];
  podsOn(node: string): SlimPod[];
  now: number;
}

/** The pool labels of the usual node provisioners. */
export const defaultPoolLabels = [
  'karpenter.sh/nodepool',
  'cloud.google.com/gke-nodepool',
  'eks.amazonaws.com/nodegroup',
  'kubernetes.azure.com/agentpool',
  'node.kubernetes.io/pool',
];

const ruleText = (r: Rule): string =>
  r.source.kind === 'File' ? `file ${r.source.path}` : `NodeLabelRule ${r.source.name}`;

/** Every key Berth's field managers own on the node, with its value and, for derived labels, its rule. */
export function derivedOf(node: SlimNode, rules: Rule[]): Derived[] {
  const managers = [
    ...new Set((node.metadata?.managedFields ?? []).map((e) => (e as { manager?: string }).manager ?? '')),
  ].filter(isBerthManager);
  const out: Derived[] = [];
  let outputs: Map<string, Output> | undefined;
  const ruleOf = (kind: Derived['kind'], key: string): string | undefined => {
    // Only a labels' key needs the rules evaluated, and only then are they.
    outputs ??= new Map(decide(nodeView(node), rules).outputs.map((o) => [`${o.kind} ${o.key}`, o]));
    const o = outputs.get(`${kind} ${key}`);
    const r = o && rules.find((x) => x.name === o.rule);
    return r ? ruleText(r) : undefined;
  };
  for (const by of managers.sort()) {
    const s = nodeState(node, by);
    const add = (kind: Derived['kind'], key: string, value: string) => {
      const rule = by === 'berth-labels' ? ruleOf(kind, key) : undefined;
      out.push({ kind, key, value, by, ...(rule ? { rule } : {}) });
    };
    for (const k of s.owned.labels) if (k in s.labels) add('label', k, s.labels[k]!);
    for (const k of s.owned.annotations) if (k in s.annotations) add('annotation', k, s.annotations[k]!);
    for (const id of s.owned.taints) {
      const t = s.taints.find((x) => taintId(x) === id);
      if (t) add('taint', id, t.value ?? '');
    }
  }
  return out;
}

export function nodeRow(node: SlimNode, inputs: NodeInputs): NodeRow {
  const name = node.metadata?.name ?? '';
  const labels = node.metadata?.labels ?? {};
  const ann = node.metadata?.annotations ?? {};
  const pool = inputs.poolLabels.map((k) => labels[k]).find((v) => v !== undefined) ?? '';
  const gates: GateRow[] = [];
  if (inputs.gates.length) {
    const decisions = decideGates(inputs.gates, node, inputs.podsOn(name), inputs.now);
    for (const [i, d] of decisions.entries()) {
      if (d.state === 'NotSelected') continue;
      const since = ann[inputs.gates[i]!.keys.gatedAt];
      gates.push({ gate: d.gate, state: d.state, waiting: d.unmet, why: d.why, ...(since ? { since } : {}) });
    }
  }
  return {
    name,
    pool,
    arch: node.status?.nodeInfo?.['architecture'] ?? labels['kubernetes.io/arch'] ?? '',
    ready: (node.status?.conditions ?? []).some((c) => c.type === 'Ready' && c.status === 'True'),
    unschedulable: node.spec?.unschedulable === true,
    labels,
    derived: derivedOf(node, inputs.rules),
    gates,
    held: gates.some((g) => g.state === 'Held' || g.state === 'HeldTimedOut'),
  };
}

/** What a text filter searches in a row, kept with the row (rows live until their node changes). */
const haystacks = new WeakMap<NodeRow, string>();
function haystack(r: NodeRow): string {
  let h = haystacks.get(r);
  if (h === undefined) {
    h = [r.name, r.pool, r.arch, ...Object.entries(r.labels).map(([k, v]) => `${k}=${v}`)]
      .join('\n')
      .toLowerCase();
    haystacks.set(r, h);
  }
  return h;
}

/** One page of the rows that match the query, sorted by name, with the pools and architectures to filter by. */
export function queryNodes(rows: NodeRow[], q: NodeQuery): NodePage {
  const words = (q.text ?? '').toLowerCase().split(/\s+/).filter(Boolean);
  const matched = rows.filter(
    (r) =>
      (!q.pool || r.pool === q.pool) &&
      (!q.arch || r.arch === q.arch) &&
      (!q.held || r.held) &&
      (words.length === 0 || words.every((w) => haystack(r).includes(w))),
  );
  const limit = Math.min(Math.max(q.limit ?? 100, 1), 500);
  const offset = Math.max(0, Math.min(q.offset ?? 0, Math.max(0, matched.length - 1)));
  const values = (f: (r: NodeRow) => string) => [...new Set(rows.map(f).filter(Boolean))].sort();
  return {
    total: rows.length,
    matched: matched.length,
    offset,
    rows: matched.slice(offset, offset + limit),
    pools: values((r) => r.pool),
    archs: values((r) => r.arch),
  };
}

interface WithStatus extends KubeObject {
  status?: Record<string, unknown> & { conditions?: ConditionView[] };
}

const conditionsOf = (o: WithStatus): ConditionView[] =>
  (o.status?.conditions ?? []).map((c) => ({
    type: c.type,
    status: c.status,
    reason: c.reason ?? '',
    message: c.message ?? '',
    tone: conditionTone(c.type, c.status),
  }));

/** A policy object as a row: its numbers from its status (counts) and its conditions. */
export function policyRow(kind: string, obj: KubeObject): PolicyRow {
  const o = obj as WithStatus;
  const counts: Record<string, number> = {};
  for (const [k, v] of Object.entries(o.status ?? {}))
    if (typeof v === 'number' && k !== 'observedGeneration') counts[k] = v;
  return {
    kind,
    ...(o.metadata?.namespace ? { namespace: o.metadata.namespace } : {}),
    name: o.metadata?.name ?? '',
    counts,
    conditions: conditionsOf(o),
  };
}

export interface EventLike extends KubeObject {
  eventTime?: string;
  deprecatedLastTimestamp?: string;
  series?: { count?: number; lastObservedTime?: string };
  reason?: string;
  note?: string;
  type?: string;
  reportingController?: string;
  regarding?: { kind?: string; namespace?: string; name?: string };
}

/** The event's last occurrence (a series' last observation, else its time). */
const eventTime = (e: EventLike): string =>
  e.series?.lastObservedTime ??
  e.eventTime ??
  e.deprecatedLastTimestamp ??
  e.metadata?.creationTimestamp ??
  '';

/** Warning events seen within `withinMs` of `now`, newest first, at most `max`. */
export function warningEvents(events: EventLike[], now: number, withinMs: number, max: number): EventRow[] {
  return events
    .filter((e) => e.type === 'Warning' && now - Date.parse(eventTime(e)) <= withinMs)
    .map((e) => ({
      time: eventTime(e),
      kind: e.regarding?.kind ?? '',
      regarding: [e.regarding?.kind, [e.regarding?.namespace, e.regarding?.name].filter(Boolean).join('/')]
        .filter(Boolean)
        .join(' '),
      reason: e.reason ?? '',
      note: e.note ?? '',
      reportingController: e.reportingController ?? '',
      count: e.series?.count ?? 1,
    }))
    .sort((a, b) => (a.time < b.time ? 1 : a.time > b.time ? -1 : 0))
    .slice(0, max);
}

/**
 * The pods a Berth scheduling gate holds, each with why: `reasons` maps a gate name to what it
 * says of a pod (the capabilities' gates; an unknown berth.dev gate is shown by name).
 */
export function heldPods(pods: SlimPod[], reasons: Record<string, (p: SlimPod) => string>): HeldPod[] {
  const out: HeldPod[] = [];
  for (const p of pods)
    for (const g of p.spec.schedulingGates ?? []) {
      if (!(g.name in reasons) && !g.name.includes('berth.dev/')) continue;
      out.push({
        namespace: p.metadata?.namespace ?? '',
        name: p.metadata?.name ?? '',
        gate: g.name,
        reason: reasons[g.name]?.(p) ?? 'held by a Berth scheduling gate',
      });
    }
  return out.sort((a, b) => `${a.namespace}/${a.name}`.localeCompare(`${b.namespace}/${b.name}`));
}

interface InstanceLike extends WithStatus {
  spec?: { ordinal?: number };
}

const conditionOf = (o: WithStatus, type: string) => conditionsOf(o).find((c) => c.type === type);

/** The Ready condition as a row shows it: its status, and the reason and message why. */
function readyOf(o: WithStatus): { ready: string; reason: string; message: string } {
  const r = conditionOf(o, 'Ready');
  return { ready: r?.status ?? 'Unknown', reason: r?.reason ?? '', message: r?.message ?? '' };
}

export function instanceRow(obj: KubeObject): InstanceRow {
  const o = obj as InstanceLike;
  return {
    namespace: o.metadata?.namespace ?? '',
    name: o.metadata?.name ?? '',
    ordinal: o.spec?.ordinal ?? 0,
    ...readyOf(o),
    tone: conditionOf(o, 'Ready')?.tone ?? 'unknown',
    quota: conditionOf(o, 'QuotaGranted')?.reason ?? '',
  };
}

/** A WorkloadDeployment with its instances (by ordinal) and rollout numbers. */
export function workloadRow(obj: KubeObject, instances: KubeObject[]): WorkloadRow {
  return {
    ...policyRow('WorkloadDeployment', obj),
    desired: Number((obj as { spec?: { replicas?: number } }).spec?.replicas ?? 0),
    instances: instances.map(instanceRow).sort((a, b) => a.ordinal - b.ordinal),
  };
}

interface CellLike extends WithStatus {
  spec?: { locations?: string[]; unschedulable?: boolean };
  status?: WithStatus['status'] & { serverVersion?: string; lastContactTime?: string };
}

interface LocationLike extends KubeObject {
  spec?: { cityCode?: string; topology?: { region?: string; zone?: string }; class?: string };
}

interface WorkloadLike extends KubeObject {
  status?: {
    placements?: {
      name: string;
      cities?: {
        city: string;
        cell?: string;
        readyReplicas?: number;
        desiredReplicas?: number;
        reason?: string;
      }[];
    }[];
  };
}

/** Each federated Workload's share per cell, from the Workloads' status: cell name → shares. */
export function workloadsByCell(workloads: KubeObject[]): Map<string, CellWorkload[]> {
  const out = new Map<string, CellWorkload[]>();
  for (const w of workloads as WorkloadLike[])
    for (const p of w.status?.placements ?? [])
      for (const c of p.cities ?? []) {
        if (!c.cell) continue;
        const shares = out.get(c.cell) ?? [];
        shares.push({
          namespace: w.metadata?.namespace ?? '',
          name: w.metadata?.name ?? '',
          placement: p.name,
          city: c.city,
          ready: c.readyReplicas ?? 0,
          desired: c.desiredReplicas ?? 0,
          reason: c.reason ?? '',
        });
        out.set(c.cell, shares);
      }
  return out;
}

export function cellRow(obj: KubeObject, workloads: CellWorkload[] = []): CellRow {
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
 * Locations and the cells serving it, each with the Workloads it runs for that city; cells that
 * name no city last, under ''.
 */
export function cityRows(
  cells: KubeObject[],
  locations: KubeObject[],
  workloads: KubeObject[] = [],
): CityRow[] {
  const shares = workloadsByCell(workloads);
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
    c.locations.sort((a, b) => (a.name < b.name ? -1 : 1));
    c.cells.sort(byName);
  }
  return [...cities.values()].sort((a, b) =>
    a.city === b.city ? 0 : a.city === '' ? 1 : b.city === '' ? -1 : a.city < b.city ? -1 : 1,
  );
}
