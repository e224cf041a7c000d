// A gate's taint on a node: its identity, how it is written, and the record of it Berth keeps.
import { taintId, type NodeTaint } from '../../policy/nodes/plan.ts';
import { taintSchema, type NodeStartupGateSpec } from '../types.ts';

export type TaintLike = { key: string; value?: string | undefined; effect: string };

/** Whether `taints` hold `t` (a taint's identity is its key and effect). */
export const holds = (taints: TaintLike[] | undefined, t: TaintLike) =>
  (taints ?? []).some((x) => taintId(x) === taintId(t));

/** A taint as kubectl writes it: key=value:Effect. */
export const formatTaint = (t: TaintLike): string => `${t.key}${t.value ? `=${t.value}` : ''}:${t.effect}`;

/** The gate's taint as written to a node (no value field when it has none). */
export const nodeTaint = (t: TaintLike): NodeTaint => ({
  key: t.key,
  ...(t.value !== undefined ? { value: t.value } : {}),
  effect: t.effect,
});

/** The taint a record holds (key=value:Effect, as formatTaint writes it), if it is one. */
export function taintOfRecord(record: string): NodeStartupGateSpec['taint'] | undefined {
  const colon = record.lastIndexOf(':');
  const [key, value] = record.slice(0, colon).split(/=(.*)/s);
  const parsed = taintSchema.safeParse({ key, ...(value ? { value } : {}), effect: record.slice(colon + 1) });
  return colon > 0 && parsed.success ? parsed.data : undefined;
}
