// `berth explain pod` for architecture-aware placement: whether an ArchPlacement gates the pod,
// and why its affinity (or its tolerations) is what it is.
import type { KubeClient } from '../runtime/client/client.ts';
import { Resources, type KubeObject } from '../runtime/api/meta.ts';
import { choosePolicy, type Policy } from './decide/policies.ts';
import { parsePolicies } from './decide/parse.ts';
import {
  gateExemption,
  webhookServiceNamespaces,
  type ArchPod,
  type ExemptionContext,
  type NodeSelectorTerm,
} from './decide/pods.ts';
import { gated, podRecords } from './decide/patches.ts';
import { nodeArchitectures, report, standingOf, type Standing } from './decide/status.ts';
import type { Said, Subject } from '../policy/explain.ts';
import type { ExplainContext } from '../capability.ts';
import { ARCH_LABEL, ARCH_TAINT, STATE_LABEL } from './types.ts';
import { ArchPlacement } from './crd.ts';

const termText = (t: NodeSelectorTerm) =>
  [...(t.matchExpressions ?? []), ...(t.matchFields ?? []).map((f) => ({ ...f, key: `field ${f.key}` }))]
    .map((e) => `${e.key} ${e.operator}${e.values ? ` [${e.values.join(', ')}]` : ''}`)
    .join(' AND ') || '(empty)';

/** The lines for one pod, from the pod, the policies and the pod's namespace labels. */
export function explainArch(
  pod: ArchPod,
  policies: Policy[],
  namespaceLabels: Record<string, string> | undefined,
  ctx: ExemptionContext,
): string[] {
  const ns = pod.metadata?.namespace ?? '';
  const out = ['Architecture-aware placement:'];
  const { state, policy: by, result, failure } = podRecords(pod);
  // A pod behind Berth's gate is gated whatever else it lost (its label, put back once Berth runs).
  if ((!state || !by) && !gated(pod)) {
    // A bound pod's nodeName may be the scheduler's, not its author's: the other reasons are certain.
    const { nodeName, ...unbound } = pod.spec;
    const certain = gateExemption({ ...pod, spec: unbound }, ns, ctx);
    if (certain) return [...out, `  never gated: ${certain}`];
    const p = choosePolicy(policies, pod, ns, namespaceLabels, ctx.berthNamespace);
    const late = "created before the policy, or while Berth's webhook was unavailable";
    if (nodeName)
      return [
        ...out,
        `  never gated: ${gateExemption(pod, ns, ctx)}` +
          (p ? `; or bound ungated though ArchPlacement ${p.name} selects it (${late})` : ''),
      ];
    return [
      ...out,
      p
        ? `  not gated, though ArchPlacement ${p.name} selects it now: ${late}`
        : '  no ArchPlacement selects the pod',
    ];
  }
  const policy = policies.find((p) => p.name === by);
  out.push(
    `  ArchPlacement ${by ?? '(not named on the pod)'}${policy ? ` (mode ${policy.spec.mode})` : ' (gone)'}: ` +
      (state ?? `Gated, its ${STATE_LABEL} label missing (Berth puts it back when it runs)`),
  );
  if (gated(pod))
    out.push(
      '  gated: waiting for Berth to read its images (is Berth running? berth explain shows no progress while it is down)',
    );
  if (result) {
    try {
      const r = JSON.parse(result) as {
        architectures: string[];
        images: { image: string; digest: string; platforms: string[] }[];
      };
      out.push(
        r.architectures.length
          ? `  every image supports: ${r.architectures.join(', ')}`
          : '  no architecture is supported by every image: the pod cannot be scheduled, on purpose',
      );
      for (const i of r.images) out.push(`    ${i.image} @ ${i.digest}: ${i.platforms.join(', ')}`);
    } catch {
      out.push(`  result: ${result}`);
    }
  }
  if (failure) out.push(`  ${state === 'Released' ? 'released' : 'inspection failed'}: ${failure}`);
  const terms =
    pod.spec.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms ?? [];
  const archTerms = terms.filter((t) => (t.matchExpressions ?? []).some((e) => e.key === ARCH_LABEL));
  if (archTerms.length)
    out.push(`  required node affinity (any term): ${terms.map((t) => `{${termText(t)}}`).join(' OR ')}`);
  const tolerations = (pod.spec.tolerations ?? []).filter((t) => t.key === ARCH_TAINT);
  if (tolerations.length)
    out.push(`  tolerates ${ARCH_TAINT}: ${tolerations.map((t) => t.value ?? '(any)').join(', ')}`);
  return out;
}

