import type { CachedInstance } from './instances.ts';
// Workloads' pure decisions of quota: the Quota in force, an instance as the grant decision sees it
// (sized), which instances a quota controller counts, the QuotaGranted condition of a verdict and the
// Quota's status. No I/O: controllers/quota.ts gathers and writes (the grant itself is grant.ts).
import { isDeepStrictEqual } from 'node:util';
import {
  findCondition,
  sameConditions,
  setCondition,
  type Condition,
  type ConditionStatus,
} from '../../runtime/api/conditions.ts';
import { type KubeObject } from '../../runtime/api/meta.ts';
import { budgetOf, dimensionNames, usageText, type Candidate, type Decision } from './grant.ts';
import {
  formatBytes,
  formatCPU,
  instanceSize,
  type InstanceTypeSize,
  type SizedTemplate,
} from '../resources.ts';
import { type QuotaClaim, type QuotaReason, type QuotaStatus } from '../types.ts';

export type QuotaObject = KubeObject & {
  spec?: { instances?: number; cpu?: string; memory?: string };
  status?: QuotaStatus;
};

export const QUOTA_CONDITION = 'QuotaGranted';

/** What a QuotaGranted condition says, as the quota controller writes it. */
export interface QuotaVerdict {
  status: ConditionStatus;
  reason: QuotaReason;
  message: string;
}

/** Oldest first: the Quota in force in a namespace is its oldest; any other is Superseded. */
export const oldestFirst = (a: KubeObject, b: KubeObject) =>
  (a.metadata?.creationTimestamp ?? '').localeCompare(b.metadata?.creationTimestamp ?? '') ||
  (a.metadata?.name ?? '').localeCompare(b.metadata?.name ?? '');

/**
 * The size of each template last sized, with the InstanceType it was sized with. A pass sizes every
 * instance of its namespace; informer objects are replaced on update, never changed in place, so an
 * unchanged template object with the same InstanceType object has the same size.
 */
const sized = new WeakMap<SizedTemplate, { type: InstanceTypeSize | undefined; size: Candidate['size'] }>();

/** An instance's size (instanceSize), or why it has none: from `sized` while its template and type stand. */
function sizeOf(
  template: SizedTemplate | undefined,
  instanceType: (name: string) => InstanceTypeSize | undefined,
): Candidate['size'] {
  if (!template?.containers) return { error: 'it has no template' };
  const type = template.instanceType ? instanceType(template.instanceType) : undefined;
  const known = sized.get(template);
  if (known && known.type === type) return known.size;
  const s = instanceSize(template, () => type);
  const size = 'error' in s ? s : { milliCPU: s.milliCPU, memoryBytes: s.memoryBytes };
  sized.set(template, { type, size });
  return size;
}

/** An instance as the grant decision sees it, sized with its own cluster's InstanceTypes. */
export function candidateOf(
  cluster: string,
  inst: CachedInstance,
  instanceType: (name: string) => InstanceTypeSize | undefined,
): Candidate {
  const size = sizeOf(inst.spec?.template, instanceType);
  return {
    cluster,
    name: inst.metadata?.name ?? '',
    uid: inst.metadata?.uid ?? '',
    creationTimestamp: inst.metadata?.creationTimestamp ?? '',
    size,
    granted: findCondition(inst.status?.conditions, QUOTA_CONDITION)?.status === 'True',
    deleting: !!inst.metadata?.deletionTimestamp,
  };
}

/**
 * The instances of a namespace a quota controller counts, per cluster as given. On a management
 * plane (`serves`), only those of the cells that serve it, and not those granted by anyone else
 * (`foreign`: granted, neither in the ledger nor a management plane's grant), which are left as they
 * are; `unserved` says whether any were passed over for a cell that does not serve the namespace.
 */
export function countedInstances(
  namespace: string,
  ledger: readonly QuotaClaim[],
  clusters: readonly { cluster: string; instances: readonly CachedInstance[] }[],
  serves?: (cluster: string, namespace: string) => boolean,
): { counted: CachedInstance[][]; unserved: boolean; foreign: string[] } {
  if (!serves) return { counted: clusters.map((c) => [...c.instances]), unserved: false, foreign: [] };
  const held = new Set(ledger.map((c) => c.uid));
  const foreign: string[] = [];
  let unserved = false;
  const counted = clusters.map(({ cluster, instances }) => {
    if (instances.length && !serves(cluster, namespace)) {
      unserved = true;
      return [];
    }
    return instances.filter((inst) => {
      const c = findCondition(inst.status?.conditions, QUOTA_CONDITION);
      const ours = c?.status !== 'True' || held.has(inst.metadata?.uid ?? '') || managementGrant(c);
      if (!ours) foreign.push(`${cluster}/${inst.metadata?.name}`);
      return ours;
    });
  });
  return { counted, unserved, foreign: foreign.sort() };
}

