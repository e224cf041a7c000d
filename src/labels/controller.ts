// Derived node labels: the reconcile loops. One controller is keyed by node: it decides the node's
// derived labels, annotations and taints from every rule and applies them under Berth's field
// manager when they differ. Another is keyed by NodeLabelRule and writes counts and conditions.
import type { PolicyKit } from '../policy/kit.ts';
import { applyStatus } from '../runtime/client/apply.ts';
import type { ApplyNodeWriter } from '../policy/nodes/apply.ts';
import { conditionSetter, sameConditions, type Condition } from '../runtime/api/conditions.ts';
import { Controller, FirstPass, type Result, type Source } from '../runtime/controller/controller.ts';
import type { EventRecorder } from '../runtime/events/recorder.ts';
import type { EventHandler, Informer } from '../runtime/cache/informer.ts';
import type { Logger } from '../runtime/observability/log.ts';
import type { Manager } from '../runtime/manager/manager.ts';
import {
  annotationsChanged,
  changed,
  deletionChanged,
  generationChanged,
  labelsChanged,
  managedFieldsChanged,
  nodeInfoChanged,
  taintsChanged,
} from '../policy/predicates.ts';
import { slimNode, type SlimNode } from '../policy/slim.ts';
import { Resources, type KubeObject } from '../runtime/api/meta.ts';
import { compileRule, decide, outputKeys, ruleNameOf, tracedOutputs } from './decide.ts';
import { formatFileError, RuleDirSource, type FileError } from './files.ts';
import { nodeView } from './match.ts';
import { FIELD_MANAGER, NodeLabelRule, type NodeLabelRuleStatus, type Rule } from './types.ts';

export interface LabelsOptions {
  /** k8s-auto-labeller rule files: DIR/<namespace>/<label>. */
  labelDir?: string;
  workers?: number;
}

/** What the node controller last found on each node, for rule status. */
interface NodeResult {
  matched: Set<string>;
  /** Rules all of whose outputs on this node are in place. */
  applied: Set<string>;
  /** Rules involved in a conflict on this node, with a description. */
  conflicts: Map<string, string>;
  /** Rules with an output whose rendered value is invalid on this node, with a description. */
  invalid: Map<string, string>;
  /** Rules with an output not set on this node because it reads an input the node lacks. */
  missing: Set<string>;
}

type RuleObject = KubeObject & { status?: NodeLabelRuleStatus };

export class LabelsController {
  readonly nodes: Informer<SlimNode>;
  readonly ruleObjects: Informer<RuleObject>;
  readonly files: RuleDirSource | undefined;
  readonly nodeController: Controller;
  readonly statusController: Controller;
  private readonly manager: Manager;
  private readonly kit: PolicyKit;
  private readonly events: EventRecorder;
  private readonly log: Logger;
  private readonly results = new Map<string, NodeResult>();
  private readonly writer: ApplyNodeWriter;
  private compiled = new Map<string, { resourceVersion: string; rule?: Rule; errors: string[] }>();
  /** Rules that would write keys another capability owns, by rule name: why. */
  private ownership = new Map<string, string[]>();
  private fileErrors: FileError[] = [];
  private readonly firstPass = new FirstPass();
  private rulesVersion = 0;
  private rulesCache: { version: number; rules: Rule[] } | undefined;

