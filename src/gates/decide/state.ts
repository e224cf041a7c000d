// What each gate wants on a node now: hold it with the gate's taint, release it, or leave it, with
// the reason, the event and the annotations that record it across restarts.
import { ownedKeys } from '../../runtime/api/fields.ts';
import { formatTaint, holds, taintId } from '../../policy/nodes/write.ts';
import type { SlimNode, SlimPod } from '../../policy/slim.ts';
import { FIELD_MANAGER, bookkeepingKeys, iso, type NodeStartupGateSpec } from '../types.ts';
import { taintOfRecord } from '../crd.ts';
import type { Gate } from './parse.ts';
import { selects, startedEarly, unmetRequirements, workloadPods } from './requirements.ts';

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

/** What one gate sees on the node before it decides: whose the taint is, since when, what it wrote. */
interface Seen {
  ann: Record<string, string>;
  tainted: boolean;
  held: boolean;
  /** A taint Berth did not put on (an admin's, a rule's) stays theirs: only admission takes one in charge. */
  foreignTaint: boolean;
  gatedAt: number;
  heldMs: number;
  completed: boolean;
  timedOutBefore: boolean;
  releasedByHand: boolean;
  selected: boolean;
  now: number;
  heldByAnother: Others['heldByAnother'];
  waitingFor: string[];
  base: { gate: string; unmet: string[]; timedOut: boolean };
}

function gateState(gate: Gate, node: SlimNode, pods: SlimPod[], now: number, others: Others): GateDecision {
  const seen = observe(gate, node, now, others);
  if (!seen.selected || !gate.enforced || gate.spec.dryRun) return notApplying(gate, node, pods, seen);
  const unmet = unmetRequirements(gate, node, pods);
  if (seen.held) return whileHeld(gate, node, seen, unmet);
  return whileOpen(gate, node, pods, seen, unmet);
}

function observe(gate: Gate, node: SlimNode, now: number, { heldByAnother, waitingFor = [] }: Others): Seen {
  const { keys, spec } = gate;
  const ann = node.metadata?.annotations ?? {};
  const tainted = holds(node.spec.taints, spec.taint);
  const held = keys.gatedAt in ann;
  const gatedAt =
    Date.parse(ann[keys.gatedAt] ?? '') || Date.parse(node.metadata?.creationTimestamp ?? '') || now;
  return {
    ann,
    tainted,
    held,
    foreignTaint: tainted && !held && !heldByAnother,
    gatedAt,
    heldMs: Math.max(0, now - gatedAt),
    completed: keys.completedAt in ann,
    timedOutBefore: keys.timedOutAt in ann,
    releasedByHand: keys.releasedByHandAt in ann,
    selected: !gate.deleting && selects(gate, node.metadata?.labels),
    now,
    heldByAnother,
    waitingFor,
    base: { gate: gate.name, unmet: [], timedOut: false },
  };
}

