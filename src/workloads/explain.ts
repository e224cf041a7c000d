// `berth explain instance` and `berth explain workloaddeployment`: what an instance or a deployment
// waits for (quota, image, scheduling, the rollout) and since when, read from the cluster as it is.
// The quota answer (granted, or the place in line) comes from the quota controller's own decision
// (decide/grant.ts) over the same objects. Writes nothing.
import type { KubeClient } from '../runtime/client/client.ts';
import { localCluster } from '../runtime/cluster/key.ts';
import { findCondition } from '../runtime/api/conditions.ts';
import { Resources, type KubeObject } from '../runtime/api/meta.ts';
import { isFormerPod } from './decide/pods.ts';
import { conditionLine, since, type Said, type Subject } from '../policy/explain.ts';
import { budgetOf, decideGrants, sizeText, usageText } from './decide/grant.ts';
import { type InstanceTypeObject } from './controllers/quota.ts';
import { candidateOf, oldestFirst, QUOTA_CONDITION, type QuotaObject } from './decide/quota.ts';
import type { CachedInstance } from './decide/instances.ts';
import {
  DEPLOYMENT_LABEL,
  OWN_INSTANCES,
  QUOTA_GATE,
  type WorkloadDeploymentSpec,
  type WorkloadDeploymentStatus,
} from './types.ts';
import { Instance, InstanceType, Quota } from './crd.ts';

export interface InstanceView {
  instance: CachedInstance;
  pod: PodView | undefined;
  /** The namespace's Quotas, instances and the cluster's InstanceTypes: what the quota decision reads. */
  quotas: QuotaObject[];
  instances: CachedInstance[];
  instanceTypes: InstanceTypeObject[];
}

type ContainerState = { reason?: string; message?: string; exitCode?: number };
export type PodView = KubeObject & {
  spec?: { nodeName?: string; schedulingGates?: { name: string }[] };
  status?: {
    phase?: string;
    conditions?: {
      type: string;
      status: string;
      reason?: string;
      message?: string;
      lastTransitionTime?: string;
    }[];
    containerStatuses?: {
      name: string;
      ready?: boolean;
      restartCount?: number;
      state?: { waiting?: ContainerState; running?: { startedAt?: string }; terminated?: ContainerState };
      lastState?: { terminated?: ContainerState };
    }[];
  };
};

const ordinalText = (n: number) =>
  `${n}${n % 100 >= 11 && n % 100 <= 13 ? 'th' : (['th', 'st', 'nd', 'rd'][n % 10] ?? 'th')}`;

/** The lines about one instance: its conditions, its quota, its Pod. */
export function instanceLines(v: InstanceView, now = new Date()): string[] {
  const inst = v.instance;
  const out: string[] = [];
  const wd = inst.metadata?.labels?.[DEPLOYMENT_LABEL];
  const hash = inst.spec?.templateHash;
  const observed = inst.status?.observedTemplateHash;
  out.push(
    `  ${wd ? `WorkloadDeployment ${wd}, ordinal ${inst.spec?.ordinal}` : 'no WorkloadDeployment'}; template ${hash ?? '(none)'}` +
      (observed && observed !== hash ? `, its Pod runs template ${observed}` : '') +
      `; created ${since(inst.metadata?.creationTimestamp, now).slice('since '.length)}`,
  );
  if (inst.metadata?.deletionTimestamp)
    out.push(`  being deleted ${since(inst.metadata.deletionTimestamp, now)}`);
  for (const c of inst.status?.conditions ?? [])
    if (c.type !== QUOTA_CONDITION) out.push(conditionLine(c, now));
  out.push(...quotaLines(v, now));
  out.push(...podLines(v.pod, now));
  return out;
}

/**
 * The quota controller's decision over a namespace as listed: the Quota that decides it (the
 * oldest), its budget, and each instance's verdict.
 */
