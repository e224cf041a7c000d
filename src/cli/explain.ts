// `berth explain node NAME`: why a node is labelled, annotated or tainted the way it is; `berth
// explain pod NAME`: what Berth does to a pod; `berth explain <kind> NAME` for the kinds a
// capability explains itself (Capability.explainKinds). What is said comes from src/explain.ts,
// which the page (src/ui) calls too.
import { SUMMARIES } from '../command/summaries.ts';
import { Command } from 'commander';
import { dryRunControllersOption } from '../capability.ts';
import { capabilities } from '../capabilities.ts';
import { explainers, explanationOf, explanationText, type Explainer } from '../explain.ts';
import { berthNamespace } from '../policy/namespace.ts';
import {
  BERTH_NAMESPACE,
  berthNamespaceFlag,
  clusterFlags,
  durationOption,
  namespaceFlags,
  namespaceOf,
  outputOption,
  print,
  withClient,
} from '../command/flags.ts';

/** The flags a kind's explanation reads, besides --kubeconfig and --namespace. */
function ruleFlags(cmd: Command, e: Explainer): Command {
  if (e.name !== 'node' && e.name !== 'pod' && !e.subjects) return cmd;
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
  const cmd = new Command('explain').description(SUMMARIES.explain.description);
  for (const e of explainers) {
    const sub = cmd
      .command(`${e.name} <name>`)
      .aliases(e.aliases)
      .description(e.resource.namespaced ? `${e.description} (NAME or NAMESPACE/NAME)` : e.description);
    if (e.resource.namespaced) namespaceFlags(sub, `the ${e.resource.kind.toLowerCase()}'s namespace`);
    clusterFlags(berthNamespaceFlag(sub, BERTH_NAMESPACE, berthNamespace())).addOption(outputOption());
    if (e.subjects === 'node') sub.option('--node <name>', 'explain why this node is in or out');
    if (e.subjects === 'pod')
      sub.option('--pod <name>', 'explain why this pod (NAMESPACE/NAME) is in or out');
    ruleFlags(sub, e).action(async (arg: string, o) => {
      const x = await withClient(o, (client) => {
        const ns = namespaceOf(o, client);
        const [namespace, name] = e.resource.namespaced ? namespaced(arg, ns) : [undefined, arg];
        const focus = o.node
          ? { node: o.node as string }
          : o.pod
            ? { pod: namespaced(o.pod, ns).join('/') }
            : undefined;
        return explanationOf(client, e, name, namespace, o, o.berthNamespace, focus);
      });
      await print(o.output, x, () => explanationText(x).join('\n'));
    });
  }
  // `berth explain nodelabelrule/gpu --node n1`, as kubectl names objects: the subcommand, then the name.
  cmd
    .argument('[kind/name]')
    .allowUnknownOption()
    .allowExcessArguments()
    .action(async (arg: string | undefined, _o, c: Command) => {
      if (!arg) return cmd.help({ error: true });
      // A kind the subcommands do not know, with or without a name: say so rather than print the help.
      const [kind = '', ...name] = arg.split('/');
      if (!explainers.some((e) => e.name === kind || e.aliases.includes(kind))) throw unknownKind(kind);
      await cmd.parseAsync([kind, name.join('/'), ...c.args.slice(1)], { from: 'user' });
    });
  return cmd;
}

/** What `berth explain` says of a kind it does not explain: which it does. */
const unknownKind = (kind: string): Error =>
  new Error(`unknown kind "${kind}": berth explain knows ${explainers.map((e) => e.name).join(', ')}`);

const namespaced = (arg: string, namespace: string): [string, string] => {
  const slash = arg.indexOf('/');
  return slash < 0 ? [namespace, arg] : [arg.slice(0, slash), arg.slice(slash + 1)];
};
