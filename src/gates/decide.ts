// Startup gates, the pure part: which gates select a node, whether a node's initialisation is done,
// what each gate wants on the node now (taint, annotations), and the patch that gets it there.
// No I/O: the controller and the webhook feed these from caches and admission requests.
import { ownedKeys } from '../runtime/client/apply.ts';
import { nodeKey, type NodeKey } from '../policy/nodes/loopbreaker.ts';
import { casPatch } from '../policy/nodes/cas.ts';
import { taintId, type NodeTaint } from '../policy/nodes/plan.ts';
import type { KeyClaim } from '../policy/nodes/ownership.ts';
import { selectorMatches, selectorProblems, selectorText } from '../policy/match/selector.ts';
import type { SlimNode, SlimPod } from '../policy/slim.ts';
import type { KubeObject } from '../runtime/api/meta.ts';
import { findCondition, hasCondition } from '../runtime/api/conditions.ts';
import type { JsonPatchOp } from '../runtime/api/jsonpatch.ts';
import { z } from 'zod';
import {
  EXEMPT_LABEL,
  FIELD_MANAGER,
  bookkeepingKeys,
  gateAnnotations,
  gatePrefix,
  GATES_DOMAIN,
  NodeStartupGate,
  taintSchema,
  type GateAnnotations,
  type NodeStartupGateSpec,
  type PodRequirement,
} from './types.ts';

export interface Gate {
  name: string;
  /**
   * False for a gate that is invalid, or loses a conflict: it holds nothing and gives back what it
   * held (failing open), as its taint and annotation keys, immutable, still say what that is.
   */
  enforced: boolean;
  spec: NodeStartupGateSpec;
  keys: GateAnnotations;
  /** Nodes created before this (ms) existed before the gate: only backfill gates them. */
  createdAt: number;
  deleting: boolean;
  /** A gate the API no longer has, known only from what it left on a node (strayGate). */
  gone?: true;
}

export interface GateProblem {
  reason: 'Invalid' | 'Conflicting';
  message: string;
}

// The gate's annotations live under "<name>.gates.berth.dev/", a DNS subdomain of at most 253 characters.
const MAX_NAME = 253 - `.${GATES_DOMAIN}`.length;

/**
 * Parses gates from their objects, sorted by name. An invalid gate is left out; gates whose `after`
 * lists form a cycle are Invalid; of two gates with the same taint (key and effect) the first by
 * name is enforced and both are Conflicting, so the outcome does not depend on the order events
 * arrive in.
 */
export function parseGates(objs: KubeObject[]): { gates: Gate[]; problems: Map<string, GateProblem> } {
  const problems = new Map<string, GateProblem>();
  const sorted = [...objs].sort((a, b) => (a.metadata!.name! < b.metadata!.name! ? -1 : 1));
  const parsed = sorted.map((obj) => {
    const name = obj.metadata!.name!;
    const meta = {
      createdAt: Date.parse(obj.metadata?.creationTimestamp ?? '') || 0,
      deleting: obj.metadata?.deletionTimestamp !== undefined,
    };
    const result = NodeStartupGate.parse({
      ...obj,
      apiVersion: NodeStartupGate.apiVersion,
      kind: NodeStartupGate.kind,
    });
    const problem = !result.success
      ? result.error
      : name.length > MAX_NAME
        ? `the name is longer than ${MAX_NAME} characters: its node annotations would not be valid keys`
        : (completionProblem(name, result.data.spec.completionAnnotation) ??
          selectorProblem(name, result.data.spec));
    return { obj, name, meta, spec: result.success && !problem ? result.data.spec : undefined, problem };
  });
  const cycles = afterCycles(new Map(parsed.flatMap((p) => (p.spec ? [[p.name, p.spec.after ?? []]] : []))));
  const gates: Gate[] = [];
  const byTaint = new Map<string, Gate>();
  for (const { obj, name, meta, spec, problem } of parsed) {
    if (!spec) {
      problems.set(name, { reason: 'Invalid', message: problem! });
      const keys = disarmedSchema.safeParse((obj as { spec?: unknown }).spec);
      if (keys.success && name.length <= MAX_NAME) {
        // A completion annotation that is another gate's key is never this gate's to take back.
        const { completionAnnotation, ...taint } = keys.data;
        const own =
          completionAnnotation === undefined || completionProblem(name, completionAnnotation)
            ? {}
            : { completionAnnotation };
        const spec = { ...DISARMED, ...taint, ...own };
        gates.push({ name, enforced: false, spec, keys: gateAnnotations(name, spec), ...meta });
      }
      continue;
    }
    const gate: Gate = { name, enforced: true, spec, keys: gateAnnotations(name, spec), ...meta };
    const cycle = cycles.get(name);
    if (cycle) {
      // Its keys are sound, so it gives back what it holds like any gate that is not enforced.
      problems.set(name, { reason: 'Invalid', message: cycle });
      gates.push({ ...gate, enforced: false });
      continue;
    }
    const holder = byTaint.get(taintId(spec.taint));
    if (holder) {
      const message = `gates ${holder.name} and ${name} both use the taint ${taintId(spec.taint)}; ${holder.name} (first by name) is enforced`;
      problems.set(name, { reason: 'Conflicting', message });
      problems.set(holder.name, { reason: 'Conflicting', message });
      gate.enforced = false;
    } else byTaint.set(taintId(spec.taint), gate);
    gates.push(gate);
  }
  return { gates, problems };
}

