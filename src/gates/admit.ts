// The gates' Node CREATE admission, as the webhook thread (runtime/webhook/thread.ts) runs it: the
// taints and annotations a joining node gets, from the parsed gates the main thread sends. What this
// module imports is what the thread loads: pure decisions only (no zod, no client; see
// webhook.ts for the main thread's side).
import { mutate } from '../runtime/api/jsonpatch.ts';
import type { KubeObject } from '../runtime/api/meta.ts';
import type { AdmissionHandler } from '../runtime/webhook/admission.ts';
import { threadHandler } from '../runtime/webhook/threaded.ts';
import type { TaintLike } from '../policy/nodes/taints.ts';
import { formatTaint, holds, nodeTaint, type NodeTaint } from '../policy/nodes/write.ts';
import type { Gate } from './decide/parse.ts';
import { selects } from './decide/requirements.ts';
import { iso } from './types.ts';

/** The admission patch for a joining node: the taint and gated-at annotation of every gate that selects it. */
export function admitNode(
  gates: Gate[],
  node: KubeObject,
  now: number,
): { taints: NodeTaint[]; annotations: Record<string, string> } {
  const taints: NodeTaint[] = [];
  const annotations: Record<string, string> = {};
  const existing = (node['spec'] as { taints?: TaintLike[] } | undefined)?.taints;
  const ann = node.metadata?.annotations ?? {};
  for (const g of gates) {
    if (!g.enforced || g.deleting || g.spec.dryRun || !selects(g, node.metadata?.labels)) continue;
    if (g.spec.mode === 'BootstrapOnly' && g.keys.completedAt in ann) continue;
    // A taint someone else puts on at registration (Karpenter's startupTaints) is taken in charge.
    if (!holds(existing, g.spec.taint)) taints.push(nodeTaint(g.spec.taint));
    if (!(g.keys.gatedAt in ann)) {
      annotations[g.keys.gatedAt] = iso(now);
      annotations[g.keys.taint] = formatTaint(g.spec.taint);
    }
  }
  return { taints, annotations };
}

/** Taints and annotates a new node for every enforced gate that selects it. */
export const nodeAdmission = threadHandler(
  import.meta.url,
  'nodeAdmission',
  (gates: () => Gate[]): AdmissionHandler =>
    (req) => {
      const node = req.object;
      if (!node || req.operation !== 'CREATE') return { allowed: true };
      const { taints, annotations } = admitNode(gates(), node, Date.now());
      if (taints.length === 0 && Object.keys(annotations).length === 0) return { allowed: true };
      const spec = (node['spec'] as { taints?: unknown[] } | undefined) ?? {};
      const after: KubeObject = {
        ...node,
        metadata: { ...node.metadata, annotations: { ...node.metadata?.annotations, ...annotations } },
        spec: { ...spec, taints: [...(spec.taints ?? []), ...taints] },
      };
      return { allowed: true, patch: mutate(node, after) };
    },
);