function namespaceGrants(v: Pick<InstanceView, 'quotas' | 'instances' | 'instanceTypes'>, now: Date) {
  const [quota] = [...v.quotas].sort(oldestFirst);
  const types = new Map(v.instanceTypes.map((t) => [t.metadata?.name ?? '', t.spec]));
  const listed = new Set(v.instances.map((i) => i.metadata?.uid));
  const budget = quota ? budgetOf(quota.spec ?? {}) : {};
  const decision = decideGrants(
    budget,
    quota?.status?.claims ?? [],
    v.instances.map((i) => candidateOf(localCluster, i, (n) => types.get(n))),
    // Instances of other clusters are out of sight here: their claims count.
    { gone: (c) => c.cluster === localCluster && !listed.has(c.uid), now: now.toISOString() },
  );
  return { quota, budget, decision, types };
}

/**
 * `berth explain quota NAMESPACE/NAME`: the instances of its namespace it grants and those that
 * wait (their place in line, what they need), from the quota controller's own decision.
 */
export function explainQuota(
  name: string,
  v: Pick<InstanceView, 'quotas' | 'instances' | 'instanceTypes'>,
  now = new Date(),
): Said {
  const { quota, budget, decision } = namespaceGrants(v, now);
  if (quota?.metadata?.name !== name)
    return { lines: [`  decides nothing: the older Quota ${quota?.metadata?.name} decides this namespace`] };
  const subjects: Subject[] = v.instances.map((i) => {
    const verdict = decision.verdicts.get(i.metadata?.uid ?? '');
    const id = `${i.metadata?.namespace}/${i.metadata?.name}`;
    if (!verdict) return { kind: 'Instance', name: id, in: false, why: ['being deleted, holds no claim'] };
    if (verdict.granted)
      return {
        kind: 'Instance',
        name: id,
        in: true,
        why: [`granted${verdict.adopted ? ' (adopted)' : ''}: ${sizeText(verdict.claim)}`],
      };
    return {
      kind: 'Instance',
      name: id,
      in: false,
      why: [`${verdict.place ? `${ordinalText(verdict.place)} in line: ` : ''}${verdict.message}`],
    };
  });
  return { subjects, lines: [`  ${usageText(decision.used, budget)} used, ${decision.waiting} waiting`] };
}

function quotaLines(v: InstanceView, now: Date): string[] {
  const inst = v.instance;
  const ns = inst.metadata?.namespace ?? '';
  const cond = findCondition(inst.status?.conditions, QUOTA_CONDITION);
  if (cond?.status === 'True')
    return [`  quota: granted (${cond.reason}) ${since(cond.lastTransitionTime, now)}: ${cond.message}`];
  // Refused with no Quota here to refuse it: a quota controller elsewhere decides (a cell run with
  // --quota-source=management), and a decision made from this namespace alone would contradict it.
  if (cond && !v.quotas.length)
    return [
      `  quota: not granted (${cond.reason}) ${since(cond.lastTransitionTime, now)}: ${cond.message}; ` +
        `no Quota in namespace ${ns} here: in a cell run with --quota-source=management the ` +
        "management plane's Quota decides; else Berth grants it on its next pass",
    ];
  // Listed a moment apart, the instance may be missing from the namespace's list: it counts all the same.
  const all = v.instances.some((i) => i.metadata?.uid === inst.metadata?.uid)
    ? v.instances
    : [...v.instances, inst];
  const { quota, budget, decision, types } = namespaceGrants({ ...v, instances: all }, now);
  const verdict = decision.verdicts.get(inst.metadata?.uid ?? '');
  const told = cond
    ? ` (${cond.reason} ${since(cond.lastTransitionTime, now)})`
    : ' (not evaluated yet: is Berth running?)';
  if (!verdict) return ['  quota: none (being deleted)'];
  if (verdict.granted)
    return [
      quota
        ? `  quota: room in Quota ${quota.metadata?.name}: Berth grants it on its next pass${told}`
        : `  quota: no Quota in namespace ${ns}: Berth grants it at once${told}`,
    ];
  if (verdict.reason === 'ConfigurationError') return [`  quota: not granted: ${verdict.message}`];
  const waiting = `waiting ${since(inst.metadata?.creationTimestamp, now)}`;
  if (verdict.place === undefined) return [`  quota: never granted, ${verdict.message}; ${waiting}`];
  const c = candidateOf(localCluster, inst, (n) => types.get(n));
  return [
    `  quota: waiting, ${ordinalText(verdict.place)} in line for Quota ${quota?.metadata?.name} ` +
      `(${usageText(decision.used, budget)} used); needs ${'error' in c.size ? '?' : sizeText(c.size)}; ${waiting}`,
  ];
}