/**
 * The gates on a cycle of `after` (name → the gates it waits for), each with the message that
 * names the cycle's gates. A gate waiting for a gate on a cycle is not on it: the gates of a cycle
 * hold nothing, so it does not wait for them.
 */
export function afterCycles(after: Map<string, string[]>): Map<string, string> {
  const reach = new Map<string, Set<string>>();
  for (const start of after.keys()) {
    const seen = new Set<string>();
    const stack = [...(after.get(start) ?? [])];
    while (stack.length) {
      const n = stack.pop()!;
      if (seen.has(n) || !after.has(n)) continue;
      seen.add(n);
      stack.push(...after.get(n)!);
    }
    reach.set(start, seen);
  }
  const out = new Map<string, string>();
  for (const [name, seen] of reach) {
    if (!seen.has(name)) continue;
    const members = [...seen].filter((n) => reach.get(n)!.has(name)).sort();
    out.set(
      name,
      members.length === 1
        ? `after: the gate waits for itself (a cycle)`
        : `after: gates ${members.join(', ')} wait for each other (a cycle); none of them is enforced`,
    );
  }
  return out;
}

/** The names in the gate's `after` that no gate has (a typo, or a gate not created yet): it does not wait for them. */
export function unknownAfter(gate: Pick<Gate, 'spec'>, gates: Gate[]): string[] {
  return (gate.spec.after ?? []).filter((n) => !gates.some((g) => g.name === n));
}

/**
 * Each enforced gate's phase: 1 without predecessors, else one more than its latest enforced
 * predecessor's. Cycles never reach here (their gates are not enforced).
 */
export function gatePhases(gates: Gate[]): Map<string, number> {
  const enforced = new Map(gates.filter((g) => g.enforced).map((g) => [g.name, g]));
  const phases = new Map<string, number>();
  const phase = (g: Gate): number => {
    const known = phases.get(g.name);
    if (known !== undefined) return known;
    const before = (g.spec.after ?? []).flatMap((n) => (enforced.has(n) ? [phase(enforced.get(n)!)] : []));
    const p = 1 + Math.max(0, ...before);
    phases.set(g.name, p);
    return p;
  };
  for (const g of enforced.values()) phase(g);
  return phases;
}

/**
 * Where a node is in its ordered gates: the gates holding it whose requirements count now, those
 * still waiting for them, and the phase (of the phases of the gates holding it). Undefined when no
 * gate holds the node.
 */
export function nodePhase(
  gates: Gate[],
  decisions: GateDecision[],
): { phase: number; of: number; now: string[]; next: string[] } | undefined {
  const held = decisions.filter((d) => d.state === 'Held' || d.state === 'HeldTimedOut');
  if (held.length === 0) return undefined;
  const phases = gatePhases(gates);
  const phaseOf = (d: GateDecision) => phases.get(d.gate) ?? 1;
  const now = held.filter((d) => !d.waitingFor);
  return {
    phase: Math.min(...(now.length ? now : held).map(phaseOf)),
    of: Math.max(...held.map(phaseOf)),
    now: now.map((d) => d.gate),
    next: held.filter((d) => d.waitingFor).map((d) => d.gate),
  };
}

/** One owner per key among gates too: a completion annotation in another gate's keys (or its own bookkeeping) would fight it. */
function completionProblem(name: string, key: string | undefined): string | undefined {
  if (key === undefined || !key.includes(`.${GATES_DOMAIN}/`)) return undefined;
  const own = gateAnnotations(name, {});
  if (key.startsWith(gatePrefix(name)) && !bookkeepingKeys(own).includes(key)) return undefined;
  return `completionAnnotation "${key}" is a key of ${key.startsWith(gatePrefix(name)) ? 'this gate' : 'another gate'}: use one outside *.${GATES_DOMAIN}/ or under ${gatePrefix(name)}`;
}

/**
 * What metav1 would refuse in the gate's selectors. Evaluated anyway, a NotIn of no values would
 * hold every node and an In of none hold nothing, while the gate said Ready.
 */
function selectorProblem(name: string, spec: NodeStartupGateSpec): string | undefined {
  const problems = [
    ...selectorProblems(spec.nodeSelector, 'spec.nodeSelector'),
    ...(spec.excludeNodeSelectors ?? []).flatMap((s, i) =>
      selectorProblems(s, `spec.excludeNodeSelectors[${i}]`),
    ),
    ...(spec.requirements.pods ?? []).flatMap((r, i) =>
      selectorProblems(r.selector, `spec.requirements.pods[${i}].selector`),
    ),
  ];
  return problems.length ? `invalid NodeStartupGate ${name}: ${problems.join('; ')}` : undefined;
}

