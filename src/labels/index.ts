import { Option } from 'commander';
import type { Capability } from '../capability.ts';
import { durationOption, atLeast, workersOption } from '../command/flags.ts';
import { POLICY_GROUP } from '../policy/kinds.ts';
import {
  CLUSTER_MAX_PER_MINUTE,
  CONFIG_SOURCE_ANNOTATION,
  type EvictOnRemoval,
  FIELD_MANAGER,
  NODE_LABEL_RULE,
  OPT_OUT_ANNOTATION,
} from './types.ts';

// What every `berth` command reads of derived labels; what runs is loaded when called (setup.ts,
// explain.ts, plan.ts, view.ts), so a Berth that does not run them loads none of it.
export const labelsCapability: Capability = {
  name: 'labels',
  description: 'Derived node labels from NodeLabelRules and k8s-auto-labeller rule files',
  roles: ['cluster'],
  // Eviction on removal leaves static pods and pods that opt out alone.
  annotations: [{ key: CONFIG_SOURCE_ANNOTATION }, { key: OPT_OUT_ANNOTATION }],
  options: () => [
    new Option(
      '--label-dir <dir>',
      'k8s-auto-labeller rule files, DIR/<namespace>/<label> (watched and reloaded)',
    ),
    workersOption('label-workers', 'labels'),
    new Option(
      '--label-dir-evict-on-removal <mode>',
      'evictOnRemoval for every rule file: evict pods that needed a label a file derived once it goes away (DryRun only reports)',
    ).choices(['Evict', 'DryRun']),
    durationOption(
      '--label-dir-evict-after <duration>',
      "how long a rule file's label must stay gone before its pods are evicted",
      60,
    ),
    new Option(
      '--max-evictions-per-minute <n>',
      'evictions on removal per minute in the whole cluster, all rules together',
    )
      .default(CLUSTER_MAX_PER_MINUTE)
      .argParser(atLeast(0)),
  ],
  kinds: [NODE_LABEL_RULE],
  crds: async () => {
    const crd = await import('./crd.ts');
    return [crd.NodeLabelRule];
  },
  rbac: [
    // Informers list and watch; writes are server-side applies (patch), statuses too.
    { apiGroups: [''], resources: ['nodes'], verbs: ['list', 'watch', 'patch'] },
    { apiGroups: [POLICY_GROUP], resources: ['nodelabelrules'], verbs: ['list', 'watch'] },
    { apiGroups: [POLICY_GROUP], resources: ['nodelabelrules/status'], verbs: ['patch'] },
    { apiGroups: [''], resources: ['pods'], verbs: ['list', 'watch'] },
    { apiGroups: [''], resources: ['pods/eviction'], verbs: ['create'] },
  ],
  explainNode: async (ctx) => (await import('./explain.ts')).explainNodeObject(ctx),
  plan: {
    NodeLabelRule: async (ctx) =>
      (await import('./plan.ts')).planRules(ctx, labelDirOf(ctx.options), evictOnRemovalFiles(ctx.options)),
  },
  planFromFlags: (options) => (ruleFilesOf(options).length ? ['NodeLabelRule'] : []),
  page: async () => (await import('./view.ts')).labelsPage,
  explainKinds: [
    {
      name: 'nodelabelrule',
      aliases: ['nlr'],
      resource: NODE_LABEL_RULE,
      subjects: 'node',
      status: true,
      description: 'Which nodes a NodeLabelRule matches, why, and what it sets on each (--node: one node)',
      explain: async (ctx) => (await import('./explain.ts')).explainRuleObject(ctx),
    },
  ],
  explainPod: async (ctx) => (await import('./explain.ts')).explainPodObject(ctx),
  setup: async (ctx) => (await import('./setup.ts')).setup(ctx),
  // Labels of a rule file removed moments before Berth stopped (a ConfigMap takes up to a minute to reach it).
  uninstall: async ({ client, say, dryRun }) =>
    (await import('../policy/nodes/release.ts')).releaseNodes(client, FIELD_MANAGER, { say, dryRun }),
};

/** `berth plan --rule-file`: k8s-auto-labeller rule files or directories to plan as applied. */
export const ruleFilesOf = (options: Record<string, unknown>): string[] =>
  Array.isArray(options['ruleFile']) ? (options['ruleFile'] as string[]) : [];

/** --label-dir of the read-only commands: the rule directory Berth runs with. */
export const labelDirOf = (options: Record<string, unknown>): string | undefined =>
  typeof options['labelDir'] === 'string' ? options['labelDir'] : undefined;

/** The evictOnRemoval of rule files, from the flags of `berth run` (and `berth explain pod`). */
export function evictOnRemovalFiles(options: Record<string, unknown>): EvictOnRemoval | undefined {
  const mode = options['labelDirEvictOnRemoval'];
  return mode === 'Evict' || mode === 'DryRun'
    ? { mode, afterSeconds: Number(options['labelDirEvictAfter'] ?? 60) }
    : undefined;
}
