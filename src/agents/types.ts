// The API of agent placement: AgentPlacement says which pods count, how their owner (pool) is
// identified, and which node label and claim annotations follow them. Its CRD, from a zod schema, is
// crd.ts: what reads only these (every command's capability list) loads no zod.
import type * as z from '../runtime/platform/zod.ts';
import type { PolicyStatus } from '../policy/crd.ts';
import { berthKind } from '../policy/kinds.ts';
import type { KeyDeclaration } from '../policy/nodes/ownership.ts';
import type { agentPlacementSpec } from './crd.ts';

export const FIELD_MANAGER = 'berth-agents';
/**
 * What agent placement owns on nodes: each placement's label and claim annotations (claimed live).
 * Rank 1: after startup gates, before derived labels (which own nothing).
 */
export const AGENT_KEYS: KeyDeclaration = { rank: 1, title: 'agent placement', domains: [] };
/**
 * Applies a placement's own finalizer and its record of what it holds on owners. On owners, each
 * placement applies its finalizer under `<this>/<placement>` (finalizers.ts); earlier versions
 * applied all of them under this one, which now only lets go of them.
 */
export const FINALIZER_FIELD_MANAGER = 'berth-agents-finalizer';
/** On AgentPlacements whose owners carry a finalizer: removes those finalizers before the placement goes. */
export const PLACEMENT_FINALIZER = 'agents.berth.dev/release-owner-finalizers';

export const AGENT_PLACEMENT = berthKind('AgentPlacement', 'Cluster');

export type AgentPlacementSpec = z.infer<typeof agentPlacementSpec>;
export type AgentPlacementStatus = PolicyStatus<'labelledNodes' | 'claims' | 'owners'>;