  constructor(kit: PolicyKit, opts: LabelsOptions = {}) {
    const manager = kit.manager;
    this.kit = kit;
    this.manager = manager;
    this.log = manager.log.child({ capability: 'labels' });
    this.events = manager.recorder('labels');
    this.nodes = manager.informer<SlimNode>(Resources.nodes, {
      transform: { name: 'slim-node', fn: slimNode },
    });
    this.writer = kit.applyWriter(FIELD_MANAGER, this.nodes);
    this.ruleObjects = manager.informer<RuleObject>(NodeLabelRule.ref);
    this.files = opts.labelDir
      ? new RuleDirSource(opts.labelDir, {
          logger: this.log,
          onErrors: (errors) => this.onFileErrors(errors),
        })
      : undefined;

    // Rule changes invalidate the compiled rule set before any key they enqueue is reconciled.
    const invalidate: EventHandler<unknown> = {
      onAdd: () => this.rulesVersion++,
      onUpdate: () => this.rulesVersion++,
      onDelete: () => this.rulesVersion++,
    };
    this.ruleObjects.addEventHandler(invalidate);
    this.files?.addEventHandler(invalidate);
    // So do changes of the keys other capabilities own (a gate created with a rule's taint key).
    kit.keys.addEventHandler(invalidate);

    const allNodes = () => this.nodes.keys();
    this.nodeController = new Controller({
      name: 'labels-node',
      workers: opts.workers ?? 16,
      logger: this.log,
      reconciler: { reconcile: (key) => this.reconcileNode(key) },
    })
      .watch(this.nodes, (n) => n.metadata!.name!, { update: nodeChanged })
      .watch(this.ruleObjects, allNodes, { update: changed(generationChanged) })
      .watch(kit.keys, allNodes);
    if (this.files) this.nodeController.watch(this.files as Source<Rule>, allNodes);

    this.statusController = new Controller({
      name: 'labels-rule-status',
      workers: 2,
      logger: this.log,
      reconciler: { reconcile: (key) => this.reconcileStatus(key) },
    })
      .watch(this.ruleObjects, (r) => r.metadata!.name!, { update: changed(generationChanged) })
      .watch(kit.keys, () => this.ruleObjects.keys());

    manager.add(this.nodeController);
    manager.add(this.statusController);
    if (this.files) {
      const files = this.files;
      manager.addRunnable({
        name: 'label-dir',
        needLeaderElection: false,
        start: () => files.start(),
        stop: async () => files.stop(),
      });
    }
  }

  /** Every valid rule, NodeLabelRules and files together, recompiled only when a source changed. */
  rules(): Rule[] {
    if (this.rulesCache?.version === this.rulesVersion) return this.rulesCache.rules;
    const version = this.rulesVersion;
    const next = new Map<string, { resourceVersion: string; rule?: Rule; errors: string[] }>();
    for (const obj of this.ruleObjects.list()) {
      const name = obj.metadata!.name!;
      const rv = obj.metadata!.resourceVersion ?? '';
      const old = this.compiled.get(name);
      next.set(name, old?.resourceVersion === rv ? old : { resourceVersion: rv, ...compileRule(obj) });
    }
    this.compiled = next;
    const compiled = [
      ...[...next.values()].flatMap((c) => (c.rule ? [c.rule] : [])),
      ...(this.files?.rules() ?? []),
    ];
    // One owner per key: a rule that outputs a key of a gate or placement is Invalid, whole.
    const ownership = new Map<string, string[]>();
    for (const r of compiled) {
      const why = this.kit.keys.violations('labels', outputKeys(r));
      if (!why.length) continue;
      ownership.set(r.name, why);
      if (r.source.kind === 'File' && this.ownership.get(r.name)?.join() !== why.join())
        this.log.error({ file: r.source.path }, `rule file rejected: ${why.join('; ')}`);
    }
    this.ownership = ownership;
    const rules = compiled.filter((r) => !ownership.has(r.name));
    this.rulesCache = { version, rules };
    return rules;
  }

