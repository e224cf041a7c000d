// Each policy's conditions as a gauge, like kube-state-metrics' *_status_condition: one series per
// condition and status (1 for the one that holds, 0 for the other), so an alert can name the policy.
// Policies are cluster objects an administrator writes: a handful each, so the labels stay few.
import { gauge } from '../runtime/observability/metrics.ts';

export const policyMetrics = {
  condition: gauge(
    'berth_policy_condition',
    'The conditions of each policy as Berth last decided them, by kind, name, condition type and status ' +
      '(True, False): 1 for the status that holds, 0 for the other',
    ['kind', 'name', 'type', 'status'],
  ),
};

const STATUSES = ['True', 'False'] as const;
/** The condition types recorded per policy (kind/name), to remove when it goes. */
const recorded = new Map<string, string[]>();

/** Records a policy's conditions; undefined: the policy is gone, and so are its series. */
export function recordConditions(
  kind: string,
  name: string,
  conditions: readonly { type: string; status: string }[] | undefined,
): void {
  const key = `${kind}/${name}`;
  const types = conditions?.map((c) => c.type) ?? [];
  for (const type of recorded.get(key) ?? [])
    if (!types.includes(type))
      for (const status of STATUSES) policyMetrics.condition.remove({ kind, name, type, status });
  if (types.length) recorded.set(key, types);
  else recorded.delete(key);
  for (const c of conditions ?? [])
    for (const status of STATUSES)
      policyMetrics.condition.set({ kind, name, type: c.type, status }, c.status === status ? 1 : 0);
}
