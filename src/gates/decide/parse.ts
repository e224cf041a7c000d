// Gates from their objects: which are valid and enforced, which conflict, and the node keys they own.
import type { KeyClaim } from '../../policy/nodes/ownership.ts';
import { taintId } from '../../policy/nodes/write.ts';
import { selectorProblems } from '../../policy/match/selector.ts';
import type { KubeObject } from '../../runtime/api/meta.ts';
import * as z from '../../runtime/platform/zod.ts';
import {
  bookkeepingKeys,
  gateAnnotations,
  gatePrefix,
  GATES_DOMAIN,
  type GateAnnotations,
  type NodeStartupGateSpec,
} from '../types.ts';
import { NodeStartupGate, taintSchema } from '../crd.ts';
import { afterCycles } from './order.ts';

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
export const DISARMED: Omit<NodeStartupGateSpec, 'taint'> = {
  requirements: {},
  nodeNamePods: 'Reject',
  minHoldSeconds: 0,
  mode: 'BootstrapOnly',
  backfill: false,
  dryRun: false,
};

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
