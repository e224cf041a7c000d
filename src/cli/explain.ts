// `berth explain node NAME`: why a node is labelled, annotated or tainted the way it is.
import { Command } from 'commander';
import { capabilities } from '../capabilities.ts';
import { berthNamespace } from '../policy/namespace.ts';
import { KubeClient } from '../runtime/client/client.ts';
import { Resources } from '../runtime/api/meta.ts';

export function explainCommand(): Command {
  const cmd = new Command('explain').description('Explain what Berth does to an object, and why');
  cmd
    .command('node <name>')
    .description('Which rules, gates and placements give this node its labels, annotations and taints')
    .option('--kubeconfig <path>', 'kubeconfig to use')
    .option('--label-dir <dir>', 'the rule directory Berth runs with (k8s-auto-labeller files)')
    .action(async (name: string, o) => {
      const client = KubeClient.fromFile(o.kubeconfig);
      try {
        const node = await client.get(Resources.nodes, name);
        const lines = [`Node ${name}`];
        for (const c of capabilities)
          if (c.explainNode)
            lines.push(
              ...(await c.explainNode({ client, node, options: o, berthNamespace: berthNamespace() })),
            );
        process.stdout.write(lines.join('\n') + '\n');
      } finally {
        client.close();
      }
    });
  return cmd;
}
