// What the page shows of any of Berth's objects, whatever its kind: its row (status counts and
// conditions, each with its tone) and its Ready condition. The page lists every policy this way; a
// capability's own rows (src/capability.ts, PageView) build on these.
import type { KubeObject } from '../runtime/api/meta.ts';
import type { ConditionView, PolicyRow } from '../ui/types.ts';
import { conditionTone } from './status.ts';

export interface WithStatus extends KubeObject {
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

export const conditionOf = (o: WithStatus, type: string): ConditionView | undefined =>
  conditionsOf(o).find((c) => c.type === type);

/** The Ready condition as a row shows it: its status, and the reason and message why. */
export function readyOf(o: WithStatus): { ready: string; reason: string; message: string } {
  const r = conditionOf(o, 'Ready');
  return { ready: r?.status ?? 'Unknown', reason: r?.reason ?? '', message: r?.message ?? '' };
}

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
