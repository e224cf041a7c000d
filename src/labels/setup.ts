// What `berth run` builds for derived labels: the rule set, its controllers and the rule directory
// (Capability.setup), loaded only when labels run.
import type { CapabilityContext, Served } from '../capability.ts';
import type { PolicyKit } from '../policy/kit.ts';
import type { EventHandler, Informer } from '../runtime/cache/informer.ts';
import type { Controller } from '../runtime/controller/controller.ts';
import type { EventRecorder } from '../runtime/events/recorder.ts';
import type { Manager } from '../runtime/manager/manager.ts';
import type { Logger } from '../runtime/observability/log.ts';
import { NodeReconciler, setupNodeReconciler } from './controllers/node.ts';
import { setupStatusWriter, type StatusWriter } from './controllers/status.ts';
import { setupEvictController } from './controllers/evict.ts';
import { compileRule, refuseOwned, type NodeDecision } from './decide/nodes.ts';
import { formatFileError, RuleDirSource, type FileError } from './files.ts';
import { evictOnRemovalFiles } from './index.ts';
import { CLUSTER_MAX_PER_MINUTE, FIELD_MANAGER, type NodeLabelRuleStatus, type Rule } from './types.ts';
import { NodeLabelRule } from './crd.ts';
import type { KeyOwnership } from '../policy/nodes/ownership.ts';
import { nodeInformer, type SlimNode } from '../policy/slim.ts';
import type { KubeObject } from '../runtime/api/meta.ts';

/** Capability.setup: the labels controllers, the rule directory and the evictor. */
export function setup({ kit, options, berthNamespace }: CapabilityContext): Served {
  const labels = setupLabels(kit, {
    ...(typeof options['labelDir'] === 'string' ? { labelDir: options['labelDir'] } : {}),
    workers: Number(options['labelWorkers'] ?? 16),
  });
  const files = evictOnRemovalFiles(options);
  setupEvictController(labels, {
    berthNamespace,
    ...(files ? { files } : {}),
    maxPerMinute: Number(options['maxEvictionsPerMinute'] ?? CLUSTER_MAX_PER_MINUTE),
  });
  return {};
}

export type RuleObject = KubeObject & { status?: NodeLabelRuleStatus };

export interface LabelsOptions {
  /** k8s-auto-labeller rule files: DIR/<namespace>/<label>. */
  labelDir?: string;
  workers?: number;
}

/**
 * What the labels controllers and the evictor share, built once in setupLabels: the informers, the
 * rule set compiled from NodeLabelRules and rule files, and which rule derived which label.
 */
export class Labels {
  readonly manager: Manager;
  readonly keys: KeyOwnership;
  readonly nodes: Informer<SlimNode>;
  readonly ruleObjects: Informer<RuleObject>;
  readonly files: RuleDirSource | undefined;
  readonly events: EventRecorder;
  readonly log: Logger;
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
  readonly derived = new Map<string, Map<string, string>>();

  constructor(kit: PolicyKit, opts: Pick<LabelsOptions, 'labelDir'> = {}) {
    const manager = kit.manager;
    this.keys = kit.keys;
    this.manager = manager;
    this.log = manager.log.child({ capability: 'labels' });
    this.events = manager.recorder('labels');
    this.nodes = nodeInformer(manager);
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
    const { rules, refused } = refuseOwned(compiled, (keys) => this.keys.violations('labels', keys));
    for (const r of compiled) {
      const why = refused.get(r.name);
      if (why && r.source.kind === 'File' && this.ownership.get(r.name)?.join() !== why.join())
        this.rejectFile({ file: r.source.path, message: why.join('; ') });
    }
    this.ownership = refused;
    this.rulesCache = { version, rules };
    return rules;
  }

  /** A NodeLabelRule's errors: its spec's, and the keys it would write that another capability owns. */
  ruleErrors(crName: string, ruleName: string): string[] {
    this.rules();
    return [...(this.compiled.get(crName)?.errors ?? []), ...(this.ownership.get(ruleName) ?? [])];
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
  recordDerived(node: SlimNode, decision: NodeDecision): void {
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

/** The labels controllers (labels-node, labels-rule-status) and the rule directory on the kit's manager. */
export function setupLabels(
  kit: PolicyKit,
  opts: LabelsOptions = {},
): Labels & { nodeController: Controller; status: StatusWriter } {
  const l = new Labels(kit, opts);
  const writer = kit.applyWriter(FIELD_MANAGER, l.nodes);
  // labels-node records each node's standings in the status writer, which waits for its first pass.
  const status = setupStatusWriter(l);
  const nodeController = setupNodeReconciler(l, new NodeReconciler(l, writer, status), {
    workers: opts.workers ?? 16,
    firstPass: status.firstPass,
  });
  if (l.files) {
    const files = l.files;
    kit.manager.addRunnable({
      name: 'label-dir',
      needLeaderElection: false,
      start: () => files.start(),
      stop: async () => files.stop(),
    });
  }
  return Object.assign(l, { nodeController, status });
}
