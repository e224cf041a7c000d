// Taints and tolerations as Kubernetes matches them, shared by every capability that reasons about
// whether a pod may stay or land on a node (startup gates, derived taints' eviction counts).
export interface Toleration {
  key?: string;
  operator?: 'Equal' | 'Exists';
  value?: string;
  effect?: string;
  tolerationSeconds?: number;
}

export interface TaintLike {
  key: string;
  value?: string | undefined;
  effect: string;
}

/** core/v1 Toleration.ToleratesTaint. */
export function tolerates(t: Toleration, taint: TaintLike): boolean {
  if (t.effect && t.effect !== taint.effect) return false;
  if (t.key && t.key !== taint.key) return false;
  if (t.operator === 'Exists') return true;
  return !!t.key && (t.value ?? '') === (taint.value ?? '');
}

/** The narrowest toleration of a taint. */
export const tolerationFor = (taint: TaintLike): Toleration =>
  taint.value
    ? { key: taint.key, operator: 'Equal', value: taint.value, effect: taint.effect }
    : { key: taint.key, operator: 'Exists', effect: taint.effect };
