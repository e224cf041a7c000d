// Derived node labels: the reconcile loops. One controller is keyed by node: it decides the node's
// derived labels, annotations and taints from every rule and applies them under Berth's field
// manager when they differ. Another is keyed by NodeLabelRule and writes counts and conditions.
import type { PolicyKit } from '../policy/kit.ts';
import type { ApplyNodeWriter } from '../policy/nodes/apply.ts';
import { PolicyStatusWriter, type StatusReport } from '../policy/status.ts';
import { Controller, type Result, type Source } from '../runtime/controller/controller.ts';
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
import { nodeInformer, type SlimNode } from '../policy/slim.ts';
import type { KubeObject } from '../runtime/api/meta.ts';
import { compileRule, decide, refuseOwned, ruleNameOf, tracedOutputs, type NodeDecision } from './decide.ts';
import { formatFileError, keepHeld, RuleDirSource, type FileError } from './files.ts';
import { nodeView } from './match.ts';
import { FIELD_MANAGER, NodeLabelRule, type NodeLabelRuleStatus, type Rule } from './types.ts';

export interface LabelsOptions {
  /** k8s-auto-labeller rule files: DIR/<namespace>/<label>. */
  labelDir?: string;
  workers?: number;
}

/** What the node controller last found for a NodeLabelRule on a node, for its status. */
interface RuleStanding {
  matched: boolean;
  /** All of its outputs on this node are in place. */
  applied: boolean;
  /** It is involved in a conflict on this node: a description. */
  conflict: string | undefined;
  /** An output's rendered value is invalid on this node: a description. */
  invalid: string | undefined;
  /** An output is not set on this node because it reads an input the node lacks. */
  missing: boolean;
  /** The node's write failed (an admission policy, annotations over the apiserver's limit): why. */
  failed: string | undefined;
}

type RuleObject = KubeObject & { status?: NodeLabelRuleStatus };
type RuleCount = 'matchedNodes' | 'appliedNodes';

/** Rules from NodeLabelRules are named after them; the others (rule files) have no status. */
const CR_RULE_PREFIX = ruleNameOf('');

export class LabelsController {
  readonly nodes: Informer<SlimNode>;
  readonly ruleObjects: Informer<RuleObject>;
  readonly files: RuleDirSource | undefined;
  readonly nodeController: Controller;
  readonly status: PolicyStatusWriter<RuleObject, RuleStanding, RuleCount>;
  readonly manager: Manager;
  readonly events: EventRecorder;
  readonly log: Logger;
  private readonly kit: PolicyKit;
  private readonly writer: ApplyNodeWriter;
  private compiled = new Map<string, { resourceVersion: string; rule?: Rule; errors: string[] }>();
  /** Rules that would write keys another capability owns, by rule name: why. */
  private ownership = new Map<string, string[]>();
  private fileErrors: FileError[] = [];
  private rulesVersion = 0;
  private rulesCache: { version: number; rules: Rule[] } | undefined;
  /**
   * By node: the rule that derived each label value there (`key\0value`), kept while the node
   * carries it or a rule derives it, so that the evictor can tell whose a removed value was.
   */
  private readonly derived = new Map<string, Map<string, string>>();

  constructor(kit: PolicyKit, opts: LabelsOptions = {}) {
    const manager = kit.manager;
    this.kit = kit;
    this.manager = manager;
    this.log = manager.log.child({ capability: 'labels' });
    this.events = manager.recorder('labels');
    this.nodes = nodeInformer(manager);
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
    if (this.files)
      this.nodeController.watch(this.files as Source<Rule>, allNodes).watch(this.files.holdChanges, allNodes);

    this.status = new PolicyStatusWriter(this, this.ruleObjects, {
      name: 'labels-rule-status',
      fieldManager: FIELD_MANAGER,
      report: (obj, standings) => this.report(obj, standings),
      // Things a user can fix: a rule that is invalid, conflicts, or renders invalid values.
      warnings: [
        { type: 'Invalid', status: 'True', event: 'InvalidRule' },
        { type: 'Conflicting', status: 'True', event: 'Conflict' },
        { type: 'Ready', status: 'False', reason: 'InvalidOutput' },
      ],
    });
    this.status.controller.watch(kit.keys, () => this.ruleObjects.keys());

    manager.add(this.nodeController);
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
    const { rules, refused } = refuseOwned(compiled, (keys) => this.kit.keys.violations('labels', keys));
    for (const r of compiled) {
      const why = refused.get(r.name);
      if (why && r.source.kind === 'File' && this.ownership.get(r.name)?.join() !== why.join())
        this.rejectFile({ file: r.source.path, message: why.join('; ') });
    }
    this.ownership = refused;
    this.rulesCache = { version, rules };
    return rules;
  }

