// `berth plan` of Quotas: which instances of a namespace the Quota in force (its oldest) would grant
// or leave waiting once the change is made, decided by decideGrants over the Quota's ledger as the
// quota controller does. In a cluster the instances are its own; on a management plane (the `quota`
// capability) they are the cells' instances as their mirrors here show them.
import { findCondition } from '../runtime/api/conditions.ts';
import { localCluster } from '../runtime/cluster/key.ts';
import { emptyPart, type PlanContext, type PlanPart } from '../policy/plan.ts';
import { candidateOf, oldestFirst, QUOTA_CONDITION, type QuotaObject } from './controllers/quota.ts';
import type { InstanceObject, InstanceTypeObject } from './decide.ts';
import { budgetOf, decideUnder, usageText, usedBy, type Candidate } from './grant.ts';
import type { InstanceTypeSize } from './resources.ts';
import {
  Instance,
  InstanceType,
  MIRROR_CELL_LABEL,
  MIRROR_LABEL,
  Quota,
  SOURCE_ANNOTATION,
  SOURCE_UID_ANNOTATION,
} from './types.ts';

/** The Quota in force in a namespace: its oldest (any other is Superseded). */
export const inForce = (quotas: readonly QuotaObject[], namespace: string): QuotaObject | undefined =>
  quotas.filter((q) => q.metadata?.namespace === namespace).sort(oldestFirst)[0];

/**
 * An instance as the quota controller counts it: a cluster's own, or a cell's through its mirror
 * (named and identified as in the cell, in that cell's cluster).
 */
export function counted(
  inst: InstanceObject,
  instanceType: (name: string) => InstanceTypeSize | undefined,
): { candidate: Candidate; cell?: string } {
  const cell = inst.metadata.labels?.[MIRROR_CELL_LABEL];
  if (inst.metadata.labels?.[MIRROR_LABEL] !== 'true' || !cell)
    return { candidate: candidateOf(localCluster, inst, instanceType) };
  const a = inst.metadata.annotations ?? {};
  const source = {
    ...inst,
    metadata: { ...inst.metadata, name: a[SOURCE_ANNOTATION] ?? '', uid: a[SOURCE_UID_ANNOTATION] ?? '' },
  };
  // Counted under the cell's name: its cluster's (cell-<name>) orders the line alike, and a claim is
  // matched by uid.
  return { candidate: candidateOf(cell, source, instanceType), cell };
}

const nowText = (now: number) => new Date(now).toISOString().replace(/\.\d{3}Z$/, 'Z');

/**
 * What a change of Quotas would grant or block: per namespace it touches, the instances whose
 * verdict changes (waiting ones granted; nothing granted is ever revoked), the Quota's own Ready,
 * and, as warnings, the instances it leaves waiting and a budget below what runs.
 */
