// metav1.Condition semantics: lastTransitionTime moves only when the status changes.
import { apiTime, type KubeObject } from './meta.ts';

export type ConditionStatus = 'True' | 'False' | 'Unknown';

export interface Condition {
  type: string;
  status: ConditionStatus;
  reason: string;
  message: string;
  lastTransitionTime: string;
  observedGeneration?: number;
}

export type ConditionInput = Omit<Condition, 'lastTransitionTime'>;

/** Returns the conditions with `c` set; the transition time is kept unless the status changed. */
export function setCondition(
  conditions: Condition[] | undefined,
  c: ConditionInput,
  now = new Date(),
): Condition[] {
  const list = conditions ?? [];
  const old = findCondition(list, c.type);
  const lastTransitionTime = old && old.status === c.status ? old.lastTransitionTime : apiTime(now.getTime());
  const next: Condition = { ...c, lastTransitionTime };
  return old ? list.map((x) => (x === old ? next : x)) : [...list, next];
}

/** The condition of `type` in a list of conditions (metav1.Condition, or a node's or pod's). */
export function findCondition<C extends { type: string }>(
  conditions: readonly C[] | undefined,
  type: string,
): C | undefined {
  return conditions?.find((c) => c.type === type);
}

/** True when obj.status.conditions has `type` with `status` (nodes, pods, and Berth's own kinds alike). */
export function hasCondition(
  obj: KubeObject | undefined,
  type: string,
  status: ConditionStatus = 'True',
): boolean {
  const conds = (obj?.['status'] as { conditions?: { type: string; status: string }[] } | undefined)
    ?.conditions;
  return conds?.some((c) => c.type === type && c.status === status) ?? false;
}

/**
 * The conditions of `types`: what one controller applies under its field manager (applying another
 * manager's would take them over) and compares with what it last wrote.
 */
export const conditionsOf = (cs: Condition[], types: readonly string[]): Condition[] =>
  cs.filter((c) => types.includes(c.type));

/** Equal ignoring lastTransitionTime and order, so a status write happens only when something changed. */
export function sameConditions(a: Condition[] | undefined, b: Condition[] | undefined): boolean {
  const x = a ?? [];
  const y = b ?? [];
  return (
    x.length === y.length &&
    x.every((c) => {
      const d = findCondition(y, c.type);
      return (
        d !== undefined &&
        d.status === c.status &&
        d.reason === c.reason &&
        d.message === c.message &&
        d.observedGeneration === c.observedGeneration
      );
    })
  );
}

/** Builds a status's conditions, each stamped with the generation it describes. */
export function conditionSetter(existing: Condition[] | undefined, generation: number | undefined) {
  let conditions = existing ?? [];
  return {
    set(type: string, status: boolean, reason: string, message: string): void {
      conditions = setCondition(conditions, {
        type,
        status: status ? 'True' : 'False',
        reason,
        message,
        ...(generation !== undefined ? { observedGeneration: generation } : {}),
      });
    },
    get conditions(): Condition[] {
      return conditions;
    },
  };
}

/**
 * Condition `type` of `after` when it has `status` (and `reason`, when given) and did not have it
 * in `before`, or now says something else: what a Warning event announces, once per change.
 */
export function newlyHolds(
  before: Condition[] | undefined,
  after: Condition[],
  type: string,
  status: ConditionStatus,
  reason?: string,
): Condition | undefined {
  const a = findCondition(after, type);
  if (!a || a.status !== status || (reason !== undefined && a.reason !== reason)) return undefined;
  const b = findCondition(before, type);
  return b?.status === a.status && b.reason === a.reason && b.message === a.message ? undefined : a;
}
