// The ArchPlacement CRD, from its zod schema (the API's constants and types are in types.ts).
import * as z from '../runtime/platform/zod.ts';
import { k8s } from '../runtime/api/crd.ts';
import { definePolicy, specColumn } from '../policy/crd.ts';
import { labelSelectorSchema } from '../policy/match/schema.ts';
import { ARCH_PLACEMENT } from './types.ts';

// GOARCH values as the kubelet labels nodes: lower case letters and digits (amd64, arm64, ppc64le, 386).
const architecture = z
  .string()
  .min(1)
  .max(32)
  .regex(/^[a-z0-9]+$/, 'an architecture as kubernetes.io/arch names it (amd64, arm64, ppc64le, ...)');

/** A registry as images name it, or `*.` and a domain; a port when images name one. */
const registryPattern = z
  .string()
  .min(1)
  .max(255)
  .regex(
    /^(?:\*\.)?[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*(?::[0-9]{1,5})?$|^\[[0-9A-Fa-f:]+\](?::[0-9]{1,5})?$/,
    'a registry as images name it (ghcr.io, registry.internal:5000, docker.io), or *.example.com',
  );

export const archPlacementSpec = k8s(
  z.object({
    namespaceSelector: labelSelectorSchema
      .optional()
      .describe(
        "Namespaces whose pods it places; all when omitted. Never kube-* namespaces, Berth's own or namespaces that serve admission webhooks, even when selected.",
      ),
    podSelector: labelSelectorSchema.optional().describe('The pods it places; all when omitted.'),
    mode: z
      .enum(['NodeAffinity', 'Taints'])
      .default('NodeAffinity')
      .describe(
        'NodeAffinity: add kubernetes.io/arch In <the architectures every image supports> to every required ' +
          'node-selector term. Taints: taint nodes with arch.berth.dev/arch=<architecture>:NoSchedule and ' +
          'give pods the tolerations of those architectures (as archaware-controller does).',
      ),
    preferredArchitectures: z
      .array(z.object({ architecture, weight: z.number().int().min(1).max(100) }))
      .max(16)
      .optional()
      .describe('NodeAffinity: preferred terms among the supported architectures, with their weights.'),
    onFailure: z
      .object({
        action: z
          .enum(['Release', 'Fallback'])
          .default('Release')
          .describe(
            'Release: ungate the pod as it is (fail open). Fallback: place it on fallbackArchitecture.',
          ),
        fallbackArchitecture: architecture.optional(),
        retries: z
          .number()
          .int()
          .min(0)
          .max(10)
          .default(3)
          .describe(
            'Retries of a transient failure (rate limit, unreachable registry, a 401 or 404 while a pull ' +
              "secret the pod names is missing) before acting; a registry's Retry-After is waited out " +
              'without using one, for up to 5 minutes.',
          ),
      })
      .default({ action: 'Release', retries: 3 })
      .describe('When an image cannot be read: always a Warning event and the reason on the pod.'),
    registries: z
      .array(registryPattern)
      .max(64)
      .optional()
      .describe(
        'The registries its pods may name, as images name them (ghcr.io, registry.internal:5000, docker.io for ' +
          'Docker Hub), or *.example.com for every host below example.com (the port as written). A pod naming ' +
          'any other is released with the reason RegistryNotAllowed (or placed on the fallback), and Berth sends ' +
          'that registry no request. All registries when omitted.',
      ),
    priority: z
      .number()
      .int()
      .min(-1000)
      .max(1000)
      .default(0)
      .describe('When several ArchPlacements select a pod, the highest priority places it (ties: by name).'),
  }),
  {
    'x-kubernetes-validations': [
      {
        rule: "self.onFailure.action != 'Fallback' || has(self.onFailure.fallbackArchitecture)",
        message: 'onFailure.action Fallback needs onFailure.fallbackArchitecture',
      },
    ],
  },
);

export const ArchPlacement = definePolicy({
  ref: ARCH_PLACEMENT,
  shortNames: ['archp'],
  spec: archPlacementSpec,
  counts: {
    gated: 'Pods it holds now, waiting for their images to be read.',
    placed: 'Live pods it placed by their images’ architectures.',
    failed: 'Live pods released or placed on the fallback because an image could not be read.',
  },
  printerColumns: [specColumn('Mode', 'mode'), 'gated', 'placed', 'failed'],
  showReason: true,
});
