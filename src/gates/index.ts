import { Option } from 'commander';
import { workersOption, type Capability } from '../capability.ts';
import { POLICY_GROUP } from '../policy/crd.ts';
import { gatesCommand, releaseGates } from './cli.ts';
import { GatesController } from './controller.ts';
import { gateKeyClaims, parseGates } from './decide/parse.ts';
import { explainNodeGates } from './explain.ts';
import { GATE_KEYS, NodeStartupGate } from './types.ts';

export const gatesCapability: Capability = {
  name: 'gates',
  description:
    'Startup gates: taint nodes as they join, release them once their initialisation pods are Ready',
  roles: ['cluster'],
  commands: () => [gatesCommand()],
  options: () => [
    workersOption('gate-workers', 'gates'),
    new Option(
      '--gates-failure-policy <policy>',
      'failurePolicy of the Node CREATE webhook and of the Pod CREATE webhook for pods with spec.nodeName: ' +
        'Ignore (nodes join while Berth is down, and the controller taints them afterwards if still idle; ' +
        'pods with spec.nodeName are admitted) or Fail (strict: no node joins ungated, no pod with ' +
        'spec.nodeName is created outside kube-system; label the nodes Berth runs on gates.berth.dev/exempt=true)',
    )
      .choices(['Ignore', 'Fail'])
      .default('Ignore'),
  ],
  crds: [NodeStartupGate],
  keys: GATE_KEYS,
  // As the controller claims: every gate's prefix, taint and completion annotation.
  keyClaims: async (client) =>
    gateKeyClaims(parseGates((await client.list(NodeStartupGate.ref)).items).gates),
  rbac: [
    // Informers list and watch; nodes are written by compare-and-swap patches, gates' finalizers
    // and statuses by server-side apply (patch).
    { apiGroups: [''], resources: ['nodes'], verbs: ['list', 'watch', 'patch'] },
    { apiGroups: [''], resources: ['pods'], verbs: ['list', 'watch'] },
    // Read only: `berth gates tolerate` patches a DaemonSet's pod template with the credentials of
    // whoever runs it, never with the controller's (patch would let Berth run anything on every node).
    { apiGroups: ['apps'], resources: ['daemonsets'], verbs: ['list', 'watch'] },
    // get: a gate a node names that the cache lacks is read for, to tell one gone from one not yet seen.
    { apiGroups: [POLICY_GROUP], resources: ['nodestartupgates'], verbs: ['get', 'list', 'watch', 'patch'] },
    { apiGroups: [POLICY_GROUP], resources: ['nodestartupgates/status'], verbs: ['patch'] },
  ],
  explainNode: ({ client, object }) => explainNodeGates(client, object),
  uninstall: ({ client, say, dryRun }) => releaseGates(client, { say, dryRun }),
  setup({ kit, options }) {
    const controller = new GatesController(kit, {
      workers: Number(options['gateWorkers'] ?? 16),
      failurePolicy: options['gatesFailurePolicy'] === 'Fail' ? 'Fail' : 'Ignore',
    });
    return { webhooks: [controller.webhook(), controller.podWebhook()] };
  },
};
