// What the page shows of architecture-aware placement: why its scheduling gate holds a pod.
import type { PageHooks } from '../capability.ts';
import type { SlimPod } from '../policy/slim.ts';
import { FAILURE_ANNOTATION, SCHEDULING_GATE, STATE_LABEL } from './types.ts';

/** A pod its gate holds: it waits for its images' platforms, in the state its label says, and why it failed. */
export function heldPodReason(p: SlimPod): string {
  const failure = p.metadata?.annotations?.[FAILURE_ANNOTATION];
  return `architecture-aware placement: reading its images' platforms (${p.metadata?.labels?.[STATE_LABEL] ?? 'Gated'})${failure ? `; ${failure}` : ''}`;
}

export const archPage: PageHooks = {
  view: () => ({ heldPods: { [SCHEDULING_GATE]: heldPodReason } }),
};
