import { Option } from 'commander';
import type { Capability } from '../capability.ts';
import { workersOption } from '../command/flags.ts';
import { POLICY_GROUP } from '../policy/kinds.ts';
import { GATE_KEYS, NODE_STARTUP_GATE } from './types.ts';

// What every `berth` command reads of the gates; what runs is loaded when called (setup.ts, cli.ts,
// explain.ts, plan.ts, view.ts), so a Berth that does not run them loads none of it.
export const gatesCapability: Capability = {
  name: 'gates',
  description:
    'Startup gates: taint nodes as they join, release them once their initialisation pods are Ready',
  roles: ['cluster'],
  commands: async () => [(await import('./cli.ts')).gatesCommand()],
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
  kinds: [NODE_STARTUP_GATE],
  crds: async () => {
    const crd = await import('./crd.ts');
    return [crd.NodeStartupGate];
  },
  keys: GATE_KEYS,
  // A gate's readyAnnotation may name any key; a pod says it is done with `true`.
  annotations: [{ value: 'true' }],
  // As the controller claims: every gate's prefix, taint and completion annotation.
  keyClaims: async (client) => (await import('./explain.ts')).listedKeyClaims(client),
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
  explainNode: async ({ client, object }) => (await import('./explain.ts')).explainNodeGates(client, object),
  plan: { NodeStartupGate: async (ctx) => (await import('./plan.ts')).planGateObjects(ctx) },
  page: async () => (await import('./view.ts')).gatesPage,
  explainKinds: [
    {
      name: 'nodestartupgate',
      aliases: ['nsg'],
      resource: NODE_STARTUP_GATE,
      subjects: 'node',
      status: true,
      description:
        'Which nodes a NodeStartupGate holds, since when and what each waits for (--node: one node)',
      explain: async (ctx) => (await import('./explain.ts')).explainGateObject(ctx),
    },
  ],
  uninstall: async ({ client, say, dryRun }) =>
    (await import('./cli.ts')).releaseGates(client, { say, dryRun }),
  setup: async (ctx) => (await import('./setup.ts')).setup(ctx),
};
