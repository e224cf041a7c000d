// `berth gates tolerate DAEMONSET`: makes a DaemonSet's pods tolerate the taints of the gates that
// wait for them, so they start on gated nodes. And what `berth uninstall` takes back of the gates.
import { SUMMARIES } from '../command/summaries.ts';
import { Command } from 'commander';
import { parseGates } from './decide/parse.ts';
import { nodePatch } from './decide/patch.ts';
import { decideGates } from './decide/state.ts';
import { gatesNamedOn, strayGate, unrecordedStray } from './decide/stray.ts';
import { gatesWaitingFor, missingTolerations, tolerationsPatch } from './tolerate.ts';
import { FIELD_MANAGER } from './types.ts';
import { NodeStartupGate } from './crd.ts';
import type { SlimNode } from '../policy/slim.ts';
import { isObjectGone } from '../runtime/client/apply.ts';
import { KubeClient } from '../runtime/client/client.ts';
import {
  clientOf,
  clusterFlags,
  dryRunOption,
  listOption,
  namespaceFlags,
  namespaceOf,
} from '../command/flags.ts';
import { Resources } from '../runtime/api/meta.ts';

/**
 * What gates left on nodes once none exists (`berth uninstall`): each gate a node still names (Berth
 * was gone when its gates were deleted, and their finalizers were removed by hand) is rebuilt from
 * its taint record and let go as the controller lets go of a stray: its taint, its annotations,
 * its completion stamp where Berth wrote it. A node held without a record is named: whose the
 * taint is, nothing says.
 */
export async function releaseGates(
  client: KubeClient,
  o: { say: (line: string) => void; dryRun: boolean },
): Promise<void> {
  for (const node of (await client.list<SlimNode>(Resources.nodes)).items) {
    const name = node.metadata!.name!;
    const strays = gatesNamedOn(node).flatMap((gate) => {
      const stray = strayGate(gate, node);
      if (!stray) o.say(`node ${name}: ${unrecordedStray(gate)}`);
      return stray ? [stray] : [];
    });
    // The patch tests what it changes against the node as listed: a node changed meanwhile fails it.
    const patch = nodePatch(node, strays, decideGates(strays, node, [], Date.now()));
    if (!patch.length) continue;
    try {
      if (!o.dryRun)
        await client.patch(Resources.nodes, name, patch, { type: 'json', fieldManager: FIELD_MANAGER });
      o.say(`node ${name}: released gates ${strays.map((g) => g.name).join(', ')} (taint and annotations)`);
    } catch (e) {
      // A node that left meanwhile carries nothing any more.
      if (!isObjectGone(e)) throw e;
    }
  }
}

export function gatesCommand(): Command {
  const cmd = new Command('gates').description(SUMMARIES.gates.description);
  const tolerate = cmd
    .command('tolerate <daemonset>')
    .description(
      "Add the tolerations for the taints of the gates that wait for this DaemonSet's pods (or of --gate) to its pod template",
    );
  namespaceFlags(clusterFlags(tolerate), 'namespace of the DaemonSet')
    .addOption(
      listOption('--gate <names>', 'tolerate these gates, whether or not they wait for the DaemonSet'),
    )
    .addOption(dryRunOption('print the patch, change nothing'))
    .action(async (name: string, o) => {
      const client = await clientOf(o);
      try {
        const ds = await client.get(Resources.daemonSets, name, namespaceOf(o, client));
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
