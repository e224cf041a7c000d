// What every placement policy of one manager shares: who owns which node key, and the loop breaker
// every node write passes. The runtime knows nothing of nodes or policies; this is where they meet it.
import type { Manager } from '../runtime/manager/manager.ts';
import { WriteLoopBreaker } from './nodes/loopbreaker.ts';
import { KeyOwnership } from './nodes/ownership.ts';

export class PolicyKit {
  /** Which capability owns which node keys: policies that would write another's are Invalid. */
  readonly keys = new KeyOwnership();
  /** Every node write of every capability goes through it: counted, and held back when it loops. */
  readonly nodeWrites: WriteLoopBreaker;

  readonly manager: Manager;

  constructor(manager: Manager) {
    this.manager = manager;
    this.nodeWrites = new WriteLoopBreaker({
      onTrip: (t) => {
        const note =
          `Berth wrote ${t.key} on this node ${t.writes} times within ${t.windowMs / 1000}s ` +
          `(${t.writers.join(', ')}): it leaves the key as it is until ${new Date(t.until).toISOString()}; ` +
          'two policies are likely fighting over it (berth explain node)';
        manager.recorder('berth').event(t.node, 'Warning', 'WriteLoop', 'Write', note);
        manager.log.warn({ node: t.node.metadata?.name, key: t.key, writers: t.writers }, note);
      },
    });
  }
}
