// `berth plan -f FILE|DIR|-`: what applying (or, with --delete, deleting) Berth's objects would do
// to the cluster as it is now, from src/plan.ts, which the page calls too. Writes nothing. Exits 0
// when nothing would change, 2 when something would (as `kubectl diff`), 1 on error.
import { Command } from 'commander';
import { text } from 'node:stream/consumers';
import { dryRunControllersOption } from '../capability.ts';
import { capabilities } from '../capabilities.ts';
import { planChange, planExitCode, planText, readManifests } from '../plan.ts';
import { berthNamespace } from '../policy/namespace.ts';
import { clusterFlags, durationOption, outputOption, print, withClient } from './flags.ts';

export function planCommand(): Command {
  const cmd = new Command('plan')
    .description(
      "Show what applying Berth's objects would do now (nodes labelled, tainted, held; pods evicted, gated; instances granted), " +
        'or with --delete what deleting them would undo. Writes nothing. Exit code 0: no change, 2: changes, 1: error.',
    )
    .requiredOption('-f, --filename <path...>', 'YAML files, directories of them, or - for stdin')
    .option('--delete', 'plan deleting these objects instead of applying them')
    .option('--label-dir <dir>', 'the rule directory Berth runs with (k8s-auto-labeller files)')
    .option('--label-dir-evict-on-removal <mode>', 'the evictOnRemoval mode Berth runs rule files with')
    .addOption(
      durationOption('--label-dir-evict-after <duration>', 'the delay Berth runs rule files with', 60),
    )
    .addOption(dryRunControllersOption(capabilities))
    .addOption(outputOption());
  return clusterFlags(cmd).action(async (o) => {
    const { objects, errors } = await readManifests(o.filename, () => text(process.stdin));
    if (errors.length) {
      process.stderr.write(errors.map((e) => `error: ${e}\n`).join(''));
      process.exitCode = 1;
      return;
    }
    const plan = await withClient(o, (client) =>
      planChange(client, objects, { deleting: !!o.delete, options: o, berthNamespace: berthNamespace() }),
    );
    await print(o.output, plan, () => planText(plan).join('\n'));
    process.exitCode = planExitCode(plan);
  });
}
