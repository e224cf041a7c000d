// `berth gates tolerate DAEMONSET`: makes a DaemonSet's pods tolerate the taints of the gates that
// wait for them, so they start on gated nodes.
import { Command } from 'commander';
import { parseGates } from './decide.ts';
import { gatesWaitingFor, missingTolerations, tolerationsPatch } from './tolerate.ts';
import { NodeStartupGate } from './types.ts';
import { KubeClient } from '../runtime/client/client.ts';
import { Resources } from '../runtime/api/meta.ts';

export function gatesCommand(): Command {
  const cmd = new Command('gates').description('Startup gates: helpers for NodeStartupGates');
  cmd
    .command('tolerate <daemonset>')
    .description(
      "Add the tolerations for the taints of the gates that wait for this DaemonSet's pods (or of --gate) to its pod template",
    )
    .option('-n, --namespace <ns>', 'namespace of the DaemonSet', 'default')
    .option('--gate <name...>', 'tolerate these gates, whether or not they wait for the DaemonSet')
    .option('--dry-run', 'print the patch, change nothing', false)
    .option('--kubeconfig <path>', 'kubeconfig to use')
    .action(async (name: string, o) => {
      const client = KubeClient.fromFile(o.kubeconfig);
      try {
        const ds = await client.get(Resources.daemonSets, name, o.namespace);
        const { gates, problems } = parseGates((await client.list(NodeStartupGate.ref)).items);
        const wanted: string[] | undefined = o.gate;
        for (const g of wanted ?? []) {
          if (!gates.some((x) => x.name === g))
            throw new Error(`NodeStartupGate ${g}: ${problems.get(g)?.message ?? 'not found'}`);
        }
        const chosen = wanted ? gates.filter((g) => wanted.includes(g.name)) : gatesWaitingFor(ds, gates);
        if (chosen.length === 0) {
          process.stdout.write(
            `no gate waits for the pods of DaemonSet ${o.namespace}/${name}; name one with --gate\n`,
          );
          return;
        }
        const add = missingTolerations(ds, chosen);
        if (add.length === 0) {
          process.stdout.write(
            `DaemonSet ${o.namespace}/${name} already tolerates ${chosen.map((g) => g.name).join(', ')}\n`,
          );
          return;
        }
        const patch = tolerationsPatch(ds, add);
        if (o.dryRun) {
          process.stdout.write(JSON.stringify(patch, null, 2) + '\n');
          return;
        }
        await client.patch(Resources.daemonSets, name, patch, {
          namespace: o.namespace,
          type: 'json',
          fieldManager: 'berth-gates-tolerate',
        });
        for (const t of add)
          process.stdout.write(
            `daemonset ${o.namespace}/${name}: added toleration ${t.key}${t.value ? `=${t.value}` : ''}:${t.effect}\n`,
          );
      } finally {
        client.close();
      }
    });
  return cmd;
}