// What a gate that does not parse still says reliably: its taint and annotation keys (both immutable).
const disarmedSchema = z.object({ taint: taintSchema, completionAnnotation: z.string().min(1).optional() });
const DISARMED: Omit<NodeStartupGateSpec, 'taint'> = {
  requirements: {},
  nodeNamePods: 'Reject',
  minHoldSeconds: 0,
  mode: 'BootstrapOnly',
  backfill: false,
  dryRun: false,
};

type TaintLike = { key: string; value?: string | undefined; effect: string };

/** Whether `taints` hold `t` (a taint's identity is its key and effect). */
const holds = (taints: TaintLike[] | undefined, t: TaintLike) =>
  (taints ?? []).some((x) => taintId(x) === taintId(t));

/** A taint as kubectl writes it: key=value:Effect. */
export const formatTaint = (t: TaintLike): string => `${t.key}${t.value ? `=${t.value}` : ''}:${t.effect}`;

/** The gate's taint as written to a node (no value field when it has none). */
const nodeTaint = (t: TaintLike): NodeTaint => ({
  key: t.key,
  ...(t.value !== undefined ? { value: t.value } : {}),
  effect: t.effect,
});

/** Whether the gate applies to a node with these labels (its exclusions and the exempt label win). */
export function selects(gate: Pick<Gate, 'spec'>, labels: Record<string, string> | undefined): boolean {
  if (labels?.[EXEMPT_LABEL] === 'true') return false;
  if (!selectorMatches(gate.spec.nodeSelector, labels)) return false;
  return !(gate.spec.excludeNodeSelectors ?? []).some((s) => selectorMatches(s, labels));
}

const ownerKinds = (p: SlimPod) => (p.metadata?.ownerReferences ?? []).map((o) => o.kind);
const terminal = (p: SlimPod) => p.status.phase === 'Succeeded' || p.status.phase === 'Failed';

/** The pods that make a node busy: anything running that is not a DaemonSet or static (mirror) pod. */
export function workloadPods(pods: SlimPod[]): SlimPod[] {
  return pods.filter(
    (p) =>
      !p.metadata?.deletionTimestamp &&
      !terminal(p) &&
      !ownerKinds(p).some((k) => k === 'DaemonSet' || k === 'Node'),
  );
}

/**
 * A pod is done initialising when it is Ready or has Succeeded (a run-to-completion init), or when
 * it says so with the ready annotation; readiness Annotation makes the annotation the only signal.
 * The default keeps gates written before `readiness` working as they did.
 */
export function podDone(
  p: SlimPod,
  readyAnnotation: string | undefined,
  readiness: PodRequirement['readiness'] = readyAnnotation ? 'Either' : 'Ready',
): boolean {
  if (readiness !== 'Ready' && readyAnnotation && p.metadata?.annotations?.[readyAnnotation] === 'true')
    return true;
  if (readiness === 'Annotation') return false;
  return p.status.phase === 'Succeeded' || (p.status.phase === 'Running' && podReady(p));
}

export const podReady = (p: SlimPod): boolean => hasCondition(p, 'Ready');

export function describeRequirement(r: PodRequirement): string {
  if (r.daemonSet) return `pods of DaemonSet ${r.namespace}/${r.daemonSet}`;
  return `pods ${selectorText(r.selector)}${r.namespace ? ` in ${r.namespace}` : ''}`;
}

/** The node's pods a requirement waits for (pods being deleted do not count). */
export function requiredPods(r: PodRequirement, pods: SlimPod[]): SlimPod[] {
  return pods.filter((p) => {
    if (p.metadata?.deletionTimestamp) return false;
    if (r.namespace && p.metadata?.namespace !== r.namespace) return false;
    if (r.daemonSet) {
      return (p.metadata?.ownerReferences ?? []).some(
        (o) => o.kind === 'DaemonSet' && o.name === r.daemonSet,
      );
    }
    return selectorMatches(r.selector, p.metadata?.labels);
  });
}

/** What the node still lacks before the gate may release it; empty when every requirement holds. */
export function unmetRequirements(gate: Pick<Gate, 'spec'>, node: SlimNode, pods: SlimPod[]): string[] {
  const unmet: string[] = [];
  for (const r of gate.spec.requirements.pods ?? []) {
    const mine = requiredPods(r, pods);
    if (mine.length === 0) {
      unmet.push(`${describeRequirement(r)}: none on the node yet`);
      continue;
    }
    const waiting = mine.filter((p) => !podDone(p, r.readyAnnotation, r.readiness));
    if (waiting.length) {
      const names = waiting
        .slice(0, 3)
        .map((p) => `${p.metadata?.namespace}/${p.metadata?.name} (${p.status.phase ?? 'Pending'})`);
      const lacking =
        r.readiness === 'Annotation'
          ? `without ${r.readyAnnotation ?? 'the ready annotation'}=true`
          : 'not Ready';
      unmet.push(
        `${describeRequirement(r)}: ${names.join(', ')}${waiting.length > 3 ? ` and ${waiting.length - 3} more` : ''} ${lacking}`,
      );
    }
  }
  for (const c of gate.spec.requirements.nodeConditions ?? []) {
    const actual = findCondition(node.status.conditions, c.type)?.status;
    if (actual !== c.status)
      unmet.push(`node condition ${c.type} is ${actual ?? 'absent'}, needs ${c.status}`);
  }
  return unmet;
}

