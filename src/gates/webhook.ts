// The gates' webhooks. The Node CREATE webhook taints joining nodes at admission, so a gated node is
// never schedulable without it; its decision is served from the webhook thread
// (runtime/webhook/thread.ts, the handler in admit.ts), where the main thread's informers cannot
// hold its answers, and is sent the parsed gates whenever they change. The Pod CREATE webhook refuses pods that would skip the taint
// by naming a held node in spec.nodeName; it reads the node and DaemonSet caches, so the main thread
// answers it.
import type { AdmissionHandler } from '../runtime/webhook/admission.ts';
import type { WebhookSpec } from '../runtime/webhook/registration.ts';
import type { Toleration } from '../policy/nodes/taints.ts';
import { deletionChanged, generationChanged, onChanges, or } from '../policy/predicates.ts';
import { slimPod, type SlimPod } from '../policy/slim.ts';
import type { Gate } from './decide/parse.ts';
import { nodeAdmission } from './admit.ts';
import type { Gates } from './setup.ts';
import type { ScopeTerm } from '../policy/admission.ts';
import { EXEMPT_LABEL } from './types.ts';
import { admitPod, canHold } from './pods.ts';

export const NODE_WEBHOOK = 'nodes.gates.berth.dev';
export const POD_WEBHOOK = 'pods.gates.berth.dev';

/**
 * The nodes the Node webhook is sent: those an enforced gate's nodeSelector selects (its
 * excludeNodeSelectors left to the handler: leaving them out only sends more).
 */
export const nodeTerms = (gates: Gate[]): ScopeTerm[] =>
  gates
    .filter((g) => g.enforced && !g.deleting && !g.spec.dryRun)
    .map((g) => ({ objectSelector: g.spec.nodeSelector }));

/**
 * The Pod webhook is sent every pod with spec.nodeName while a gate could hold a node (canHold; its
 * nodeNamePods Reject or Warn both need the review), and none otherwise. Not narrowed to the nodes
 * held now: a node is held from its admission, before any configuration naming it could be in
 * effect, and the pod naming it may come at once.
 */
export const podTerms = (gates: Gate[]): ScopeTerm[] => (gates.some(canHold) ? [{}] : []);

/**
 * The Node CREATE webhook. failurePolicy Ignore (the default) keeps nodes joining while Berth is
 * down, and the controller's fallback taints such a node afterwards if it is still idle; Fail is
 * strict (no node joins ungated) and needs the nodes Berth itself runs on labelled exempt, which
 * the objectSelector keeps away from the webhook altogether. Sent only the nodes a gate selects.
 */
export function nodeWebhook(g: Gates, failurePolicy: 'Fail' | 'Ignore'): WebhookSpec {
  return {
    name: NODE_WEBHOOK,
    path: '/gates/mutate-node',
    kind: 'mutating',
    // In the webhook thread, from the gates as the controllers parse them.
    handler: nodeAdmission.fed(
      () => g.gates().gates,
      // A gate's status changes with every node it holds; admission reads its spec and deletion.
      (changed) => g.gateObjects.addEventHandler(onChanges(or(generationChanged, deletionChanged), changed)),
    ),
    rules: [{ operations: ['CREATE'], apiGroups: [''], apiVersions: ['v1'], resources: ['nodes'] }],
    failurePolicy,
    objectSelector: { matchExpressions: [{ key: EXEMPT_LABEL, operator: 'NotIn', values: ['true'] }] },
    timeoutSeconds: 2,
    scope: g.admission.nodes,
  };
}

/**
 * The Pod CREATE admission handler: refuses (or warns about) a pod whose spec.nodeName names a
 * node a gate holds, from the caches alone (the apiserver waits for this answer).
 */
export function podAdmission(g: Gates): AdmissionHandler {
  return (req) => {
    const obj = req.object;
    if (!obj || req.operation !== 'CREATE') return { allowed: true };
    const slim = slimPod(obj);
    const pod: SlimPod = { ...slim, metadata: { ...slim.metadata, namespace: req.namespace } };
    const node = pod.spec.nodeName ? g.nodes.get(pod.spec.nodeName) : undefined;
    const verdict = admitPod(g.gates().gates, {
      pod,
      tolerations: (obj['spec'] as { tolerations?: Toleration[] } | undefined)?.tolerations,
      node,
      groups: req.userInfo.groups,
      daemonSetExists: (ns, name, uid) => g.daemonSets.get(`${ns}/${name}`)?.metadata?.uid === uid,
    });
    if (node && !req.dryRun) {
      for (const w of verdict.warnings) g.events.event(node, 'Warning', 'NodeNameBypass', 'Admit', w);
    }
    if (verdict.allowed) {
      if (verdict.warnings.length) g.log.info({ node: pod.spec.nodeName }, verdict.warnings.join('; '));
      return verdict.warnings.length ? { allowed: true, warnings: verdict.warnings } : { allowed: true };
    }
    g.log.info({ node: pod.spec.nodeName }, verdict.message!);
    return {
      allowed: false,
      status: { code: 403, reason: 'Forbidden', message: verdict.message! },
      ...(verdict.warnings.length ? { warnings: verdict.warnings } : {}),
    };
  };
}

/**
 * The Pod CREATE webhook, for pods created with spec.nodeName only (the match condition keeps the
 * apiserver from calling it for any other). It shares the Node webhook's failurePolicy: Ignore
 * admits such pods while Berth is down, Fail refuses them (kube-system and Berth's namespace
 * excepted), so a strict cluster is strict about both doors.
 */
export function podWebhook(g: Gates, failurePolicy: 'Fail' | 'Ignore'): WebhookSpec {
  return {
    name: POD_WEBHOOK,
    path: '/gates/validate-pod',
    kind: 'validating',
    handler: podAdmission(g),
    rules: [{ operations: ['CREATE'], apiGroups: [''], apiVersions: ['v1'], resources: ['pods'] }],
    failurePolicy,
    matchConditions: [
      { name: 'node-name-set', expression: "has(object.spec.nodeName) && object.spec.nodeName != ''" },
    ],
    timeoutSeconds: 2,
    scope: g.admission.pods,
  };
}
