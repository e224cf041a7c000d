// `berth agents test`: a dry run of AgentPlacements against the cluster's pods. Writes nothing.
import { SUMMARIES } from '../cli/summaries.ts';
import { Command } from 'commander';
import { readFile } from 'node:fs/promises';
import { parseAllDocuments } from 'yaml';
import { filesOrNames, type CommandContext } from '../capability.ts';
import { clientOf, contextOption, kubeconfigOption, outputOption, print } from '../cli/flags.ts';
import { checkOwnership, parsePlacements, type ParsedPlacement } from './decide.ts';
import { clusterPlacements, loadView, previewPlacements, type PlacementPreview } from './explain.ts';
import { berthNamespace } from '../policy/namespace.ts';
import type { KubeObject } from '../runtime/api/meta.ts';

/** The AgentPlacements of a YAML file, parsed and validated; documents of other kinds are skipped. */
async function filePlacements(path: string): Promise<{ parsed: ParsedPlacement[]; errors: string[] }> {
  const objs: KubeObject[] = [];
  const errors: string[] = [];
  for (const doc of parseAllDocuments(await readFile(path, 'utf8'))) {
    if (doc.errors.length) errors.push(`${path}: ${doc.errors.map((e) => e.message).join('; ')}`);
    const obj = doc.toJS() as KubeObject | null;
    if (obj?.kind === 'AgentPlacement') objs.push(obj);
  }
  const { parsed, errors: invalid } = parsePlacements(objs);
  return { parsed, errors: [...errors, ...[...invalid.values()].map((e) => `${path}: ${e}`)] };
}

function describe(p: PlacementPreview): string[] {
  if (p.problems.length)
    return [`${p.name}: invalid, Berth applies nothing`, ...p.problems.map((x) => `  ${x}`)];
  const out = [
    `${p.name}: selects ${p.selectedPods} pods; would claim ${p.claims} (owner, node) pairs for ${p.owners} owners ` +
      `from ${p.claimedPods} pods, on ${p.nodes} nodes`,
  ];
  if (p.wouldMutate !== undefined)
    out.push(`  waitForAgent: ${p.wouldMutate} of these pods would get the init container if created now`);
  if (p.acknowledged) out.push(`  acknowledged (acknowledgeAllPods): ${p.acknowledged}`);
  for (const r of p.rejected.slice(0, 5)) out.push(`  no claim for ${r}`);
  if (p.rejected.length > 5) out.push(`  (+${p.rejected.length - 5} more without a claim)`);
  return out;
}

export function agentsCommand(ctx: CommandContext): Command {
  const cmd = new Command('agents').description(SUMMARIES.agents.description);
  cmd
    .command('test [fileOrPlacement...]')
    .description(
      'Show how many pods each AgentPlacement selects and would claim, on how many nodes, and with waitForAgent how many ' +
        'pods would get the init container (YAML files of AgentPlacements, or names of existing ones; all existing ' +
        'ones when none is given). Writes nothing.',
    )
    .addOption(kubeconfigOption())
    .addOption(contextOption())
    .option(
      '--berth-namespace <ns>',
      "Berth's namespace, left alone unless a placement names it",
      berthNamespace(),
    )
    .addOption(outputOption())
    .addOption(ctx.controllersOption())
    .action(async (args: string[], o) => {
      const client = await clientOf(o);
      try {
        const current = await clusterPlacements(client);
        const { items: chosen, errors } = await filesOrNames<ParsedPlacement>(
          args,
          (file) => filePlacements(file).then((loaded) => ({ items: loaded.parsed, errors: loaded.errors })),
          (name) => {
            const p = current.parsed.find((x) => x.name === name);
            if (p) return { items: [p] };
            const why = current.errors.get(name) ?? 'no such file, and no AgentPlacement of that name';
            return { errors: [`${name}: ${why}`] };
          },
        );
        if (args.length === 0) {
          chosen.push(...current.parsed);
          errors.push(...current.errors.values());
        }
        // Refused as the controller refuses them: a key a gate owns (for the Berth of --controllers),
        // a claim prefix overlapping another placement's (the cluster's, or another given here).
        const owners = await ctx.keys(client, o.controllers);
        const names = new Set(chosen.map((p) => p.name));
        const checked = checkOwnership(
          [...current.parsed.filter((p) => !names.has(p.name)), ...chosen],
          (keys) => owners.violations('agents', keys),
        ).filter((p) => names.has(p.name));
        const previews = previewPlacements(await loadView(client), checked, o.berthNamespace);
        if (errors.length || previews.some((p) => p.problems.length)) process.exitCode = 1;
        await print(o.output, { placements: previews, errors }, () =>
          [
            `${previews.length} AgentPlacements (dry run: nothing was written)`,
            ...previews.flatMap(describe),
          ].join('\n'),
        );
        if (o.output === 'text' && errors.length)
          process.stderr.write(errors.map((e) => `error: ${e}\n`).join(''));
      } finally {
        client.close();
      }
    });
  return cmd;
}
