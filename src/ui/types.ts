// The shapes of what the page's server answers (view.ts computes them, page/app.ts shows them).
// No imports: the page's own build reads this file too.

/** A label, annotation or taint one of Berth's field managers owns on a node. */
export interface Derived {
  kind: 'label' | 'annotation' | 'taint';
  key: string;
  value: string;
  /** The field manager (berth-labels, berth-gates, berth-agents, berth-arch). */
  by: string;
  /** The rule behind a derived label: "NodeLabelRule gpu", "file accelerators/edgetpu". */
  rule?: string;
}

export interface GateRow {
  gate: string;
  /** Held, HeldTimedOut, Released or WouldGate (gates/decide/state.ts GateState). */
  state: string;
  /** Held: since when (the gate's gated-at annotation). */
  since?: string;
  /** What the node still waits for. */
  waiting: string[];
  why: string;
}

export interface NodeRow {
  name: string;
  pool: string;
  arch: string;
  ready: boolean;
  unschedulable: boolean;
  labels: Record<string, string>;
  derived: Derived[];
  /** The gates that select the node (held, released, would hold). */
  gates: GateRow[];
  /** True while a startup gate holds the node. */
  held: boolean;
}

export interface NodeQuery {
  /** Words that must all appear in the name, pool, architecture or a label (key=value). */
  text?: string;
  pool?: string;
  arch?: string;
  /** Only nodes a startup gate holds. */
  held?: boolean;
  offset?: number;
  limit?: number;
}

export interface NodePage {
  total: number;
  matched: number;
  offset: number;
  rows: NodeRow[];
  pools: string[];
  archs: string[];
}

/** What a condition's status means for its type (src/policy/status.ts conditionTone). */
export type Tone = 'good' | 'bad' | 'unknown';

export interface ConditionView {
  type: string;
  status: string;
  reason: string;
  message: string;
  tone: Tone;
}

export interface PolicyRow {
  kind: string;
  namespace?: string;
  name: string;
  /** The status counts (policies), or replica counts (WorkloadDeployments). */
  counts: Record<string, number>;
  conditions: ConditionView[];
}

export interface EventRow {
  time: string;
  /** The regarding object's kind, and the object as "Kind namespace/name". */
  kind: string;
  regarding: string;
  reason: string;
  note: string;
  reportingController: string;
  count: number;
}

export interface HeldPod {
  namespace: string;
  name: string;
  /** The scheduling gate Berth holds it with. */
  gate: string;
  reason: string;
}

export interface InstanceRow {
  namespace: string;
  name: string;
  ordinal: number;
  ready: string;
  tone: Tone;
  reason: string;
  message: string;
  quota: string;
}

export interface WorkloadRow extends PolicyRow {
  desired: number;
  instances: InstanceRow[];
}

export interface PoliciesSnapshot {
  policies: PolicyRow[];
  /** Kinds whose CRD is not installed: the page says so instead of an empty list. */
  missing: string[];
  events: EventRow[];
}

export interface PodsSnapshot {
  pods: HeldPod[];
  /** Nodes a startup gate holds, and what each waits for. */
  heldNodes: { name: string; waiting: string[] }[];
}

/** A Cell the management plane probes, as its status says. */
export interface CellRow {
  name: string;
  /** The Reachable and Ready conditions' status (True, False, Unknown). */
  reachable: string;
  ready: string;
  /** The Ready condition's reason and message: why a cell cannot take workloads. */
  reason: string;
  message: string;
  cordoned: boolean;
  serverVersion: string;
  lastContactTime: string;
  /** The federated Workloads placed in this cell, with the cell's counts for each. */
  workloads: CellWorkload[];
}

/** A Workload's share in one cell, as the Workload's status reports it. */
export interface CellWorkload {
  namespace: string;
  name: string;
  placement: string;
  city: string;
  ready: number;
  desired: number;
  /** Why the city is not available, when it is not. */
  reason: string;
}

/** A city and the cells that serve it (a cell serving several cities is under each). */
export interface CityRow {
  /** The IATA-style code; '' for cells that name no city. */
  city: string;
  /** The Locations in the city, each with where it is (region, zone, class). */
  locations: { name: string; where: string }[];
  cells: CellRow[];
}

export interface WorkloadsSnapshot {
  workloads: WorkloadRow[];
  /** The cells by city; empty when none are joined (or the cells capability is off). */
  cities: CityRow[];
  /** Instances in this cluster (the cell the page runs in). */
  localInstances: number;
}

/** Who leads: the Lease's holder, whether it is the Berth serving the page, and a word on how it is known. */
export interface LeaderView {
  holder: string;
  self: boolean;
  note: string;
}

/** What the header says besides the counts (which come from the other snapshots). */
export interface AboutSnapshot {
  version: string;
  /** The controllers of the Berth the page shows (berth run's, or berth ui's --controllers). */
  controllers: string[];
  leader: LeaderView;
  /** The kinds `berth explain` knows (Kind → its name there): the page offers explain for these. */
  explainable: Record<string, string>;
}

/** A condition in the explain panel: since when it holds. */
export interface ExplainCondition extends ConditionView {
  /** "since 2026-11-27T15:00:00Z (3m ago)", as `berth explain` prints it. */
  since: string;
}

/** An object a policy acts on or leaves alone (src/policy/explain.ts Subject). */
export interface SubjectView {
  kind: string;
  name: string;
  in: boolean;
  why: string[];
}

/** What `berth explain` says of one object, for the panel: its parts, the long lists cut. */
export interface ExplainView {
  /** "NodeLabelRule gpu", "Quota shop/default". */
  title: string;
  missingCrds: string[];
  /** Undefined for kinds without status conditions (node, pod); empty when there is none yet. */
  conditions?: ExplainCondition[];
  counts: Record<string, number>;
  /** The first subjects of each side, and how many there are in all. */
  acts: { shown: SubjectView[]; total: number };
  leaves: { shown: SubjectView[]; total: number };
  /** The rest, as the command prints it. */
  lines: string[];
}

/** /api/explain's answer: the lines the command prints, and the view of the same result. */
export interface ExplainAnswer {
  lines: string[];
  view: ExplainView;
}

/** One effect of a plan (src/policy/plan.ts Effect). */
export interface EffectView {
  op: '+' | '-' | '~' | '!';
  what: string;
  by: string;
}

/** /api/plan's answer: `berth plan -o json`'s result grouped for the page, and its text. */
export interface PlanView {
  changes: boolean;
  /** What `berth plan` would exit with: 0 no change, 2 changes, 1 errors. */
  exitCode: 0 | 1 | 2;
  /** The effects by object ("Node n1"), in the order the plan gives them. */
  objects: { object: string; effects: EffectView[] }[];
  evictions?: { namespaces: Record<string, number>; budgets: Record<string, number> };
  warnings: string[];
  unknown: string[];
  errors: string[];
  lines: string[];
}