export async function explainPodArch(
  client: KubeClient,
  full: KubeObject,
  berthNamespace: string,
): Promise<string[]> {
  const { policies } = parsePolicies((await client.list(ArchPlacement.ref)).items);
  const pod = full as ArchPod;
  const ns = pod.metadata?.namespace ?? '';
  const [namespace, mutating, validating] = await Promise.all([
    client.get(Resources.namespaces, ns).catch(() => undefined),
    client.list(Resources.mutatingWebhookConfigurations),
    client.list(Resources.validatingWebhookConfigurations),
  ]);
  const webhookNamespaces = new Set(
    [...mutating.items, ...validating.items].flatMap(webhookServiceNamespaces),
  );
  return explainArch(pod, policies, namespace?.metadata?.labels, {
    berthNamespace,
    servesWebhook: (n) => webhookNamespaces.has(n),
  });
}

/**
 * `berth explain archplacement NAME`: the pods it stands for (gated, placed on which
 * architectures, failed), as Berth recorded on them, and the pods it selects now but never gated;
 * then the placed pods no node can take (the controller's report).
 */
export function explainArchPlacement(
  name: string,
  policies: Policy[],
  pods: ArchPod[],
  namespaces: Map<string, Record<string, string>>,
  nodes: KubeObject[],
  berthNamespace: string,
): Said {
  const subjects: Subject[] = [];
  const standings: Standing[] = [];
  for (const pod of pods) {
    const ns = pod.metadata?.namespace ?? '';
    const id = `${ns}/${pod.metadata?.name}`;
    const s = standingOf(pod);
    if (s?.policy === name) {
      standings.push(s.standing);
      const what =
        s.standing.state === 'Placed'
          ? `Placed on ${s.standing.architectures?.join(', ') || 'no architecture (none in common)'}`
          : s.standing.state === 'Failed'
            ? `Failed (${s.standing.reason})`
            : s.standing.state;
      subjects.push({ kind: 'Pod', name: id, in: true, why: [what] });
    } else if (!s && choosePolicy(policies, pod, ns, namespaces.get(ns), berthNamespace)?.name === name)
      subjects.push({
        kind: 'Pod',
        name: id,
        in: false,
        why: ["selected, never gated: created before the policy, or while Berth's webhook was unavailable"],
      });
  }
  const r = report(standings, nodeArchitectures(nodes));
  return {
    subjects,
    lines: [
      ...[...r.unschedulable].map(
        ([archs, n]) => `  ${n} placed pod(s) on ${archs}: no node has that architecture`,
      ),
      ...[...r.failures].map(([reason, n]) => `  ${n} pod(s) failed: ${reason}`),
    ],
  };
}

/** `berth explain archplacement NAME`: which pods it gated and placed on which architectures (ExplainKind.explain). */
export async function explainArchPlacementObject({
  client,
  object,
  berthNamespace,
  focus,
}: ExplainContext): Promise<Said> {
  const [objects, namespaces, nodes] = await Promise.all([
    client.list(ArchPlacement.ref).then((l) => l.items),
    client.list(Resources.namespaces).then((l) => l.items),
    client.list(Resources.nodes).then((l) => l.items),
  ]);
  const [ns, pod] = focus?.pod ? focus.pod.split('/') : [];
  const pods = pod ? [await client.get(Resources.pods, pod, ns)] : (await client.list(Resources.pods)).items;
  const { policies, errors } = parsePolicies(objects);
  const name = object.metadata!.name!;
  const said = explainArchPlacement(
    name,
    policies,
    pods as ArchPod[],
    new Map(namespaces.map((n) => [n.metadata!.name!, n.metadata?.labels ?? {}])),
    nodes,
    berthNamespace,
  );
  const error = errors.get(name);
  return error ? { lines: [`  invalid, applies nothing: ${error}`] } : said;
}
