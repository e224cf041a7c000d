// `berth plan` of Quotas: which instances of a namespace the Quota in force (its oldest) would grant
// or leave waiting once the change is made, decided by decideGrants over the Quota's ledger as the
// quota controller does. In a cluster the instances are its own; on a management plane (the `quota`
// capability) they are the cells' instances as their mirrors here show them.
import { findCondition } from '../runtime/api/conditions.ts';
import { localCluster } from '../runtime/cluster/key.ts';
import { emptyPart, ofKind, replaced, type PlanContext, type PlanPart } from '../policy/plan.ts';
import { apiTime, type KubeObject } from '../runtime/api/meta.ts';
import { candidateOf, oldestFirst, QUOTA_CONDITION, type QuotaObject } from './decide/quota.ts';
import type { DeploymentObject } from './controllers/deployment.ts';
import { boundedReplicas, instanceName, templateHash, templateRevision } from './decide/revisions.ts';
import {
  byInstanceType,
  controlledBy,
  type InstanceObject,
  type InstanceTypeObject,
} from './decide/instances.ts';
import { instanceState, nextStep, type InstanceState } from './decide/step.ts';
import { budgetOf, decideUnder, usageText, usedBy, type Candidate } from './decide/grant.ts';
import type { InstanceTypeSize } from './resources.ts';
import {
  DEPLOYMENT_LABEL,
  MAX_REPLICAS,
  OWN_INSTANCES,
  type InstanceTemplate,
  type QuotaClaim,
  MIRROR_CELL_LABEL,
  MIRROR_LABEL,
  SOURCE_ANNOTATION,
  SOURCE_UID_ANNOTATION,
} from './types.ts';
import { Instance, InstanceType, WorkloadDeployment, Quota } from './crd.ts';

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
  const changed = change.map((q) => ({
    ...q,
    metadata: { ...q.metadata, namespace: q.metadata?.namespace ?? 'default' },
  }));
  // A new Quota is created now, as the API would stamp it; one there keeps its age and ledger.
  const after = replaced([...current], changed, deleting, now);
  for (const ns of [...new Set(changed.map((q) => q.metadata.namespace))].sort())
    quotaNamespace(part, ns, current, after, named, instances, instanceType, now);
  return part;
}