/**
 * What ends the grants of a management plane's quota controller: by it, that controller tells its own
 * grants from those of anyone else who may write an instance's status in a cell (the cell's own
 * Berth granting locally, its admin), which it neither adopts nor counts.
 */
export const MANAGEMENT_GRANT = ' of the management plane';

/**
 * The QuotaGranted condition an instance's verdict gives; undefined for an instance being deleted
 * without a claim. A grant's message ends with `mark` (a management plane's MANAGEMENT_GRANT).
 */
export function verdictCondition(
  decision: Decision,
  uid: string,
  quota: string | undefined,
  namespace: string,
  mark = '',
): QuotaVerdict | undefined {
  const v = decision.verdicts.get(uid);
  if (!v) return undefined;
  if (!v.granted) return { status: 'False', reason: v.reason, message: v.message };
  return quota
    ? { status: 'True', reason: 'QuotaAvailable', message: `counted by Quota ${quota}${mark}` }
    : { status: 'True', reason: 'NoQuota', message: `no Quota in namespace ${namespace}${mark}` };
}

/** A grant a management plane's quota controller wrote (its message ends with MANAGEMENT_GRANT). */
export const managementGrant = (c: Pick<Condition, 'status' | 'reason' | 'message'> | undefined): boolean =>
  c?.status === 'True' &&
  (c.reason === 'QuotaAvailable' || c.reason === 'NoQuota') &&
  c.message.endsWith(MANAGEMENT_GRANT);

/**
 * The status a Quota in force gets from a decision; conditions keep their transition times. `unread`
 * names the engaged clusters decided without (they have not listed their instances in time).
 */
export function quotaStatus(
  quota: QuotaObject,
  decision: Decision,
  now: Date,
  unread: readonly string[] = [],
): QuotaStatus & { conditions: Condition[] } {
  const budget = budgetOf(quota.spec ?? {});
  const usage = usageText(decision.used, budget);
  const [one, its, it] =
    unread.length === 1 ? ['cluster', 'its', 'it answers'] : ['clusters', 'their', 'they answer'];
  const note = unread.length
    ? `; ${one} ${unread.join(', ')} not read: ${its} claims stay counted, ${its} waiting instances are decided once ${it}`
    : '';
  const ready = decision.over.length
    ? {
        status: 'False' as const,
        reason: 'OverBudget',
        message:
          `${usage} used, over the budget in ${decision.over.map((d) => dimensionNames[d]).join(', ')}: instances granted before this ` +
          `Quota counted them are kept (nothing is revoked); new ones wait until use is back within it${note}`,
      }
    : { status: 'True' as const, reason: 'WithinBudget', message: `${usage} used${note}` };
  return {
    ...(quota.metadata?.generation !== undefined ? { observedGeneration: quota.metadata.generation } : {}),
    used: {
      instances: decision.used.instances,
      cpu: formatCPU(decision.used.milliCPU),
      memory: formatBytes(decision.used.memoryBytes),
    },
    waiting: decision.waiting,
    claims: decision.claims,
    conditions: setCondition(
      quota.status?.conditions,
      {
        type: 'Ready',
        ...ready,
        ...(quota.metadata?.generation !== undefined
          ? { observedGeneration: quota.metadata.generation }
          : {}),
      },
      now,
    ),
  };
}

/** Equal but for the conditions' transition times: a status that needs no write. */
export function sameQuotaStatus(a: QuotaStatus | undefined, b: QuotaStatus): boolean {
  const { conditions: ca, ...ra } = a ?? {};
  const { conditions: cb, ...rb } = b;
  return isDeepStrictEqual(ra, rb) && sameConditions(ca, cb);
}

/**
 * How long a pass waits for an engaged cluster's first list before it decides without that cluster:
 * a cell that is down when Berth starts must not hold every namespace's grants in the other cells.
 */
