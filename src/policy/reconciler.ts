// What a capability's controllers share, and the part of a node controller that is the same in every
// capability: a node the cache no longer holds is forgotten, one it holds is the capability's to decide.
import type { Informer } from '../runtime/cache/informer.ts';
import type { Reconciler, Result } from '../runtime/controller/controller.ts';
import type { EventRecorder } from '../runtime/events/recorder.ts';
import type { Manager } from '../runtime/manager/manager.ts';
import type { Logger } from '../runtime/observability/log.ts';
import type { SlimNode } from './slim.ts';

/** What a capability's controllers and webhooks share, built once in its setup: these and its own caches. */
export interface PolicyContext {
  readonly manager: Manager;
  readonly nodes: Informer<SlimNode>;
  readonly events: EventRecorder;
  readonly log: Logger;
}

/**
 * A node controller's reconciler over its capability's context, the node writer under its field
 * manager and the status writer its standings go to.
 */
export abstract class PolicyNodeReconciler<
  C extends PolicyContext,
  W extends { forget(node: string): void },
  S extends { set(node: string, standings: undefined): void },
> implements Reconciler {
  protected readonly ctx: C;
  protected readonly writer: W;
  protected readonly status: S;

  constructor(ctx: C, writer: W, status: S) {
    this.ctx = ctx;
    this.writer = writer;
    this.status = status;
  }

  async reconcile(name: string): Promise<Result | void> {
    const node = this.ctx.nodes.get(name);
    if (node) return this.reconcileNode(node, name);
    this.writer.forget(name);
    this.forget(name);
  }

  /** A node the cache holds. */
  protected abstract reconcileNode(node: SlimNode, name: string): Promise<Result | void>;

  /** A node gone from the cache: its standings go too. */
  protected forget(name: string): void {
    this.status.set(name, undefined);
  }
}
