import { Command, Help } from 'commander';
import { berthErrorLine } from './errors.ts';
import { examplesOf } from './examples.ts';
import { SUMMARIES } from '../command/summaries.ts';
import { version } from './version.ts';

/** Each top-level command's module, loaded only when the command runs. */
type Loader = () => Promise<Command[]>;

const capability = (name: string) => async () =>
  (
    await (
      await import('../capability.ts')
    ).capabilityCommands((await import('../capabilities.ts')).capabilities)
  ).filter((c) => c.name() === name);

// Each command's module is loaded only when it runs: `berth run` lives for weeks, and the sandbox's,
// explain's and uninstall's code would stay resident all that time; `berth --help` and `berth
// version` load none, and list the commands from SUMMARIES.
const COMMANDS: Record<keyof typeof SUMMARIES, Loader> = {
  run: async () => [(await import('./run.ts')).runCommand()],
  install: async () => [(await import('./install.ts')).installCommand()],
  manifests: async () => [(await import('./install.ts')).manifestsCommand()],
  uninstall: async () => [(await import('./uninstall.ts')).uninstallCommand()],
  explain: async () => [(await import('./explain.ts')).explainCommand()],
  plan: async () => [(await import('./plan.ts')).planCommand()],
  ui: async () => [(await import('./ui.ts')).uiCommand()],
  rules: async () => [(await import('./plan.ts')).rulesTestCommand()],
  gates: capability('gates'),
  agents: async () => [(await import('./plan.ts')).agentsTestCommand()],
  arch: capability('arch'),
  cells: capability('cells'),
  sandbox: async () => [(await import('./sandbox.ts')).sandboxCommand()],
  completion: async () => [(await import('./completion.ts')).completionCommand(() => berthProgram())],
  version: async () => [(await import('./version.ts')).versionCommand()],
};

/**
 * The `berth` program. Given the command about to run, only that command's module is loaded; given
 * none it knows (`--help`, `--version`, a typo), the command list alone, from SUMMARIES. The docs'
 * test, the reference generator and completion build it whole (`only` undefined).
 */
export async function berthProgram(only?: string | null): Promise<Command> {
  const program = new Command()
    .name('berth')
    .description('A placement control plane for Kubernetes.')
    .version(version())
    .showHelpAfterError();
  const load = only && Object.hasOwn(COMMANDS, only) ? COMMANDS[only as keyof typeof COMMANDS] : undefined;
  if (only === undefined) {
    const all = await Promise.all(Object.values(COMMANDS).map((l) => l()));
    for (const command of all.flat()) program.addCommand(command);
  } else if (load) for (const command of await load()) program.addCommand(command);
  else {
    for (const [name, e] of Object.entries(SUMMARIES)) program.command(name).description(e.description);
    const help = new Help();
    const term = (name: string) => (SUMMARIES as Record<string, { term: string }>)[name]?.term;
    program.configureHelp({ subcommandTerm: (c) => term(c.name()) ?? help.subcommandTerm(c) });
  }
  finish(program);
  return program;
}

/** The words after the program's name that run `command` (`sandbox up`). */
export function pathOf(command: Command): string {
  const names: string[] = [];
  for (let c: Command | null = command; c?.parent; c = c.parent) names.unshift(c.name());
  return names.join(' ');
}

/**
 * What every command shares, given once the commands are loaded (commander copies no setting to a
 * command added whole): error lines that start `berth:`, and an Examples section after the help,
 * under the name the program runs as (`kubectl berth` as a plugin).
 */
function finish(command: Command): void {
  const formatHelp = (cmd: Command, helper: Help): string => {
    let root = cmd;
    while (root.parent) root = root.parent;
    const examples = examplesOf(
      pathOf(cmd),
      cmd.options.some((o) => o.short === '-n'),
    ).map((e) => `  ${e.replace(/^berth /, `${root.name()} `)}`);
    const help = Help.prototype.formatHelp.call(helper, cmd, helper);
    return examples.length ? `${help}\nExamples:\n${examples.join('\n')}\n` : help;
  };
  command
    .configureHelp({ ...command.configureHelp(), formatHelp })
    .configureOutput({ outputError: (line, write) => write(berthErrorLine(line)) });
  command.commands.forEach(finish);
}
