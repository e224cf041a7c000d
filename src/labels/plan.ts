// `berth plan` of NodeLabelRules: the labels, annotations and taints each node would gain or lose
// (previewRules, as the controller decides), the pods a NoExecute taint it gains would evict, and
// the pods an evictOnRemoval rule would evict once a label they need goes (the evictor's verdict).
import { emptyPart, evictionWarning, type PlanContext, type PlanPart } from '../policy/plan.ts';
import type { KeyPattern } from '../policy/nodes/ownership.ts';
import { slimNode, slimPod } from '../policy/slim.ts';
import { Resources } from '../runtime/api/meta.ts';
import { compileRule, refuseOwned } from './decide/nodes.ts';
import { evictingRules, verdict, type Removal } from './decide/evict.ts';
import { evictions, previewRules, type NodeChanges } from './explain.ts';
import { holdsBeside } from './files.ts';
import { ruleFilesOf } from './index.ts';
import { clusterRules, localRules } from './load.ts';
import type { EvictOnRemoval, Rule } from './types.ts';

const byOf = (rule: string) => rule.replace(/^nodelabelrule\//, 'NodeLabelRule ');

export async function planRules(
  ctx: PlanContext,
  labelDir?: string,
  files?: EvictOnRemoval,
): Promise<PlanPart> {
  const { client } = ctx;
  const part = emptyPart();
  const candidates: Rule[] = [];
  for (const o of ctx.objects) {
    const c = compileRule(o);
    if (c.rule) candidates.push(c.rule);
    else part.errors.push(`NodeLabelRule ${o.metadata?.name}: ${c.errors.join('; ')}`);
  }
  // k8s-auto-labeller rule files (--rule-file), each standing in for the --label-dir file of its name.
  for (const path of ruleFilesOf(ctx.options)) {
    const loaded = await localRules(path);
    candidates.push(...loaded.rules);
    part.errors.push(...loaded.errors);
  }
  const owners = await ctx.keys();
  const owned = (keys: KeyPattern[]) => owners.violations('labels', keys);
  for (const [name, why] of refuseOwned(candidates, owned).refused)
    part.errors.push(`${byOf(name)} would be Invalid and apply nothing: ${why.join('; ')}`);
  const current = await clusterRules(client, labelDir);
  const { rules: usable, refused } = refuseOwned(current.rules, owned);
  // Current rules Berth applies nothing of, before or after: said, as the plan leaves them out.
  part.warnings.push(
    ...current.errors.map((e) => `current rule skipped: ${e}`),
    ...[...refused].map(
      ([name, why]) => `current rule skipped: ${byOf(name)}: Invalid, applies nothing: ${why.join('; ')}`,
    ),
  );
  const named = new Set(candidates.map((r) => r.name));
  const kept = usable.filter((r) => !named.has(r.name));
  const after = ctx.deleting ? kept : [...kept, ...refuseOwned(candidates, owned).rules];
  const held = current.holds ?? [];
  const nodes = (await client.list(Resources.nodes)).items;
  const changes = previewRules(nodes, usable, after, {
    before: held,
    after: ctx.deleting ? held : holdsBeside(held, candidates),
  });
  nodeEffects(part, changes, nodes.length);
  if (!changes.length) return part;
  const pods = (
    await client.list(Resources.pods, {
      query: { fieldSelector: 'status.phase!=Succeeded,status.phase!=Failed' },
    })
  ).items;
  for (const e of evictions(changes, pods))
    for (const p of e.pods)
      part.effects.push({
        kind: 'Pod',
        name: p,
        op: '!',
        what: `evicted by taint ${e.taint}`,
        by: `node ${e.node}`,
      });
  const onRemoval = removalEvictions(changes, nodes, pods, after, ctx.berthNamespace, files);
  part.effects.push(...onRemoval);
  const warning = evictionWarning(
    part.effects.filter((e) => e.op === '!').map((e) => e.name),
    'this change',
  );
  if (warning) part.warnings.push(warning);
  return part;
}

/** The changes to nodes as effects, and a warning for a taint every node (of several) would get. */
function nodeEffects(part: PlanPart, changes: NodeChanges[], nodeCount: number): void {
  for (const n of changes)
    for (const c of n.changes)
      part.effects.push({
        kind: 'Node',
        name: n.node,
        op: c.before === undefined ? '+' : c.after === undefined ? '-' : '~',
        what:
          c.before !== undefined && c.after !== undefined
            ? `${c.kind} ${c.key}: ${c.before} -> ${c.after}`
            : `${c.kind} ${c.key}=${c.after ?? c.before}`,
        by: byOf(c.rule),
      });
  const tainted = new Map<string, Set<string>>();
  for (const n of changes)
    for (const c of n.changes)
      if (c.kind === 'taint' && c.after !== undefined)
        tainted.set(c.key, (tainted.get(c.key) ?? new Set()).add(n.node));
  for (const [taint, on] of tainted)
    if (nodeCount > 1 && on.size === nodeCount)
      part.warnings.push(`every node (${nodeCount}) would be tainted ${taint}`);
}

/** The pods the evictor would evict once the labels lost in `changes` are gone from their nodes. */
function removalEvictions(
  changes: NodeChanges[],
  nodes: Parameters<typeof slimNode>[0][],
  pods: Parameters<typeof slimPod>[0][],
  rules: Rule[],
  berthNamespace: string,
  files: EvictOnRemoval | undefined,
): PlanPart['effects'] {
  const policies = evictingRules(rules, files);
  const out: PlanPart['effects'] = [];
  for (const n of changes) {
    const gone = new Map<string, Removal>();
    for (const c of n.changes)
      if (c.kind === 'label' && c.before !== undefined)
        gone.set(c.key, { value: c.before, rule: c.rule, at: 0 });
    if (!gone.size) continue;
    const full = nodes.find((x) => x.metadata?.name === n.node)!;
    const labels = { ...full.metadata?.labels };
    for (const c of n.changes)
      if (c.kind === 'label') {
        if (c.after === undefined) delete labels[c.key];
        else labels[c.key] = c.after;
      }
    const node = slimNode({ ...full, metadata: { ...full.metadata, labels } });
    for (const p of pods.filter((x) => (x as { spec?: { nodeName?: string } }).spec?.nodeName === n.node)) {
      const pod = slimPod(p);
      const v = verdict(pod, node, policies, gone, berthNamespace);
      if (v && v.policy.mode === 'Evict')
        out.push({
          kind: 'Pod',
          name: `${pod.metadata?.namespace}/${pod.metadata?.name}`,
          op: '!',
          what: `evicted ${v.policy.afterSeconds} s after label ${v.label} goes`,
          by: byOf(v.rule),
        });
    }
  }
  return out;
}
