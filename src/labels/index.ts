import { Option } from 'commander';
import { atLeast, workersOption, type Capability } from '../capability.ts';
import { POLICY_GROUP } from '../policy/crd.ts';
import { rulesCommand } from './cli.ts';
import { LabelsController } from './controller.ts';
import { CLUSTER_MAX_PER_MINUTE, EVICTION_REASONS, Evictor } from './evictor.ts';
import { explainPodEviction } from './evict.ts';
import { explainNodeLabels } from './explain.ts';
import { clusterRules } from './load.ts';
import { FIELD_MANAGER, NodeLabelRule, type EvictOnRemoval } from './types.ts';
import type { KeyPattern } from '../policy/nodes/ownership.ts';
import { releaseNodes } from '../policy/nodes/release.ts';
import { slimNode, slimPod } from '../policy/slim.ts';
import { Resources, type KubeObject } from '../runtime/api/meta.ts';

export const labelsCapability: Capability = {
  name: 'labels',
  description: 'Derived node labels from NodeLabelRules and k8s-auto-labeller rule files',
  roles: ['cluster'],
  commands: (ctx) => [rulesCommand(ctx)],
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
    new Option(
      '--label-dir-evict-after <seconds>',
      "how long a rule file's label must stay gone before its pods are evicted",
    )
      .default(60)
      .argParser(atLeast(0)),
    new Option(
      '--max-evictions-per-minute <n>',
      'evictions on removal per minute in the whole cluster, all rules together',
    )
      .default(CLUSTER_MAX_PER_MINUTE)
      .argParser(atLeast(0)),
  ],
  crds: [NodeLabelRule],
  rbac: [
    // Informers list and watch; writes are server-side applies (patch), statuses too.
    { apiGroups: [''], resources: ['nodes'], verbs: ['list', 'watch', 'patch'] },
    { apiGroups: [POLICY_GROUP], resources: ['nodelabelrules'], verbs: ['list', 'watch'] },
    { apiGroups: [POLICY_GROUP], resources: ['nodelabelrules/status'], verbs: ['patch'] },
    { apiGroups: [''], resources: ['pods'], verbs: ['list', 'watch'] },
    { apiGroups: [''], resources: ['pods/eviction'], verbs: ['create'] },
  ],
  async explainNode({ client, object: node, options, keys }) {
    const labelDir = typeof options['labelDir'] === 'string' ? options['labelDir'] : undefined;
    const { rules, errors, holds } = await clusterRules(client, labelDir);
    const owners = await keys?.();
    const owned = owners && ((k: KeyPattern[]) => owners.violations('labels', k));
    return [
      ...explainNodeLabels(node, rules, holds, owned),
      ...errors.map((e) => `  skipped invalid rule: ${e}`),
    ];
  },
  async explainPod({ client, object: pod, options, berthNamespace }) {
    const labelDir = typeof options['labelDir'] === 'string' ? options['labelDir'] : undefined;
    const { rules } = await clusterRules(client, labelDir);
    const slim = slimPod(pod);
    const node = slim.spec.nodeName
      ? await client.get(Resources.nodes, slim.spec.nodeName).then(slimNode, () => undefined)
      : undefined;
    const events = await client.list<
      KubeObject & { eventTime?: string; reason?: string; note?: string; regarding?: { uid?: string } }
    >(Resources.events, { namespace: slim.metadata!.namespace! });
    const reasons: readonly string[] = Object.values(EVICTION_REASONS);
    return explainPodEviction(
      slim,
      node,
      rules,
      berthNamespace,
      evictOnRemovalFiles(options),
      events.items
        .filter((e) => e.regarding?.uid === slim.metadata?.uid && reasons.includes(e.reason ?? ''))
        .map((e) => ({ time: e.eventTime ?? '', reason: e.reason ?? '', note: e.note ?? '' })),
    );
  },
  setup({ kit, options, berthNamespace }) {
    const labels = new LabelsController(kit, {
      ...(typeof options['labelDir'] === 'string' ? { labelDir: options['labelDir'] } : {}),
      workers: Number(options['labelWorkers'] ?? 16),
    });
    const files = evictOnRemovalFiles(options);
    new Evictor(kit, labels, {
      berthNamespace,
      ...(files ? { files } : {}),
      maxPerMinute: Number(options['maxEvictionsPerMinute'] ?? CLUSTER_MAX_PER_MINUTE),
    });
    return {};
  },
  // Labels of a rule file removed moments before Berth stopped (a ConfigMap takes up to a minute to reach it).
  uninstall: ({ client, say, dryRun }) => releaseNodes(client, FIELD_MANAGER, { say, dryRun }),
};

/** The evictOnRemoval of rule files, from the flags of `berth run` (and `berth explain pod`). */
function evictOnRemovalFiles(options: Record<string, unknown>): EvictOnRemoval | undefined {
  const mode = options['labelDirEvictOnRemoval'];
  return mode === 'Evict' || mode === 'DryRun'
    ? { mode, afterSeconds: Number(options['labelDirEvictAfter'] ?? 60) }
    : undefined;
}
