// What `berth explain` says of an object: the node and pod hooks of every capability, and the kinds a
// capability explains itself (Capability.explainKinds). The command and the page both call this, so
// the page shows exactly what the command prints.
import {
  clusterKeyOwnership,
  controllersOf,
  runningCapabilities,
  type ExplainContext,
} from './capability.ts';
import { capabilities } from './capabilities.ts';
import type { KubeClient } from './runtime/client/client.ts';
import { missingCrdsLine, withoutMissingCrds } from './runtime/client/absent.ts';
import { Resources, type ResourceRef } from './runtime/api/meta.ts';

export interface Explainer {
  /** The subcommand and the page's kind: node, pod, or a capability's kind name (instance). */
  name: string;
  aliases: string[];
  resource: ResourceRef;
  description: string;
  lines(ctx: ExplainContext): Promise<string[]>;
}

/**
 * What every capability Berth runs (--controllers) says through one of its hooks, in order; the
 * ones it does not run are named, not explained: they do nothing to the object.
 */
const every =
  (hook: 'explainNode' | 'explainPod') =>
  async (ctx: ExplainContext): Promise<string[]> => {
    const running = runningCapabilities(capabilities, ctx.options);
    const lines: string[] = [];
    for (const c of running) lines.push(...((await c[hook]?.(ctx)) ?? []));
    const off = capabilities.filter((c) => c[hook] && !running.includes(c)).map((c) => c.name);
    if (off.length) lines.push(`Not run by this Berth (--controllers): ${off.join(', ')}`);
    return lines;
  };

/** Every kind `berth explain` knows. */
export const explainers: Explainer[] = [
  {
    name: 'node',
    aliases: [],
    resource: Resources.nodes,
    description: 'Which rules, gates and placements give this node its labels, annotations and taints',
    lines: every('explainNode'),
  },
  {
    name: 'pod',
    aliases: [],
    resource: Resources.pods,
    description: 'What Berth does (or will do) to this pod, and why',
    lines: every('explainPod'),
  },
  ...capabilities.flatMap((c) => (c.explainKinds ?? []).map((k) => ({ ...k, aliases: k.aliases ?? [] }))),
];

export const explainerOf = (kind: string): Explainer | undefined =>
  explainers.find((e) => e.name === kind || e.aliases.includes(kind));

/**
 * The explanation of one object as `berth explain` prints it: a title line (`Node NAME`, `Pod
 * NAMESPACE/NAME`), then the lines said of it. `options` are the flags Berth runs with (--label-dir,
 * --controllers).
 */
export async function explainObject(
  client: KubeClient,
  e: Explainer,
  name: string,
  namespace: string | undefined,
  options: Record<string, unknown>,
  berthNamespace: string,
): Promise<string[]> {
  const ns = e.resource.namespaced ? (namespace ?? 'default') : undefined;
  const object = await client.get(e.resource, name, ns);
  const missing = new Set<string>();
  const reader = withoutMissingCrds(client, missing);
  // Who owns which node keys: read only if a hook asks, and then once.
  let owners: ReturnType<typeof clusterKeyOwnership> | undefined;
  const keys = () =>
    (owners ??= clusterKeyOwnership(capabilities, reader, controllersOf(capabilities, options)));
  const said = await e.lines({ client: reader, object, options, berthNamespace, keys });
  const title = `${e.resource.kind} ${ns ? `${ns}/` : ''}${name}`;
  if (missing.size === 0) return [title, ...said];
  return [title, missingCrdsLine(missing), ...said];
}