  private async reconcileNode(name: string): Promise<Result | void> {
    const node = this.nodes.get(name);
    if (!node) {
      this.writer.forget(name);
      this.status.set(name, undefined);
      this.derived.delete(name);
      return;
    }
    const decision = decide(nodeView(node), this.rules());
    this.recordDerived(node, decision);
    // A write the apiserver refuses is still a standing (so status is written, and says so), then retried.
    const written = await this.writer.trySync(node, keepHeld(decision, this.files?.holds() ?? [], node));
    const failed = written.refused?.message;
    const foreign = tracedOutputs(decision, written.foreign);

    // Each NodeLabelRule's standing on this node, for its status.
    const standings = new Map<string, RuleStanding>();
    const standing = (rule: string): RuleStanding | undefined => {
      if (!rule.startsWith(CR_RULE_PREFIX)) return undefined;
      const cr = rule.slice(CR_RULE_PREFIX.length);
      let s = standings.get(cr);
      if (!s) {
        s = {
          matched: false,
          applied: false,
          conflict: undefined,
          invalid: undefined,
          missing: false,
          failed: undefined,
        };
        standings.set(cr, s);
      }
      return s;
    };
    for (const c of decision.conflicts) {
      const text = `${c.kind} ${c.key}: ${[c.winner, ...c.losers].map((o) => `${o.rule} sets "${o.value}"`).join(', ')}; ${c.winner.rule} wins (rules apply in name order)`;
      for (const o of [c.winner, ...c.losers]) {
        const s = standing(o.rule);
        if (s) s.conflict = text;
      }
    }
    for (const f of foreign) {
      const s = standing(f.rule);
      if (s)
        // A label or annotation set to another value, or a taint that was never (or is no longer) Berth's.
        s.conflict = `${f.kind} ${f.key} on node ${name} is held by another field manager; Berth leaves it alone`;
    }
    const matched = [...decision.matches].filter(([, m]) => m.matched).map(([r]) => r);
    const blocked = new Set([...foreign, ...decision.conflicts.flatMap((c) => c.losers)].map((o) => o.rule));
    for (const e of decision.renderErrors) {
      blocked.add(e.rule);
      const s = standing(e.rule);
      if (s) s.invalid = `node ${name}: ${e.message}`;
    }
    for (const e of decision.missingInputs) {
      const s = standing(e.rule);
      if (s) s.missing = true;
    }
    for (const r of matched) {
      const s = standing(r);
      if (s) {
        s.matched = true;
        s.applied = !blocked.has(r) && !failed;
      }
    }
    // A failed write is the failure of every rule it wrote for: those that match, and those whose
    // values it was taking off (recordDerived keeps them while the node carries them).
    if (failed)
      for (const r of new Set([...matched, ...(this.derived.get(name)?.values() ?? [])])) {
        const s = standing(r);
        if (s) s.failed = failed;
      }
    this.status.set(name, standings);
    if (written.refused) {
      this.events.event(node, 'Warning', 'WriteFailed', 'Label', written.refused.message);
      throw written.refused.error;
    }
    // The loop breaker held keys back: write them once it lets go.
    if (written.retryAfterMs !== undefined) return { requeueAfterMs: written.retryAfterMs };
  }

  /** The rule that derived `key=value` on the node, while it is there or derived (recordDerived). */
  derivedBy(node: string, key: string, value: string): string | undefined {
    return this.derived.get(node)?.get(`${key}\0${value}`);
  }