export type GateState =
  /** The gate does not apply: not selected, being deleted, or (for writes) in dry run. */
  | 'NotSelected'
  /** Berth holds the node with the gate's taint. */
  | 'Held'
  /** Held past the timeout (outcome KeepTainted). */
  | 'HeldTimedOut'
  /** Selected, not held. */
  | 'Released'
  /** Dry run: selected, and the gate would hold it. */
  | 'WouldGate';

export interface GateDecision {
  gate: string;
  state: GateState;
  /** true: the gate's taint must be on the node; false: Berth's taint must come off; undefined: leave it. */
  taint: boolean | undefined;
  /**
   * A taint a gate of this name put on before (its record says so) that is no longer the gate's: the
   * gate was deleted and created again with another taint while Berth was away. It comes off.
   */
  formerTaint?: NodeStartupGateSpec['taint'];
  /** Annotations to set, or to remove (null). */
  annotations: Record<string, string | null>;
  /** What the node is still waiting for (empty when everything holds or the gate does not apply). */
  unmet: string[];
  /** One line for explain and logs. */
  why: string;
  event?: { type: 'Normal' | 'Warning'; reason: 'Gated' | 'Released' | 'TimedOut'; message: string };
  /** Set when this decision releases the node. */
  release?: { outcome: 'Ready' | 'Timeout' | 'Removed' | 'Manual'; heldSeconds: number };
  timedOut: boolean;
  /** When to look again even if nothing changes (the minimum hold or the timeout runs out). */
  requeueAfterMs?: number;
  /** Held: the gates of its `after` that still hold the node, so its requirements do not count yet. */
  waitingFor?: string[];
  /** Held: the node's pods (namespace/name) no gate requires that run there already. */
  startedEarly?: string[];
}

const iso = (ms: number) => new Date(ms).toISOString();
const seconds = (ms: number) => Math.round(ms / 100) / 10;

/** Every gate's decision for a node (what the controller writes and explain shows). */
export function decideGates(gates: Gate[], node: SlimNode, pods: SlimPod[], now: number): GateDecision[] {
  const ann = node.metadata?.annotations ?? {};
  const early = startedEarly(gates, pods);
  return gates.map((g) => {
    const holder = gates.find(
      (o) => o !== g && taintId(o.spec.taint) === taintId(g.spec.taint) && o.keys.gatedAt in ann,
    );
    const d = decideGate(g, node, pods, now, {
      heldByAnother: holder && { gate: holder.name, since: ann[holder.keys.gatedAt]! },
      // A predecessor has released the node once the node says so (its gated-at is gone), so the
      // phases come off one after the other even when their requirements hold at once.
      waitingFor: (g.spec.after ?? []).filter((n) =>
        gates.some((o) => o.name === n && o.keys.gatedAt in ann),
      ),
    });
    const held = d.state === 'Held' || d.state === 'HeldTimedOut';
    return held && early.length ? { ...d, startedEarly: early } : d;
  });
}

/**
 * The gate's taint record, kept beside its gated-at: on while the decision leaves the node held, off
 * with it. A node held since before Berth kept records gets one.
 */
function withTaintRecord(gate: Gate, node: SlimNode, d: GateDecision): GateDecision {
  const ann = node.metadata?.annotations ?? {};
  const { gatedAt, taint } = gate.keys;
  const heldAfter = gatedAt in d.annotations ? d.annotations[gatedAt] !== null : gatedAt in ann;
  const want = heldAfter ? formatTaint(gate.spec.taint) : undefined;
  if (want === ann[taint]) return d;
  const former = formerTaintOf(gate, node);
  return {
    ...d,
    ...(former ? { formerTaint: former } : {}),
    annotations: { ...d.annotations, [taint]: want ?? null },
  };
}

/** The taint on the node that the gate's record names, when that is not the gate's taint (GateDecision.formerTaint). */
function formerTaintOf(gate: Gate, node: SlimNode): NodeStartupGateSpec['taint'] | undefined {
  const record = node.metadata?.annotations?.[gate.keys.taint];
  const recorded = record === undefined ? undefined : taintOfRecord(record);
  return recorded && taintId(recorded) !== taintId(gate.spec.taint) && holds(node.spec.taints, recorded)
    ? recorded
    : undefined;
}

