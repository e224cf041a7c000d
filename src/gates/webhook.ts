// The Node CREATE webhook's decision. It is served from the webhook thread
// (runtime/webhook/thread.ts), where the main thread's informers cannot hold its answers; the
// controller sends it the parsed gates whenever they change.
import { mutate } from '../runtime/api/jsonpatch.ts';
import type { KubeObject } from '../runtime/api/meta.ts';
import type { AdmissionHandler } from '../runtime/webhook/admission.ts';
import { threadHandler } from '../runtime/webhook/threaded.ts';
import { type Gate } from './decide/parse.ts';
import { admitNode } from './decide/patch.ts';

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
