// Pods that something other than the scheduler places: the kubelet's mirror pods of static pods,
// and pods a DaemonSet makes for one node. Policies that gate, place or evict pods leave them alone.
import type { KubeObject } from '../runtime/api/meta.ts';

/** The annotation the kubelet puts on the mirror pod of a static pod. */
export const MIRROR_POD_ANNOTATION = 'kubernetes.io/config.mirror';

export const isMirrorPod = (pod: KubeObject): boolean =>
  pod.metadata?.annotations?.[MIRROR_POD_ANNOTATION] !== undefined;

/** The pod carries the scheduling gate `name` (of the gates a capability adds, each its own). */
export const hasSchedulingGate = (pod: KubeObject, name: string): boolean =>
  (pod['spec'] as { schedulingGates?: { name: string }[] } | undefined)?.schedulingGates?.some(
    (g) => g.name === name,
  ) ?? false;

/** The DaemonSet that controls the pod, if one does. */
export const daemonSetOwner = (pod: KubeObject) =>
  pod.metadata?.ownerReferences?.find((o) => o.controller && o.kind === 'DaemonSet');

export const OS_LABEL = 'kubernetes.io/os';

/** What podOs reads of a pod. */
export interface PodOsSpec {
  spec: {
    os?: { name?: string };
    nodeSelector?: Record<string, string>;
    affinity?: {
      nodeAffinity?: {
        requiredDuringSchedulingIgnoredDuringExecution?: {
          nodeSelectorTerms?: { matchExpressions?: { key: string; operator: string; values?: string[] }[] }[];
        };
      };
    };
  };
}

/**
 * The OS the pod runs on: spec.os, else its nodeSelector's kubernetes.io/os, else a
 * `kubernetes.io/os In [one value]` every required term names, else linux. Windows pods mostly say
 * it only by selector (spec.os is recent and optional).
 */
export function podOs(pod: PodOsSpec): string {
  const named = pod.spec.os?.name ?? pod.spec.nodeSelector?.[OS_LABEL];
  if (named) return named;
  const terms =
    pod.spec.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms;
  const each = (terms ?? []).map(
    (t) =>
      (t.matchExpressions ?? []).find(
        (e) => e.key === OS_LABEL && e.operator === 'In' && e.values?.length === 1,
      )?.values?.[0],
  );
  const [first] = each;
  return first !== undefined && each.every((os) => os === first) ? first : 'linux';
}
