// `berth explain node` for startup gates: which gates hold the node, since when, in which phase,
// what each is still waiting for and which pods started early; or why a gate does not hold it.
import type { KubeClient } from '../runtime/client/client.ts';
import { slimNode, slimPod, type SlimPod } from '../policy/slim.ts';
import { nodesOf, podsByNode, type Said, type Subject } from '../policy/explain.ts';
import type { ExplainContext } from '../capability.ts';
import type { KeyClaim } from '../policy/nodes/ownership.ts';
import { Resources, type KubeObject } from '../runtime/api/meta.ts';
import { nodePhase } from './decide/order.ts';
import { gateKeyClaims, parseGates } from './decide/parse.ts';
import { nodePatch } from './decide/patch.ts';
import { decideGates } from './decide/state.ts';
import { gatesNamedOn, strayGate, unrecordedStray } from './decide/stray.ts';
import { formatTaint } from '../policy/nodes/write.ts';
import { FIELD_MANAGER } from './types.ts';
import { NodeStartupGate } from './crd.ts';

export async function explainNodeGates(
  client: KubeClient,
  full: KubeObject,
  now = Date.now(),
): Promise<string[]> {
  const objects = (await client.list(NodeStartupGate.ref)).items;
  const parsed = parseGates(objects);
  const node = slimNode(full);
  // Gates gone from the API whose keys are still on the node: what Berth takes back, or cannot.
  const gone = gatesNamedOn(node).filter((n) => !objects.some((o) => o.metadata?.name === n));
  const strays = gone.flatMap((n) => strayGate(n, node) ?? []);
  const gates = [...parsed.gates, ...strays];
  const { problems } = parsed;
  if (gates.length === 0 && problems.size === 0 && gone.length === 0)
    return ['Startup gates: no NodeStartupGate'];
  const name = node.metadata!.name!;
  const pods = (
    await client.list(Resources.pods, { query: { fieldSelector: `spec.nodeName=${name}` } })
  ).items.map(slimPod);
  const out = [`Startup gates (field manager ${FIELD_MANAGER}):`];
  const decisions = decideGates(gates, node, pods, now);
  const phase = nodePhase(gates, decisions);
  if (phase && phase.of > 1)
    out.push(
      `  phase ${phase.phase} of ${phase.of}: now ${phase.now.join(', ') || 'none'}${phase.next.length ? `; then ${phase.next.join(', ')}` : ''}`,
    );
  for (const [i, d] of decisions.entries()) {
    const g = gates[i]!;
    const head = `  ${g.name} (taint ${formatTaint(g.spec.taint)}, ${g.spec.mode}${g.spec.after?.length ? `, after ${g.spec.after.join(', ')}` : ''}${g.spec.dryRun ? ', dry run' : ''})`;
    const since = node.metadata?.annotations?.[g.keys.gatedAt];
    if (g.gone) {
      out.push(
        `  ${g.name}: the gate no longer exists; Berth takes back what it left on the node${d.taint === false ? ` (its taint ${formatTaint(g.spec.taint)}, held since ${since})` : ''}`,
      );
      continue;
    }
    switch (d.state) {
      case 'Held':
      case 'HeldTimedOut':
        out.push(`${head}: HELD since ${since ?? 'now'}; ${d.why}`);
        for (const u of d.unmet) out.push(`    waiting for ${u}`);
        for (const p of d.startedEarly ?? []) out.push(`    started early (not required by any gate): ${p}`);
        break;
      case 'WouldGate':
        out.push(`${head}: ${d.why}`);
        for (const u of d.unmet) out.push(`    would wait for ${u}`);
        break;
      default:
        out.push(`${head}: not held: ${d.why}`);
    }
  }
  for (const n of gone.filter((n) => !strays.some((g) => g.name === n))) out.push(`  ${unrecordedStray(n)}`);
  for (const [gate, p] of problems) out.push(`  ${gate}: ${p.reason}: ${p.message}`);
  if (nodePatch(node, gates, decisions).length)
    out.push(
      '  not yet applied (Berth not running, or catching up): the decisions above differ from the node',
    );
  return out;
}

/**
 * `berth explain nodestartupgate NAME`: the nodes the gate holds (since when, what each still waits
 * for) and the ones it does not (why), from the same decision as the controller over every gate.
 * `pods` are the pods bound to each node, by node name.
 */
export function explainGate(
  name: string,
  objects: KubeObject[],
  nodes: KubeObject[],
  pods: Map<string, SlimPod[]>,
  now: number,
): Said {
  const { gates, problems } = parseGates(objects);
  const problem = problems.get(name);
  const lines = problem ? [`  ${problem.reason}: ${problem.message}`] : [];
  const i = gates.findIndex((g) => g.name === name);
  if (i < 0) return { lines: [...lines, '  holds no node'] };
  const gate = gates[i]!;
  const subjects: Subject[] = nodes.map((full) => {
    const node = slimNode(full);
    const nodeName = node.metadata!.name!;
    const d = decideGates(gates, node, pods.get(nodeName) ?? [], now)[i]!;
    const since = node.metadata?.annotations?.[gate.keys.gatedAt];
    const held = d.state === 'Held' || d.state === 'HeldTimedOut' || d.state === 'WouldGate';
    return {
      kind: 'Node',
      name: nodeName,
      in: held,
      why: [
        `${d.state}${since ? ` since ${since}` : ''}: ${d.why}`,
        ...d.unmet.map((u) => `waiting for ${u}`),
        ...(d.waitingFor ?? []).map((g) => `after gate ${g}, which still holds the node`),
      ],
    };
  });
  return {
    subjects,
    lines: [
      ...lines,
      `  taint ${formatTaint(gate.spec.taint)}, ${gate.spec.mode}${gate.spec.after?.length ? `, after ${gate.spec.after.join(', ')}` : ''}${gate.spec.dryRun ? ', dry run: holds nothing, says what it would' : ''}`,
    ],
  };
}

/** `berth explain nodestartupgate NAME`: which nodes the gate holds (ExplainKind.explain). */
export async function explainGateObject({ client, object, focus }: ExplainContext): Promise<Said> {
  const [objects, nodes, pods] = await Promise.all([
    client.list(NodeStartupGate.ref).then((l) => l.items),
    nodesOf(client, focus),
    podsByNode(client, focus),
  ]);
  return explainGate(object.metadata!.name!, objects, nodes, pods, Date.now());
}

/** Capability.keyClaims, as the controller claims: every gate's prefix, taint and completion annotation. */
export const listedKeyClaims = async (client: KubeClient): Promise<KeyClaim[]> =>
  gateKeyClaims(parseGates((await client.list(NodeStartupGate.ref)).items).gates);
