// What every placement policy of one manager shares: who owns which node key, the loop breaker
// every node write passes, and the node writers that pass it. The runtime knows nothing of nodes or
// policies; this is where they meet it.
import type { Manager } from '../runtime/manager/manager.ts';
import { ApplyNodeWriter } from './nodes/apply.ts';
import type { Spacing } from '../runtime/controller/spacing.ts';
import { CasNodeWriter, type NodeEvents } from './nodes/cas.ts';
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

  /** A server-side-apply writer of `fieldManager`'s share of nodes; it writes through nodeWrites. */
  applyWriter(
    fieldManager: string,
    nodes: NodeEvents,
    opts: { spacing?: Spacing; decidesFromNode?: boolean } = {},
  ): ApplyNodeWriter {
    return new ApplyNodeWriter(() => this.manager.client(), fieldManager, nodes, {
      ...opts,
      breaker: this.nodeWrites,
    });
  }

  /** A compare-and-swap writer of nodes under `fieldManager`; it writes through nodeWrites. */
  casWriter(fieldManager: string, nodes: NodeEvents): CasNodeWriter {
    return new CasNodeWriter(() => this.manager.client(), fieldManager, nodes, { breaker: this.nodeWrites });
  }
}