/** The names of the gates whose keys (`<gate>.gates.berth.dev/gated-at` and the like) are on the node. */
export function gatesNamedOn(node: SlimNode): string[] {
  const names = new Set<string>();
  for (const key of Object.keys(node.metadata?.annotations ?? {})) {
    const slash = key.indexOf('/');
    const domain = key.slice(0, slash);
    if (slash < 0 || !domain.endsWith(`.${GATES_DOMAIN}`)) continue;
    const name = domain.slice(0, -GATES_DOMAIN.length - 1);
    const keys = gateAnnotations(name, {});
    if ([...bookkeepingKeys(keys), keys.completedAt].includes(key)) names.add(name);
  }
  return [...names];
}

/**
 * A gate the API no longer has, rebuilt from what it left on the node, for decideGates to take
 * back (as for a gate being deleted): its taint from the record. Undefined when the node is held
 * with no readable record (gated before Berth kept them): the taint is unknown, so nothing is taken.
 */
export function strayGate(name: string, node: SlimNode): Gate | undefined {
  const keys = gateAnnotations(name, {});
  const ann = node.metadata?.annotations ?? {};
  const record = ann[keys.taint];
  const recorded = record === undefined ? undefined : taintOfRecord(record);
  if (keys.gatedAt in ann && !recorded) return undefined;
  // Not held, a gate's taint is never looked at: a key no node can carry stands in for it.
  const taint = recorded ?? { key: '', effect: 'NoSchedule' as const };
  return {
    name,
    enforced: false,
    spec: { ...DISARMED, taint },
    keys,
    createdAt: 0,
    deleting: true,
    gone: true,
  };
}

/** What a node held for a gone gate with no record of its taint needs (strayGate leaves it). */
export const unrecordedStray = (name: string): string =>
  `gate ${name} no longer exists, and the node is held for it with no record of its taint (gated by a Berth older than the record): remove that taint and the ${gatePrefix(name)} annotations by hand`;

/** The taint a record holds (key=value:Effect, as formatTaint writes it), if it is one. */
function taintOfRecord(record: string): NodeStartupGateSpec['taint'] | undefined {
  const colon = record.lastIndexOf(':');
  const [key, value] = record.slice(0, colon).split(/=(.*)/s);
  const parsed = taintSchema.safeParse({ key, ...(value ? { value } : {}), effect: record.slice(colon + 1) });
  return colon > 0 && parsed.success ? parsed.data : undefined;
}

/**
 * The node's pods that no gate requires and that have started (or run to the end): what ran on a
 * node before its gates released it, as the DaemonSets that tolerate every taint do. Static pods
 * (their mirrors) run whatever the API says, so they are left out.
 */
export function startedEarly(gates: Gate[], pods: SlimPod[]): string[] {
  return pods
    .filter(
      (p) =>
        !p.metadata?.deletionTimestamp &&
        p.status.phase !== undefined &&
        p.status.phase !== 'Pending' &&
        !ownerKinds(p).includes('Node') &&
        !gates.some((g) => (g.spec.requirements.pods ?? []).some((r) => requiredPods(r, [p]).length)),
    )
    .map((p) => `${p.metadata?.namespace}/${p.metadata?.name}`);
}

/** What the other gates on the node say to one gate's decision (decideGates). */
interface Others {
  heldByAnother?: { gate: string; since: string };
  waitingFor?: string[];
}

/**
 * What one gate wants on one node now. Berth holds a node exactly while the gate's gated-at
 * annotation is on it: that is how it knows the taint is its own (put on by its webhook or its
 * controller) and since when, across restarts. `heldByAnother`: another gate with the same taint
 * holds the node (the loser of a conflict) since its gated-at, so the taint is Berth's to hand
 * over. `waitingFor`: the gates of its `after` that still hold the node; until they let go they
 * are all it waits for.
 */
export function decideGate(
  gate: Gate,
  node: SlimNode,
  pods: SlimPod[],
  now: number,
  others: Others = {},
): GateDecision {
  return withTaintRecord(gate, node, gateState(gate, node, pods, now, others));
}

