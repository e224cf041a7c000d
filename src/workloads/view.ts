// What the page shows of workloads in a cell: each WorkloadDeployment with its instances (by
// ordinal) and rollout numbers, why the quota gate holds an instance's pod, and how many instances
// run here. Instances are cached as the workloads controllers cache them: one cache serves both.
import type { PageHooks, PageKind } from '../capability.ts';
import { conditionOf, policyRow, readyOf, type WithStatus } from '../policy/view.ts';
import type { SlimPod } from '../policy/slim.ts';
import type { KubeObject } from '../runtime/api/meta.ts';
import type { InstanceRow, WorkloadRow } from '../ui/types.ts';
import { INSTANCE_CACHE } from './decide/instances.ts';
import { DEPLOYMENT_LABEL, QUOTA_GATE } from './types.ts';
import { Instance, WorkloadDeployment } from './crd.ts';

interface InstanceLike extends WithStatus {
  spec?: { ordinal?: number };
}

function instanceRow(obj: KubeObject): InstanceRow {
  const o = obj as InstanceLike;
  return {
    namespace: o.metadata?.namespace ?? '',
    name: o.metadata?.name ?? '',
    ordinal: o.spec?.ordinal ?? 0,
    ...readyOf(o),
    tone: conditionOf(o, 'Ready')?.tone ?? 'unknown',
    quota: conditionOf(o, 'QuotaGranted')?.reason ?? '',
  };
}

/** A WorkloadDeployment with its instances (by ordinal) and rollout numbers. */
export function workloadRow(obj: KubeObject, instances: KubeObject[]): WorkloadRow {
  return {
    ...policyRow('WorkloadDeployment', obj),
    desired: Number((obj as { spec?: { replicas?: number } }).spec?.replicas ?? 0),
    instances: instances.map(instanceRow).sort((a, b) => a.ordinal - b.ordinal),
  };
}

/** A pod the quota gate holds: what its Instance's QuotaGranted condition says, if it says anything yet. */
export function quotaReason(instance: WithStatus | undefined): string {
  const q = instance && conditionOf(instance, 'QuotaGranted');
  return `quota: ${q ? `${q.reason}${q.message ? `: ${q.message}` : ''}` : 'waiting for the quota controller'}`;
}

const workloadKind: PageKind = { sections: ['workloads', 'policies', 'pods'] };

export const workloadsPage: PageHooks = {
  kinds: {
    [WorkloadDeployment.kind]: workloadKind,
    [Instance.kind]: { ...workloadKind, cache: INSTANCE_CACHE as PageKind['cache'], unlisted: true },
  },
  view(ctx) {
    const deployments = ctx.informer(WorkloadDeployment);
    const instances = ctx.informer(Instance);
    instances.addIndexer('ui-deployment', (i) => {
      const d = i.metadata?.labels?.[DEPLOYMENT_LABEL];
      return d ? [`${i.metadata?.namespace}/${d}`] : [];
    });
    const instanceOf = (p: SlimPod) =>
      instances.get(`${p.metadata?.namespace}/${p.metadata?.name}`) as WithStatus | undefined;
    return {
      heldPods: { [QUOTA_GATE]: (p) => quotaReason(instanceOf(p)) },
      workloads: () =>
        deployments
          .list()
          .map((d) =>
            workloadRow(
              d,
              instances.byIndex('ui-deployment', `${d.metadata?.namespace}/${d.metadata?.name}`),
            ),
          ),
      // Mirrors of the cells' instances (a management plane's), which run in the cells, are not cached.
      localInstances: () => instances.list().length,
    };
  },
};
