// Wait-for-agent injection: between a workload pod being scheduled and the agent DaemonSet being
// ready on its node there is a gap. A mutating webhook on pod CREATE closes it with an init container
// that waits until the agent answers on the node's IP and port. Opt-in per AgentPlacement
// (spec.waitForAgent); the webhook never denies and is registered with failurePolicy Ignore, so an
// unavailable Berth never blocks pod creation. It is served from the webhook thread
// (runtime/webhook/thread.ts), where the pods' informer cannot hold its answers; the controller
// sends it an AgentAdmissionState whenever one of its parts changes (webhook.ts). What this module
// imports is what the thread loads: pure decisions only (no zod, no client).
import { createHash } from 'node:crypto';
import { rootLogger, type Logger } from '../runtime/observability/log.ts';
import type { KubeObject } from '../runtime/api/meta.ts';
import type { AdmissionHandler, AdmissionResult } from '../runtime/webhook/admission.ts';
import { mutate } from '../runtime/api/jsonpatch.ts';
import { threadHandler } from '../runtime/webhook/threaded.ts';
import { claimOf, podSelected, type OwnerLookup, type Placement } from './decide.ts';
import type { AgentPlacementSpec } from './types.ts';
import { podSelection, withNamespaceLabels } from '../policy/namespace.ts';
import { podOs, type PodOsSpec } from '../policy/pods.ts';

/** Lists the placements whose init containers a pod carries, for `kubectl describe` and `berth explain`. */
export const WAIT_FOR_AGENT_ANNOTATION = 'agents.berth.dev/wait-for-agent';
/** The escape hatch: a pod annotated with this set to "true" is never changed. */
export const SKIP_WAIT_FOR_AGENT_ANNOTATION = 'agents.berth.dev/skip-wait-for-agent';
const MIRROR_POD_ANNOTATION = 'kubernetes.io/config.mirror';

const CONTAINER_PREFIX = 'berth-wait-for-agent-';
const MAX_CONTAINER_NAME = 63;
const HASH_LENGTH = 8;

export type WaitForAgent = NonNullable<AgentPlacementSpec['waitForAgent']>;

export interface WaitingPlacement {
  name: string;
  waitForAgent: WaitForAgent;
}

export interface Container {
  name: string;
  image: string;
  command: string[];
  env: { name: string; valueFrom: { fieldRef: { fieldPath: string } } }[];
  resources: { requests: Record<string, string>; limits: Record<string, string> };
  securityContext: {
    runAsNonRoot: boolean;
    runAsUser: number;
    allowPrivilegeEscalation: boolean;
    readOnlyRootFilesystem: boolean;
    capabilities: { drop: string[] };
    seccompProfile: { type: 'RuntimeDefault' };
  };
}

interface PodSpec extends NonNullable<PodOsSpec['spec']> {
  initContainers?: { name: string }[];
  containers?: { name: string }[];
}

const byName = (a: { name: string }, b: { name: string }): number => (a.name < b.name ? -1 : 1);

// Always suffixed, so a container's name does not depend on which other placements apply (a
// reinvoked webhook still recognises it). A placement name is a DNS subdomain (up to 253 characters,
// dots allowed) but a container name is a DNS label: a name that does not fit as is is replaced and
// truncated, with a hash of the full name keeping it unique.
function containerName(placementName: string): string {
  const room = MAX_CONTAINER_NAME - CONTAINER_PREFIX.length;
  if (placementName.length <= room && /^[a-z0-9-]+$/.test(placementName)) {
    return CONTAINER_PREFIX + placementName;
  }
  const hash = createHash('sha256').update(placementName).digest('hex').slice(0, HASH_LENGTH);
  const readable = placementName.replaceAll('.', '-').slice(0, room - HASH_LENGTH - 1);
  return `${CONTAINER_PREFIX}${readable}-${hash}`;
}

// POSIX sh for busybox: nc -z needs busybox's nc-1.10 compatibility (on in its default build, which
// the busybox image uses). A timeout gives up with exit 0: a broken agent must not hold the workload
// back forever.
function waitScript(port: number, timeoutSeconds: number): string {
  const target = `$HOST_IP:${port}`;
  const probe = `until nc -z -w 1 "$HOST_IP" ${port} 2>/dev/null; do`;
  if (timeoutSeconds === 0) {
    return [
      `echo "waiting for the agent on ${target}"`,
      probe,
      '  sleep 1',
      'done',
      'echo "agent is up"',
    ].join('\n');
  }
  return [
    `echo "waiting for the agent on ${target} (up to ${timeoutSeconds}s)"`,
    `deadline=$(($(date +%s) + ${timeoutSeconds}))`,
    probe,
    '  if [ "$(date +%s)" -ge "$deadline" ]; then',
    `    echo "no agent on ${target} after ${timeoutSeconds}s, starting without it"`,
    '    exit 0',
    '  fi',
    '  sleep 1',
    'done',
    'echo "agent is up"',
  ].join('\n');
}

