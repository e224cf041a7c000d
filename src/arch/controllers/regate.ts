// arch-regate: finds the gated pods that lost their state label, and labels them again.
// A gated pod whose state label someone takes off leaves the gated pods' informer, which selects the
// label: nothing would take its gate off. Watching every pod instead would cache the whole
// cluster's, and the apiserver selects on no scheduling gate; so Berth looks only where such a
// pod can be. Each gated pod the informer loses is read again (the watch says DELETED for a
// pod deleted and for one unlabelled alike): one GET per gated pod gone, where a list per loss
// would read every pending pod each time. And a leader, once it starts, lists the unbound pods
// without the label, for the labels taken off while no Berth watched (no event tells of
// those). A pod that still carries the gate gets its label back, and the pod controller, seeing
// it again, places or releases it.
import { relabelPatch, gated, UNLABELLED_UNBOUND } from '../decide/patches.ts';
import { type ArchPod } from '../decide/pods.ts';
import { Resources } from '../../runtime/api/meta.ts';
import { keyOf } from '../../runtime/cache/informer.ts';
import { ApiError, isNotFound } from '../../runtime/client/client.ts';
import { Controller } from '../../runtime/controller/controller.ts';
import type { Arch } from '../setup.ts';
import { STATE_LABEL } from '../types.ts';
import { patchPod } from './pod.ts';

/** The regate controller's key of its sweep; pod keys are `namespace/name`. */
const SWEEP = 'sweep';

export class RegateReconciler {
  private readonly a: Arch;

  constructor(a: Arch) {
    this.a = a;
  }

  reconcile(key: string, signal: AbortSignal): Promise<void> {
    return key === SWEEP ? this.sweep(signal) : this.regate(key);
  }

  /** A gated pod the informer lost: read again, it gets its label back if it still carries the gate. */
  async regate(key: string): Promise<void> {
    // Back in the cache (labelled again meanwhile): the pod controller has it.
    if (this.a.pods.get(key)) return;
    const [namespace, name] = key.split('/') as [string, string];
    let pod: ArchPod;
    try {
      pod = await this.a.manager.client().get<ArchPod>(Resources.pods, name, namespace);
    } catch (e) {
      if (isNotFound(e)) return;
      throw e;
    }
    await this.relabel(pod);
  }

  /**
   * The unbound pods without the state label, a page at a time (none kept): the gated ones get it
   * back. Ends early when Berth stops, so that the Lease is released without waiting for it.
   */
  async sweep(signal: AbortSignal): Promise<void> {
    let cont: string | undefined;
    do {
      // The first page from the apiserver's watch cache (resourceVersion 0), not from etcd: the
      // selector is sparse, and etcd would read every pod for it. Later pages follow the continue token.
      const page = await this.a.manager.client().list<ArchPod>(Resources.pods, {
        query: {
          ...UNLABELLED_UNBOUND,
          limit: 500,
          ...(cont ? { continue: cont } : { resourceVersion: '0' }),
        },
      });
      for (const pod of page.items) {
        if (signal.aborted) return;
        await this.relabel(pod);
      }
      cont = page.metadata.continue || undefined;
    } while (cont && !signal.aborted);
  }

  private async relabel(pod: ArchPod): Promise<void> {
    const patch = relabelPatch(pod);
    if (!patch.length) return;
    try {
      await patchPod(this.a, pod, patch);
    } catch (e) {
      // Deleted, or its gate taken off meanwhile (the patch tests it): nothing holds it any more.
      if (isNotFound(e) || (e instanceof ApiError && e.status === 422)) return;
      throw e;
    }
    this.a.log.warn(
      { pod: keyOf(pod) },
      `gated pod without its ${STATE_LABEL} label: labelled again, so that it is placed`,
    );
  }
}

/** The arch-regate controller: the leader's lost gated pods, and one sweep per leadership. */
export function setupRegateReconciler(a: Arch): Controller {
  const reconciler = new RegateReconciler(a);
  const controller = new Controller({
    name: 'arch-regate',
    workers: 4,
    logger: a.log,
    reconciler,
    // Only the leader's losses: a follower's queue would grow for as long as it follows, and the
    // sweep covers what happened before it leads.
  }).watch(a.pods, keyOf, {
    add: () => false,
    update: () => false,
    delete: (p) => a.manager.isLeader() && gated(p),
  });
  // Once per leadership: a replica that loses the lease exits.
  controller.queue.add(SWEEP);
  a.manager.add(controller);
  return controller;
}