  /**
   * Before a decision is written: its labels with their rules, and the values recorded before that
   * neither the node carries nor a rule derives any more forgotten (a removal Berth writes is seen
   * by the evictor, whose handler runs before this node's next pass).
   */
  private recordDerived(node: SlimNode, decision: NodeDecision): void {
    const name = node.metadata!.name!;
    const labels = node.metadata?.labels ?? {};
    const mine = this.derived.get(name) ?? new Map<string, string>();
    for (const id of mine.keys()) {
      const [key = '', value] = id.split('\0');
      if (labels[key] !== value && decision.labels[key] !== value) mine.delete(id);
    }
    for (const o of decision.outputs) if (o.kind === 'label') mine.set(`${o.key}\0${o.value}`, o.rule);
    if (mine.size) this.derived.set(name, mine);
    else this.derived.delete(name);
  }

  private report(obj: RuleObject, standings: RuleStanding[]): StatusReport<RuleCount> {
    const crName = obj.metadata!.name!;
    this.rules();
    const compiled = this.compiled.get(crName);
    const ruleName = ruleNameOf(crName);
    let matchedNodes = 0;
    let appliedNodes = 0;
    let missingNodes = 0;
    const conflicts: string[] = [];
    const invalid: string[] = [];
    const failed: string[] = [];
    for (const s of standings) {
      if (s.matched) matchedNodes++;
      if (s.applied) appliedNodes++;
      if (s.missing) missingNodes++;
      if (s.conflict && !conflicts.includes(s.conflict)) conflicts.push(s.conflict);
      if (s.invalid) invalid.push(s.invalid);
      if (s.failed) failed.push(s.failed);
    }
    const errors = [...(compiled?.errors ?? []), ...(this.ownership.get(ruleName) ?? [])];
    const ready =
      errors.length === 0 &&
      conflicts.length === 0 &&
      invalid.length === 0 &&
      failed.length === 0 &&
      appliedNodes === matchedNodes;
    const reason = errors.length
      ? 'Invalid'
      : conflicts.length
        ? 'Conflicting'
        : invalid.length
          ? 'InvalidOutput'
          : failed.length
            ? 'WriteFailed'
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
        : failed.length
          ? `${failed.length} of ${matchedNodes} matching nodes could not be written (retried): ${failed.slice(0, 3).join(' | ')}`
          : `${appliedNodes} of ${matchedNodes} matching nodes carry the rule's outputs${skipped}`;
    return {
      counts: {
        matchedNodes: errors.length ? 0 : matchedNodes,
        appliedNodes: errors.length ? 0 : appliedNodes,
      },
      conditions: [
        {
          type: 'Invalid',
          status: errors.length > 0,
          reason: errors.length ? 'InvalidSpec' : 'Valid',
          message: errors.join('; ').slice(0, 2000),
        },
        {
          type: 'Conflicting',
          status: conflicts.length > 0,
          reason: conflicts.length ? 'OutputConflict' : 'NoConflict',
          message: conflicts.length
            ? `${conflicts.slice(0, 3).join(' | ')}${conflicts.length > 3 ? ` (+${conflicts.length - 3} more)` : ''}`
            : '',
        },
        { type: 'Ready', status: ready, reason, message: message.slice(0, 2000) },
      ],
    };
  }

  private onFileErrors(errors: FileError[]): void {
    this.fileErrors = errors;
    for (const e of errors) this.rejectFile(e);
  }

  /** A rule file Berth does not use: a log line and, rule files belonging to no API object, a Warning on Berth's own pod when it runs in one. */
  private rejectFile(e: FileError): void {
    this.log.error({ file: e.file, line: e.line }, `rule file rejected: ${formatFileError(e)}`);
    const pod = process.env['POD_NAME'];
    const ns = process.env['POD_NAMESPACE'];
    if (pod && ns)
      this.events.event(
        { apiVersion: 'v1', kind: 'Pod', name: pod, namespace: ns },
        'Warning',
        'InvalidRuleFile',
        'Load',
        formatFileError(e),
      );
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
