// `berth explain node NAME`: why a node is labelled, annotated or tainted the way it is; `berth
// explain pod NAME`: what Berth does to a pod.
import { Command } from 'commander';
import { capabilities } from '../capabilities.ts';
import { berthNamespace } from '../policy/namespace.ts';
import { KubeClient } from '../runtime/client/client.ts';
import { Resources, type KubeObject } from '../runtime/api/meta.ts';

export function explainCommand(): Command {
  const cmd = new Command('explain').description('Explain what Berth does to an object, and why');
  cmd
    .command('node <name>')
    .description('Which rules, gates and placements give this node its labels, annotations and taints')
    .option('--kubeconfig <path>', 'kubeconfig to use')
    .option('--label-dir <dir>', 'the rule directory Berth runs with (k8s-auto-labeller files)')
    .action(async (name: string, o) => {
      await explain(o, `Node ${name}`, (client) => client.get(Resources.nodes, name), 'explainNode');
    });
  cmd
    .command('pod <name>')
    .description('What Berth does (or will do) to this pod, and why (NAME or NAMESPACE/NAME)')
    .option('-n, --namespace <ns>', "the pod's namespace", 'default')
    .option('--kubeconfig <path>', 'kubeconfig to use')
    .option('--label-dir <dir>', 'the rule directory Berth runs with (k8s-auto-labeller files)')
    .option('--label-dir-evict-on-removal <mode>', 'the evictOnRemoval mode Berth runs rule files with')
    .option('--label-dir-evict-after <seconds>', 'the delay Berth runs rule files with', '60')
    .action(async (arg: string, o) => {
      const [namespace, name] = arg.includes('/') ? arg.split('/', 2) : [o.namespace as string, arg];
      await explain(
        o,
        `Pod ${namespace}/${name}`,
        (client) => client.get(Resources.pods, name!, namespace),
        'explainPod',
      );
    });
  return cmd;
}

/** Prints `title`, then what every capability says of the object. */
async function explain(
  o: Record<string, unknown> & { kubeconfig?: string },
  title: string,
  get: (client: KubeClient) => Promise<KubeObject>,
  hook: 'explainNode' | 'explainPod',
): Promise<void> {
  const client = KubeClient.fromFile(o.kubeconfig);
  try {
    const object = await get(client);
    const lines = [title];
    for (const c of capabilities)
      lines.push(
        ...((await c[hook]?.({ client, object, options: o, berthNamespace: berthNamespace() })) ?? []),
      );
    process.stdout.write(lines.join('\n') + '\n');
  } finally {
    client.close();
  }
}
