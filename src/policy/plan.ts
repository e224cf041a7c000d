// What `berth plan` says a change would do, as data: each effect on an object with the policy
// responsible, the dangerous ones as warnings, and what it could not know. Each capability plans
// its own kinds from the decisions its controllers make; `src/plan.ts` puts them together.
import { apiTime, type KubeObject } from '../runtime/api/meta.ts';
import type { KubeClient } from '../runtime/client/client.ts';
import type { KeyOwnership } from './nodes/ownership.ts';

/** One effect on one object. */
export interface Effect {
  /** Node, Pod, Instance, Workload... */
  kind: string;
  /** NAME or NAMESPACE/NAME. */
  name: string;
  /** `+` gains, `-` loses, `~` changes, `!` is evicted or held. */
  op: '+' | '-' | '~' | '!';
  /** What: `label a=b`, `taint k:NoExecute`, `held by gate g`, `evicted (taint k)`. */
  what: string;
  /** The policy responsible: `NodeLabelRule gpu`. */
  by: string;
}

/** What a capability plans for the objects of its kinds a change holds. */
export interface PlanPart {
  effects: Effect[];
  /** Dangerous effects, one line each: mass eviction, every node tainted, every pod gated. */
  warnings: string[];
  /** What it could not know, and why (an image never inspected, a cell not reached). */
  unknown: string[];
  /** Objects of its kinds it refuses, as its controller would (Invalid), with why. */
  errors: string[];
}

/** What a capability's plan is given. */
export interface PlanContext {
  client: KubeClient;
  /** The objects of the capability's kinds in the change, as they would be applied. */
  objects: KubeObject[];
  /** Every object of the change, whatever its kind: one kind's effects may hang on another's (a Workload on the Locations beside it). */
  all: KubeObject[];
  /** The change deletes them instead of applying them. */
  deleting: boolean;
  /** The flags Berth runs with (--label-dir, --controllers). */
  options: Record<string, unknown>;
  berthNamespace: string;
  /** Who owns which node keys, as the running Berth finds them (clusterKeyOwnership). */
  keys(): Promise<KeyOwnership>;
}

/** An object named by namespace (if any) and name, with its age and status kept across a change. */
export type Named = {
  metadata?: { namespace?: string; name?: string; creationTimestamp?: string };
  status?: unknown;
};

const nameOf = (o: Named) => `${o.metadata?.namespace ?? ''}/${o.metadata?.name}`;

/** The objects of a kind among `objects`, a namespaced one in `default` when it names none (as kubectl). */
export const ofKind = (objects: KubeObject[], kind: string, namespaced: boolean): KubeObject[] =>
  objects
    .filter((o) => o.kind === kind)
    .map((o) =>
      namespaced ? { ...o, metadata: { ...o.metadata, namespace: o.metadata?.namespace ?? 'default' } } : o,
    );

/**
 * `objects` in place of those of their name in `list`, or without them (`deleting`): the cluster as
 * the change would leave it. One there keeps its status and age; a new one is created now, as the
 * API would stamp it.
 */
export function replaced<T extends Named>(list: T[], objects: T[], deleting: boolean, now: number): T[] {
  const named = new Set(objects.map(nameOf));
  const kept = list.filter((o) => !named.has(nameOf(o)));
  if (deleting) return kept;
  return [
    ...kept,
    ...objects.map((o) => {
      const was = list.find((x) => nameOf(x) === nameOf(o));
      const creationTimestamp = was?.metadata?.creationTimestamp ?? apiTime(now);
      return { ...o, metadata: { ...o.metadata, creationTimestamp }, status: was?.status } as T;
    }),
  ];
}

/** A part with nothing in it yet. */
export const emptyPart = (): PlanPart => ({ effects: [], warnings: [], unknown: [], errors: [] });

/** What every eviction warning says (a reversed plan leaves them out). */
export const EVICTS = ' would evict ';

/** Pods evicted, as a warning: how many, in how many namespaces, the biggest first. */
export function evictionWarning(pods: string[], cause: string): string | undefined {
  if (!pods.length) return undefined;
  const byNs = new Map<string, number>();
  for (const p of pods) {
    const ns = p.slice(0, p.indexOf('/'));
    byNs.set(ns, (byNs.get(ns) ?? 0) + 1);
  }
  const counts = [...byNs].sort((a, b) => b[1] - a[1]).map(([ns, n]) => `${ns} ${n}`);
  return `${cause}${EVICTS}${pods.length} pod(s): ${counts.join(', ')}`;
}
