import type { Capability } from '../capability.ts';
import { workersOption } from '../command/flags.ts';
import { OWNER_HOLD_ANNOTATION } from './finalizers.ts';
import { POLICY_GROUP } from '../policy/kinds.ts';
import { AGENT_KEYS, AGENT_PLACEMENT, FIELD_MANAGER } from './types.ts';

// What every `berth` command reads of agent placement; what runs is loaded when called (setup.ts,
// explain.ts, plan.ts), so a Berth that does not run it loads none of it.
export const agentsCapability: Capability = {
  name: 'agents',
  description: 'Agent placement: label the nodes that host a workload, one claim per owner',
  roles: ['cluster'],
  options: () => [workersOption('agent-workers', 'agents')],
  kinds: [AGENT_PLACEMENT],
  crds: async () => {
    const crd = await import('./crd.ts');
    return [crd.AgentPlacement];
  },
  keys: AGENT_KEYS,
  annotations: [{ key: OWNER_HOLD_ANNOTATION }],
  // As the controller claims: the keys of the usable placements, a gate's keys outranking theirs.
  keyClaims: async (client, keys) => (await import('./explain.ts')).listedKeyClaims(client, keys),
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
  explainNode: async (ctx) => (await import('./explain.ts')).explainNodeObject(ctx),
  explainKinds: [
    {
      name: 'agentplacement',
      aliases: ['ap'],
      resource: AGENT_PLACEMENT,
      subjects: 'node',
      status: true,
      description: 'Which nodes an AgentPlacement labels and claims, for which owners (--node: one node)',
      explain: async (ctx) => (await import('./explain.ts')).explainPlacementObject(ctx),
    },
  ],
  plan: { AgentPlacement: async (ctx) => (await import('./plan.ts')).planAgentPlacements(ctx) },
  setup: async (ctx) => (await import('./setup.ts')).setup(ctx),
  // Claims and labels of a placement deleted moments before Berth stopped.
  uninstall: async ({ client, say, dryRun }) =>
    (await import('../policy/nodes/release.ts')).releaseNodes(client, FIELD_MANAGER, { say, dryRun }),
};
