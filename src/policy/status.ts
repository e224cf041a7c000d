// A policy's status, from what a node-keyed controller found on each node. That controller records
// each node's standing per policy; the policies whose standing changed are queued (after a short
// delay, so that a change across many nodes makes one write). Their status controller turns the
// standings into counts and conditions (the capability's `report`), announces a condition turning
// bad (a Warning event and a log line, once per change), and writes the status only when something
// changed, and never before the node controller's first full pass: counts over part of the nodes
// would flap on every restart.
// A policy that holds things on nodes keeps its finalizer through the same controller (`finalizer`,
// released by the capability's `cleanup`).
// A policy a webhook acts on gets no status until the webhook's configuration covers its generation
// (`admission`, policy/admission.ts): Ready then means in effect at admission too.
import { isDeepStrictEqual } from 'node:util';
import type { PolicyStatus } from './crd.ts';
import { applyStatus } from '../runtime/client/apply.ts';
import {
  conditionSetter,
  newlyHolds,
  sameConditions,
  type ConditionStatus,
} from '../runtime/api/conditions.ts';
import {
  Controller,
  FirstPass,
  type Predicates,
  type Result,
  type Source,
} from '../runtime/controller/controller.ts';
import { changed, generationChanged } from './predicates.ts';
import { finalizer } from './finalizer.ts';
import { recordConditions } from './metrics.ts';
import type { AdmissionCoverage } from './admission.ts';
import type { EventRecorder } from '../runtime/events/recorder.ts';
import type { Logger } from '../runtime/observability/log.ts';
import type { Manager } from '../runtime/manager/manager.ts';
import type { KubeObject, ResourceRef } from '../runtime/api/meta.ts';

/** What a policy reports: every count (undefined leaves it out) and its conditions, in order. */
export interface StatusReport<Count extends string> {
  counts: Record<Count, number | undefined>;
  conditions: { type: string; status: boolean; reason: string; message: string }[];
}

/**
 * The condition types whose `True` is bad news ("abnormal-true" in Kubernetes' API conventions):
 * the one table of polarity, read by the page. Every other type (Ready, Available, Reachable, ...)
 * is good when `True`. Degraded and Stalled are kstatus's, kept for kinds that report them.
 */
const ABNORMAL_TRUE: readonly string[] = [
  'Invalid',
  'Conflicting',
  'InspectionsFailing',
  'StartedEarly',
  'Degraded',
  'Stalled',
];

/** What a condition's status means for its type: good, bad, or not known (Unknown, or no status). */
export function conditionTone(type: string, status: string): 'good' | 'bad' | 'unknown' {
  if (status !== 'True' && status !== 'False') return 'unknown';
  return (status === 'True') === ABNORMAL_TRUE.includes(type) ? 'bad' : 'good';
}

/** A condition a user can act on: announced when it comes to hold, or says something new while it holds. */
export interface Warning {
  type: string;
  status: ConditionStatus;
  /** Only with this reason. */
  reason?: string;
  /** The event's reason; the condition's when not given. */
  event?: string;
}

/**
 * What the writer writes with, and the nodes whose first pass it waits for: the node controller
 * that records the standings is given the writer's `firstPass` (ControllerOptions.firstPass).
 */
export interface NodeLoop {
  readonly manager: Pick<Manager, 'add' | 'client'>;
  /** The nodes it must have seen once before a status is written. */
  readonly nodes: { keys(): string[]; hasSynced(): boolean };
  readonly events: Pick<EventRecorder, 'event'>;
  readonly log: Logger;
}

/** The policy objects, from their informer. */
export type PolicyObjects<O> = Source<O> & { readonly ref: ResourceRef; get(name: string): O | undefined };

export interface PolicyStatusOptions<O extends PolicyObject<Count>, Count extends string> {
  /** The status controller's name. */
  name: string;
  fieldManager: string;
  /** How long a changed standing waits before its policy's status is looked at; default 500 ms. */
  delayMs?: number;
  warnings: Warning[];
  /** Which object updates reach the status controller; default: a new generation. */
  objectChanged?: Predicates<O>['update'];
  /** The events' action; default Reconcile. */
  eventAction?: string;
  /**
   * The policy's finalizer, written under fieldManager: while a policy lives its status is written;
   * once it is being deleted, the writer's `cleanup` releases what it holds on nodes before the
   * finalizer comes off.
   */
  finalizer?: string;
  /** The scopes of the webhooks that act on these policies: each must cover a policy before its status is written. */
  admission?: AdmissionCoverage[];
}

export type PolicyObject<Count extends string = string> = KubeObject & { status?: PolicyStatus<Count> };

/**
 * A capability's status writer is a subclass: it says what a policy's standings come to (`report`)
 * and, with a finalizer, releases a deleted policy (`cleanup`).
 */
