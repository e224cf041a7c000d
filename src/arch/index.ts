import { Option } from 'commander';
import type { Capability } from '../capability.ts';
import { durationOption, atLeast } from '../command/flags.ts';
import { POLICY_GROUP } from '../policy/kinds.ts';
import { Resources } from '../runtime/api/meta.ts';
import {
  ARCH_KEYS,
  ARCH_PLACEMENT,
  FAILURE_ANNOTATION,
  INSPECT_WAIT_MS,
  POLICY_ANNOTATION,
  PULL_SECRET_RULE,
  RESULT_ANNOTATION,
  SKIP_ANNOTATION,
} from './types.ts';
import { ADMISSION_BUDGET_MS } from './decide/admission.ts';

// What every `berth` command reads of architecture-aware placement; what runs is loaded when called
// (setup.ts, cli.ts, explain.ts, plan.ts, view.ts), so a Berth that does not run it loads none of it.
export const archCapability: Capability = {
  name: 'arch',
  description: 'Architecture-aware placement: pods land on nodes whose architecture all their images support',
  roles: ['cluster'],
  commands: async () => [(await import('./cli.ts')).archCommand()],
  options: () => [
    new Option(
      '--arch-workers <n>',
      'pods the arch controller patches at once (a pod waiting on its registry holds none)',
    )
      .default(32)
      .argParser(atLeast(1)),
    durationOption(
      '--arch-admission-wait <duration>',
      "how long a new image's first pods wait at admission for Berth to read it, to be placed there rather than gated (0: gate them at once)",
      INSPECT_WAIT_MS / 1000,
      0,
      ADMISSION_BUDGET_MS / 1000,
    ),
    new Option(
      '--arch-registries <file>',
      'registries configuration (YAML): mirrors tried in order, a CA bundle per registry, insecure registries and registries on private addresses (allowPrivate) by opt-in',
    ),
    new Option(
      '--arch-registry-ca <file>',
      'a PEM bundle trusted by every registry that names no CA of its own',
    ),
    new Option(
      '--arch-pull-secret <namespace/name>',
      "a pull secret tried for every pod's images after the pod's own (a cluster-wide registry login)",
    ),
  ],
  kinds: [ARCH_PLACEMENT],
  crds: async () => {
    const crd = await import('./crd.ts');
    return [crd.ArchPlacement];
  },
  keys: ARCH_KEYS,
  // Its records on the pods it gated, and the skip flag. A record names at most MAX_POD_IMAGES
  // images of at most 520 characters each, with their platforms: within 64 KiB.
  annotations: [
    { key: POLICY_ANNOTATION },
    { key: RESULT_ANNOTATION, max: 64 * 1024 },
    { key: FAILURE_ANNOTATION, max: 64 * 1024 },
    { key: SKIP_ANNOTATION },
  ],
  // Pull secrets, read by name: pods' own where the install opts their namespace in, and
  // --arch-pull-secret by its name where the install names it (RbacOptions.archPullSecret).
  userNamespaceRbac: [PULL_SECRET_RULE],
  rbac: [
    // Informers list and watch; pods are ungated by patch, the rest written by server-side apply.
    // A gated pod the informer loses is read again (get): its state label may have been taken off.
    { apiGroups: [''], resources: ['pods'], verbs: ['get', 'list', 'watch', 'patch'] },
    { apiGroups: [''], resources: ['namespaces'], verbs: ['list', 'watch'] },
    // Asked before a pull secret is read: may Berth read Secrets in the pod's namespace?
    { apiGroups: ['authorization.k8s.io'], resources: ['selfsubjectaccessreviews'], verbs: ['create'] },
    // Taints mode: the architecture taint.
    { apiGroups: [''], resources: ['nodes'], verbs: ['list', 'watch', 'patch'] },
    // Registry egress: the service ranges, refused like private addresses (cluster-ranges.ts).
    {
      apiGroups: [Resources.serviceCidrs.group],
      resources: [Resources.serviceCidrs.resource],
      verbs: ['list'],
    },
    // Pods in namespaces that serve admission webhooks are never gated (see docs/decisions/0012).
    {
      apiGroups: ['admissionregistration.k8s.io'],
      resources: ['mutatingwebhookconfigurations', 'validatingwebhookconfigurations'],
      verbs: ['list', 'watch'],
    },
    { apiGroups: [POLICY_GROUP], resources: ['archplacements'], verbs: ['list', 'watch', 'patch'] },
    { apiGroups: [POLICY_GROUP], resources: ['archplacements/status'], verbs: ['patch'] },
  ],
  explainPod: async ({ client, object, berthNamespace }) =>
    (await import('./explain.ts')).explainPodArch(client, object, berthNamespace),
  plan: { ArchPlacement: async (ctx) => (await import('./plan.ts')).planArchObjects(ctx) },
  page: async () => (await import('./view.ts')).archPage,
  explainKinds: [
    {
      name: 'archplacement',
      aliases: ['archp'],
      resource: ARCH_PLACEMENT,
      subjects: 'pod',
      status: true,
      description: 'Which pods an ArchPlacement gated and placed on which architectures (--pod: one pod)',
      explain: async (ctx) => (await import('./explain.ts')).explainArchPlacementObject(ctx),
    },
  ],
  setup: async (ctx) => (await import('./setup.ts')).setup(ctx),
  // Deleting the ArchPlacements released their pods; what stays on them is Berth's record of it.
  uninstall: async ({ client, say, dryRun }) =>
    (await import('./cli.ts')).cleanArch(client, { say, dryRun, records: true }),
};