function gateState(
  gate: Gate,
  node: SlimNode,
  pods: SlimPod[],
  now: number,
  { heldByAnother, waitingFor = [] }: Others,
): GateDecision {
  const { keys, spec } = gate;
  const ann = node.metadata?.annotations ?? {};
  const tainted = holds(node.spec.taints, spec.taint);
  const held = keys.gatedAt in ann;
  // A taint Berth did not put on (an admin's, a rule's) stays theirs: only admission takes one in charge.
  const foreignTaint = tainted && !held && !heldByAnother;
  const gatedAt =
    Date.parse(ann[keys.gatedAt] ?? '') || Date.parse(node.metadata?.creationTimestamp ?? '') || now;
  const heldMs = Math.max(0, now - gatedAt);
  const completed = keys.completedAt in ann;
  const timedOutBefore = keys.timedOutAt in ann;
  const releasedByHand = keys.releasedByHandAt in ann;
  const selected = !gate.deleting && selects(gate, node.metadata?.labels);
  const base = { gate: gate.name, unmet: [] as string[], timedOut: false };

  // The gate does not apply (or is disarmed): give back whatever Berth holds.
  if (!selected || !gate.enforced || spec.dryRun) {
    const annotations: Record<string, string | null> = {};
    if (held) annotations[keys.gatedAt] = null;
    if (timedOutBefore) annotations[keys.timedOutAt] = null;
    if (releasedByHand) annotations[keys.releasedByHandAt] = null;
    // Uninstalling leaves nothing behind: a deleted gate also takes back the completion stamps it wrote.
    if (gate.deleting && completed && completionOwned(gate, node)) annotations[keys.completedAt] = null;
    const why = gate.gone
      ? 'the gate no longer exists'
      : gate.deleting
        ? 'the gate is being deleted'
        : !gate.enforced
          ? 'the gate is invalid or conflicting, and not enforced'
          : !selected
            ? 'the gate does not select this node'
            : 'dry run';
    const released = held
      ? {
          release: { outcome: 'Removed' as const, heldSeconds: seconds(heldMs) },
          event: {
            type: 'Normal' as const,
            reason: 'Released' as const,
            message: `gate ${gate.name}: released (${why})`,
          },
        }
      : {};
    if (!selected || !gate.enforced)
      return {
        ...base,
        state: 'NotSelected',
        taint: held && tainted ? false : undefined,
        annotations,
        why,
        ...released,
      };
    const unmet = unmetRequirements(gate, node, pods);
    const would =
      unmet.length > 0 &&
      !foreignTaint &&
      (completed ? spec.mode === 'Continuous' : mayGate(gate, node, pods).ok);
    return {
      ...base,
      state: would ? 'WouldGate' : 'Released',
      taint: held && tainted ? false : undefined,
      annotations,
      unmet,
      why: would ? `dry run: would hold the node` : 'dry run: would not hold the node',
      ...released,
    };
  }

  const unmet = unmetRequirements(gate, node, pods);
  if (held) {
    const earlier = waitingFor.length
      ? {
          unmet: waitingFor.map((n) => `gate ${n} to release the node first (after)`),
          why: `waiting for gate${waitingFor.length > 1 ? 's' : ''} ${waitingFor.join(', ')} to release the node first`,
        }
      : undefined;
    // Held with the taint of a former gate of this name (formerTaint): the taint changes, no one took it off.
    if (!tainted && !formerTaintOf(gate, node)) {
      // Someone took the taint off by hand: that is a release, and the gate stops holding. While its
      // requirements fail, it does not put the taint back (that would fight whoever took it off).
      return {
        ...base,
        state: 'Released',
        taint: undefined,
        annotations: {
          [keys.gatedAt]: null,
          ...(timedOutBefore ? { [keys.timedOutAt]: null } : {}),
          ...(completed ? {} : { [keys.completedAt]: iso(now) }),
          ...(unmet.length ? { [keys.releasedByHandAt]: iso(now) } : {}),
        },
        why: 'the taint was removed by someone else',
        release: { outcome: 'Manual', heldSeconds: seconds(heldMs) },
        event: {
          type: 'Normal',
          reason: 'Released',
          message: `gate ${gate.name}: the taint was removed by someone else after ${seconds(heldMs)}s`,
        },
      };
    }
    const releaseWith = (outcome: 'Ready' | 'Timeout'): Record<string, string | null> => ({
      [keys.gatedAt]: null,
      ...(outcome === 'Timeout'
        ? { [keys.timedOutAt]: iso(now) }
        : timedOutBefore
          ? { [keys.timedOutAt]: null }
          : {}),
      ...(completed ? {} : { [keys.completedAt]: iso(now) }),
    });
    // Until its predecessors let go, they are all it waits for: its own requirements do not count yet.
    const pending = earlier?.unmet ?? unmet;
    const minHoldMs = spec.minHoldSeconds * 1000;
    if (pending.length === 0) {
      if (heldMs >= minHoldMs) {
        return {
          ...base,
          state: 'Released',
          taint: false,
          annotations: releaseWith('Ready'),
          why: 'every requirement holds',
          release: { outcome: 'Ready', heldSeconds: seconds(heldMs) },
          event: {
            type: 'Normal',
            reason: 'Released',
            message: `gate ${gate.name}: every requirement holds after ${seconds(heldMs)}s`,
          },
        };
      }
      return {
        ...base,
        state: 'Held',
        taint: true,
        annotations: {},
        unmet: [`the minimum hold, until ${iso(gatedAt + minHoldMs)}`],
        why: 'every requirement holds; the minimum hold has not passed',
        requeueAfterMs: minHoldMs - heldMs,
      };
    }
    const timeoutMs = spec.timeout ? spec.timeout.seconds * 1000 : undefined;
    if (timeoutMs !== undefined && heldMs >= timeoutMs) {
      const waiting = pending.join('; ');
      if (spec.timeout!.outcome === 'Release') {
        return {
          ...base,
          state: 'Released',
          taint: false,
          annotations: releaseWith('Timeout'),
          unmet: pending,
          timedOut: true,
          why: `released by the ${spec.timeout!.seconds}s timeout`,
          release: { outcome: 'Timeout', heldSeconds: seconds(heldMs) },
          event: {
            type: 'Warning',
            reason: 'TimedOut',
            message: `gate ${gate.name}: released after the ${spec.timeout!.seconds}s timeout although it still waits for: ${waiting}`,
          },
        };
      }
      return {
        ...base,
        state: 'HeldTimedOut',
        taint: true,
        annotations: timedOutBefore ? {} : { [keys.timedOutAt]: iso(now) },
        unmet: pending,
        timedOut: true,
        ...(earlier ? { waitingFor } : {}),
        why: `held past the ${spec.timeout!.seconds}s timeout (outcome KeepTainted)`,
        ...(timedOutBefore
          ? {}
          : {
              event: {
                type: 'Warning' as const,
                reason: 'TimedOut' as const,
                message: `gate ${gate.name}: still held after the ${spec.timeout!.seconds}s timeout, waiting for: ${waiting}`,
              },
            }),
      };
    }
    return {
      ...base,
      state: 'Held',
      taint: true,
      annotations: {},
      unmet: pending,
      why: earlier?.why ?? 'waiting for its requirements',
      ...(earlier ? { waitingFor } : {}),
      ...(timeoutMs !== undefined ? { requeueAfterMs: timeoutMs - heldMs } : {}),
    };
  }

  // Not held. Once every requirement holds, a timeout is history (its annotation goes); a completed
  // node stays open in bootstrap-only mode, and one the timeout released is not gated again for the
  // requirement that made it time out, only once its requirements have held and then fail.
  const open = (why: string, annotations: Record<string, string | null> = {}): GateDecision => ({
    ...base,
    state: 'Released',
    taint: undefined,
    annotations,
    unmet,
    timedOut: timedOutBefore && !(keys.timedOutAt in annotations),
    why,
  });
  if (unmet.length === 0)
    return open('every requirement holds', {
      ...(timedOutBefore ? { [keys.timedOutAt]: null } : {}),
      ...(releasedByHand ? { [keys.releasedByHandAt]: null } : {}),
    });
  if (completed && spec.mode === 'BootstrapOnly')
    return open(`released at ${ann[keys.completedAt]} (bootstrap only: never gated again)`);
  if (timedOutBefore)
    return open('released by the timeout; gated again only after its requirements have held');
  if (releasedByHand)
    return open(
      `its taint was removed by someone else at ${ann[keys.releasedByHandAt]}; gated again only after its requirements have held`,
    );
  // A hold from `since` (its timeout counts from then), saying how it came.
  const hold = (since: number, how: string): GateDecision => ({
    ...base,
    state: 'Held',
    taint: true,
    annotations: { [keys.gatedAt]: iso(since) },
    unmet,
    why: 'waiting for its requirements',
    event: {
      type: 'Normal',
      reason: 'Gated',
      message: `gate ${gate.name}: ${how}; waiting for: ${unmet.join('; ')}`,
    },
    ...(spec.timeout ? { requeueAfterMs: Math.max(0, spec.timeout.seconds * 1000 - (now - since)) } : {}),
  });
  // The loser of a conflict holds the node: the winner takes it over as it is, from when it was
  // gated (its minimum hold and timeout count from then), whatever mayGate would say of a new hold.
  if (tainted && heldByAnother)
    return hold(
      Date.parse(heldByAnother.since) || now,
      `took over the node from gate ${heldByAnother.gate}, which held it with the same taint`,
    );
  if (foreignTaint)
    return open(
      `not gated: the node already carries the taint ${taintId(spec.taint)}, which Berth did not put on; it stays theirs`,
    );
  const may = completed
    ? { ok: true, why: 'a requirement failed after release (continuous mode)' }
    : mayGate(gate, node, pods);
  if (!may.ok) return open(`not gated: ${may.why}`);
  return hold(now, `tainted, ${may.why}`);
}