/** planQuotas in one namespace: the verdicts that change, the Quotas' own effects, and what waits. */
function quotaNamespace(
  part: PlanPart,
  ns: string,
  current: readonly QuotaObject[],
  after: readonly QuotaObject[],
  named: Set<string>,
  instances: readonly InstanceObject[],
  instanceType: (name: string) => InstanceTypeSize | undefined,
  now: number,
): void {
  const before = inForce(current, ns);
  const quota = inForce(after, ns);
  const pool = instances
    .filter((i) => i.metadata.namespace === ns)
    .map((i) => ({ inst: i, ...counted(i, instanceType) }));
  const decision = decideUnder(
    quota,
    quota && before && quotaKey(quota) === quotaKey(before) ? before.status?.claims : [],
    pool.map((p) => p.candidate),
    new Set(),
    apiTime(now),
  );
  const by = quota ? `Quota ${quotaKey(quota)}` : `no Quota in ${ns}`;
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
  if (quota && before && quotaKey(before) !== quotaKey(quota))
    part.effects.push({
      kind: 'Quota',
      name: quotaKey(before),
      op: '-',
      what: `no longer in force in ${ns}`,
      by,
    });
  if (!quota && before)
    part.effects.push({
      kind: 'Quota',
      name: quotaKey(before),
      op: '-',
      what: `no longer limits ${ns} (${usageText(usedBy(before.status?.claims ?? []), budgetOf(before.spec ?? {}))} used): every instance is granted`,
      by: `Quota ${quotaKey(before)}`,
    });
  if (quota && named.has(quotaKey(quota)))
    part.effects.push({
      kind: 'Quota',
      name: quotaKey(quota),
      op: before && quotaKey(before) === quotaKey(quota) ? '~' : '+',
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

/** The sizes of InstanceTypes as the change would leave them: its own in place of the cluster's. */
export const sizesAfter = (ctx: PlanContext, types: InstanceTypeObject[]): Map<string, InstanceTypeSize> =>
  new Map(
    replaced(
      types,
      ofKind(ctx.all, 'InstanceType', false) as InstanceTypeObject[],
      ctx.deleting,
      Date.now(),
    ).map((t) => [t.metadata!.name!, t.spec!]),
  );

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
  const sizes = sizesAfter(ctx, types);
  const part = planQuotas(
    quotas,
    ctx.objects as QuotaObject[],
    ctx.deleting,
    instances,
    (n) => sizes.get(n),
    Date.now(),
  );
  if (ctx.all.some((o) => o.kind === 'Workload' || o.kind === 'WorkloadDeployment'))
    part.unknown.push(
      "a Quota's counts here are of the instances that run now: those of the change's Workloads and WorkloadDeployments, and what the Quota grants them, are in their own lines",
    );
  if (source === 'management' && instances.some((i) => i.spec?.template?.instanceType))
    part.unknown.push(
      "instances sized by an InstanceType are sized here with this cluster's InstanceTypes: the quota controller reads each cell's",
    );
  return part;
}

/** A WorkloadDeployment as `berth plan` steps it: its instances now, and what it would want. */
export interface Stepped {
  namespace: string;
  name: string;
  /** The cluster it runs in (on a management plane, its cell): the quota line's tie-break. */
  cluster: string;
  replicas: number;
  policy: 'OrderedReady' | 'Parallel';
  hash: string;
  template: InstanceTemplate | undefined;
  states: InstanceState[];
  /** Name to uid: its instances now, and those the plan makes. */
  uids: Map<string, string>;
  /** Its instances now: name to template hash. */
  start: Map<string, string>;
  rolled: Set<string>;
  made: Set<string>;
  /** The step it stops at: the instance it waits for. */
  waitingFor?: InstanceState;
}

/** A deployment with `instances` (named and identified as in its cluster), wanting nothing yet. */
export function stepped(
  namespace: string,
  name: string,
  cluster: string,
  instances: InstanceObject[],
): Stepped {
  const states = instances.map(instanceState);
  return {
    namespace,
    name,
    cluster,
    replicas: 0,
    policy: 'OrderedReady',
    hash: '',
    template: undefined,
    states,
    uids: new Map(instances.map((i) => [i.metadata.name!, i.metadata.uid ?? ''])),
    start: new Map(states.map((s) => [s.name, s.hash])),
    rolled: new Set(),
    made: new Set(),
  };
}

/** What the quota controller would say of each new instance (by uid): granted, or why it waits. */
export type Said = Map<string, { granted: boolean; message?: string; quota: string }>;

/** More than any deployment's steps: each instance is made, and rolled, once. */
const MAX_ROUNDS = 4 * MAX_REPLICAS + 8;
const quotaKey = (q: QuotaObject) => `${q.metadata?.namespace}/${q.metadata?.name}`;

/**
 * Steps every deployment's plan (the deployment controller's), round after round, as its events
 * would, each round's new instances decided by the Quota of their namespace over `counted` (every
 * instance the quota controller counts, all clusters together, oldest first; `quotas` undefined: no
 * quota is decided here, every instance is taken as granted), a granted one taken to become Ready,
 * until none moves.
 */
export function stepDeployments(ds: Stepped[], f: StepFacts, part: PlanPart): Said {
  const s = startPools(ds, f);
  for (let round = 1; round <= MAX_ROUNDS; round++) {
    const made = ds.flatMap((c) => stepOnce(c, s, f, round));
    if (!s.moved) break;
    s.moved = false;
    if (!f.quotas || !made.length) continue;
    for (const ns of s.pool.keys()) grantRound(ds, made, ns, s, f.quotas, f.now, part);
  }
  return s.said;
}

interface StepFacts {
  counted: readonly InstanceObject[];
  quotas?: QuotaObject[];
  instanceType: (name: string) => InstanceTypeSize | undefined;
  now: number;
}

/** What the rounds carry: each namespace's candidates and quota ledger, the instances gone, what quota said. */
interface Pools {
  said: Said;
  /** By namespace: the quota controller's candidates, by uid. */
  pool: Map<string, Map<string, Candidate>>;
  ledgers: Map<string, QuotaClaim[] | undefined>;
  gone: Set<string>;
  /** Some deployment acted this round. */
  moved: boolean;
  /** The race of cells for a quota's last room is said once. */
  racing: boolean;
}

function startPools(ds: Stepped[], f: StepFacts): Pools {
  const s: Pools = {
    said: new Map(),
    pool: new Map(),
    ledgers: new Map(),
    gone: new Set(),
    moved: false,
    racing: false,
  };
  for (const ns of new Set(ds.map((c) => c.namespace))) {
    const of = f.counted
      .filter((m) => m.metadata.namespace === ns)
      .map((m) => counted(m, f.instanceType).candidate);
    s.pool.set(ns, new Map(of.map((c) => [c.uid, c])));
    s.ledgers.set(ns, f.quotas ? inForce(f.quotas, ns)?.status?.claims : []);
  }
  return s;
}

/** One deployment's next step, applied to its states and its namespace's pool: itself once per instance it made. */
function stepOnce(c: Stepped, s: Pools, f: StepFacts, round: number): Stepped[] {
  const step = nextStep({
    name: c.name,
    replicas: c.replicas,
    policy: c.policy,
    hash: c.hash,
    instances: c.states,
  });
  c.waitingFor = step.waitingFor;
  s.moved ||= step.actions.length > 0;
  const pool = s.pool.get(c.namespace)!;
  const made: Stepped[] = [];
  for (const a of step.actions) {
    if (a.type === 'delete') {
      c.states = c.states.filter((st) => st.name !== a.name);
      if (a.rollout) c.rolled.add(a.name);
      s.gone.add(c.uids.get(a.name) ?? '');
      pool.delete(c.uids.get(a.name) ?? '');
      continue;
    }
    const name = instanceName(c.name, a.ordinal);
    const uid = `planned:${c.cluster}/${c.namespace}/${name}/${round}`;
    c.uids.set(name, uid);
    c.made.add(name);
    const granted = !f.quotas;
    c.states.push({
      name,
      ordinal: a.ordinal,
      hash: c.hash,
      ready: granted,
      available: granted,
      programmed: true,
      deleting: false,
      notReadySince: f.now,
    });
    const inst = {
      metadata: { name, uid, namespace: c.namespace, creationTimestamp: apiTime(f.now + round * 1000) },
      spec: { template: c.template },
    } as unknown as InstanceObject;
    pool.set(uid, { ...candidateOf(c.cluster, inst, f.instanceType) });
    made.push(c);
  }
  return made;
}

/** A round's new instances of one namespace decided by its Quota, as the quota controller would. */
function grantRound(
  ds: Stepped[],
  made: Stepped[],
  ns: string,
  s: Pools,
  quotas: QuotaObject[],
  now: number,
  part: PlanPart,
): void {
  const quota = inForce(quotas, ns);
  const d = decideUnder(quota, s.ledgers.get(ns), [...s.pool.get(ns)!.values()], s.gone, apiTime(now));
  s.ledgers.set(ns, d.claims);
  const clustersOf = (granted: boolean) =>
    new Set(
      made
        .filter(
          (c) =>
            c.namespace === ns &&
            c.states.some(
              (st) =>
                c.made.has(st.name) && !st.ready && d.verdicts.get(c.uids.get(st.name)!)?.granted === granted,
            ),
        )
        .map((c) => c.cluster),
    );
  // New instances of one round in several clusters, some granted and some not: which cluster
  // creates its instance first decides.
  const [yes, no] = [clustersOf(true), clustersOf(false)];
  if (!s.racing && yes.size && no.size && new Set([...yes, ...no]).size > 1) {
    s.racing = true;
    part.unknown.push(
      `the last of Quota ${quota ? quotaKey(quota) : ns} goes to whichever cell creates its instance first: which instance waits is a race`,
    );
  }
  for (const c of ds.filter((x) => x.namespace === ns))
    for (const st of c.states) {
      const v = d.verdicts.get(c.uids.get(st.name) ?? '');
      if (!v || st.ready) continue;
      if (v.granted) Object.assign(st, { ready: true, available: true });
      if (c.made.has(st.name))
        s.said.set(c.uids.get(st.name)!, {
          granted: v.granted,
          ...(v.granted ? {} : { message: v.message }),
          quota: quota ? `Quota ${quotaKey(quota)}` : `no Quota in ${ns}`,
        });
    }
}

/**
 * A stepped deployment's instances made, rolled or deleted, each with what quota said; a warning
 * when new ones wait for quota, and what the plan cannot know when it stops behind an instance of
 * its own that is not Ready.
 */
export function instanceEffects(
  c: Stepped,
  said: Said,
  o: { where: string; by: string; owner: string },
  part: PlanPart,
): void {
  const { where, by } = o;
  const at = where ? ` ${where}` : '';
  const now = new Map([...c.states].sort((a, b) => a.ordinal - b.ordinal).map((s) => [s.name, s]));
  const quota = (name: string) => {
    const s = said.get(c.uids.get(name) ?? '');
    if (!s) return '';
    return s.granted ? `; quota granted (${s.quota})` : `; waits for quota: ${s.message} (${s.quota})`;
  };
  const effect = (op: '+' | '-' | '~', name: string, what: string) =>
    part.effects.push({ kind: 'Instance', name: `${c.namespace}/${name}`, op, what, by });
  for (const [name, s] of now) {
    if (!c.start.has(name)) effect('+', name, `${where || 'created'}${quota(name)}`);
    else if (c.rolled.has(name))
      effect('~', name, `${where ? `${where}: ` : ''}rolled to template ${s.hash}${quota(name)}`);
  }
  for (const name of c.start.keys()) if (!now.has(name)) effect('-', name, `deleted${at}`);
  const waiting = [...now.values()].filter(
    (s) => c.made.has(s.name) && said.get(c.uids.get(s.name)!)?.granted === false,
  );
  if (waiting.length) {
    const behind = c.replicas - now.size;
    part.warnings.push(
      `${o.owner} would exceed its quota${at}: ${waiting.map((s) => s.name).join(', ')} wait${behind > 0 ? `, and ${behind} more instance(s) are not created until it is granted (OrderedReady)` : ''}`,
    );
  } else if (c.waitingFor && !c.made.has(c.waitingFor.name))
    part.unknown.push(
      `WorkloadDeployment ${c.namespace}/${c.name}${at} waits for instance ${c.waitingFor.name} (${c.waitingFor.reason ?? 'not Ready'}): what follows it depends on the cluster`,
    );
}

/**
 * What applying (or deleting) WorkloadDeployments would do in this cluster: each one's instances
 * made, rolled or deleted (its plan stepped to its end), granted or left waiting by the Quota of
 * their namespace here.
 */
export async function planDeploymentObjects(ctx: PlanContext): Promise<PlanPart> {
  const part = emptyPart();
  const [current, instances, quotasNow, types] = await Promise.all([
    ctx.client.list<DeploymentObject>(WorkloadDeployment.ref).then((l) => l.items),
    ctx.client.list<InstanceObject>(Instance.ref, { query: OWN_INSTANCES }).then((l) => l.items),
    ctx.client.list<QuotaObject>(Quota.ref).then((l) => l.items),
    ctx.client.list<InstanceTypeObject>(InstanceType.ref).then((l) => l.items),
  ]);
  const sizes = sizesAfter(ctx, types);
  // The change's Quotas are in force as it would leave them (a WorkloadDeployment beside its Quota).
  const quotas = replaced(
    quotasNow,
    ofKind(ctx.all, 'Quota', true) as QuotaObject[],
    ctx.deleting,
    Date.now(),
  );
  const ds: [Stepped, string][] = [];
  for (const o of ctx.objects) {
    const d = steppedDeployment(ctx, o, current, instances, part);
    if (d) ds.push(d);
  }
  const said = stepDeployments(
    ds.map(([d]) => d),
    { counted: instances, quotas, instanceType: (n) => sizes.get(n), now: Date.now() },
    part,
  );
  for (const [d, by] of ds) {
    instanceEffects(d, said, { where: '', by, owner: by }, part);
    if (d.start.size && !d.states.length)
      part.warnings.push(`${by} would lose every instance (${d.start.size})`);
  }
  return part;
}

/** One WorkloadDeployment of the change, ready to step, and its own effect (made, changed, deleted). */
function steppedDeployment(
  ctx: PlanContext,
  o: KubeObject,
  current: readonly DeploymentObject[],
  instances: readonly InstanceObject[],
  part: PlanPart,
): [Stepped, string] | undefined {
  const r = WorkloadDeployment.parse({
    ...o,
    metadata: { ...o.metadata, namespace: o.metadata?.namespace ?? 'default' },
  });
  if (!r.success) {
    part.errors.push(r.error);
    return undefined;
  }
  const { metadata, spec } = r.data;
  const [ns, name] = [metadata.namespace!, metadata.name!];
  const was = current.find((d) => d.metadata.namespace === ns && d.metadata.name === name);
  const own = instances.filter(
    (i) =>
      i.metadata.namespace === ns &&
      (was ? controlledBy(i, was.metadata.uid) : i.metadata.labels?.[DEPLOYMENT_LABEL] === name),
  );
  const d = stepped(ns, name, localCluster, own);
  const by = `WorkloadDeployment ${ns}/${name}`;
  if (!ctx.deleting) {
    const { hash, bytes } = templateRevision(spec.template);
    const { replicas, bounded } = boundedReplicas(spec.replicas, bytes);
    if (bounded) part.warnings.push(`${by}: ${bounded} (ReplicasBounded)`);
    Object.assign(d, { replicas, policy: spec.instanceManagementPolicy, hash, template: spec.template });
  }
  const changed = was && [
    ...(was.spec.replicas !== spec.replicas ? [`replicas ${was.spec.replicas} -> ${spec.replicas}`] : []),
    ...(templateHash(was.spec.template) !== d.hash ? [`template -> ${d.hash}`] : []),
  ];
  if (ctx.deleting) {
    if (was)
      part.effects.push({
        kind: 'WorkloadDeployment',
        name: `${ns}/${name}`,
        op: '-',
        what: 'deleted',
        by,
      });
  } else if (!was)
    part.effects.push({
      kind: 'WorkloadDeployment',
      name: `${ns}/${name}`,
      op: '+',
      what: `${d.replicas} instance(s)`,
      by,
    });
  else if (changed?.length)
    part.effects.push({
      kind: 'WorkloadDeployment',
      name: `${ns}/${name}`,
      op: '~',
      what: changed.join(', '),
      by,
    });
  return [d, by];
}

/**
 * InstanceTypes: they size the change's own instances (sizesAfter). Instances that name one now keep
 * the Pods they were made with; new Pods and the quota's count take its new size, and one deleted
 * leaves them without a size (ConfigurationError): said, not stepped.
 */
export async function planInstanceTypes(ctx: PlanContext): Promise<PlanPart> {
  const part = emptyPart();
  const instances = (await ctx.client.list<InstanceObject>(Instance.ref)).items;
  for (const t of ctx.objects) {
    const name = t.metadata!.name!;
    const naming = instances.filter((i) => byInstanceType(i).includes(name)).length;
    if (!naming) continue;
    if (ctx.deleting)
      part.warnings.push(
        `InstanceType ${name} deleted: ${naming} instance(s) name it and would have no size (ConfigurationError): their running Pods stay, no new one is made and quota grants them nothing`,
      );
    else
      part.unknown.push(
        `InstanceType ${name}: ${naming} instance(s) name it now: their running Pods keep the resources they were made with; new Pods and the quota's count take its size (berth plan does not step this)`,
      );
  }
  return part;
}
