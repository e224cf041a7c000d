// `berth explain node NAME`: why a node is labelled, annotated or tainted the way it is; `berth
// explain pod NAME`: what Berth does to a pod; `berth explain <kind> NAME` for the kinds a
// capability explains itself (Capability.explainKinds). What is said comes from src/explain.ts,
// which the page (src/ui) calls too.
import { Command } from 'commander';
import { dryRunControllersOption } from '../capability.ts';
import { capabilities } from '../capabilities.ts';
import { explainers, explainObject, type Explainer } from '../explain.ts';
import { berthNamespace } from '../policy/namespace.ts';
import { clusterFlags, durationOption, namespaceFlags, namespaceOf, withClient } from './flags.ts';

/** The flags a kind's explanation reads, besides --kubeconfig and --namespace. */
function ruleFlags(cmd: Command, e: Explainer): Command {
  if (e.name !== 'node' && e.name !== 'pod') return cmd;
  cmd
    .option('--label-dir <dir>', 'the rule directory Berth runs with (k8s-auto-labeller files)')
    .addOption(dryRunControllersOption(capabilities));
  if (e.name === 'pod')
    cmd
      .option('--label-dir-evict-on-removal <mode>', 'the evictOnRemoval mode Berth runs rule files with')
      .addOption(
        durationOption('--label-dir-evict-after <duration>', 'the delay Berth runs rule files with', 60),
      );
  return cmd;
}

export function explainCommand(): Command {
  const cmd = new Command('explain').description('Explain what Berth does to an object, and why');
  for (const e of explainers) {
    const sub = cmd
      .command(`${e.name} <name>`)
      .aliases(e.aliases)
      .description(e.resource.namespaced ? `${e.description} (NAME or NAMESPACE/NAME)` : e.description);
    if (e.resource.namespaced) namespaceFlags(sub, `the ${e.resource.kind.toLowerCase()}'s namespace`);
    clusterFlags(sub);
    ruleFlags(sub, e).action(async (arg: string, o) => {
      const lines = await withClient(o, (client) => {
        const [namespace, name] = e.resource.namespaced
          ? namespaced(arg, namespaceOf(o, client))
          : [undefined, arg];
        return explainObject(client, e, name, namespace, o, berthNamespace());
      });
      process.stdout.write(lines.join('\n') + '\n');
    });
  }
  return cmd;
}

const namespaced = (arg: string, namespace: string): [string, string] => {
  const slash = arg.indexOf('/');
  return slash < 0 ? [namespace, arg] : [arg.slice(0, slash), arg.slice(slash + 1)];
};