/**
 * Whether the controller may put the taint on a node that never had it (the webhook missed it, or it
 * is older than the gate): only while the node runs nothing but DaemonSet and static pods, so a gate
 * never turns away from a node the workloads it already runs depend on.
 */
function mayGate(gate: Gate, node: SlimNode, pods: SlimPod[]): { ok: boolean; why: string } {
  const busy = workloadPods(pods);
  if (busy.length) {
    const p = busy[0]!;
    return {
      ok: false,
      why: `the node already runs workload pods (${p.metadata?.namespace}/${p.metadata?.name})`,
    };
  }
  const created = Date.parse(node.metadata?.creationTimestamp ?? '') || 0;
  if (created >= gate.createdAt)
    return { ok: true, why: 'the node joined without the taint (the webhook missed it)' };
  if (gate.spec.backfill) return { ok: true, why: 'backfill of an idle node that existed before the gate' };
  return { ok: false, why: 'the node existed before the gate and backfill is off' };
}

/** Whether anything of the gate is still on the node: its taint as Berth holds it, or its annotations. */
export function leftOnNode(gate: Gate, node: SlimNode): boolean {
  const ann = node.metadata?.annotations ?? {};
  if (bookkeepingKeys(gate.keys).some((k) => k in ann)) return true;
  return gate.keys.completedAt in ann && completionOwned(gate, node);
}

