// Ordered gates (`after`): cycles, names no gate has, and the phase a node is in.
import type { Gate } from './parse.ts';
import type { GateDecision } from './state.ts';

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
