// The pods a gate waits for must tolerate its taint, or they never start on a gated node (a
// DaemonSet's controller does not even create a pod for a node whose taints it does not tolerate).
// `berth gates tolerate` adds the missing tolerations to a DaemonSet's pod template.
import { selectorMatches } from '../policy/match/selector.ts';
import { tolerates, tolerationFor, type Toleration } from '../policy/nodes/taints.ts';
import type { KubeObject } from '../runtime/api/meta.ts';
import type { JsonPatchOp } from '../runtime/api/jsonpatch.ts';
import type { Gate } from './decide/parse.ts';

interface PodTemplateOwner extends KubeObject {
  spec?: {
    template?: { metadata?: { labels?: Record<string, string> }; spec?: { tolerations?: Toleration[] } };
  };
}

/** The gates whose pod requirements this DaemonSet's pods satisfy: by name, or by a selector matching its template. */
export function gatesWaitingFor(ds: PodTemplateOwner, gates: Gate[]): Gate[] {
  const ns = ds.metadata?.namespace;
  const labels = ds.spec?.template?.metadata?.labels;
  return gates.filter((g) =>
    (g.spec.requirements.pods ?? []).some((r) =>
      r.daemonSet
        ? r.daemonSet === ds.metadata?.name && r.namespace === ns
        : (!r.namespace || r.namespace === ns) && selectorMatches(r.selector, labels),
    ),
  );
}

/** The gates' taints the template does not tolerate yet. */
export function missingTolerations(ds: PodTemplateOwner, gates: Gate[]): Toleration[] {
  const have = ds.spec?.template?.spec?.tolerations ?? [];
  const out: Toleration[] = [];
  for (const g of gates) {
    // Two gates may share a taint (one of them Conflicting): one toleration covers both.
    if (![...have, ...out].some((t) => tolerates(t, g.spec.taint))) out.push(tolerationFor(g.spec.taint));
  }
  return out;
}

/** A JSON patch appending `add` to the template's tolerations, valid only on the version read (test). */
export function tolerationsPatch(ds: PodTemplateOwner, add: Toleration[]): JsonPatchOp[] {
  const have = ds.spec?.template?.spec?.tolerations;
  if (add.length === 0) return [];
  if (!have) {
    return [
      { op: 'test', path: '/metadata/resourceVersion', value: ds.metadata?.resourceVersion },
      { op: 'add', path: '/spec/template/spec/tolerations', value: add },
    ];
  }
  return [
    { op: 'test', path: '/spec/template/spec/tolerations', value: have },
    ...add.map((value) => ({ op: 'add' as const, path: '/spec/template/spec/tolerations/-', value })),
  ];
}
