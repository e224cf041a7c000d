import { Option } from 'commander';
import { atLeast, secondsWithin, type Capability } from '../capability.ts';
import { POLICY_GROUP } from '../policy/crd.ts';
import { RegistryClient } from '../registry/index.ts';
import { archCommand, cleanArch, registryOptions } from './cli.ts';
import { clusterCidrs, SERVICE_CIDRS } from './cluster-ranges.ts';
import { ArchController } from './controller.ts';
import { explainPodArch } from './explain.ts';
import { ARCH_KEYS, ArchPlacement, PULL_SECRET_RULE } from './types.ts';
import { ADMISSION_BUDGET_MS, INSPECT_WAIT_MS } from './webhook.ts';

export const archCapability: Capability = {
  name: 'arch',
  description: 'Architecture-aware placement: pods land on nodes whose architecture all their images support',
  roles: ['cluster'],
  commands: () => [archCommand()],
  options: () => [
    new Option(
      '--arch-workers <n>',
      'pods the arch controller patches at once (a pod waiting on its registry holds none)',
    )
      .default(32)
      .argParser(atLeast(1)),
    new Option(
      '--arch-admission-wait <seconds>',
      "how long a new image's first pods wait at admission for Berth to read it, to be placed there rather than gated (0: gate them at once)",
    )
      .default(INSPECT_WAIT_MS / 1000)
      .argParser(secondsWithin(0, ADMISSION_BUDGET_MS / 1000)),
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
  crds: [ArchPlacement],
  keys: ARCH_KEYS,
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
    { apiGroups: [SERVICE_CIDRS.group], resources: [SERVICE_CIDRS.resource], verbs: ['list'] },
    // Pods in namespaces that serve admission webhooks are never gated (see docs/decisions/0012).
    {
      apiGroups: ['admissionregistration.k8s.io'],
      resources: ['mutatingwebhookconfigurations', 'validatingwebhookconfigurations'],
      verbs: ['list', 'watch'],
    },
    { apiGroups: [POLICY_GROUP], resources: ['archplacements'], verbs: ['list', 'watch', 'patch'] },
    { apiGroups: [POLICY_GROUP], resources: ['archplacements/status'], verbs: ['patch'] },
  ],
  explainPod: ({ client, object, berthNamespace }) => explainPodArch(client, object, berthNamespace),
  async setup({ kit, options, berthNamespace }) {
    const controller = new ArchController(kit, {
      inspector: new RegistryClient({
        ...registryOptions({ registries: options['archRegistries'], registryCa: options['archRegistryCa'] }),
        clusterCidrs: await clusterCidrs(kit.manager.client(), kit.manager.log),
      }),
      berthNamespace,
      workers: Number(options['archWorkers'] ?? 32),
      admissionWaitMs: 1000 * Number(options['archAdmissionWait'] ?? INSPECT_WAIT_MS / 1000),
      ...(typeof options['archPullSecret'] === 'string' ? { pullSecret: options['archPullSecret'] } : {}),
    });
    return { webhooks: [controller.webhook()] };
  },
  // Deleting the ArchPlacements released their pods; what stays on them is Berth's record of it.
  uninstall: ({ client, say, dryRun }) => cleanArch(client, { say, dryRun, records: true }),
};
