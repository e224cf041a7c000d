// What makes an AgentPlacement unusable beyond its schema: keys and values the apiserver would
// refuse on a node or a pod, selectors metav1 would refuse, and a selector that reaches every pod
// without the acknowledgement. A placement with a problem is Invalid and applies nothing; one bad
// placement must never make a node write fail for the others.
import {
  selectorProblems,
  validateLabelKey,
  validateLabelValue,
  type LabelSelector,
} from '../policy/match/selector.ts';
import type { AgentPlacementSpec } from './types.ts';
import { DNS1123_LABEL, DNS1123_SUBDOMAIN } from '../runtime/api/meta.ts';

// Object UIDs are RFC 4122 strings: a controllerRef owner's claim key needs this much room.
const UID_LENGTH = 36;

/** A value quoted for a message: escaped, and bounded whatever its size. */
const quote = (v: string): string => JSON.stringify(v.length > 64 ? `${v.slice(0, 64)}…` : v);

/** The selector requires some label to be present: matchLabels, or an In or Exists expression. */
export function requiresLabel(sel: LabelSelector | undefined): boolean {
  return (
    Object.keys(sel?.matchLabels ?? {}).length > 0 ||
    (sel?.matchExpressions ?? []).some((e) => e.operator === 'In' || e.operator === 'Exists')
  );
}

/**
 * Why the placement needs spec.acknowledgeAllPods, or undefined: its podSelector requires no label
 * and it reaches every pod of the cluster (no namespaceSelector that requires a label) or changes
 * every new pod of its namespaces (waitForAgent). The CRD's CEL rule says the same.
 */
export function needsAcknowledgement(spec: AgentPlacementSpec): string | undefined {
  if (requiresLabel(spec.podSelector)) return undefined;
  if (spec.waitForAgent)
    return 'podSelector requires no label and waitForAgent is set: every new pod of the selected namespaces would get the init container';
  if (!requiresLabel(spec.namespaceSelector))
    return 'podSelector and namespaceSelector require no label: every pod of the cluster would be claimed';
  return undefined;
}

/** Why `<prefix><owner UID>` is not a valid annotation key, or undefined when it is. */
export function claimKeyProblem(prefix: string, uid: string): string | undefined {
  const p = validateLabelKey(`${prefix}${uid}`);
  return p && `claim key ${quote(`${prefix}${uid}`)}: ${p}`;
}

function apiVersionProblem(apiVersion: string): string | undefined {
  const [group, version, ...rest] = apiVersion.includes('/') ? apiVersion.split('/') : ['', apiVersion];
  if (apiVersion.length > 317) return 'must be no more than 317 characters';
  if (rest.length || (apiVersion.includes('/') && !DNS1123_SUBDOMAIN.test(group ?? '')))
    return 'must be <group>/<version>, or <version> for the core group';
  if (!DNS1123_LABEL.test(version ?? '')) return 'the version must be a DNS label (as v1 or v1beta1)';
  return undefined;
}

/** What makes owner.apiVersion and owner.kind unusable as a kind to look up: no API call can resolve them. */
export function ownerKindProblems({ apiVersion, kind }: { apiVersion?: string; kind?: string }): string[] {
  const out: string[] = [];
  const v = apiVersion && apiVersionProblem(apiVersion);
  if (v) out.push(`owner.apiVersion ${quote(apiVersion)}: ${v}`);
  if (kind && (kind.length > 63 || !/^[A-Za-z][A-Za-z0-9]*$/.test(kind)))
    out.push(`owner.kind ${quote(kind)}: must be a kind name of at most 63 characters, as WorkerPool`);
  return out;
}

/** Everything about the spec that Berth could not apply as written; empty when it is usable. */
export function validatePlacement(spec: AgentPlacementSpec): string[] {
  const out: string[] = [];
  const add = (at: string, value: string, problem: string | undefined) => {
    if (problem) out.push(`${at} ${quote(value)}: ${problem}`);
  };
  out.push(...selectorProblems(spec.namespaceSelector, 'namespaceSelector'));
  out.push(...selectorProblems(spec.podSelector, 'podSelector'));
  add('nodeLabel.key', spec.nodeLabel.key, validateLabelKey(spec.nodeLabel.key));
  add('nodeLabel.value', spec.nodeLabel.value, validateLabelValue(spec.nodeLabel.value));
  if (spec.owner.uidLabel) add('owner.uidLabel', spec.owner.uidLabel, validateLabelKey(spec.owner.uidLabel));
  out.push(...ownerKindProblems(spec.owner));
  // The shortest and the longest owner UID must both make a valid key: one character for a
  // uidLabel (a longer label value is checked per claim), a full UID for controllerRef.
  const prefix = spec.claimAnnotationPrefix;
  const keyProblem = validateLabelKey(`${prefix}${spec.owner.controllerRef ? '0'.repeat(UID_LENGTH) : '0'}`);
  add(
    'claimAnnotationPrefix',
    prefix,
    keyProblem && `<prefix><owner UID> must be a valid annotation key: ${keyProblem}`,
  );
  if (spec.finalizer) {
    const name = spec.finalizer.name;
    add(
      'finalizer.name',
      name,
      validateLabelKey(name) ??
        (name.includes('/') ? undefined : 'must be qualified with a domain, as example.com/name'),
    );
  }
  if (spec.waitForAgent && /\s/.test(spec.waitForAgent.image))
    add('waitForAgent.image', spec.waitForAgent.image, 'must not contain whitespace');
  const ack = needsAcknowledgement(spec);
  if (ack && !spec.acknowledgeAllPods) out.push(`${ack}; set acknowledgeAllPods: true if that is meant`);
  return out;
}
