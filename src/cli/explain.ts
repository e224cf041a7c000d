// `berth explain node NAME`: why a node is labelled, annotated or tainted the way it is; `berth
// explain pod NAME`: what Berth does to a pod.
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
  cmd
    .command('pod <name>')
    .description('What Berth does (or will do) to this pod, and why (NAME or NAMESPACE/NAME)')
    .option('-n, --namespace <ns>', "the pod's namespace", 'default')
    .option('--kubeconfig <path>', 'kubeconfig to use')
    .action(async (arg: string, o) => {
      const [namespace, name] = arg.includes('/') ? arg.split('/', 2) : [o.namespace as string, arg];
      const client = KubeClient.fromFile(o.kubeconfig);
      try {
        const pod = await client.get(Resources.pods, name!, namespace);
        const lines = [`Pod ${namespace}/${name}`];
        for (const c of capabilities)
          if (c.explainPod)
            lines.push(
              ...(await c.explainPod({ client, pod, options: o, berthNamespace: berthNamespace() })),
            );
        process.stdout.write(lines.join('\n') + '\n');
      } finally {
        client.close();
      }
    });
  return cmd;
}
