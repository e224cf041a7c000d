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
