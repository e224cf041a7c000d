// Read-only answers about derived labels: why a node carries what it carries (explain), and what a
// rule would change before it is applied (dry run). Pure functions over nodes and rules.
import type { KeyPattern } from '../policy/nodes/ownership.ts';
import { tolerates, type Toleration } from '../policy/nodes/taints.ts';
import { Resources, type KubeObject } from '../runtime/api/meta.ts';
import { nodeState, taintId } from '../policy/nodes/write.ts';
import {
  decide,
  tracedNodeWrite,
  refuseOwned,
  ruleNameOf,
  type NodeDecision,
  type Output,
  type OutputKind,
} from './decide/nodes.ts';
import { nodesOf, type Said, type Subject } from '../policy/explain.ts';
import type { ExplainContext } from '../capability.ts';
import { slimNode, slimPod } from '../policy/slim.ts';
import { EVICTION_REASONS } from './controllers/evict.ts';
import { explainPodEviction } from './decide/evict.ts';
import { evictOnRemovalFiles, labelDirOf } from './index.ts';
import { clusterRules } from './load.ts';
import { MATCH_INPUT_MAX } from '../policy/match/requirement.ts';
import { escapeControl, quote } from '../policy/text.ts';
import { inScope, keepHeld, type Hold } from './files.ts';
import { nodeView, subjectOf, termValue, type NodeView, type RuleMatch } from './match.ts';
import { FIELD_MANAGER, type MatchTerm, type Rule } from './types.ts';

function describeTerm(view: NodeView, t: MatchTerm): string {
  const s = subjectOf(t);
  const value = termValue(view, t);
  const unread =
    value !== undefined && value.length > MATCH_INPUT_MAX && ['Gt', 'Lt', 'InRegexp'].includes(t.operator)
      ? `, longer than the ${MATCH_INPUT_MAX} characters ${t.operator} reads`
      : '';
  const seen = value === undefined ? 'absent' : `${quote(value)}${unread}`;
  const values = t.values?.length ? ` [${t.values.map((v) => escapeControl(v)).join(', ')}]` : '';
  return `${s.kind} ${escapeControl(s.key)} ${t.operator}${values} (node: ${seen})`;
}

const sourceOf = (r: Rule): string =>
  r.source.kind === 'File' ? `file ${r.source.path}` : `NodeLabelRule ${r.source.name}`;

function describeHold(h: Hold): string {
  const why = h.errors.map((e) => `${e.line === undefined ? '' : `line ${e.line}: `}${e.message}`).join('; ');
  const what =
    h.scope.label !== undefined
      ? 'rule file'
      : h.scope.namespace !== undefined
        ? 'namespace directory'
        : 'rule directory';
  const until =
    h.scope.label !== undefined
      ? 'Berth leaves the label where it set it until the file is fixed or removed (a Berth that read a good version of it since it started runs that instead)'
      : 'Berth leaves the labels it set under it where they are until it can be read or is removed';
  return `${what} ${escapeControl(h.file)} cannot be used (${why}): ${until}`;
}

const scopes = (holds: readonly Hold[]) => holds.map((h) => h.scope);

/** `d` as the controller writes it on `node` (keepHeld), and the labels in it that only a hold keeps, each with its hold. */
function withHeld(d: NodeDecision, holds: readonly Hold[], node: KubeObject) {
  const kept = keepHeld(d, scopes(holds), node);
  const held = Object.entries(kept.labels)
    .filter(([key]) => !(key in d.labels))
    .map(([key, value]) => ({ key, value, hold: holds.find((h) => inScope(h.scope, key))! }));
  return { kept, held };
}

/** Why a rule does not match a node: its first allOf term that fails, or every anyOf term. */
function whyNot(view: NodeView, m: RuleMatch): string {
  const failed = m.terms.filter((t) => (t.group === 'allOf' ? !t.held : false));
  const anyHeld = m.terms.some((t) => t.group === 'anyOf' && t.held);
  if (failed.length) return `allOf ${describeTerm(view, failed[0]!.term)} does not hold`;
  if (!anyHeld)
    return `no anyOf term holds (${m.terms
      .filter((t) => t.group === 'anyOf')
      .map((t) => describeTerm(view, t.term))
      .join('; ')})`;
  return 'no terms';
}

const show = (o: Output) =>
  o.kind === 'taint'
    ? `taint ${o.key}${o.value ? ` (value ${o.value})` : ''}`
    : `${o.kind} ${o.key}=${o.value}`;

