// `berth rules test`: a dry run of derived-label rules against the cluster's nodes. Writes nothing.
import { SUMMARIES } from '../cli/summaries.ts';
import { Command } from 'commander';
import { existsSync } from 'node:fs';
import { evictions, previewRules, type Eviction, type NodeChanges } from './explain.ts';
import { holdsBeside } from './files.ts';
import { clusterRules, localRules } from './load.ts';
import { refuseOwned, ruleNameOf } from './decide.ts';
import { filesOrNames, type CommandContext } from '../capability.ts';
import { clientOf, contextOption, kubeconfigOption, outputOption, print } from '../cli/flags.ts';
import type { KeyPattern } from '../policy/nodes/ownership.ts';
import type { Rule } from './types.ts';
import { missingCrdsLine, withoutMissingCrds } from '../runtime/client/absent.ts';
import { Resources } from '../runtime/api/meta.ts';

export function rulesCommand(ctx: CommandContext): Command {
  const cmd = new Command('rules').description(SUMMARIES.rules.description);
  cmd
    .command('test <fileOrRule...>')
    .description(
      'Show which nodes would gain and which would lose which labels, annotations and taints if these rules were applied ' +
        '(YAML files of NodeLabelRules, k8s-auto-labeller rule files or directories, or the name of an existing NodeLabelRule). Writes nothing.',
    )
    .addOption(kubeconfigOption())
    .addOption(contextOption())
    .option(
      '--label-dir <dir>',
      'the rule directory Berth runs with, part of the current rules; labels of its files Berth cannot use stay, as Berth holds them',
    )
    .addOption(ctx.controllersOption())
    .addOption(outputOption())
    .action(async (args: string[], o) => {
      const kube = await clientOf(o);
      // A cluster without some of Berth's CRDs (rule files only) has none of their objects.
      const missing = new Set<string>();
      const client = withoutMissingCrds(kube, missing);
      try {
        const current = await clusterRules(client, o.labelDir);
        const removed = new Set<string>();
        const { items: candidates, errors } = await filesOrNames<Rule>(
          args,
          (file) => localRules(file).then((loaded) => ({ items: loaded.rules, errors: loaded.errors })),
          (name) => {
            // An existing NodeLabelRule: what it does now, compared with the cluster without it.
            const rule = current.rules.find((r) => r.name === ruleNameOf(name));
            if (!rule) return { errors: [`${name}: no such file, and no valid NodeLabelRule of that name`] };
            removed.add(rule.name);
            return {};
          },
        );
        // Two different questions (what would these files change; what do these rules do now): one per run.
        if (removed.size && (candidates.length || args.some((a) => existsSync(a))))
          errors.push('give rule files to preview, or names of current rules to see what they do, not both');
        // One owner per key, as the controller applies it: a rule that would write a key a gate or
        // placement owns is Invalid and applies nothing. A candidate's is an error; a current one's
        // applies nothing before or after.
        const owners = await ctx.keys(client, o.controllers);
        const owned = (keys: KeyPattern[]) => owners.violations('labels', keys);
        for (const [name, why] of refuseOwned(candidates, owned).refused)
          errors.push(`${name} would be Invalid and apply nothing: ${why.join('; ')}`);
        if (errors.length) {
          process.stderr.write(errors.map((e) => `error: ${e}\n`).join(''));
          process.exitCode = 1;
          return;
        }
        const { rules: usable, refused } = refuseOwned(current.rules, owned);
        const replaced = new Set(candidates.map((r) => r.name));
        const before = usable.filter((r) => !replaced.has(r.name) && !removed.has(r.name));
        const baseline = removed.size ? before : usable;
        const after = removed.size ? usable : [...before, ...candidates];
        const nodes = (await client.list(Resources.nodes)).items;
        // Labels of rule files Berth cannot use stay where it set them, before and after; a
        // candidate standing in for such a file decides them instead.
        const held = current.holds ?? [];
        const changes = previewRules(nodes, baseline, after, {
          before: held,
          after: removed.size ? held : holdsBeside(held, candidates),
        });
        // Pods are read only when a NoExecute taint would appear: they are many, and otherwise moot.
        const gainsNoExecute = changes.some((n) =>
          n.changes.some((c) => c.kind === 'taint' && c.after !== undefined && c.key.endsWith(':NoExecute')),
        );
        const pods = gainsNoExecute
          ? (
              await client.list(Resources.pods, {
                query: { fieldSelector: 'status.phase!=Succeeded,status.phase!=Failed' },
              })
            ).items
          : [];
        const evicted = evictions(changes, pods);
        if (o.output === 'text') printPreview(nodes.length, changes, gainsNoExecute ? evicted : undefined);
        else await print(o.output, { nodes: nodes.length, changes, evictions: evicted }, () => '');
        // After the preview, on stderr in either format (the JSON on stdout stays whole).
        const skipped = [
          ...current.errors,
          ...[...refused].map(([name, why]) => `${name}: Invalid, applies nothing: ${why.join('; ')}`),
        ];
        if (skipped.length)
          process.stderr.write(skipped.map((e) => `warning: current rule skipped: ${e}\n`).join(''));
        if (missing.size) process.stderr.write(`warning: ${missingCrdsLine(missing)}\n`);
        if (!(o.controllers as string[]).includes('labels'))
          process.stderr.write(
            'warning: labels is not among --controllers: that Berth applies no label rules, so none of this would happen\n',
          );
      } finally {
        kube.close();
      }
    });
  return cmd;
}

/** The preview as text; `evicted` when a NoExecute taint would appear (the pods were read). */
function printPreview(nodes: number, changes: NodeChanges[], evicted: Eviction[] | undefined): void {
  process.stdout.write(`${changes.length} of ${nodes} nodes would change (dry run: nothing was written)\n`);
  for (const n of changes) {
    process.stdout.write(`${n.node}\n`);
    for (const c of n.changes) {
      const what = `${c.kind} ${c.key}`;
      if (c.before === undefined) process.stdout.write(`  + ${what}=${c.after}  (${c.rule})\n`);
      else if (c.after === undefined) process.stdout.write(`  - ${what}=${c.before}  (${c.rule})\n`);
      else process.stdout.write(`  ~ ${what}: ${c.before} -> ${c.after}  (${c.rule})\n`);
    }
  }
  if (!evicted) return;
  const count = evicted.reduce((n, e) => n + e.pods.length, 0);
  const onNodes = new Set(evicted.filter((e) => e.pods.length).map((e) => e.node)).size;
  process.stdout.write(
    `${count} pods on ${onNodes} nodes would be evicted by NoExecute taints they do not tolerate\n`,
  );
  for (const e of evicted.filter((x) => x.pods.length > 0)) {
    const shown = e.pods.slice(0, 10).join(', ');
    const more = e.pods.length > 10 ? ` (+${e.pods.length - 10} more)` : '';
    process.stdout.write(`  ${e.node} (${e.taint}): ${shown}${more}\n`);
  }
}