function podLines(pod: PodView | undefined, now: Date): string[] {
  if (!pod) return ['  pod: none yet'];
  const out: string[] = [];
  const gates = (pod.spec?.schedulingGates ?? []).map((g) => g.name);
  const phase = pod.status?.phase ?? 'Pending';
  out.push(
    `  pod ${pod.metadata?.name}: ${phase}` +
      (pod.spec?.nodeName ? ` on node ${pod.spec.nodeName}` : '') +
      (gates.includes(QUOTA_GATE) ? `, gated by ${QUOTA_GATE} until the quota is granted` : '') +
      (gates.some((g) => g !== QUOTA_GATE)
        ? `, other scheduling gates: ${gates.filter((g) => g !== QUOTA_GATE).join(', ')}`
        : ''),
  );
  const conds = pod.status?.conditions ?? [];
  const scheduled = conds.find((c) => c.type === 'PodScheduled');
  if (scheduled?.status === 'False' && scheduled.reason !== 'SchedulingGated')
    out.push(
      `    not scheduled (${scheduled.reason}) ${since(scheduled.lastTransitionTime, now)}: ${scheduled.message ?? ''}`,
    );
  const ready = conds.find((c) => c.type === 'Ready');
  if (ready) out.push(`    Ready: ${ready.status} ${since(ready.lastTransitionTime, now)}`);
  for (const cs of pod.status?.containerStatuses ?? []) {
    const w = cs.state?.waiting;
    const last = cs.lastState?.terminated;
    const restarts = cs.restartCount ? `, restarted ${cs.restartCount} times` : '';
    if (w)
      out.push(
        `    container ${cs.name}: waiting (${w.reason ?? '?'})${w.message ? `: ${w.message}` : ''}${restarts}`,
      );
    else if (cs.state?.running)
      out.push(`    container ${cs.name}: running ${since(cs.state.running.startedAt, now)}${restarts}`);
    else if (cs.state?.terminated)
      out.push(`    container ${cs.name}: terminated (${cs.state.terminated.reason ?? '?'})${restarts}`);
    if (last && cs.restartCount)
      out.push(
        `      last ended: ${last.reason ?? '?'} (exit code ${last.exitCode ?? '?'})${last.message ? `: ${last.message}` : ''}`,
      );
  }
  return out;
}

/** Reads what explaining an instance needs, and explains it. */
export async function explainInstance(client: KubeClient, object: KubeObject): Promise<string[]> {
  const inst = object as CachedInstance;
  const ns = inst.metadata?.namespace ?? '';
  const [pod, quotas, instances, instanceTypes] = await Promise.all([
    client.get<PodView>(Resources.pods, inst.metadata?.name ?? '', ns).catch(() => undefined),
    client.list<QuotaObject>(Quota.ref, { namespace: ns }).then((l) => l.items),
    // Mirrors of the cells' instances are not this cluster's to count (OWN_INSTANCES, as the quota controller).
    client.list<CachedInstance>(Instance.ref, { namespace: ns, query: OWN_INSTANCES }).then((l) => l.items),
    client.list<InstanceTypeObject>(InstanceType.ref).then((l) => l.items),
  ]);
  // A Pod of that name that the instance does not own is not its Pod.
  const owned = pod?.metadata?.ownerReferences?.some((o) => o.uid === inst.metadata?.uid) ? pod : undefined;
  return instanceLines({ instance: inst, pod: owned, quotas, instances, instanceTypes });
}

export type WorkloadDeploymentObject = KubeObject & {
  spec?: Partial<WorkloadDeploymentSpec>;
  status?: WorkloadDeploymentStatus;
};

/**
 * The lines about a deployment: its counts and conditions, the rollout, each instance in a line, and
 * the Pods of its instances that are gone (deleted in the background) while they are still going
 * (`formerPods`, as the plan counts them: isFormerPod).
 */
