import { workersOption, type Capability } from '../capability.ts';
import { POLICY_GROUP } from '../policy/crd.ts';
import { agentsCommand } from './cli.ts';
import { AgentsController } from './controller.ts';
import { checkOwnership, placementClaims } from './decide.ts';
import { clusterPlacements, explainNodeAgents } from './explain.ts';
import { AGENT_KEYS, AgentPlacement, FIELD_MANAGER } from './types.ts';
import { releaseNodes } from '../policy/nodes/release.ts';

export const agentsCapability: Capability = {
  name: 'agents',
  description: 'Agent placement: label the nodes that host a workload, one claim per owner',
  roles: ['cluster'],
  commands: (ctx) => [agentsCommand(ctx)],
  options: () => [workersOption('agent-workers', 'agents')],
  crds: [AgentPlacement],
  keys: AGENT_KEYS,
  // As the controller claims: the keys of the usable placements, a gate's keys outranking theirs.
  keyClaims: async (client, keys) =>
    placementClaims(
      checkOwnership((await clusterPlacements(client)).parsed, (k) => keys.violations('agents', k)),
    ),
  rbac: [
    // Informers list and watch; claims, finalizers and statuses are server-side applies (patch).
    { apiGroups: [''], resources: ['nodes'], verbs: ['list', 'watch', 'patch'] },
    { apiGroups: [''], resources: ['pods', 'namespaces'], verbs: ['list', 'watch'] },
    // A pod's controller chain up to its top owner (controllerRef: true), read only: the top owner's
    // UID is read from the ReplicaSet's or Job's owner reference, never from the owner itself.
    { apiGroups: ['apps'], resources: ['replicasets'], verbs: ['list', 'watch'] },
    { apiGroups: ['batch'], resources: ['jobs'], verbs: ['list', 'watch'] },
    // patch: the controller applies its own finalizer to placements, so that deleting one releases its owners.
    { apiGroups: [POLICY_GROUP], resources: ['agentplacements'], verbs: ['list', 'watch', 'patch'] },
    { apiGroups: [POLICY_GROUP], resources: ['agentplacements/status'], verbs: ['patch'] },
    // Owner kinds that carry a placement's finalizer are not here: watching and patching a workload
    // kind would let Berth change every pod template of it, so each is opted into (RbacOptions
    // finalizerOwners: `berth manifests --finalizer-owner`, Helm agents.finalizerOwners, the kustomize
    // component finalizer-owners).
    // An owner kind that is not served yet is checked again when its CRD appears.
    {
      apiGroups: ['apiextensions.k8s.io'],
      resources: ['customresourcedefinitions'],
      verbs: ['list', 'watch'],
    },
    // Whether Berth may watch and patch an owner kind, before it watches it.
    { apiGroups: ['authorization.k8s.io'], resources: ['selfsubjectaccessreviews'], verbs: ['create'] },
  ],
  async explainNode({ client, object, berthNamespace, keys }) {
    const owners = await keys?.();
    return explainNodeAgents(
      client,
      object,
      berthNamespace,
      owners && ((k) => owners.violations('agents', k)),
    );
  },
  setup({ kit, options, berthNamespace }) {
    const controller = new AgentsController(kit, {
      workers: Number(options['agentWorkers'] ?? 16),
      berthNamespace,
    });
    return { webhooks: [controller.webhook()] };
  },
  // Claims and labels of a placement deleted moments before Berth stopped.
  uninstall: ({ client, say, dryRun }) => releaseNodes(client, FIELD_MANAGER, { say, dryRun }),
};