  private async reconcileNode(name: string): Promise<Result | void> {
    const node = this.nodes.get(name);
    if (!node) {
      this.writer.forget(name);
      this.setResult(name, undefined);
      return;
    }
    const decision = decide(nodeView(node), this.rules());
    const written = await this.writer.sync(node, decision);
    const foreign = tracedOutputs(decision, written.foreign);

    const conflicts = new Map<string, string>();
    for (const c of decision.conflicts) {
      const text = `${c.kind} ${c.key}: ${[c.winner, ...c.losers].map((o) => `${o.rule} sets "${o.value}"`).join(', ')}; ${c.winner.rule} wins (rules apply in name order)`;
      for (const o of [c.winner, ...c.losers]) conflicts.set(o.rule, text);
    }
    for (const f of foreign) {
      conflicts.set(
        f.rule,
        `${f.kind} ${f.key} on node ${name} is set to another value by another field manager; Berth leaves it alone`,
      );
    }
    const matched = new Set([...decision.matches].filter(([, m]) => m.matched).map(([r]) => r));
    const blocked = new Set([...foreign, ...decision.conflicts.flatMap((c) => c.losers)].map((o) => o.rule));
    const invalid = new Map<string, string>();
    for (const e of decision.renderErrors) {
      blocked.add(e.rule);
      invalid.set(e.rule, `node ${name}: ${e.message}`);
    }
    const missing = new Set(decision.missingInputs.map((e) => e.rule));
    const applied = new Set([...matched].filter((r) => !blocked.has(r)));
    this.setResult(name, { matched, applied, conflicts, invalid, missing });
    // The loop breaker held keys back: write them once it lets go.
    if (written.retryAfterMs !== undefined) return { requeueAfterMs: written.retryAfterMs };
  }

  private setResult(name: string, r: NodeResult | undefined): void {
    const old = this.results.get(name);
    if (r) this.results.set(name, r);
    else this.results.delete(name);
    // Recount only the rules whose standing on this node changed, coalesced over a short window.
    const touched = new Set<string>();
    const diff = (a: Set<string> | undefined, b: Set<string> | undefined) => {
      for (const x of a ?? []) if (!b?.has(x)) touched.add(x);
      for (const x of b ?? []) if (!a?.has(x)) touched.add(x);
    };
    diff(old?.matched, r?.matched);
    diff(old?.applied, r?.applied);
    diff(new Set(old?.conflicts.keys()), new Set(r?.conflicts.keys()));
    diff(new Set(old?.invalid.keys()), new Set(r?.invalid.keys()));
    diff(old?.missing, r?.missing);
    for (const [rule, text] of r?.conflicts ?? []) if (old?.conflicts.get(rule) !== text) touched.add(rule);
    for (const [rule, text] of r?.invalid ?? []) if (old?.invalid.get(rule) !== text) touched.add(rule);
    for (const rule of touched) {
      if (rule.startsWith('nodelabelrule/'))
        this.statusController.queue.addAfter(rule.slice('nodelabelrule/'.length), 500);
    }
  }

