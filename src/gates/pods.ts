// Startup gates, the pure part of the Pod CREATE webhook. A pod created with spec.nodeName skips
// the scheduler, so a NoSchedule gate taint does not stop it: admission closes that door while a
// gate holds the node, for pods that neither tolerate the gate's taint nor are its required pods.
import { tolerates, type Toleration } from '../policy/nodes/taints.ts';
import { formatTaint, taintId } from '../policy/nodes/write.ts';
import type { SlimNode, SlimPod } from '../policy/slim.ts';
import { type Gate } from './decide/parse.ts';
import { requiredPods } from './decide/requirements.ts';
import { daemonSetOwner, isMirrorPod } from '../policy/pods.ts';

export interface PodAdmissionInput {
  /** The pod as created, with its namespace (the request's) set. */
  pod: SlimPod;
  tolerations: Toleration[] | undefined;
  /** The node its spec.nodeName names, from the cache (undefined: not known there). */
  node: SlimNode | undefined;
  /** The groups of whoever creates it: mirror pods come from the kubelet (system:nodes). */
  groups: string[] | undefined;
  /** Whether a DaemonSet with this namespace, name and uid exists (an owner reference alone is anyone's to write). */
  daemonSetExists: (namespace: string, name: string, uid: string) => boolean;
}

export interface PodAdmission {
  allowed: boolean;
  /** Why it is refused: the gates that hold the node and what the pod may do instead. */
  message?: string;
  /** Gates in Warn mode the pod bypasses: the admission warnings, and the node's Warning events. */
  warnings: string[];
}

/**
 * Whether a gate can hold a node: enforced, not a dry run (which holds nothing and gives back what
 * it held), not being deleted, with a taint the scheduler heeds.
 */
export const canHold = (g: Gate): boolean =>
  g.enforced && !g.deleting && !g.spec.dryRun && g.spec.taint.effect !== 'PreferNoSchedule';

/** The gates that hold the node now, by the node's own record: their gated-at and a taint the scheduler heeds. */
export function holdingGates(gates: Gate[], node: SlimNode): Gate[] {
  const ann = node.metadata?.annotations ?? {};
  const taints = node.spec.taints ?? [];
  return gates.filter(
    (g) => canHold(g) && g.keys.gatedAt in ann && taints.some((t) => taintId(t) === taintId(g.spec.taint)),
  );
}

/** Why a pod passes whatever gate holds its node, if it does. */
export function alwaysAdmitted(input: PodAdmissionInput): string | undefined {
  const { pod } = input;
  if (!pod.spec.nodeName) return 'no spec.nodeName: the scheduler heeds the taints';
  if (pod.metadata?.namespace === 'kube-system') return 'a kube-system pod';
  const ds = daemonSetOwner(pod);
  if (ds && input.daemonSetExists(pod.metadata!.namespace!, ds.name, ds.uid)) return 'a DaemonSet pod';
  if (isMirrorPod(pod) && input.groups?.includes('system:nodes')) return 'a mirror pod';
  return undefined;
}

/**
 * Whether a pod created with spec.nodeName may be: refused while a gate in Reject mode holds its
 * node, unless it tolerates that gate's taint or is one of that gate's required pods; admitted
 * with a warning for gates in Warn mode.
 */
export function admitPod(gates: Gate[], input: PodAdmissionInput): PodAdmission {
  const { pod, node } = input;
  if (!node || alwaysAdmitted(input)) return { allowed: true, warnings: [] };
  const who = `pod ${pod.metadata?.namespace}/${pod.metadata?.name ?? pod.metadata?.generateName ?? ''}`;
  const bypassed = holdingGates(gates, node).filter(
    (g) =>
      !(input.tolerations ?? []).some((t) => tolerates(t, g.spec.taint)) &&
      !(g.spec.requirements.pods ?? []).some((r) => requiredPods(r, [pod]).length),
  );
  const say = (g: Gate) =>
    `NodeStartupGate ${g.name} holds node ${node.metadata!.name} (taint ${formatTaint(g.spec.taint)}) until its initialisation is done`;
  const rejecting = bypassed.filter((g) => g.spec.nodeNamePods === 'Reject');
  const warnings = bypassed
    .filter((g) => g.spec.nodeNamePods === 'Warn')
    .map((g) => `${who} sets spec.nodeName, so it skips the taint: ${say(g)}`);
  if (rejecting.length === 0) return { allowed: true, warnings };
  return {
    allowed: false,
    warnings,
    message:
      `${who} sets spec.nodeName, which skips the scheduler and its taints: ${rejecting.map(say).join('; ')}. ` +
      'Leave spec.nodeName unset (a nodeSelector or affinity waits for the release), tolerate the taint, or create the pod once the node is released',
  };
}
