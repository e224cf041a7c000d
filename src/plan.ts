// What `berth plan` says a change would do: the objects of a file (or directory, or stdin) given to
// each capability that plans their kind (Capability.plan), against the cluster as it is now, from
// the decisions its controllers make. The command and the page both call this.
import { readdir, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { yaml } from './runtime/platform/yaml.ts';
import { clusterKeyOwnership, controllersOf, runningCapabilities } from './capability.ts';
import { capabilities } from './capabilities.ts';
import { selectorMatches, type LabelSelector } from './policy/match/selector.ts';
import { EVICTS, type Effect, type PlanPart } from './policy/plan.ts';
import { Resources, type KubeObject } from './runtime/api/meta.ts';
import { missingCrdsLine, withoutMissingCrds } from './runtime/client/absent.ts';
import { isForbidden, type KubeClient } from './runtime/client/client.ts';

export interface Plan extends PlanPart {
  /** Whether anything would change (the command exits 2 then, as `terraform plan -detailed-exitcode`). */
  changes: boolean;
  /** Pods evicted, per namespace and per PodDisruptionBudget covering them (NAMESPACE/NAME). */
  evictions?: { namespaces: Record<string, number>; budgets: Record<string, number> };
}

/** Most documents a change may hold: every one is planned against the whole cluster. */
const MAX_OBJECTS = 256;
/** Most bytes of YAML read, all files together (the page's /api/plan takes as much). */
export const MAX_BYTES = 4 << 20;

/** The objects of YAML text: every document, lists unwrapped; what cannot be read, with why. */
export function parseManifests(text: string, source: string): { objects: KubeObject[]; errors: string[] } {
  const objects: KubeObject[] = [];
  const errors: string[] = [];
  // YAML 1.1, as kubectl reads it (sigs.k8s.io/yaml): `yes` and `on` are booleans there, and the
  // apiserver refuses a label value `yes` that YAML 1.2 would read as the string the plan would predict.
  for (const doc of yaml().parseAllDocuments(text, { version: '1.1' })) {
    if (doc.errors.length) {
      errors.push(`${source}: ${doc.errors.map((e) => e.message).join('; ')}`);
      continue;
    }
    const obj = doc.toJS() as (KubeObject & { items?: KubeObject[] }) | null;
    if (!obj) continue;
    if (obj.kind?.endsWith('List') && Array.isArray(obj.items)) objects.push(...obj.items);
    else if (typeof obj.kind !== 'string' || !obj.metadata?.name)
      errors.push(`${source}: a document without kind or metadata.name`);
    else objects.push(obj);
  }
  return { objects, errors };
}

/** Reads `-f` paths: files, directories (their .yaml, .yml and .json files), or `-` for stdin. */
export async function readManifests(
  paths: string[],
  stdin: () => Promise<string>,
): Promise<{ objects: KubeObject[]; errors: string[] }> {
  const texts: [string, string][] = [];
  for (const p of paths) {
    if (p === '-') texts.push([await stdin(), 'stdin']);
    else if ((await stat(p)).isDirectory()) {
      for (const f of (await readdir(p)).filter((f) => /\.(ya?ml|json)$/.test(f)).sort())
        texts.push([await readFile(join(p, f), 'utf8'), join(p, f)]);
    } else texts.push([await readFile(p, 'utf8'), p]);
  }
  return manifestsOf(texts);
}

/** The objects of YAML texts (each with where it came from) read together, within the limits. */
export function manifestsOf(texts: [text: string, source: string][]): {
  objects: KubeObject[];
  errors: string[];
} {
  if (texts.reduce((n, [t]) => n + t.length, 0) > MAX_BYTES)
    return { objects: [], errors: [`more than ${MAX_BYTES} bytes of manifests`] };
  const read = texts.map(([t, source]) => parseManifests(t, source));
  const objects = read.flatMap((r) => r.objects);
  const errors = read.flatMap((r) => r.errors);
  if (objects.length > MAX_OBJECTS)
    errors.push(`${objects.length} objects: plan takes at most ${MAX_OBJECTS}`);
  return { objects, errors };
}

/**
 * What applying `objects` (or deleting them) would do now: each capability that runs (--controllers)
 * plans the objects of its kinds; a kind none plans is said to be unknown, never ignored quietly.
 */
export async function planChange(
  client: KubeClient,
  objects: KubeObject[],
  opts: { deleting: boolean; options: Record<string, unknown>; berthNamespace: string },
): Promise<Plan> {
  const missing = new Set<string>();
  const reader = withoutMissingCrds(client, missing);
  let owners: ReturnType<typeof clusterKeyOwnership> | undefined;
  const keys = () =>
    (owners ??= clusterKeyOwnership(capabilities, reader, controllersOf(capabilities, opts.options)));
  const running = runningCapabilities(capabilities, opts.options);
  const plan: Plan = { changes: false, effects: [], warnings: [], unknown: [], errors: [] };
  const berthKinds = new Set(capabilities.flatMap((c) => c.kinds).map((r) => r.kind));
  const foreign: string[] = [];
  const kinds = [
    ...new Set([
      ...objects.map((o) => o.kind!),
      ...capabilities.flatMap((c) => c.planFromFlags?.(opts.options) ?? []),
    ]),
  ];
  for (const kind of kinds) {
    const of = objects.filter((o) => o.kind === kind);
    const names = of.map((o) => o.metadata!.name!).join(', ');
    // Of the capabilities that plan a kind, one that runs here (a Quota: a cluster's, or a management plane's).
    const c = running.find((x) => x.plan?.[kind]) ?? capabilities.find((x) => x.plan?.[kind]);
    if (!c) {
      if (berthKinds.has(kind)) plan.unknown.push(`${kind} ${names}: berth plan does not plan this kind`);
      else foreign.push(...of.map((o) => `${kind} ${o.metadata!.name!}`));
      continue;
    }
    if (!running.includes(c))
      plan.warnings.push(
        `${c.name} is not among --controllers: that Berth would not act on ${kind} ${names}`,
      );
    const part = await c.plan![kind]!({ client: reader, objects: of, all: objects, keys, ...opts });
    plan.effects.push(...part.effects);
    plan.warnings.push(...part.warnings);
    plan.unknown.push(...part.unknown);
    plan.errors.push(...part.errors);
  }
  if (foreign.length)
    plan.unknown.push(
      `${foreign.join(', ')}: not Berth's kinds (kubectl diff -f shows what applying them changes)`,
    );
  if (missing.size) plan.unknown.push(missingCrdsLine(missing));
  const evicted = plan.effects.filter(
    (e) => e.kind === 'Pod' && e.op === '!' && e.what.startsWith('evicted'),
  );
  if (evicted.length) {
    const { counts, short } = await evictionCounts(reader, evicted, plan.unknown);
    plan.evictions = counts;
    plan.warnings.push(...short);
  }
  plan.changes = plan.effects.length > 0;
  return plan;
}

/**
 * Evicted pods counted per namespace and per PodDisruptionBudget that covers them, and a warning
 * for each budget that allows fewer disruptions now than the pods it would lose: the Eviction API
 * refuses the rest (429) until it allows more, and Berth retries them. Berth's own role may not
 * list budgets (the page plans as Berth): then the budgets are said to be unknown.
 */
async function evictionCounts(
  client: KubeClient,
  evicted: Effect[],
  unknown: string[],
): Promise<{ counts: NonNullable<Plan['evictions']>; short: string[] }> {
  const budgets = await client
    .list<KubeObject & { spec?: { selector?: LabelSelector }; status?: { disruptionsAllowed?: number } }>(
      Resources.podDisruptionBudgets,
    )
    .then(
      (l) => l.items,
      (e: unknown) => {
        if (!isForbidden(e)) throw e;
        unknown.push(
          'PodDisruptionBudgets: not allowed to list them, so evictions per budget are not counted',
        );
        return [];
      },
    );
  const pods = new Map(
    (await client.list(Resources.pods)).items.map((p) => [`${p.metadata?.namespace}/${p.metadata?.name}`, p]),
  );
  const counts = { namespaces: {} as Record<string, number>, budgets: {} as Record<string, number> };
  const allowed = new Map<string, number>();
  for (const name of new Set(evicted.map((e) => e.name))) {
    const ns = name.slice(0, name.indexOf('/'));
    counts.namespaces[ns] = (counts.namespaces[ns] ?? 0) + 1;
    const pod = pods.get(name);
    for (const b of budgets)
      if (
        b.metadata?.namespace === ns &&
        b.spec?.selector &&
        selectorMatches(b.spec.selector, pod?.metadata?.labels)
      ) {
        const id = `${ns}/${b.metadata.name}`;
        counts.budgets[id] = (counts.budgets[id] ?? 0) + 1;
        allowed.set(id, b.status?.disruptionsAllowed ?? 0);
      }
  }
  const short = Object.entries(counts.budgets)
    .filter(([id, n]) => allowed.get(id)! < n)
    .map(
      ([id, n]) =>
        `PodDisruptionBudget ${id} allows ${allowed.get(id)} disruption(s) now, ${n} of its pods would be evicted: the Eviction API refuses the rest until it allows more`,
    );
  return { counts, short };
}

const opposite = { '+': '-', '-': '+', '~': '~', '!': '!' } as const;

/**
 * A plan of deleting objects, the other way round: what they do now (a label they take back is one
 * they set; a change `a -> b` is said `b -> a`). Pods deleting them would evict are no part of what
 * they do now: counted on an `unknown:` line instead.
 */
export function reversed(p: Plan): Plan {
  const evicted = p.effects.filter((e) => e.op === '!').length;
  const effects = p.effects
    .filter((e) => e.op !== '!')
    .map((e) => ({
      ...e,
      op: opposite[e.op],
      what: e.op === '~' ? e.what.replace(/^(.*): (.*) -> (.*)$/, '$1: $3 -> $2') : e.what,
    }));
  const { evictions: _, ...rest } = p;
  return {
    ...rest,
    changes: effects.length > 0,
    effects,
    warnings: p.warnings.filter((w) => !w.includes(EVICTS)),
    unknown: [
      ...p.unknown,
      ...(evicted ? [`deleting them would evict ${evicted} pod(s): berth plan --delete says which`] : []),
    ],
  };
}

/** What `berth plan` exits with, as `terraform plan -detailed-exitcode`: 1 on errors, 2 when something would change, else 0. */
export const planExitCode = (p: Plan): 0 | 1 | 2 => (p.errors.length ? 1 : p.changes ? 2 : 0);

/** Effects grouped by the object they act on (`Kind NAME`), in the order first met. */
export function effectsByObject(effects: Effect[]): Map<string, Effect[]> {
  const byObject = new Map<string, Effect[]>();
  for (const e of effects) {
    const id = `${e.kind} ${e.name}`;
    byObject.set(id, [...(byObject.get(id) ?? []), e]);
  }
  return byObject;
}

/**
 * The plan as `berth plan` prints it: effects by object, then evictions, warnings and unknowns;
 * `now`: a reversed plan, what the objects do now.
 */
export function planText(p: Plan, now = false): string[] {
  const out: string[] = [];
  const byObject = effectsByObject(p.effects);
  const head = now
    ? `what these do now, to ${byObject.size} object(s)`
    : `${byObject.size} object(s) would change`;
  out.push(p.changes ? `${head} (nothing was written)` : now ? 'they do nothing now' : 'no change');
  for (const [id, effects] of byObject) {
    out.push(id);
    for (const e of effects) out.push(`  ${e.op} ${e.what}  (${e.by})`);
  }
  if (p.evictions) {
    const ns = Object.entries(p.evictions.namespaces).map(([n, c]) => `${n} ${c}`);
    out.push(`evictions by namespace: ${ns.join(', ')}`);
    const b = Object.entries(p.evictions.budgets).map(([n, c]) => `${n} ${c}`);
    if (b.length) out.push(`evictions by PodDisruptionBudget: ${b.join(', ')}`);
  }
  out.push(...p.warnings.map((w) => `warning: ${w}`));
  out.push(...p.unknown.map((u) => `unknown: ${u}`));
  out.push(...p.errors.map((e) => `error: ${e}`));
  return out;
}
