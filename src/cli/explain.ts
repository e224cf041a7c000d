// `berth explain node NAME`: why a node is labelled, annotated or tainted the way it is; `berth
// explain pod NAME`: what Berth does to a pod; `berth explain <kind> NAME` for the kinds a
// capability explains itself (Capability.explainKinds).
import { Command } from 'commander';
import type { ExplainContext } from '../capability.ts';
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
      await explain(o, `Node ${name}`, (client) => client.get(Resources.nodes, name), every('explainNode'));
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
      const [namespace, name] = namespaced(arg, o.namespace);
      await explain(
        o,
        `Pod ${namespace}/${name}`,
        (client) => client.get(Resources.pods, name, namespace),
        every('explainPod'),
      );
    });
  for (const kind of capabilities.flatMap((c) => c.explainKinds ?? []))
    cmd
      .command(`${kind.name} <name>`)
      .aliases(kind.aliases ?? [])
      .description(`${kind.description} (NAME or NAMESPACE/NAME)`)
      .option('-n, --namespace <ns>', `the ${kind.resource.kind}'s namespace`, 'default')
      .option('--kubeconfig <path>', 'kubeconfig to use')
      .action(async (arg: string, o) => {
        const [namespace, name] = namespaced(arg, o.namespace);
        await explain(
          o,
          `${kind.resource.kind} ${namespace}/${name}`,
          (client) => client.get(kind.resource, name, namespace),
          (ctx) => kind.lines(ctx),
        );
      });
  return cmd;
}

const namespaced = (arg: string, namespace: string): [string, string] => {
  const slash = arg.indexOf('/');
  return slash < 0 ? [namespace, arg] : [arg.slice(0, slash), arg.slice(slash + 1)];
};

/** What every capability says through one of its hooks, in order. */
const every =
  (hook: 'explainNode' | 'explainPod') =>
  async (ctx: ExplainContext): Promise<string[]> => {
    const lines: string[] = [];
    for (const c of capabilities) lines.push(...((await c[hook]?.(ctx)) ?? []));
    return lines;
  };

/** Prints `title`, then the lines said of the object. */
async function explain(
  o: Record<string, unknown> & { kubeconfig?: string },
  title: string,
  get: (client: KubeClient) => Promise<KubeObject>,
  lines: (ctx: ExplainContext) => Promise<string[]>,
): Promise<void> {
  const client = KubeClient.fromFile(o.kubeconfig);
  try {
    const object = await get(client);
    const said = await lines({ client, object, options: o, berthNamespace: berthNamespace() });
    process.stdout.write([title, ...said].join('\n') + '\n');
  } finally {
    client.close();
  }
}
