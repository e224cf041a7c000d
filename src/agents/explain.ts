// `berth explain node` for agent placement: the claims a node should carry, and the pods behind each.
import type { KubeClient } from '../runtime/kube.ts';
import { ownedKeys } from '../runtime/apply.ts';
import { slimPod } from '../runtime/transforms.ts';
import { Resources, type KubeObject } from '../runtime/types.ts';
import { decideNode, type Placement } from './decide.ts';
import { AgentPlacement, FIELD_MANAGER } from './types.ts';

export async function explainNodeAgents(client: KubeClient, node: KubeObject): Promise<string[]> {
  const name = node.metadata!.name!;
  const placements: Placement[] = (await client.list(AgentPlacement.ref)).items.flatMap((o) => {
    const p = AgentPlacement.parse({
      ...o,
      apiVersion: AgentPlacement.apiVersion,
      kind: AgentPlacement.kind,
    });
    return p.success ? [{ name: o.metadata!.name!, spec: p.data.spec }] : [];
  });
  if (placements.length === 0) return ['Agent placement: no AgentPlacement'];
  const pods = (
    await client.list(Resources.pods, { query: { fieldSelector: `spec.nodeName=${name}` } })
  ).items.map(slimPod);
  const namespaces = new Map(
    (await client.list(Resources.namespaces)).items.map((n) => [n.metadata!.name!, n.metadata?.labels ?? {}]),
  );
  // The ReplicaSets and Jobs of these pods' namespaces, to follow owners up to Deployments and CronJobs.
  const owners = new Map<string, KubeObject>();
  for (const ns of new Set(pods.map((p) => p.metadata!.namespace!))) {
    for (const ref of [
      Resources.replicaSets,
      { group: 'batch', version: 'v1', resource: 'jobs', kind: 'Job', namespaced: true },
    ]) {
      for (const o of (await client.list(ref, { namespace: ns })).items)
        owners.set(`${ref.kind}/${ns}/${o.metadata!.name}`, o);
    }
  }
  const d = decideNode(
    pods,
    placements,
    (ns) => namespaces.get(ns),
    (_v, kind, ns, n) => owners.get(`${kind}/${ns}/${n}`),
  );
  const out = [`Agent placement (field manager ${FIELD_MANAGER}):`];
  for (const [pname, r] of d.placements) {
    const spec = placements.find((p) => p.name === pname)!.spec;
    if (r.claims.size === 0) {
      out.push(`  ${pname}: no counted pod on this node, so no claim and no ${spec.nodeLabel.key} label`);
      continue;
    }
    out.push(
      `  ${pname}: label ${spec.nodeLabel.key}=${spec.nodeLabel.value}${r.labelled ? '' : ' (held by another AgentPlacement with another value)'}`,
    );
    for (const [uid, c] of r.claims) {
      out.push(
        `    claim ${spec.claimAnnotationPrefix}${uid} (${c.owner.description}): ${c.pods.join(', ')}`,
      );
    }
  }
  const owned = new Set(ownedKeys(node, FIELD_MANAGER, ['metadata', 'annotations']));
  const want = Object.keys(d.desired.annotations);
  const pending = [
    ...want.filter((k) => !owned.has(k)).map((k) => `will add ${k}`),
    ...[...owned].filter((k) => !want.includes(k)).map((k) => `will remove ${k}`),
  ];
  if (pending.length)
    out.push('  not yet applied (Berth not running, or catching up):', ...pending.map((p) => `    ${p}`));
  return out;
}
