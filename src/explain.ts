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
import { conditionLine, statusSaid, type Focus, type Said } from './policy/explain.ts';

export interface Explainer {
  /** The subcommand and the page's kind: node, pod, or a capability's kind name (instance). */
  name: string;
  aliases: string[];
  resource: ResourceRef;
  description: string;
  /** What it acts on: `--node` or `--pod` asks about one of them. */
  subjects?: keyof Focus;
  /** Show its status conditions (with since-when) and counts as they are. */
  status?: true;
  explain(ctx: ExplainContext): Promise<Said>;
}

/** What `berth explain` says of one object: printed as text (explanationText), JSON, YAML, or on the page. */
export interface Explanation extends Said {
  kind: string;
  name: string;
  namespace?: string;
  /** Berth's kinds whose CRD is not installed here, read as having no objects. */
  missingCrds?: string[];
}

/**
 * What every capability Berth runs (--controllers) says through one of its hooks, in order; the
 * ones it does not run are named, not explained: they do nothing to the object.
 */
const every =
  (hook: 'explainNode' | 'explainPod') =>
  async (ctx: ExplainContext): Promise<Said> => {
    const running = runningCapabilities(capabilities, ctx.options);
    const lines: string[] = [];
    for (const c of running) lines.push(...((await c[hook]?.(ctx)) ?? []));
    const off = capabilities.filter((c) => c[hook] && !running.includes(c)).map((c) => c.name);
    if (off.length) lines.push(`Not run by this Berth (--controllers): ${off.join(', ')}`);
    return { lines };
  };

/** Every kind `berth explain` knows. */
export const explainers: Explainer[] = [
  {
    name: 'node',
    aliases: [],
    resource: Resources.nodes,
    description: 'Which rules, gates and placements give this node its labels, annotations and taints',
    explain: every('explainNode'),
  },
  {
    name: 'pod',
    aliases: [],
    resource: Resources.pods,
    description: 'What Berth does (or will do) to this pod, and why',
    explain: every('explainPod'),
  },
  ...capabilities.flatMap((c) => (c.explainKinds ?? []).map((k) => ({ ...k, aliases: k.aliases ?? [] }))),
];

export const explainerOf = (kind: string): Explainer | undefined =>
  explainers.find((e) => e.name === kind || e.aliases.includes(kind));

/**
 * The explanation of one object. `options` are the flags Berth runs with (--label-dir,
 * --controllers); `focus` the node or pod asked about of a policy (`--node`, `--pod`).
 */
export async function explanationOf(
  client: KubeClient,
  e: Explainer,
  name: string,
  namespace: string | undefined,
  options: Record<string, unknown>,
  berthNamespace: string,
  focus?: Focus,
): Promise<Explanation> {
  const ns = e.resource.namespaced ? (namespace ?? 'default') : undefined;
  const object = await client.get(e.resource, name, ns);
  const missing = new Set<string>();
  const reader = withoutMissingCrds(client, missing);
  // Who owns which node keys: read only if a hook asks, and then once.
  let owners: ReturnType<typeof clusterKeyOwnership> | undefined;
  const keys = () =>
    (owners ??= clusterKeyOwnership(capabilities, reader, controllersOf(capabilities, options)));
  const said = await e.explain({
    client: reader,
    object,
    options,
    berthNamespace,
    keys,
    ...(focus ? { focus } : {}),
  });
  return {
    kind: e.resource.kind,
    name,
    ...(ns ? { namespace: ns } : {}),
    ...(missing.size ? { missingCrds: [...missing].sort() } : {}),
    ...(e.status ? statusSaid(object) : {}),
    ...said,
  };
}

/** Subjects of each side the text shows before it says how many more there are. */
const SHOWN = 20;

/**
 * An explanation as `berth explain` prints it: a title line (`Node NAME`, `Pod NAMESPACE/NAME`),
 * the conditions and counts, the subjects in and then out (each with why), then the lines.
 */
export function explanationText(x: Explanation, now = new Date()): string[] {
  const out = [`${x.kind} ${x.namespace ? `${x.namespace}/` : ''}${x.name}`];
  if (x.missingCrds) out.push(missingCrdsLine(new Set(x.missingCrds)));
  for (const c of x.conditions ?? []) out.push(conditionLine(c, now));
  if (x.conditions?.length === 0) out.push('  no status yet (Berth not running, or not caught up)');
  const counts = Object.entries(x.counts ?? {});
  if (counts.length) out.push(`  counts: ${counts.map(([k, v]) => `${k} ${v}`).join(', ')}`);
  for (const side of [true, false]) {
    const list = (x.subjects ?? []).filter((s) => s.in === side);
    if (!list.length) continue;
    out.push(`  ${side ? 'acts on' : 'leaves alone'} ${list.length} ${list[0]!.kind.toLowerCase()}(s):`);
    for (const s of list.slice(0, SHOWN)) {
      out.push(`    ${s.kind} ${s.name}${s.why.length ? `: ${s.why[0]}` : ''}`);
      for (const w of s.why.slice(1)) out.push(`      ${w}`);
    }
    if (list.length > SHOWN) out.push(`    (+${list.length - SHOWN} more: -o json lists them all)`);
  }
  out.push(...x.lines);
  return out;
}

/** The explanation of one object as `berth explain` prints it (explanationText). */
export const explainObject = async (...args: Parameters<typeof explanationOf>): Promise<string[]> =>
  explanationText(await explanationOf(...args));