/** The gate does not apply (or is disarmed, or in dry run): give back whatever Berth holds. */
function notApplying(gate: Gate, node: SlimNode, pods: SlimPod[], seen: Seen): GateDecision {
  const { keys, spec } = gate;
  const { held, tainted, timedOutBefore, releasedByHand, completed, selected, heldMs, base } = seen;
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
    !seen.foreignTaint &&
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

/** The gates of its `after` that still hold the node: until they let go, they are all it waits for. */
function earlierGates(waitingFor: string[]): { unmet: string[]; why: string } | undefined {
  return waitingFor.length
    ? {
        unmet: waitingFor.map((n) => `gate ${n} to release the node first (after)`),
        why: `waiting for gate${waitingFor.length > 1 ? 's' : ''} ${waitingFor.join(', ')} to release the node first`,
      }
    : undefined;
}

/** A held node: released by hand, released (its requirements hold, or the timeout), or held on. */
function whileHeld(gate: Gate, node: SlimNode, seen: Seen, unmet: string[]): GateDecision {
  const { spec } = gate;
  const { tainted, heldMs, gatedAt, waitingFor, base } = seen;
  const earlier = earlierGates(waitingFor);
  // Held with the taint of a former gate of this name (formerTaint): the taint changes, no one took it off.
  if (!tainted && !formerTaintOf(gate, node)) return removedByHand(gate, seen, unmet);
  // Until its predecessors let go, they are all it waits for: its own requirements do not count yet.
  const pending = earlier?.unmet ?? unmet;
  const minHoldMs = spec.minHoldSeconds * 1000;
  if (pending.length === 0) {
    if (heldMs >= minHoldMs) {
      return {
        ...base,
        state: 'Released',
        taint: false,
        annotations: releaseAnnotations(gate, seen, 'Ready'),
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
  if (timeoutMs !== undefined && heldMs >= timeoutMs)
    return pastTimeout(gate, seen, pending, earlier !== undefined);
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

/**
 * Someone took the taint off by hand: that is a release, and the gate stops holding. While its
 * requirements fail, it does not put the taint back (that would fight whoever took it off).
 */
function removedByHand(gate: Gate, seen: Seen, unmet: string[]): GateDecision {
  const { keys } = gate;
  const { timedOutBefore, completed, now, heldMs, base } = seen;
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

/** The annotations of a release: the hold ends, the timeout is stamped or forgotten, completion stamped once. */
function releaseAnnotations(
  gate: Gate,
  seen: Seen,
  outcome: 'Ready' | 'Timeout',
): Record<string, string | null> {
  const { keys } = gate;
  const { timedOutBefore, completed, now } = seen;
  return {
    [keys.gatedAt]: null,
    ...(outcome === 'Timeout'
      ? { [keys.timedOutAt]: iso(now) }
      : timedOutBefore
        ? { [keys.timedOutAt]: null }
        : {}),
    ...(completed ? {} : { [keys.completedAt]: iso(now) }),
  };
}

/** Held past the timeout: released (outcome Release), or held on and said so once (KeepTainted). */
function pastTimeout(gate: Gate, seen: Seen, pending: string[], afterEarlier: boolean): GateDecision {
  const { keys } = gate;
  const timeout = gate.spec.timeout!;
  const { timedOutBefore, heldMs, now, waitingFor, base } = seen;
  const waiting = pending.join('; ');
  if (timeout.outcome === 'Release') {
    return {
      ...base,
      state: 'Released',
      taint: false,
      annotations: releaseAnnotations(gate, seen, 'Timeout'),
      unmet: pending,
      timedOut: true,
      why: `released by the ${timeout.seconds}s timeout`,
      release: { outcome: 'Timeout', heldSeconds: seconds(heldMs) },
      event: {
        type: 'Warning',
        reason: 'TimedOut',
        message: `gate ${gate.name}: released after the ${timeout.seconds}s timeout although it still waits for: ${waiting}`,
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
    ...(afterEarlier ? { waitingFor } : {}),
    why: `held past the ${timeout.seconds}s timeout (outcome KeepTainted)`,
    ...(timedOutBefore
      ? {}
      : {
          event: {
            type: 'Warning' as const,
            reason: 'TimedOut' as const,
            message: `gate ${gate.name}: still held after the ${timeout.seconds}s timeout, waiting for: ${waiting}`,
          },
        }),
  };
}

/**
 * A node not held. Once every requirement holds, a timeout is history (its annotation goes); a
 * completed node stays open in bootstrap-only mode, and one the timeout released is not gated again
 * for the requirement that made it time out, only once its requirements have held and then fail.
 */
function whileOpen(gate: Gate, node: SlimNode, pods: SlimPod[], seen: Seen, unmet: string[]): GateDecision {
  const { keys, spec } = gate;
  const { ann, tainted, completed, timedOutBefore, releasedByHand, heldByAnother, now, base } = seen;
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
  if (seen.foreignTaint)
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