  private async reconcileStatus(crName: string): Promise<Result | void> {
    const obj = this.ruleObjects.get(crName);
    if (!obj) return;
    this.rules();
    const compiled = this.compiled.get(crName);
    const ruleName = ruleNameOf(crName);
    const generation = obj.metadata?.generation;
    let matchedNodes = 0;
    let appliedNodes = 0;
    let missingNodes = 0;
    const conflicts: string[] = [];
    const invalid: string[] = [];
    for (const r of this.results.values()) {
      if (r.matched.has(ruleName)) matchedNodes++;
      if (r.applied.has(ruleName)) appliedNodes++;
      if (r.missing.has(ruleName)) missingNodes++;
      const c = r.conflicts.get(ruleName);
      if (c && !conflicts.includes(c)) conflicts.push(c);
      const i = r.invalid.get(ruleName);
      if (i) invalid.push(i);
    }
    // Until the first pass over every node is done, the counts are partial: writing them would make
    // the status (and Ready) flap on every restart.
    if (!this.firstPass.complete(this.nodeController, this.results, this.nodes))
      return { requeueAfterMs: 250 };
    const errors = [...(compiled?.errors ?? []), ...(this.ownership.get(ruleName) ?? [])];
    const conds = conditionSetter(obj.status?.conditions as Condition[] | undefined, generation);
    const set = (type: string, status: boolean, reason: string, message: string) =>
      conds.set(type, status, reason, message);
    set(
      'Invalid',
      errors.length > 0,
      errors.length ? 'InvalidSpec' : 'Valid',
      errors.join('; ').slice(0, 2000),
    );
    set(
      'Conflicting',
      conflicts.length > 0,
      conflicts.length ? 'OutputConflict' : 'NoConflict',
      conflicts.length
        ? `${conflicts.slice(0, 3).join(' | ')}${conflicts.length > 3 ? ` (+${conflicts.length - 3} more)` : ''}`
        : '',
    );
    const ready =
      errors.length === 0 && conflicts.length === 0 && invalid.length === 0 && appliedNodes === matchedNodes;
    const reason = errors.length
      ? 'Invalid'
      : conflicts.length
        ? 'Conflicting'
        : invalid.length
          ? 'InvalidOutput'
          : ready
            ? 'Applied'
            : 'Progressing';
    // A skipped output is part of the truth about the rule, Ready or not.
    const skipped = missingNodes
      ? `; on ${missingNodes} of them an output reads an input the node lacks and is not set (berth explain node NAME)`
      : '';
    const message = ready
      ? `applied to ${appliedNodes} of ${matchedNodes} matching nodes${skipped}`
      : invalid.length
        ? `${invalid.length} of ${matchedNodes} matching nodes skip an output whose rendered value is invalid: ${invalid.slice(0, 3).join(' | ')}`
        : `${appliedNodes} of ${matchedNodes} matching nodes carry the rule's outputs${skipped}`;
    set('Ready', ready, reason, message.slice(0, 2000));

    const status: NodeLabelRuleStatus = {
      ...(generation !== undefined ? { observedGeneration: generation } : {}),
      matchedNodes: errors.length ? 0 : matchedNodes,
      appliedNodes: errors.length ? 0 : appliedNodes,
      conditions: conds.conditions,
    };
    const old = obj.status;
    const same =
      old?.observedGeneration === status.observedGeneration &&
      old?.matchedNodes === status.matchedNodes &&
      old?.appliedNodes === status.appliedNodes &&
      sameConditions(old?.conditions as Condition[] | undefined, conds.conditions);
    if (!same) {
      this.announceTransitions(obj, old?.conditions as Condition[] | undefined, conds.conditions);
      await applyStatus(this.manager.client(), NodeLabelRule.ref, obj, status, FIELD_MANAGER);
    }
  }

  /** Warning events when a rule becomes invalid, conflicting or renders invalid values: things a user can fix. */
  private announceTransitions(obj: RuleObject, before: Condition[] | undefined, after: Condition[]): void {
    const warnings: [type: string, when: (c: Condition | undefined) => boolean, reason: string][] = [
      ['Invalid', (c) => c?.status === 'True', 'InvalidRule'],
      ['Conflicting', (c) => c?.status === 'True', 'Conflict'],
      ['Ready', (c) => c?.reason === 'InvalidOutput', 'InvalidOutput'],
    ];
    for (const [type, when, reason] of warnings) {
      const b = before?.find((c) => c.type === type);
      const a = after.find((c) => c.type === type)!;
      if (when(a) && (!when(b) || b?.message !== a.message)) {
        this.events.event(obj, 'Warning', reason, 'Reconcile', a.message);
        this.log.warn({ rule: obj.metadata?.name, reason: a.reason }, a.message);
      }
    }
  }

  private onFileErrors(errors: FileError[]): void {
    this.fileErrors = errors;
    for (const e of errors)
      this.log.error({ file: e.file, line: e.line }, `rule file rejected: ${formatFileError(e)}`);
    // Rule files belong to no API object: the event goes on Berth's own pod when it runs in one.
    const pod = process.env['POD_NAME'];
    const ns = process.env['POD_NAMESPACE'];
    if (pod && ns) {
      for (const e of errors) {
        this.events.event(
          { apiVersion: 'v1', kind: 'Pod', name: pod, namespace: ns },
          'Warning',
          'InvalidRuleFile',
          'Load',
          formatFileError(e),
        );
      }
    }
  }

  get ruleFileErrors(): FileError[] {
    return this.fileErrors;
  }
}

/** Node events that can change a decision: labels, annotations, taints, node info, deletion, what Berth owns. */
const nodeChanged = changed<SlimNode>(
  generationChanged,
  deletionChanged,
  labelsChanged,
  annotationsChanged,
  taintsChanged,
  nodeInfoChanged,
  managedFieldsChanged,
);
