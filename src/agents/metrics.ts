import { counter } from '../runtime/observability/metrics.ts';

// Agent placement: the claims Berth writes on nodes and takes off them.
export const agentMetrics = {
  claims: counter(
    'berth_agent_claims_total',
    'Claim annotations Berth wrote on nodes (written: new or changed) and took off them (cleared)',
    ['action'],
  ),
};

/** Counts what a node write did to the claims: `before`, the node's annotations; `after`, those written. */
export function countClaimWrites(
  before: Record<string, string>,
  after: Record<string, string>,
  isClaim: (key: string) => boolean,
): void {
  let written = 0;
  let cleared = 0;
  for (const [k, v] of Object.entries(after)) if (isClaim(k) && before[k] !== v) written++;
  for (const k of Object.keys(before)) if (isClaim(k) && !(k in after)) cleared++;
  if (written) agentMetrics.claims.inc({ action: 'written' }, written);
  if (cleared) agentMetrics.claims.inc({ action: 'cleared' }, cleared);
}