/**
 * `berth explain nodelabelrule NAME`: each node the rule matches (the terms that hold, what it
 * sets there, where another rule wins a key) or does not (the term that fails), from the same
 * decision as the controller over every rule Berth runs (`all`, with its holds and refusals).
 */
export function explainRule(
  name: string,
  nodes: KubeObject[],
  all: Rule[],
  owned?: (keys: KeyPattern[]) => string[],
): Said {
  const ruleName = ruleNameOf(name);
  const { rules, refused } = owned
    ? refuseOwned(all, owned)
    : { rules: all, refused: new Map<string, string[]>() };
  const why = refused.get(ruleName);
  if (why) return { lines: [`  refused: sets nothing on any node: ${why.join('; ')}`] };
  if (!rules.some((r) => r.name === ruleName)) return { lines: ['  invalid: applies nothing'] };
  const subjects: Subject[] = nodes.map((node) => {
    const view = nodeView(node);
    const d = decide(view, rules);
    const m = d.matches.get(ruleName)!;
    if (!m.matched) return { kind: 'Node', name: view.name, in: false, why: [whyNot(view, m)] };
    return {
      kind: 'Node',
      name: view.name,
      in: true,
      why: [
        ...m.terms.filter((t) => t.held).map((t) => `matched: ${t.group} ${describeTerm(view, t.term)}`),
        ...d.outputs.filter((o) => o.rule === ruleName).map((o) => `sets ${show(o)}`),
        ...d.conflicts
          .filter((c) => c.losers.some((l) => l.rule === ruleName))
          .map((c) => `loses ${c.kind} ${c.key} to ${c.winner.rule} (rules apply in name order)`),
        ...d.missingInputs.filter((e) => e.rule === ruleName).map((e) => e.message),
        ...d.renderErrors.filter((e) => e.rule === ruleName).map((e) => `held back: ${e.message}`),
      ],
    };
  });
  return { subjects, lines: [] };
}

/**
 * Lines explaining a node's derived labels, annotations and taints. `holds` (holdsOf) keep the
 * labels no rule sets that the controller keeps (keepHeld), and each such label says why. `owned`
 * (KeyOwnership.violations of derived labels) refuses, as the controller does, the rules that
 * would write another capability's keys: they are shown refused, with their owner, and set nothing.
 */
export function explainNodeLabels(
  node: KubeObject,
  all: Rule[],
  holds: readonly Hold[] = [],
  owned?: (keys: KeyPattern[]) => string[],
): string[] {
  const { rules, refused } = owned
    ? refuseOwned(all, owned)
    : { rules: all, refused: new Map<string, string[]>() };
  const view = nodeView(node);
  const d = decide(view, rules);
  const state = nodeState(node, FIELD_MANAGER);
  const { kept, held } = withHeld(d, holds, node);
  const write = tracedNodeWrite(state, kept);
  const byName = new Map(all.map((r) => [r.name, r]));
  const out: string[] = [];
  const outputsOf = (rule: string) => d.outputs.filter((o) => o.rule === rule);

  const matched = [...d.matches].filter(([, m]) => m.matched);
  out.push(
    `Derived labels (field manager ${FIELD_MANAGER}): ${matched.length} of ${rules.length} rules match${refused.size ? ` (${refused.size} more refused)` : ''}`,
  );
  for (const [name, m] of matched) {
    const r = byName.get(name)!;
    out.push(`  ${name} (${sourceOf(r)})`);
    for (const t of m.terms.filter((t) => t.held))
      out.push(`    matched: ${t.group} ${describeTerm(view, t.term)}`);
    for (const o of outputsOf(name)) out.push(`    sets ${show(o)}`);
    for (const e of d.missingInputs.filter((e) => e.rule === name)) out.push(`    ${e.message}`);
  }
  for (const c of d.conflicts) {
    out.push(
      `  conflict on ${c.kind} ${c.key}: ${c.winner.rule} wins with "${c.winner.value}" over ${c.losers.map((l) => `${l.rule} ("${l.value}")`).join(', ')} (rules apply in name order)`,
    );
  }
  for (const e of d.renderErrors) out.push(`  held back: ${e.rule}: ${e.message}`);
  for (const f of write.foreignOutputs) {
    out.push(
      `  held back: ${show(f)} from ${f.rule}: another field manager holds ${f.kind} ${f.key}; Berth leaves it alone`,
    );
  }
  for (const [name, why] of refused)
    out.push(`  refused: ${name} (${sourceOf(byName.get(name)!)}) sets nothing: ${why.join('; ')}`);
  for (const { key, value, hold } of held)
    if (key in write.labels)
      out.push(`  held: label ${key}=${value} stays though no rule sets it: ${describeHold(hold)}`);
  // Drift between what the rules say and what Berth owns on the node right now.
  const pending: string[] = [];
  const kinds: [OutputKind, Record<string, string>, Record<string, string>, string[]][] = [
    ['label', write.labels, state.labels, state.owned.labels],
    ['annotation', write.annotations, state.annotations, state.owned.annotations],
  ];
  for (const [kind, want, have, owned] of kinds) {
    for (const [k, v] of Object.entries(want))
      if (have[k] !== v || !owned.includes(k)) pending.push(`will set ${kind} ${k}=${v}`);
    for (const k of owned)
      if (!(k in want)) pending.push(`will remove ${kind} ${k} (no rule backs it any more)`);
  }
  const wantTaints = new Set(write.taints.map(taintId));
  for (const t of write.taints)
    if (!state.owned.taints.includes(taintId(t))) pending.push(`will set taint ${taintId(t)}`);
  for (const id of state.owned.taints)
    if (!wantTaints.has(id)) pending.push(`will remove taint ${id} (no rule backs it any more)`);
  if (pending.length)
    out.push('  not yet applied (Berth not running, or catching up):', ...pending.map((p) => `    ${p}`));

  const unmatched = [...d.matches].filter(([, m]) => !m.matched);
  if (unmatched.length) out.push('  rules that do not match:');
  for (const [name, m] of unmatched) out.push(`    ${name}: ${whyNot(view, m)}`);
  return out;
}