/** The init container that waits until the agent on the pod's node answers on `w.port`. */
export function waitForAgentContainer(placementName: string, w: WaitForAgent): Container {
  return {
    name: containerName(placementName),
    image: w.image,
    command: ['sh', '-c', waitScript(w.port, w.timeoutSeconds)],
    env: [{ name: 'HOST_IP', valueFrom: { fieldRef: { fieldPath: 'status.hostIP' } } }],
    resources: { requests: { cpu: '10m', memory: '8Mi' }, limits: { cpu: '50m', memory: '16Mi' } },
    // An unprivileged TCP connect needs nothing, so the container gets nothing: Pod Security's
    // `restricted` level as a container's own (the pod may set no seccomp profile of its own).
    securityContext: {
      runAsNonRoot: true,
      runAsUser: 65534,
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
      capabilities: { drop: ['ALL'] },
      seccompProfile: { type: 'RuntimeDefault' },
    },
  };
}

/**
 * A copy of the pod with one init container per placement, in name order, before its own init
 * containers (the agent must be up before anything else runs). A container whose name the pod
 * already has is left as it is, so injecting twice equals injecting once. A Windows pod gets none.
 */
export function injectWaitForAgent(pod: KubeObject, placements: WaitingPlacement[]): KubeObject {
  const out = structuredClone(pod);
  const spec = (out['spec'] ??= {}) as PodSpec;
  // A Windows pod: the wait script is POSIX sh, and Linux security fields are refused there.
  if (placements.length === 0 || podOs({ spec }) === 'windows') return out;
  const sorted = [...placements].sort(byName);
  const present = new Set([...(spec.initContainers ?? []), ...(spec.containers ?? [])].map((c) => c.name));
  const added = sorted
    .map((p) => waitForAgentContainer(p.name, p.waitForAgent))
    .filter((c) => !present.has(c.name));
  if (added.length > 0) spec.initContainers = [...added, ...(spec.initContainers ?? [])];
  const annotations = ((out.metadata ??= {}).annotations ??= {});
  // Keeps names already listed (a template's), whose containers stay too.
  const listed = (annotations[WAIT_FOR_AGENT_ANNOTATION] ?? '').split(',').filter(Boolean);
  annotations[WAIT_FOR_AGENT_ANNOTATION] = [...new Set([...listed, ...sorted.map((p) => p.name)])]
    .sort()
    .join(',');
  return out;
}

// At admission the pod's controller is as far as its owner can be followed (the webhook thread holds
// no ReplicaSets or Jobs); whether the claim then names it or its own owner, the pod has one.
const noLookup: OwnerLookup = () => undefined;

/**
 * The placements with waitForAgent that select the pod of `namespace` and will claim it once it
 * runs, in name order. A pod no claim follows (no owner, or a claim key the apiserver refuses)
 * gets no agent placed for it, and would wait for one forever.
 */
export function placementsForPod(
  pod: KubeObject,
  namespace: string,
  namespaceLabels: Record<string, string> | undefined,
  placements: Placement[],
  berthNamespace: string,
): WaitingPlacement[] {
  return placements
    .flatMap(({ name, spec }) => {
      if (!spec.waitForAgent) return [];
      if (!podSelected(namespace, pod.metadata?.labels, namespaceLabels, spec, berthNamespace)) return [];
      const claim = claimOf(pod, spec, noLookup);
      return claim && !claim.rejected ? [{ name, waitForAgent: spec.waitForAgent }] : [];
    })
    .sort(byName);
}

/**
 * Why the pod is never changed, or undefined when it may be. `namespace` defaults to the pod's own,
 * which a pod created from a template does not carry at admission time.
 */
