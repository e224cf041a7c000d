// The arch capability's webhook as the main thread registers it: the state it sends the webhook
// thread (where admit.ts answers) and when, and the pods the apiserver sends it.
import { namespaceLabelsByName } from '../policy/namespace.ts';
import {
  deletionChanged,
  generationChanged,
  labelsChanged,
  onChanges,
  or,
  valueChanged,
} from '../policy/predicates.ts';
import type { KubeObject } from '../runtime/api/meta.ts';
import type { WebhookSpec } from '../runtime/webhook/registration.ts';
import type { ScopeTerm } from '../policy/admission.ts';
import type { Arch } from './setup.ts';
import type { PodReconciler } from './controllers/pod.ts';
import type { Policy } from './decide/policies.ts';
import { archAdmission, type ArchAdmissionState } from './admit.ts';
import { INSPECT_WAIT_MS } from './types.ts';

/** The Pod CREATE webhook's state: the policies and caches it reads, and the images arch-pod failed to read for it. */
function admissionState(a: Arch, pods: PodReconciler): ArchAdmissionState {
  return {
    policies: a.policies(),
    berthNamespace: a.opts.berthNamespace,
    namespaceLabels: namespaceLabelsByName(a.namespaces),
    webhookNamespaces: new Set(a.webhookNamespaces.flatMap((namespaces) => [...namespaces()])),
    images: a.opts.inspector.known(),
    ...(a.opts.pullSecret ? { pullSecret: a.opts.pullSecret } : {}),
    failedImages: pods.failedForAdmission(),
    inspectWaitMs: a.opts.admissionWaitMs ?? INSPECT_WAIT_MS,
  };
}

export const POD_WEBHOOK = 'pods.arch.berth.dev';

/** The pods the webhook is sent: those a live policy selects (choosePolicy picks among them). */
export const podTerms = (policies: Policy[]): ScopeTerm[] =>
  policies
    .filter((p) => !p.deleting)
    .map((p) => ({ namespaceSelector: p.spec.namespaceSelector, objectSelector: p.spec.podSelector }));

export function podWebhook(a: Arch, pods: PodReconciler): WebhookSpec {
  return {
    name: POD_WEBHOOK,
    path: '/arch/mutate-pod',
    kind: 'mutating',
    // In the webhook thread, from what the controllers know, sent again whenever it changes.
    handler: archAdmission.fed(
      () => admissionState(a, pods),
      // Only what admission reads: a policy's status changes with every pod it places.
      (changed) => {
        a.policyObjects.addEventHandler(onChanges(or(generationChanged, deletionChanged), changed));
        a.namespaces.addEventHandler(onChanges(labelsChanged, changed));
        const services = valueChanged((o: KubeObject) => String(o['namespaces']));
        for (const configs of a.webhookConfigs) configs.addEventHandler(onChanges(services, changed));
        a.opts.inspector.onLearn(changed);
        pods.onAdmissionChange(changed);
      },
      (hint) => pods.inspectForAdmission(hint),
    ),
    rules: [{ operations: ['CREATE'], apiGroups: [''], apiVersions: ['v1'], resources: ['pods'] }],
    // Fail open: Berth down leaves pods ungated, never uncreated.
    failurePolicy: 'Ignore',
    // Asked again after a later webhook changes the pod (a sidecar injected, an image rewritten):
    // a pod placed at admission is placed on the images it is created with.
    reinvocationPolicy: 'IfNeeded',
    // A pod with nodeName can carry no gate: the apiserver need not ask.
    matchConditions: [{ name: 'no-node-name', expression: '!has(object.spec.nodeName)' }],
    timeoutSeconds: 2,
    scope: a.admission,
  };
}