// The completion annotation may be a key another tool also writes (the seed's): Berth takes back only its own.
const completionOwned = (gate: Gate, node: SlimNode) =>
  ownedKeys(node, FIELD_MANAGER, ['metadata', 'annotations'], '', 'Update').includes(gate.keys.completedAt);

/**
 * The keys of the node a decision changes, for the loop breaker: the gate's taint (by key) when it
 * goes on or comes off, and every annotation it sets to a new value or removes.
 */
export function decisionKeys(node: SlimNode, gate: Gate, d: GateDecision): NodeKey[] {
  const keys: NodeKey[] = [];
  const tainted = holds(node.spec.taints, gate.spec.taint);
  if ((d.taint === true && !tainted) || (d.taint === false && tainted))
    keys.push(nodeKey('taint', gate.spec.taint.key));
  if (d.formerTaint) keys.push(nodeKey('taint', d.formerTaint.key));
  const have = node.metadata?.annotations ?? {};
  for (const [k, v] of Object.entries(d.annotations)) {
    if (v === null ? k in have : have[k] !== v) keys.push(nodeKey('annotation', k));
  }
  return keys;
}

/** The node keys the gates own, for the ownership registry: each gate's prefix, taint and completion annotation. */
export function gateKeyClaims(gates: Gate[]): KeyClaim[] {
  return gates.flatMap((g) => {
    const owner = `NodeStartupGate ${g.name}`;
    return [
      { pattern: { kind: 'any' as const, prefix: gatePrefix(g.name) }, owner },
      { pattern: { kind: 'taint' as const, key: g.spec.taint.key }, owner },
      { pattern: { kind: 'annotation' as const, key: g.keys.completedAt }, owner },
    ];
  });
}

/** The admission patch for a joining node: the taint and gated-at annotation of every gate that selects it. */
export function admitNode(
  gates: Gate[],
  node: KubeObject,
  now: number,
): { taints: NodeTaint[]; annotations: Record<string, string> } {
  const taints: NodeTaint[] = [];
  const annotations: Record<string, string> = {};
  const existing = (node['spec'] as { taints?: TaintLike[] } | undefined)?.taints;
  const ann = node.metadata?.annotations ?? {};
  for (const g of gates) {
    if (!g.enforced || g.deleting || g.spec.dryRun || !selects(g, node.metadata?.labels)) continue;
    if (g.spec.mode === 'BootstrapOnly' && g.keys.completedAt in ann) continue;
    // A taint someone else puts on at registration (Karpenter's startupTaints) is taken in charge.
    if (!holds(existing, g.spec.taint)) taints.push(nodeTaint(g.spec.taint));
    if (!(g.keys.gatedAt in ann)) {
      annotations[g.keys.gatedAt] = iso(now);
      annotations[g.keys.taint] = formatTaint(g.spec.taint);
    }
  }
  return { taints, annotations };
}

/**
 * The JSON patch that brings a node to the gates' decisions. It is a compare-and-swap: the taints
 * are tested against what the cache saw before they are replaced, and every annotation removed is
 * tested first, so a concurrent change by anyone else fails the patch (422) instead of being lost.
 * (A taint the webhook put on belongs to the node's creator in managedFields, so server-side apply
 * could not take it off without forcing; see docs/decisions/0006.)
 */
export function nodePatch(node: SlimNode, gates: Gate[], decisions: GateDecision[]): JsonPatchOp[] {
  const current = node.spec.taints ?? [];
  const taintOf = (d: GateDecision) => gates.find((g) => g.name === d.gate)!.spec.taint;
  const wanted = decisions.filter((d) => d.taint === true).map(taintOf);
  let next = current;
  for (const t of wanted) if (!holds(next, t)) next = [...next, nodeTaint(t)];
  // A taint one gate wants is never taken off by another (a conflicting gate with the same taint).
  const off = [
    ...decisions.filter((d) => d.taint === false).map(taintOf),
    ...decisions.flatMap((d) => d.formerTaint ?? []),
  ];
  for (const t of off) {
    if (holds(next, t) && !holds(wanted, t)) next = next.filter((x) => taintId(x) !== taintId(t));
  }
  return casPatch(
    node,
    next !== current ? next : undefined,
    decisions.flatMap((d) => Object.entries(d.annotations)),
  );
}