export function waitExemption(
  pod: KubeObject,
  namespace = pod.metadata?.namespace,
  berthNamespace?: string,
): string | undefined {
  // Cluster add-ons, possibly the agent itself: waiting there could hold up the whole cluster.
  if (namespace === 'kube-system') return 'pods in kube-system are never changed';
  // Berth's own pods: the webhook's registration leaves its namespace out too.
  if (namespace === berthNamespace) return "pods in Berth's namespace are never changed";
  const annotations = pod.metadata?.annotations ?? {};
  if (annotations[SKIP_WAIT_FOR_AGENT_ANNOTATION] === 'true') {
    return `annotation ${SKIP_WAIT_FOR_AGENT_ANNOTATION}=true`;
  }
  // The kubelet runs static pods from files; their API mirror cannot be changed.
  if (MIRROR_POD_ANNOTATION in annotations) return 'mirror pod of a static pod';
  // Agents run as DaemonSets: a DaemonSet pod waiting for the agent could be waiting for itself.
  if (pod.metadata?.ownerReferences?.some((o) => o.controller && o.kind === 'DaemonSet'))
    return 'DaemonSet pods are agents, not workloads';
  return undefined;
}

export interface PodMutatingDeps {
  /** The usable placements only. */
  placements(): Placement[];
  /** A namespace's labels ({} for none), or undefined while the cache does not know it. */
  namespaceLabels(namespace: string): Record<string, string> | undefined;
  /** How long a review waits for the cache to learn a new namespace (NAMESPACE_WAIT_MS). */
  namespaceWaitMs?: number;
  berthNamespace: string;
  logger?: Logger;
}

/** The pod CREATE webhook: injects the wait-for-agent init containers, and always allows. */
export function podMutatingHandler(deps: PodMutatingDeps): AdmissionHandler {
  const log = (deps.logger ?? rootLogger).child({ webhook: 'wait-for-agent' });
  return (req) => {
    const pod = req.object;
    if (req.operation !== 'CREATE' || req.kind.kind !== 'Pod' || req.subResource || !pod) {
      return { allowed: true };
    }
    const namespace = pod.metadata?.namespace || req.namespace || '';
    const key = { namespace, name: pod.metadata?.name || pod.metadata?.generateName };
    const failOpen = (err: unknown): AdmissionResult => {
      log.error({ ...key, err }, 'wait-for-agent injection failed, pod admitted unchanged');
      return { allowed: true };
    };
    const admit = (namespaceLabels: Record<string, string> | undefined): AdmissionResult => {
      const placements = placementsForPod(
        pod,
        namespace,
        namespaceLabels,
        deps.placements(),
        deps.berthNamespace,
      );
      if (placements.length === 0) return { allowed: true };
      const patch = mutate(pod, injectWaitForAgent(pod, placements));
      if (patch.length === 0) return { allowed: true };
      log.info({ ...key, placements: placements.map((p) => p.name) }, 'wait-for-agent injected');
      return { allowed: true, patch };
    };
    // A thrown error would be answered allowed=false; this webhook must fail open instead.
    try {
      const reason = waitExemption(pod, namespace, deps.berthNamespace);
      if (reason) {
        log.debug({ ...key, reason }, 'pod exempt from wait-for-agent');
        return { allowed: true };
      }
      // A namespace created a moment before its pod: its labels are on their way to the cache
      // (policy/namespace.ts), and deciding without them would start the pod without its agent.
      const answer = withNamespaceLabels(
        deps.namespaceLabels,
        namespace,
        () => namespaceDecides(pod, namespace, deps.placements(), deps.berthNamespace),
        admit,
        (waitedMs) =>
          log.warn(
            { ...key, waitedMs },
            "namespace not in Berth's cache: placements with a namespaceSelector pass the pod by",
          ),
        deps.namespaceWaitMs,
      );
      return answer instanceof Promise ? answer.catch(failOpen) : answer;
    } catch (err) {
      return failOpen(err);
    }
  };
}

/** Whether a waitForAgent placement's choice of the pod turns on the labels of its namespace. */
function namespaceDecides(
  pod: KubeObject,
  namespace: string,
  placements: Placement[],
  berthNamespace: string,
): boolean {
  return placements.some(
    ({ spec }) =>
      spec.waitForAgent &&
      podSelection(namespace, pod.metadata?.labels, undefined, spec, berthNamespace) === undefined,
  );
}

/** What the webhook decides from, as a value the webhook thread holds. */
export interface AgentAdmissionState {
  /** The usable placements that set waitForAgent: the others change no pod. */
  placements: Placement[];
  berthNamespace: string;
  /** Every namespace the controller's cache holds: one missing is not known yet (namespaceLabelsByName). */
  namespaceLabels: Map<string, Record<string, string>>;
}

export const agentAdmission = threadHandler(
  import.meta.url,
  'agentAdmission',
  (state: () => AgentAdmissionState) =>
    podMutatingHandler({
      placements: () => state().placements,
      namespaceLabels: (ns) => state().namespaceLabels.get(ns),
      get berthNamespace() {
        return state().berthNamespace;
      },
    }),
);
