// What `berth explain` says of an object as data, so that the text printer, `-o json|yaml` and the
// page render one result: the object's conditions with since-when, its counts, the objects it acts
// on (in, or out, each with why), and the rest in lines.
import type { Condition } from '../runtime/api/conditions.ts';
import { Resources, type KubeObject } from '../runtime/api/meta.ts';
import type { KubeClient } from '../runtime/client/client.ts';
import { slimPod, type SlimPod } from './slim.ts';

/** An object a policy acts on, or could: a node a rule matches, a pod a placement gates. */
export interface Subject {
  kind: string;
  /** NAME, or NAMESPACE/NAME. */
  name: string;
  /** Whether the policy acts on it now. */
  in: boolean;
  /** Why it is in or out, and what the policy does to it. */
  why: string[];
}

/** What a capability says of one object. */
export interface Said {
  /** The object's status conditions, each with when it last changed. */
  conditions?: Condition[];
  /** The object's status counts (matchedNodes, gated, waiting...). */
  counts?: Record<string, number>;
  /** The objects it acts on, or the one asked about (`--node`, `--pod`). */
  subjects?: Subject[];
  /** Everything else, in prose. */
  lines: string[];
}

/** What `--node` or `--pod` asked about: the subject to explain alone, with every reason. */
export interface Focus {
  node?: string;
  /** NAMESPACE/NAME. */
  pod?: string;
}

/** An object's status conditions and its counts (its whole-number fields but observedGeneration). */
export function statusSaid(object: KubeObject): Pick<Said, 'conditions' | 'counts'> {
  const status = (object as { status?: Record<string, unknown> }).status ?? {};
  const counts = Object.fromEntries(
    Object.entries(status).filter(
      (e): e is [string, number] => e[0] !== 'observedGeneration' && Number.isInteger(e[1]),
    ),
  );
  return { conditions: (status['conditions'] as Condition[] | undefined) ?? [], counts };
}

/** "3m" */
export function age(from: string | undefined, now: Date): string {
  const s = Math.max(0, Math.floor((now.getTime() - Date.parse(from ?? '')) / 1000));
  if (!Number.isFinite(s)) return '?';
  if (s < 120) return `${s}s`;
  if (s < 7200) return `${Math.floor(s / 60)}m`;
  if (s < 172_800) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86_400)}d`;
}

export const since = (t: string | undefined, now: Date) =>
  t ? `since ${t} (${age(t, now)} ago)` : 'since (unknown)';

export const conditionLine = (c: Condition, now: Date) =>
  `  ${c.type}: ${c.status} (${c.reason}) ${since(c.lastTransitionTime, now)}${c.message ? `: ${c.message}` : ''}`;

/** The nodes a policy's explanation looks at: the one `--node` names, or all. */
export const nodesOf = async (client: KubeClient, focus: Focus | undefined): Promise<KubeObject[]> =>
  focus?.node ? [await client.get(Resources.nodes, focus.node)] : (await client.list(Resources.nodes)).items;

/** The pods bound to nodes, by node name: of the one node `--node` names, or of all. */
export async function podsByNode(
  client: KubeClient,
  focus: Focus | undefined,
): Promise<Map<string, SlimPod[]>> {
  const query = focus?.node ? { query: { fieldSelector: `spec.nodeName=${focus.node}` } } : {};
  const byNode = new Map<string, SlimPod[]>();
  for (const pod of (await client.list(Resources.pods, query)).items.map(slimPod)) {
    const node = pod.spec.nodeName;
    if (node) byNode.set(node, [...(byNode.get(node) ?? []), pod]);
  }
  return byNode;
}
