// The agents' webhook as the main thread registers it: the state it sends the webhook thread
// (where admit.ts answers) and when, and the pods the apiserver sends it.
import type { KubeObject } from '../runtime/api/meta.ts';
import type { WebhookSpec } from '../runtime/webhook/registration.ts';
import { namespaceLabelsByName } from '../policy/namespace.ts';
import { deletionChanged, generationChanged, labelsChanged, onChanges, or } from '../policy/predicates.ts';
import type { Agents } from './setup.ts';
import type { AgentPlacementSpec } from './types.ts';
import { agentAdmission } from './admit.ts';

export const POD_WEBHOOK = 'pods.agents.berth.dev';

/** A usable placement the webhook acts for: it sets waitForAgent and is not being deleted. */
export const waitsForAgent = (p: { spec: AgentPlacementSpec; obj: KubeObject }): boolean =>
  p.spec.waitForAgent !== undefined && !p.obj.metadata?.deletionTimestamp;

/**
 * The Pod CREATE webhook that adds the wait-for-agent init container. failurePolicy Ignore: an
 * unavailable Berth must never block pod creation; such a pod just starts without waiting. Sent
 * only the pods a placement with waitForAgent selects (its scope); none without such a placement.
 */
export function podWebhook(a: Agents): WebhookSpec {
  return {
    name: POD_WEBHOOK,
    path: '/agents/mutate-pod',
    kind: 'mutating',
    // In the webhook thread, from the placements as the controllers parse them.
    handler: agentAdmission.fed(
      () => ({
        placements: a.placements().flatMap((p) => (waitsForAgent(p) ? [{ name: p.name, spec: p.spec }] : [])),
        berthNamespace: a.berthNamespace,
        namespaceLabels: namespaceLabelsByName(a.namespaces),
      }),
      // Only what admission reads: a placement's status changes with every node it claims.
      (changed) => {
        a.placementObjects.addEventHandler(onChanges(or(generationChanged, deletionChanged), changed));
        // A key a gate takes makes a placement Invalid, so unusable.
        a.keys.addEventHandler({ onUpdate: changed });
        a.namespaces.addEventHandler(onChanges(labelsChanged, changed));
      },
    ),
    rules: [{ operations: ['CREATE'], apiGroups: [''], apiVersions: ['v1'], resources: ['pods'] }],
    failurePolicy: 'Ignore',
    timeoutSeconds: 2,
    scope: a.admission,
  };
}
