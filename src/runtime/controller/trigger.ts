// A trigger: keys that whoever holds it sends to the controllers that reconcile on it, as
// controller-runtime's source.Channel and kube-rs's Controller::reconcile_on. It is made before the
// controller and the reconciler, and handed to both (and to anything else that enqueues: another
// controller, a webhook's hint), so no controller is passed around, or set, after construction.
import type { AddOptions, WorkQueue } from '../workqueue/queue.ts';

/** Where a trigger's keys go: the work queue of a controller that reconciles on it. */
export type TriggerTarget = Pick<WorkQueue<string>, 'add' | 'addAfter'>;

export class Trigger {
  private readonly targets: TriggerTarget[] = [];
  /** Keys sent before any controller reconciled on it, delivered to the first that does: none is lost. */
  private readonly early: { key: string; afterMs: number; options?: AddOptions }[] = [];

  /**
   * Queues the keys (a controller's keys: `cluster://…` for another cluster's) at once; at low
   * priority for what a cache's initial list brings (WorkQueue.add).
   */
  send(keys: string | Iterable<string>, options?: AddOptions): void {
    for (const key of typeof keys === 'string' ? [keys] : keys) this.deliver(key, 0, options);
  }

  /** Queues the key once `afterMs` has passed; of several delays for one waiting key, the earliest wins. */
  sendAfter(key: string, afterMs: number): void {
    this.deliver(key, afterMs);
  }

  private deliver(key: string, afterMs: number, options?: AddOptions): void {
    if (this.targets.length === 0) this.early.push({ key, afterMs, options });
    for (const t of this.targets) {
      if (afterMs > 0) t.addAfter(key, afterMs);
      else t.add(key, options);
    }
  }

  /** A controller's side (Controller.reconcileOn): its queue receives every key sent from now on. */
  connect(target: TriggerTarget): void {
    this.targets.push(target);
    for (const { key, afterMs, options } of this.early.splice(0)) this.deliver(key, afterMs, options);
  }
}