export function deploymentLines(
  wd: WorkloadDeploymentObject,
  instances: CachedInstance[],
  now = new Date(),
  formerPods: KubeObject[] = [],
): string[] {
  const s = wd.status ?? {};
  const desired = s.templateHash;
  const out = [
    `  ${wd.spec?.replicas ?? '?'} desired, ${s.replicas ?? 0} exist, ${s.readyReplicas ?? 0} ready, ` +
      `${s.availableReplicas ?? 0} available, ${s.updatedReplicas ?? 0} on template ${desired ?? '(not reconciled yet)'}; ` +
      `${wd.spec?.instanceManagementPolicy ?? 'OrderedReady'}` +
      (s.observedGeneration !== undefined && s.observedGeneration !== wd.metadata?.generation
        ? `; status is of generation ${s.observedGeneration}, the spec is at ${wd.metadata?.generation}`
        : ''),
  ];
  for (const c of s.conditions ?? []) out.push(conditionLine(c, now));
  const sorted = [...instances].sort((a, b) => (a.spec?.ordinal ?? 0) - (b.spec?.ordinal ?? 0));
  const drifted = desired ? sorted.filter((i) => i.spec?.templateHash !== desired) : [];
  if (drifted.length)
    out.push(
      `  rollout: ${drifted.length} instance(s) on an older template (${drifted.map((i) => i.metadata?.name).join(', ')}), ` +
        'recreated one at a time, highest ordinal first, each after the one before is Ready',
    );
  for (const i of sorted) {
    const ready = findCondition(i.status?.conditions, 'Ready');
    const state = i.metadata?.deletionTimestamp
      ? `being deleted ${since(i.metadata.deletionTimestamp, now)}`
      : ready?.status === 'True'
        ? `Ready ${since(ready.lastTransitionTime, now)}`
        : ready
          ? `not Ready (${ready.reason}) ${since(ready.lastTransitionTime, now)}${ready.message ? `: ${ready.message}` : ''}`
          : `not reconciled yet, created ${since(i.metadata?.creationTimestamp, now).slice('since '.length)}`;
    const older =
      desired && i.spec?.templateHash !== desired ? ` [older template ${i.spec?.templateHash}]` : '';
    out.push(`  instance ${i.metadata?.name}: ${state}${older}`);
  }
  if (instances.length === 0) out.push('  no instances');
  for (const p of formerPods) {
    const when = p.metadata?.deletionTimestamp
      ? `terminating ${since(p.metadata.deletionTimestamp, now)}`
      : 'to be deleted';
    out.push(`  pod ${p.metadata?.name} of a deleted instance: ${when}; the next step waits for it to go`);
  }
  return out;
}

export async function explainWorkloadDeployment(client: KubeClient, object: KubeObject): Promise<string[]> {
  const wd = object as WorkloadDeploymentObject;
  const query = {
    namespace: wd.metadata?.namespace ?? '',
    query: { labelSelector: `${DEPLOYMENT_LABEL}=${wd.metadata?.name}` },
  };
  const [labelled, pods] = await Promise.all([
    client.list<CachedInstance>(Instance.ref, query).then((l) => l.items),
    client.list(Resources.pods, query).then((l) => l.items),
  ]);
  const instances = labelled.filter((i) =>
    i.metadata?.ownerReferences?.some((o) => o.uid === wd.metadata?.uid),
  );
  const uidOf = new Map(labelled.map((i) => [i.metadata?.name, i.metadata?.uid]));
  const former = pods.filter((p) => isFormerPod(p, (name) => uidOf.get(name)));
  return deploymentLines(wd, instances, new Date(), former);
}

/** Reads what explaining a Quota needs (its namespace's Quotas and instances, the InstanceTypes), and explains it. */
export async function explainQuotaObject(client: KubeClient, object: KubeObject): Promise<Said> {
  const namespace = object.metadata?.namespace ?? '';
  const [quotas, instances, instanceTypes] = await Promise.all([
    client.list<QuotaObject>(Quota.ref, { namespace }).then((l) => l.items),
    client.list<CachedInstance>(Instance.ref, { namespace, query: OWN_INSTANCES }).then((l) => l.items),
    client.list<InstanceTypeObject>(InstanceType.ref).then((l) => l.items),
  ]);
  return explainQuota(object.metadata?.name ?? '', { quotas, instances, instanceTypes });
}
