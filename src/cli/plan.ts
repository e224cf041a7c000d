// `berth plan -f FILE|DIR|-`: what applying (or, with --delete, deleting) Berth's objects would do
// to the cluster as it is now, from src/plan.ts, which the page calls too. Writes nothing. Exits 0
// when nothing would change, 2 when something would (as `terraform plan -detailed-exitcode`), 1 on error.
import { SUMMARIES } from '../command/summaries.ts';
import { Command } from 'commander';
import { existsSync, statSync } from 'node:fs';
import { text } from 'node:stream/consumers';
import { dryRunControllersOption } from '../capability.ts';
import { capabilities } from '../capabilities.ts';
import { planChange, planExitCode, planText, readManifests, reversed } from '../plan.ts';
import { berthNamespace } from '../policy/namespace.ts';
import { isNotFound, type KubeClient } from '../runtime/client/client.ts';
import type { KubeObject, ResourceRef } from '../runtime/api/meta.ts';
import {
  clusterFlags,
  BERTH_NAMESPACE,
  berthNamespaceFlag,
  durationOption,
  listOption,
  outputOption,
  print,
  withClient,
  type ClusterFlags,
  type Format,
} from '../command/flags.ts';

export function planCommand(): Command {
  const cmd = new Command('plan')
    .description(SUMMARIES.plan.description)
    .addOption(listOption('-f, --filename <paths>', 'YAML files, directories of them, or - for stdin'))
    .option('--delete', 'plan deleting these objects instead of applying them')
    .option('--label-dir <dir>', 'the rule directory Berth runs with (k8s-auto-labeller files)')
    .addOption(
      listOption(
        '--rule-file <paths>',
        'k8s-auto-labeller rule files or directories to plan as applied, each in place of the --label-dir file of its name',
      ),
    )
    .option('--label-dir-evict-on-removal <mode>', 'the evictOnRemoval mode Berth runs rule files with')
    .addOption(
      durationOption('--label-dir-evict-after <duration>', 'the delay Berth runs rule files with', 60),
    )
    .option(
      '--arch-registries <file>',
      'the registries configuration Berth runs with, to read images Berth has no record of',
    )
    .option('--arch-registry-ca <file>', 'the CA bundle Berth runs with for registries')
    .option(
      '--arch-cache-only',
      "read images' platforms only from Berth's records on pods, never from a registry",
    )
    .addOption(dryRunControllersOption(capabilities))
    .addOption(outputOption());
  berthNamespaceFlag(cmd, BERTH_NAMESPACE, berthNamespace());
  return clusterFlags(cmd).action(async (o) => {
    const { objects, errors } = await readManifests(o.filename ?? [], () => text(process.stdin));
    if (!o.filename?.length && !o.ruleFile?.length) errors.push('give the objects to plan: -f FILE|DIR|-');
    if (o.delete && o.ruleFile?.length) errors.push('--delete plans deleting objects, not rule files');
    if (errors.length) {
      process.stderr.write(errors.map((e) => `berth: ${e}\n`).join(''));
      process.exitCode = 1;
      return;
    }
    const plan = await withClient(o, (client) =>
      planChange(client, objects, { deleting: !!o.delete, options: o, berthNamespace: o.berthNamespace }),
    );
    await print(o.output, plan, () => planText(plan).join('\n'));
    process.exitCode = planExitCode(plan);
  });
}

/**
 * `berth rules test` and `berth agents test`, kept for the scripts that run them: `berth plan` of
 * the files given (for rules, k8s-auto-labeller rule files and directories as `--rule-file`); for
 * names of existing objects, what they do now, which is the plan of deleting them the other way
 * round. They say on stderr that they are deprecated, and exit as they did: 1 on a refused or
 * unreadable object, else 0 (not 2 on changes).
 */
export const rulesTestCommand = (): Command =>
  legacyCommand('rules', SUMMARIES.rules.description, 'NodeLabelRule', {
    args: '<fileOrRule...>',
    description:
      'Deprecated: use berth plan -f FILE (rule files: --rule-file PATH). What applying these rules would do (YAML files of ' +
      'NodeLabelRules, k8s-auto-labeller rule files or directories), or what existing NodeLabelRules do now (names), ' +
      'as berth plan says it. Writes nothing.',
    option: ['--label-dir <dir>', 'the rule directory Berth runs with, part of the current rules'],
  });