export interface Change {
  kind: OutputKind;
  key: string;
  before?: string;
  after?: string;
  /** The rule behind the value after (or before, for a loss). */
  rule: string;
}

export interface NodeChanges {
  node: string;
  changes: Change[];
}

/** The holds (holdsOf) of the rule directory before and after the change a preview compares. */
export interface PreviewHolds {
  before: readonly Hold[];
  after: readonly Hold[];
}

/**
 * What applying `next` instead of `current` would change on each node: gains, losses and new
 * values, as the controller would write them. A label a hold keeps (keepHeld) counts as set, by
 * the unusable file, as the controller keeps it: a candidate that fixes that file changes nothing
 * on the nodes that already carry it. An output another field manager holds is not Berth's to set
 * (tracedNodeWrite holds it back), and a key Berth does not own alone stays when Berth lets go of it.
 */
export function previewRules(
  nodes: KubeObject[],
  current: Rule[],
  next: Rule[],
  holds: PreviewHolds = { before: [], after: [] },
): NodeChanges[] {
  const result: NodeChanges[] = [];
  for (const node of nodes) {
    const view = nodeView(node);
    const state = nodeState(node, FIELD_MANAGER);
    const index = (rules: Rule[], held: readonly Hold[]) => {
      const d = decide(view, rules);
      const { kept, held: heldLabels } = withHeld(d, held, node);
      const foreign = new Set(tracedNodeWrite(state, kept).foreign.map((f) => `${f.kind}\u0000${f.key}`));
      const outputs = new Map(
        d.outputs.map((o) => [`${o.kind}\u0000${o.key}`, o] as const).filter(([id]) => !foreign.has(id)),
      );
      for (const { key, value, hold } of heldLabels)
        outputs.set(`label\u0000${key}`, {
          kind: 'label',
          key,
          value,
          rule: `held: ${escapeControl(hold.file)} cannot be used`,
        });
      return outputs;
    };
    // What Berth's letting go leaves on the node: a label or annotation there that another manager set too.
    const staysWithout = (o: Output) =>
      o.kind !== 'taint' &&
      o.key in state[`${o.kind}s`] &&
      (state.shared[`${o.kind}s`].includes(o.key) || !state.owned[`${o.kind}s`].includes(o.key));
    const before = index(current, holds.before);
    const after = index(next, holds.after);
    const changes: Change[] = [];
    for (const [id, o] of after) {
      const b = before.get(id);
      if (!b) changes.push({ kind: o.kind, key: o.key, after: o.value, rule: o.rule });
      else if (b.value !== o.value)
        changes.push({ kind: o.kind, key: o.key, before: b.value, after: o.value, rule: o.rule });
    }
    for (const [id, b] of before)
      if (!after.has(id) && !staysWithout(b))
        changes.push({ kind: b.kind, key: b.key, before: b.value, rule: b.rule });
    if (changes.length)
      result.push({ node: view.name, changes: changes.sort((a, b) => (a.key < b.key ? -1 : 1)) });
  }
  return result.sort((a, b) => (a.node < b.node ? -1 : 1));
}

