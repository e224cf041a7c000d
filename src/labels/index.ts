import { Option } from 'commander';
import type { Capability } from '../capability.ts';
import { rulesCommand } from './cli.ts';
import { LabelsController } from './controller.ts';
import { CLUSTER_MAX_PER_MINUTE, Evictor } from './evictor.ts';
import { explainNodeLabels } from './explain.ts';
import { clusterRules } from './load.ts';
import { NodeLabelRule } from './types.ts';

export const labelsCapability: Capability = {
  name: 'labels',
  description: 'Derived node labels from NodeLabelRules and k8s-auto-labeller rule files',
  roles: ['cluster'],
  commands: () => [rulesCommand()],
  options: () => [
    new Option(
      '--label-dir <dir>',
      'k8s-auto-labeller rule files, DIR/<namespace>/<label> (watched and reloaded)',
    ),
    new Option('--label-workers <n>', 'concurrent node reconciles of the labels controller')
      .default(16)
      .argParser(Number),
    new Option(
      '--label-dir-evict-on-removal <mode>',
      'evictOnRemoval for every rule file: evict pods that needed a label a file derived once it goes away (DryRun only reports)',
    ).choices(['Evict', 'DryRun']),
    new Option(
      '--label-dir-evict-after <seconds>',
      "how long a rule file's label must stay gone before its pods are evicted",
    )
      .default(60)
      .argParser(Number),
    new Option(
      '--max-evictions-per-minute <n>',
      'evictions on removal per minute in the whole cluster, all rules together',
    )
      .default(CLUSTER_MAX_PER_MINUTE)
      .argParser(Number),
  ],
  crds: [NodeLabelRule],
  rbac: [
    { apiGroups: [''], resources: ['nodes'], verbs: ['get', 'list', 'watch', 'patch'] },
    { apiGroups: ['berth.dev'], resources: ['nodelabelrules'], verbs: ['get', 'list', 'watch'] },
    { apiGroups: ['berth.dev'], resources: ['nodelabelrules/status'], verbs: ['get', 'patch', 'update'] },
    { apiGroups: [''], resources: ['pods'], verbs: ['get', 'list', 'watch'] },
    { apiGroups: [''], resources: ['pods/eviction'], verbs: ['create'] },
  ],
  async explainNode({ client, node, options }) {
    const labelDir = typeof options['labelDir'] === 'string' ? options['labelDir'] : undefined;
    const { rules, errors } = await clusterRules(client, labelDir);
    return [...explainNodeLabels(node, rules), ...errors.map((e) => `  skipped invalid rule: ${e}`)];
  },
  setup({ kit, options, berthNamespace }) {
    const labels = new LabelsController(kit, {
      ...(typeof options['labelDir'] === 'string' ? { labelDir: options['labelDir'] } : {}),
      workers: Number(options['labelWorkers'] ?? 16),
    });
    const mode = options['labelDirEvictOnRemoval'];
    new Evictor(kit, labels, {
      berthNamespace,
      ...(mode === 'Evict' || mode === 'DryRun'
        ? { files: { mode, afterSeconds: Number(options['labelDirEvictAfter'] ?? 60) } }
        : {}),
      maxPerMinute: Number(options['maxEvictionsPerMinute'] ?? CLUSTER_MAX_PER_MINUTE),
    });
    return {};
  },
};
