// The API of architecture-aware placement: ArchPlacement says which pods are placed by the
// architectures their images support, how (a node affinity, or the seed's taints and tolerations),
// and what happens when an image cannot be read.
// Its CRD, from a zod schema, is crd.ts: what reads only these (the webhook thread, every
// command's capability list) loads no zod.
import type * as z from '../runtime/platform/zod.ts';
import type { PolicyStatus } from '../policy/crd.ts';
import { berthKind } from '../policy/kinds.ts';
import type { KeyDeclaration } from '../policy/nodes/ownership.ts';
import type { DeclaredRule } from '../runtime/api/rbac.ts';
import type { archPlacementSpec } from './crd.ts';

/**
 * How long a new image's first pods wait for the controller to read it (`--arch-admission-wait`):
 * a read takes tens of milliseconds from a nearby registry. The wait is the image's, from when it
 * was first asked, not each pod's: the pods that come meanwhile wait for the same deadline.
 */
export const INSPECT_WAIT_MS = 500;

export const FIELD_MANAGER = 'berth-arch';
export const ARCH_PLACEMENT = berthKind('ArchPlacement', 'Cluster');
/** The scheduling gate the webhook adds and the controller removes; no other gate is ever touched. */
export const SCHEDULING_GATE = 'arch.berth.dev/inspect';
/**
 * Set by the webhook beside the gate, and kept up to date by the controller: `Gated`, `Placed`,
 * `Failed` (an image could not be read), `Released` (its policy went away first). A label, so that
 * the controller's pod informer watches only the pods Berth gated; a gated pod it is taken off is
 * found and labelled again (arch-regate, controllers/regate.ts).
 */
export const STATE_LABEL = 'arch.berth.dev/state';
export type PodState = 'Gated' | 'Placed' | 'Failed' | 'Released';
/** The ArchPlacement that gated the pod (names do not fit a label value). */
export const POLICY_ANNOTATION = 'arch.berth.dev/policy';
/** What Berth read: the architectures it placed the pod on, and each image's digest and platforms (JSON). */
export const RESULT_ANNOTATION = 'arch.berth.dev/result';
/** Why an inspection failed, and what Berth did about it. */
export const FAILURE_ANNOTATION = 'arch.berth.dev/failure';
/** A pod annotated with this set to "true" is never gated. */
export const SKIP_ANNOTATION = 'arch.berth.dev/skip';
/** The node label the kubelet sets from its GOARCH; node affinity and the taint values use its values. */
export const ARCH_LABEL = 'kubernetes.io/arch';
/** The node label of the kubelet's GOOS, and the pods' way to ask for an OS (beside spec.os). */
export { OS_LABEL } from '../policy/pods.ts';
/** Taints mode: every node selected carries `arch.berth.dev/arch=<its architecture>:NoSchedule`. */
export const ARCH_TAINT = 'arch.berth.dev/arch';
/** Deleting an ArchPlacement first takes its gate off every pod it still holds. */
export const ARCH_FINALIZER = 'arch.berth.dev/release-pods';

/**
 * What reading pull secrets needs: get by name (never list: a pod names the ones it uses). Granted
 * in the namespaces an install opts in, and for --arch-pull-secret by its name alone.
 */
export const PULL_SECRET_RULE: DeclaredRule = {
  apiGroups: [''],
  resources: ['secrets'],
  verbs: ['get'],
  why: "a pod's imagePullSecrets (and --arch-pull-secret) are read to read its images' platforms",
};

/**
 * What the arch capability owns on nodes: its taint key. Rank 2: after startup gates and agent
 * placement, before derived labels (which own nothing).
 */
export const ARCH_KEYS: KeyDeclaration = {
  rank: 2,
  title: 'architecture-aware placement',
  domains: [{ pattern: { kind: 'taint', key: ARCH_TAINT }, owner: 'architecture-aware placement' }],
};

export type ArchPlacementSpec = z.infer<typeof archPlacementSpec>;
export type ArchPlacementStatus = PolicyStatus<'gated' | 'placed' | 'failed'>;
