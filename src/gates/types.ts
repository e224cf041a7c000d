// The API of startup gates: a NodeStartupGate taints the nodes it selects when they join, and
// releases each once its initialisation pods are Ready and its node conditions hold.
// Its CRD, from a zod schema, is crd.ts: what reads only these (the webhook thread, every
// command's capability list) loads no zod.
import type * as z from '../runtime/platform/zod.ts';
import type { PolicyStatus } from '../policy/crd.ts';
import { berthKind } from '../policy/kinds.ts';
import type { KeyDeclaration } from '../policy/nodes/ownership.ts';
import type { nodeStartupGateSpec, podRequirement } from './crd.ts';

export const FIELD_MANAGER = 'berth-gates';
export const NODE_STARTUP_GATE = berthKind('NodeStartupGate', 'Cluster');
/** The domain whose subdomains hold each gate's node annotations: `<gate>.gates.berth.dev/`. */
export const GATES_DOMAIN = 'gates.berth.dev';
/**
 * What startup gates own on nodes: every key under `<gate>.gates.berth.dev/`, and each gate's taint
 * and completion annotation (claimed live). Rank 0: a gate's keys decide whether a node takes
 * workloads at all, so no other capability's policy may write them.
 */
export const GATE_KEYS: KeyDeclaration = {
  rank: 0,
  title: 'startup gates',
  domains: [{ pattern: { kind: 'any', subdomainsOf: GATES_DOMAIN }, owner: 'startup gates' }],
};
/** On every NodeStartupGate: its taints and annotations leave every node before the gate goes. */
export const GATE_FINALIZER = 'gates.berth.dev/release-nodes';
/** A node labelled with this ("true") is never gated by any gate, and the webhook is not even called for it. */
export const EXEMPT_LABEL = 'gates.berth.dev/exempt';
/** The prefix cluster-autoscaler treats as a temporary startup taint when it simulates scale-up. */
export const AUTOSCALER_STARTUP_PREFIX = 'startup-taint.cluster-autoscaler.kubernetes.io/';

export type PodRequirement = z.infer<typeof podRequirement>;
export type NodeStartupGateSpec = z.infer<typeof nodeStartupGateSpec>;
export type NodeStartupGateStatus = PolicyStatus<
  'nodes' | 'gated' | 'released' | 'timedOut' | 'wouldGate' | 'startedEarly'
>;

/** The annotations a gate keeps on a node, all under `<gate>.gates.berth.dev/` but the completion one. */
export interface GateAnnotations {
  /** When Berth put the taint on (RFC 3339); present exactly while Berth holds the node. */
  gatedAt: string;
  /** When the timeout fired; until the node next releases normally. */
  timedOutAt: string;
  /**
   * When someone else took the taint off a held node while its requirements failed; until they hold.
   * Continuous mode gates such a node again only after they have held, as after a timeout.
   */
  releasedByHandAt: string;
  completedAt: string;
  /**
   * The taint Berth holds the node with (key=value:Effect), beside gatedAt: what takes the taint back
   * should the gate be gone before it releases the node (a replica whose webhook had not yet seen
   * the gate deleted, a gate whose finalizer was removed by hand).
   */
  taint: string;
}

export const gatePrefix = (name: string): string => `${name}.${GATES_DOMAIN}/`;

/** The keys a gate keeps for itself on a node, all under its prefix: never its completion annotation. */
export const bookkeepingKeys = (keys: GateAnnotations): string[] => [
  keys.gatedAt,
  keys.timedOutAt,
  keys.releasedByHandAt,
  keys.taint,
];

export function gateAnnotations(name: string, spec: Pick<NodeStartupGateSpec, 'completionAnnotation'>) {
  const prefix = gatePrefix(name);
  return {
    gatedAt: `${prefix}gated-at`,
    timedOutAt: `${prefix}timed-out-at`,
    releasedByHandAt: `${prefix}released-by-hand-at`,
    completedAt: spec.completionAnnotation ?? `${prefix}completed-at`,
    taint: `${prefix}taint`,
  } satisfies GateAnnotations;
}

/** The time a gate's annotations hold (RFC 3339, to the millisecond). */
export const iso = (ms: number) => new Date(ms).toISOString();
