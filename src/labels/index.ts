import { Option } from 'commander';
import { workersOption, type Capability } from '../capability.ts';
import { POLICY_GROUP } from '../policy/crd.ts';
import { rulesCommand } from './cli.ts';
import { LabelsController } from './controller.ts';
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
    workersOption('label-workers', 'labels'),
  ],
  crds: [NodeLabelRule],
  rbac: [
    { apiGroups: [''], resources: ['nodes'], verbs: ['get', 'list', 'watch', 'patch'] },
    { apiGroups: [POLICY_GROUP], resources: ['nodelabelrules'], verbs: ['get', 'list', 'watch'] },
    { apiGroups: [POLICY_GROUP], resources: ['nodelabelrules/status'], verbs: ['get', 'patch', 'update'] },
  ],
  async explainNode({ client, node, options }) {
    const labelDir = typeof options['labelDir'] === 'string' ? options['labelDir'] : undefined;
    const { rules, errors } = await clusterRules(client, labelDir);
    return [...explainNodeLabels(node, rules), ...errors.map((e) => `  skipped invalid rule: ${e}`)];
  },
  setup({ kit, options }) {
    new LabelsController(kit, {
      ...(typeof options['labelDir'] === 'string' ? { labelDir: options['labelDir'] } : {}),
      workers: Number(options['labelWorkers'] ?? 16),
    });
    return {};
  },
};
