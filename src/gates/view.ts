// What the page shows of startup gates: on each node's row, the gates that select it, their state
// and what the node still waits for; read from the cached NodeStartupGates and the node's pods.
import type { PageHooks } from '../capability.ts';
import type { SlimNode, SlimPod } from '../policy/slim.ts';
import type { GateRow } from '../ui/types.ts';
import { parseGates, type Gate } from './decide/parse.ts';
import { decideGates } from './decide/state.ts';
import { NodeStartupGate } from './crd.ts';

/** The gates that select `node` (held, released, would hold), with since when a gate holds it. */
export function gateRows(gates: Gate[], node: SlimNode, pods: SlimPod[], now: number): GateRow[] {
  const ann = node.metadata?.annotations ?? {};
  const rows: GateRow[] = [];
  for (const [i, d] of decideGates(gates, node, pods, now).entries()) {
    if (d.state === 'NotSelected') continue;
    const since = ann[gates[i]!.keys.gatedAt];
    rows.push({ gate: d.gate, state: d.state, waiting: d.unmet, why: d.why, ...(since ? { since } : {}) });
  }
  return rows;
}

export const gatesPage: PageHooks = {
  view(ctx) {
    const gates = ctx.informer(NodeStartupGate).derive((objs) => {
      const all = parseGates(objs).gates;
      // Those that act on nodes, or would: an invalid or losing gate shows nothing.
      return { any: all.length > 0, acting: all.filter((g) => g.enforced || g.spec.dryRun) };
    });
    return {
      nodeGates(node, now) {
        const { acting } = gates();
        return acting.length ? gateRows(acting, node, ctx.podsOn(node.metadata?.name ?? ''), now) : [];
      },
      readsPods: () => gates().any,
    };
  },
};