export abstract class PolicyStatusWriter<O extends PolicyObject<Count>, S, Count extends string> {
  /** Keyed by policy name; more sources may be watched. */
  readonly controller: Controller;
  /** The node loop's first pass, which its controller is given: no status is written before it. */
  readonly firstPass: FirstPass;
  private readonly loop: NodeLoop;
  private readonly objects: PolicyObjects<O>;
  private readonly opts: PolicyStatusOptions<O, Count>;
  /** Node → policy → its standing there. */
  private readonly standings = new Map<string, Map<string, S>>();

  constructor(loop: NodeLoop, objects: PolicyObjects<O>, opts: PolicyStatusOptions<O, Count>) {
    this.loop = loop;
    this.objects = objects;
    this.opts = opts;
    this.firstPass = new FirstPass(this.standings, loop.nodes);
    this.controller = new Controller({
      name: opts.name,
      workers: 2,
      logger: loop.log,
      reconciler: { reconcile: (name) => this.reconcile(name) },
    }).watch(objects, (o) => o.metadata!.name!, {
      update: opts.objectChanged ?? changed(generationChanged),
    });
    loop.manager.add(this.controller);
    for (const a of opts.admission ?? [])
      a.onCovered((names) => names.forEach((n) => this.controller.queue.add(n)));
  }

  /** The policy's counts and conditions from its standing on every node that has one; a Result to look again later. */
  protected abstract report(obj: O, standings: S[]): StatusReport<Count> | Result;

  /** A deleted policy's release (with `finalizer`): 'released' once nothing of it is left on a node. */
  protected cleanup?(obj: O): Promise<Result | 'released'>;

  /** Records a node's standing per policy (none: the node is gone), and queues the policies it changed for. */
  set(node: string, standings: Map<string, S> | undefined): void {
    const old = this.standings.get(node);
    if (standings) this.standings.set(node, standings);
    else this.standings.delete(node);
    for (const policy of new Set([...(old?.keys() ?? []), ...(standings?.keys() ?? [])])) {
      if (!isDeepStrictEqual(old?.get(policy), standings?.get(policy)))
        this.controller.queue.addAfter(policy, this.opts.delayMs ?? 500);
    }
  }

  /** A node's standings as last recorded. */
  get(node: string): ReadonlyMap<string, S> | undefined {
    return this.standings.get(node);
  }

  /** Whether the node controller has been through every node once. */
  firstPassDone(): boolean {
    return this.firstPass.complete();
  }

  private async reconcile(name: string): Promise<Result | void> {
    const obj = this.objects.get(name);
    if (!obj) return recordConditions(this.objects.ref.kind, name, undefined);
    const finalizerName = this.opts.finalizer;
    const cleanup = this.cleanup?.bind(this);
    if (!finalizerName || !cleanup) return this.write(obj);
    const ref = {
      name: finalizerName,
      client: this.loop.manager.client(),
      ref: this.objects.ref,
      fieldManager: this.opts.fieldManager,
    };
    return finalizer(ref, obj, { apply: () => this.write(obj), cleanup: () => cleanup(obj) });
  }

  private async write(obj: O): Promise<Result | void> {
    if (!this.firstPassDone()) return { requeueAfterMs: 250 };
    // Written once covered: onCovered queues it again.
    if (this.opts.admission?.some((a) => !a.covers(obj))) return;
    const name = obj.metadata!.name!;
    const standings: S[] = [];
    for (const s of this.standings.values()) {
      const mine = s.get(name);
      if (mine !== undefined) standings.push(mine);
    }
    const report = this.report(obj, standings);
    if (!('counts' in report)) return report;

    const generation = obj.metadata?.generation;
    const conds = conditionSetter(obj.status?.conditions, generation);
    for (const c of report.conditions) conds.set(c.type, c.status, c.reason, c.message);
    recordConditions(this.objects.ref.kind, name, conds.conditions);
    const old = obj.status;
    const counts = Object.entries<number | undefined>(report.counts);
    if (
      old?.observedGeneration === generation &&
      counts.every(([k, v]) => (old as Record<string, unknown> | undefined)?.[k] === v) &&
      sameConditions(old?.conditions, conds.conditions)
    )
      return;
    for (const w of this.opts.warnings) {
      const c = newlyHolds(old?.conditions, conds.conditions, w.type, w.status, w.reason);
      if (!c) continue;
      this.loop.events.event(
        obj,
        'Warning',
        w.event ?? c.reason,
        this.opts.eventAction ?? 'Reconcile',
        c.message,
      );
      this.loop.log.warn({ policy: name, reason: c.reason }, c.message);
    }
    const status = {
      ...(generation !== undefined ? { observedGeneration: generation } : {}),
      ...Object.fromEntries(counts.filter(([, v]) => v !== undefined)),
      conditions: conds.conditions,
    };
    await applyStatus(this.loop.manager.client(), this.objects.ref, obj, status, this.opts.fieldManager);
  }
}
