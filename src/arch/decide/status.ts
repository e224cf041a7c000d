// Architecture-aware placement's pure decisions: what a pod stands for in its policy's status, the
// report of a policy's pods, the records uninstall takes off, the nodes' architectures. No I/O.
import { guarded, mutate, type JsonPatchOp } from '../../runtime/api/jsonpatch.ts';
import type { KubeObject } from '../../runtime/api/meta.ts';
import {
  FAILURE_ANNOTATION,
  POLICY_ANNOTATION,
  RESULT_ANNOTATION,
  STATE_LABEL,
  type PodState,
} from '../types.ts';
import { type ArchPod } from './pods.ts';
import { gated, nodeArchTaint } from './patches.ts';

/** Berth's own annotations on the pods it gated, beside the state label. */
export const RECORD_ANNOTATIONS = [POLICY_ANNOTATION, RESULT_ANNOTATION, FAILURE_ANNOTATION];

/**
 * Uninstalling: the state label and the annotations Berth wrote come off an ungated pod (its affinity
 * or tolerations stay: the apiserver lets no one remove them from a pod that may be scheduled).
 */
export function recordsPatch(pod: ArchPod): JsonPatchOp[] {
  const out = structuredClone(pod);
  const meta = (out.metadata ??= {});
  if (meta.labels) delete meta.labels[STATE_LABEL];
  for (const a of RECORD_ANNOTATIONS) if (meta.annotations) delete meta.annotations[a];
  return guarded(pod, mutate(pod, out));
}

/** What a pod stands for in its policy's status. */
export interface Standing {
  state: PodState;
  /** Placed: the architectures it may run on (empty: none in common). */
  architectures?: string[];
  /** Failed: the reason, as the failure annotation starts. */
  reason?: string;
}

/** The pod's standing, read from what Berth wrote on it (so a restarted Berth counts the same). */
export function standingOf(pod: ArchPod): { policy: string; standing: Standing } | undefined {
  const policy = pod.metadata?.annotations?.[POLICY_ANNOTATION];
  const state = pod.metadata?.labels?.[STATE_LABEL];
  if (!policy || (state !== 'Gated' && state !== 'Placed' && state !== 'Failed' && state !== 'Released'))
    return undefined;
  // A gate that is still there wins over a label someone else set.
  if (gated(pod)) return { policy, standing: { state: 'Gated' } };
  if (state === 'Placed') {
    let architectures: string[] = [];
    try {
      const r = JSON.parse(pod.metadata?.annotations?.[RESULT_ANNOTATION] ?? '{}') as {
        architectures?: unknown;
      };
      if (Array.isArray(r.architectures))
        architectures = r.architectures.filter((a) => typeof a === 'string');
    } catch {
      // A result someone else rewrote counts as none in common.
    }
    return { policy, standing: { state, architectures } };
  }
  if (state === 'Failed') {
    const reason = pod.metadata?.annotations?.[FAILURE_ANNOTATION]?.split(':')[0] ?? 'Unknown';
    return { policy, standing: { state, reason } };
  }
  return { policy, standing: { state } };
}

export interface Report {
  gated: number;
  placed: number;
  failed: number;
  /** Placed pods whose architectures no node has (none in common included), by architecture set. */
  unschedulable: Map<string, number>;
  /** Failed pods by reason. */
  failures: Map<string, number>;
}

/** A policy's counts and problems from its pods' standings and the architectures the nodes have. */
export function report(standings: Standing[], nodeArchitectures: ReadonlySet<string>): Report {
  const r: Report = { gated: 0, placed: 0, failed: 0, unschedulable: new Map(), failures: new Map() };
  for (const s of standings) {
    if (s.state === 'Gated') r.gated++;
    else if (s.state === 'Failed') {
      r.failed++;
      r.failures.set(s.reason ?? 'Unknown', (r.failures.get(s.reason ?? 'Unknown') ?? 0) + 1);
    } else if (s.state === 'Placed') {
      r.placed++;
      const archs = s.architectures ?? [];
      if (!archs.some((a) => nodeArchitectures.has(a))) {
        const k = archs.join(', ') || 'none in common';
        r.unschedulable.set(k, (r.unschedulable.get(k) ?? 0) + 1);
      }
    }
  }
  return r;
}

/** The architectures of the nodes, as their labels (or kubelets) say. */
export function nodeArchitectures(
  nodes: (KubeObject & { status?: { nodeInfo?: Record<string, string> } })[],
): Set<string> {
  const out = new Set<string>();
  for (const n of nodes) for (const t of nodeArchTaint(n)) out.add(t.value!);
  return out;
}
