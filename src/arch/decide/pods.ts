// Architecture-aware placement's pure decisions: the pod as Berth reads it, and which pods are never
// gated (exemption). No I/O: the webhook and the controllers feed these from their caches.
import { type Toleration } from '../../policy/nodes/taints.ts';
import type { KubeObject } from '../../runtime/api/meta.ts';
import { ARCH_LABEL, SKIP_ANNOTATION } from '../types.ts';
import { daemonSetOwner, isMirrorPod } from '../../policy/pods.ts';

export interface NodeSelectorRequirement {
  key: string;
  operator: string;
  values?: string[];
}
export interface NodeSelectorTerm {
  matchExpressions?: NodeSelectorRequirement[];
  matchFields?: NodeSelectorRequirement[];
}
export interface PreferredTerm {
  weight: number;
  preference: NodeSelectorTerm;
}
interface Container {
  name: string;
  image: string;
  imagePullPolicy?: string;
}

/** The pod fields placement reads and writes. */
export interface ArchPod extends KubeObject {
  spec: {
    nodeName?: string;
    nodeSelector?: Record<string, string>;
    affinity?: {
      nodeAffinity?: {
        requiredDuringSchedulingIgnoredDuringExecution?: { nodeSelectorTerms: NodeSelectorTerm[] };
        preferredDuringSchedulingIgnoredDuringExecution?: PreferredTerm[];
      };
    } & Record<string, unknown>;
    tolerations?: Toleration[];
    schedulingGates?: { name: string }[];
    imagePullSecrets?: { name: string }[];
    containers: Container[];
    initContainers?: Container[];
    os?: { name: string };
  };
}

/** The value of the impossible requirement an empty intersection gets: no kubelet reports it. */
export const NO_COMMON_ARCHITECTURE = 'berth-no-common-architecture';

export interface ExemptionContext {
  berthNamespace: string;
  /** Whether a Service of the namespace backs an admission webhook (from the webhook configurations). */
  servesWebhook(namespace: string): boolean;
}

/** The namespaces of the Services a Mutating- or ValidatingWebhookConfiguration calls. */
export const webhookServiceNamespaces = (config: KubeObject): string[] => [
  ...new Set(
    ((config['webhooks'] ?? []) as { clientConfig?: { service?: { namespace?: string } } }[]).flatMap(
      (h) => h.clientConfig?.service?.namespace ?? [],
    ),
  ),
];

export const requiredTerms = (pod: ArchPod) =>
  pod.spec.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms;

/** The pod already says which architectures it runs on: its nodeSelector, or every required term. */
export function constrainsArch(pod: ArchPod): boolean {
  if (pod.spec.nodeSelector?.[ARCH_LABEL] !== undefined) return true;
  const terms = requiredTerms(pod);
  return !!terms?.length && terms.every((t) => (t.matchExpressions ?? []).some((e) => e.key === ARCH_LABEL));
}

/** Why a pod is never gated, or undefined when a policy may gate it. */
export function gateExemption(
  pod: ArchPod,
  namespace: string,
  ctx: ExemptionContext,
  /** The pod's arch constraint is Berth's own (a reinvocation, toPlaceAgain): it does not exempt. */
  ownArch = false,
): string | undefined {
  // Cluster add-ons: gating them could hold up the whole cluster.
  if (namespace.startsWith('kube-')) return `namespace ${namespace} holds cluster add-ons`;
  // Berth's own pods: gated, they could never be released.
  if (namespace === ctx.berthNamespace) return "Berth's own namespace";
  // A pod that serves a webhook, gated while Berth is down, could block Berth's own pod (the anchor's deadlock).
  if (ctx.servesWebhook(namespace)) return `namespace ${namespace} serves an admission webhook`;
  if (pod.spec.nodeName) return 'the pod names its node (a pod with nodeName cannot carry gates)';
  const annotations = pod.metadata?.annotations ?? {};
  if (isMirrorPod(pod)) return 'mirror pod of a static pod';
  if (daemonSetOwner(pod)) return 'DaemonSet pods run on the node they are made for';
  if (annotations[SKIP_ANNOTATION] === 'true') return `annotation ${SKIP_ANNOTATION}=true`;
  if (!ownArch && constrainsArch(pod)) return `the pod already constrains ${ARCH_LABEL}`;
  return undefined;
}