export interface Eviction {
  node: string;
  /** The NoExecute taint the node would gain, "key:NoExecute". */
  taint: string;
  /** namespace/name of each running pod on the node that does not tolerate it for good. */
  pods: string[];
}

interface PodLike extends KubeObject {
  spec?: { nodeName?: string; tolerations?: Toleration[] };
  status?: { phase?: string };
}

/**
 * The pods that the NoExecute taints gained in `changes` would evict: those bound to the node and
 * not finished, with no toleration that holds for good (one with tolerationSeconds only delays).
 */
export function evictions(changes: NodeChanges[], pods: PodLike[]): Eviction[] {
  const out: Eviction[] = [];
  for (const { node, changes: list } of changes) {
    for (const c of list) {
      if (c.kind !== 'taint' || c.after === undefined || !c.key.endsWith(':NoExecute')) continue;
      const taint = { key: c.key.slice(0, -':NoExecute'.length), value: c.after, effect: 'NoExecute' };
      const evicted = pods.filter(
        (p) =>
          p.spec?.nodeName === node &&
          p.status?.phase !== 'Succeeded' &&
          p.status?.phase !== 'Failed' &&
          !(p.spec.tolerations ?? []).some((t) => tolerates(t, taint) && t.tolerationSeconds === undefined),
      );
      out.push({
        node,
        taint: c.key,
        pods: evicted.map((p) => `${p.metadata?.namespace}/${p.metadata?.name}`),
      });
    }
  }
  return out;
}

/** `berth explain node`: the labels and taints the rules derive on the node (Capability.explainNode). */
export async function explainNodeObject({
  client,
  object: node,
  options,
  keys,
}: ExplainContext): Promise<string[]> {
  const { rules, errors, holds } = await clusterRules(client, labelDirOf(options));
  const owners = await keys?.();
  const owned = owners && ((k: KeyPattern[]) => owners.violations('labels', k));
  return [
    ...explainNodeLabels(node, rules, holds, owned),
    ...errors.map((e) => `  skipped invalid rule: ${e}`),
  ];
}

/** `berth explain nodelabelrule NAME`: which nodes the rule matches and what it sets (ExplainKind.explain). */
export async function explainRuleObject({
  client,
  object,
  options,
  keys,
  focus,
}: ExplainContext): Promise<Said> {
  const name = object.metadata!.name!;
  const { rules, errors } = await clusterRules(client, labelDirOf(options));
  const owners = await keys?.();
  const owned = owners && ((k: KeyPattern[]) => owners.violations('labels', k));
  const said = explainRule(name, await nodesOf(client, focus), rules, owned);
  const own = errors.filter((e) => e.startsWith(`NodeLabelRule ${name}: `));
  return { ...said, lines: [...own.map((e) => `  ${e}`), ...said.lines] };
}

/** `berth explain pod`: whether eviction on removal would evict the pod, and what it did (Capability.explainPod). */
export async function explainPodObject({
  client,
  object: pod,
  options,
  berthNamespace,
}: ExplainContext): Promise<string[]> {
  const { rules } = await clusterRules(client, labelDirOf(options));
  const slim = slimPod(pod);
  const node = slim.spec.nodeName
    ? await client.get(Resources.nodes, slim.spec.nodeName).then(slimNode, () => undefined)
    : undefined;
  const events = await client.list<
    KubeObject & { eventTime?: string; reason?: string; note?: string; regarding?: { uid?: string } }
  >(Resources.events, { namespace: slim.metadata!.namespace! });
  const reasons: readonly string[] = Object.values(EVICTION_REASONS);
  return explainPodEviction(
    slim,
    node,
    rules,
    berthNamespace,
    evictOnRemovalFiles(options),
    events.items
      .filter((e) => e.regarding?.uid === slim.metadata?.uid && reasons.includes(e.reason ?? ''))
      .map((e) => ({ time: e.eventTime ?? '', reason: e.reason ?? '', note: e.note ?? '' })),
  );
}