export function planQuotas(
  current: readonly QuotaObject[],
  change: readonly QuotaObject[],
  deleting: boolean,
  instances: readonly InstanceObject[],
  instanceType: (name: string) => InstanceTypeSize | undefined,
  now: number,
): PlanPart {
  const part = emptyPart();
  const named = new Set(change.map((q) => `${q.metadata?.namespace ?? 'default'}/${q.metadata?.name}`));
  const keyOf = (q: QuotaObject) => `${q.metadata?.namespace}/${q.metadata?.name}`;
  const kept = current.filter((q) => !named.has(keyOf(q)));
  const changed = change.map((q) => {
    const was = current.find((c) => keyOf(c) === `${q.metadata?.namespace ?? 'default'}/${q.metadata?.name}`);
    // A new Quota is created now, as the API would stamp it; one there keeps its age and ledger.
    const metadata = {
      ...q.metadata,
      namespace: q.metadata?.namespace ?? 'default',
      creationTimestamp: was?.metadata?.creationTimestamp ?? nowText(now),
    };
    return { ...q, metadata, ...(was?.status ? { status: was.status } : {}) };
  });
  const after = deleting ? kept : [...kept, ...changed];
  for (const ns of [...new Set(changed.map((q) => q.metadata.namespace))].sort()) {
    const before = inForce(current, ns);
    const quota = inForce(after, ns);
    const pool = instances
      .filter((i) => i.metadata.namespace === ns)
      .map((i) => ({ inst: i, ...counted(i, instanceType) }));
    const decision = decideUnder(
      quota,
      quota && before && keyOf(quota) === keyOf(before) ? before.status?.claims : [],
      pool.map((p) => p.candidate),
      new Set(),
      nowText(now),
    );
    const by = quota ? `Quota ${keyOf(quota)}` : `no Quota in ${ns}`;
    const waiting: string[] = [];
    for (const { inst, candidate, cell } of pool) {
      const v = decision.verdicts.get(candidate.uid);
      if (!v || inst.metadata.deletionTimestamp) continue;
      const where = cell ? ` (cell ${cell})` : '';
      const was = findCondition(inst.status?.conditions, QUOTA_CONDITION);
      if (v.granted && was?.status !== 'True')
        part.effects.push({
          kind: 'Instance',
          name: `${ns}/${candidate.name}`,
          op: '+',
          what: `quota granted${where}`,
          by,
        });
      else if (!v.granted) waiting.push(`${candidate.name}${where}: ${v.message}`);
    }
    const budget = budgetOf(quota?.spec ?? {});
    const usage = usageText(decision.used, budget);
    if (quota && before && keyOf(before) !== keyOf(quota))
      part.effects.push({
        kind: 'Quota',
        name: keyOf(before),
        op: '-',
        what: `no longer in force in ${ns}`,
        by,
      });
    if (!quota && before)
      part.effects.push({
        kind: 'Quota',
        name: keyOf(before),
        op: '-',
        what: `no longer limits ${ns} (${usageText(usedBy(before.status?.claims ?? []), budgetOf(before.spec ?? {}))} used): every instance is granted`,
        by: `Quota ${keyOf(before)}`,
      });
    if (quota && named.has(keyOf(quota)))
      part.effects.push({
        kind: 'Quota',
        name: keyOf(quota),
        op: before && keyOf(before) === keyOf(quota) ? '~' : '+',
        what: `${decision.over.length ? 'OverBudget' : 'WithinBudget'}: ${usage} used, ${decision.waiting} waiting`,
        by,
      });
    if (waiting.length)
      part.warnings.push(`${by} would leave ${waiting.length} instance(s) waiting: ${waiting.join('; ')}`);
    if (decision.over.length)
      part.warnings.push(
        `${by}: ${usage} used, over its budget: the running instances are kept (nothing is revoked), but none is granted, a rollout's replacements included, until use is back within it`,
      );
  }
  return part;
}

/** The instances the quota controller counts here: a cluster's own (`local`), or the mirrors of the cells' (`management`). */
export async function planQuotaObjects(ctx: PlanContext, source: 'local' | 'management'): Promise<PlanPart> {
  const [quotas, instances, types] = await Promise.all([
    ctx.client.list<QuotaObject>(Quota.ref).then((l) => l.items),
    ctx.client
      .list<InstanceObject>(Instance.ref, {
        query: { labelSelector: source === 'management' ? `${MIRROR_LABEL}=true` : `!${MIRROR_LABEL}` },
      })
      .then((l) => l.items),
    ctx.client.list<InstanceTypeObject>(InstanceType.ref).then((l) => l.items),
  ]);
  const sizes = new Map(types.map((t) => [t.metadata!.name!, t.spec!]));
  const part = planQuotas(
    quotas,
    ctx.objects as QuotaObject[],
    ctx.deleting,
    instances,
    (n) => sizes.get(n),
    Date.now(),
  );
  if (source === 'management' && instances.some((i) => i.spec?.template?.instanceType))
    part.unknown.push(
      "instances sized by an InstanceType are sized here with this cluster's InstanceTypes: the quota controller reads each cell's",
    );
  return part;
}
