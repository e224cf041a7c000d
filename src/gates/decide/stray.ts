// Gates the API no longer has, known only from what they left on a node.
import type { SlimNode } from '../../policy/slim.ts';
import { bookkeepingKeys, gateAnnotations, gatePrefix, GATES_DOMAIN } from '../types.ts';
import { taintOfRecord } from '../crd.ts';
import { DISARMED, type Gate } from './parse.ts';

/** The names of the gates whose keys (`<gate>.gates.berth.dev/gated-at` and the like) are on the node. */
export function gatesNamedOn(node: SlimNode): string[] {
  const names = new Set<string>();
  for (const key of Object.keys(node.metadata?.annotations ?? {})) {
    const slash = key.indexOf('/');
    const domain = key.slice(0, slash);
    if (slash < 0 || !domain.endsWith(`.${GATES_DOMAIN}`)) continue;
    const name = domain.slice(0, -GATES_DOMAIN.length - 1);
    const keys = gateAnnotations(name, {});
    if ([...bookkeepingKeys(keys), keys.completedAt].includes(key)) names.add(name);
  }
  return [...names];
}

/**
 * A gate the API no longer has, rebuilt from what it left on the node, for decideGates to take
 * back (as for a gate being deleted): its taint from the record. Undefined when the node is held
 * with no readable record (gated before Berth kept them): the taint is unknown, so nothing is taken.
 */
export function strayGate(name: string, node: SlimNode): Gate | undefined {
  const keys = gateAnnotations(name, {});
  const ann = node.metadata?.annotations ?? {};
  const record = ann[keys.taint];
  const recorded = record === undefined ? undefined : taintOfRecord(record);
  if (keys.gatedAt in ann && !recorded) return undefined;
  // Not held, a gate's taint is never looked at: a key no node can carry stands in for it.
  const taint = recorded ?? { key: '', effect: 'NoSchedule' as const };
  return {
    name,
    enforced: false,
    spec: { ...DISARMED, taint },
    keys,
    createdAt: 0,
    deleting: true,
    gone: true,
  };
}

/** What a node held for a gone gate with no record of its taint needs (strayGate leaves it). */
export const unrecordedStray = (name: string): string =>
  `gate ${name} no longer exists, and the node is held for it with no record of its taint (gated by a Berth older than the record): remove that taint and the ${gatePrefix(name)} annotations by hand`;