export const agentsTestCommand = (): Command =>
  legacyCommand('agents', SUMMARIES.agents.description, 'AgentPlacement', {
    args: '[fileOrPlacement...]',
    description:
      'Deprecated: use berth plan -f FILE. What applying the AgentPlacements of YAML files would do, or what existing ' +
      'ones do now (names; all of them when none is given), as berth plan says it. Writes nothing.',
    option: ['--berth-namespace <ns>', BERTH_NAMESPACE, berthNamespace()],
  });

/** `berth PARENT test ARGS`, of one kind, with its one option of its own. */
function legacyCommand(
  parent: string,
  about: string,
  kind: string,
  test: { args: string; description: string; option: [string, string, string?] },
): Command {
  const cmd = new Command(parent).description(about);
  const sub = cmd
    .command(`test ${test.args}`)
    .description(test.description)
    .option(...test.option)
    .addOption(dryRunControllersOption(capabilities))
    .addOption(outputOption());
  clusterFlags(sub).action((args: string[], o) => legacyTest(args, o, kind));
  return cmd;
}

/** The resource of one of Berth's kinds. */
const refOf = (kind: string): ResourceRef =>
  capabilities.flatMap((c) => c.kinds).find((r) => r.kind === kind)!;

/** A rule file or directory of k8s-auto-labeller's, not YAML: `berth plan --rule-file`. */
const ruleFile = (path: string) => statSync(path).isDirectory() || !/\.ya?ml$/.test(path);

/** A deprecated `test` command: files planned as applied, or existing objects by name as what they do now. */
async function legacyTest(
  args: string[],
  o: ClusterFlags & Record<string, unknown> & { output: Format; berthNamespace?: string },
  kind: string,
): Promise<void> {
  const paths = args.filter((a) => existsSync(a));
  const names = args.filter((a) => !existsSync(a));
  const rules = kind === 'NodeLabelRule' ? paths.filter(ruleFile) : [];
  const files = paths.filter((p) => !rules.includes(p));
  const plan = [...files.map((f) => `-f ${f}`), ...rules.map((r) => `--rule-file ${r}`)].join(' ');
  process.stderr.write(
    paths.length
      ? `berth: deprecated: use berth plan ${plan}\n`
      : `berth: deprecated: use berth plan --delete -f FILE of the objects, read the other way round (kubectl get ${kind.toLowerCase()} NAME -o yaml | berth plan --delete -f -)\n`,
  );
  const read = await readManifests(files, () => Promise.resolve(''));
  const errors = read.errors;
  if (paths.length && names.length) errors.push('give files to plan, or names of existing objects, not both');
  const result = await withClient(o, async (client) => {
    const existing = paths.length ? [] : await namedObjects(client, refOf(kind), names, errors);
    if (errors.length) return undefined;
    const opts = { options: { ...o, ruleFile: rules }, berthNamespace: o.berthNamespace ?? berthNamespace() };
    if (!paths.length) return reversed(await planChange(client, existing, { ...opts, deleting: true }));
    const objects = read.objects.filter((x) => x.kind === kind);
    return planChange(client, objects, { ...opts, deleting: false });
  });
  if (!result) {
    process.stderr.write(errors.map((e) => `berth: ${e}\n`).join(''));
    process.exitCode = 1;
    return;
  }
  await print(o.output, result, () => planText(result, !paths.length).join('\n'));
  process.exitCode = result.errors.length ? 1 : 0;
}
/** The objects of these names, or every one when none is named; a name not found is an error. */
async function namedObjects(
  client: KubeClient,
  ref: ResourceRef,
  names: string[],
  errors: string[],
): Promise<KubeObject[]> {
  if (!names.length) return (await client.list(ref)).items;
  const out: KubeObject[] = [];
  for (const name of names)
    await client.get(ref, name).then(
      (x) => out.push(x),
      (e: unknown) => {
        if (!isNotFound(e)) throw e;
        errors.push(`${name}: no such file, and no ${ref.kind} of that name`);
      },
    );
  return out;
}
