import { Command, Help } from 'commander';
import { version } from './version.ts';

/** A top-level command: how `berth --help` lists it, and its module, loaded only when it runs. */
interface Entry {
  /** Its term in the command list (`run [options]`) and its description, as its module declares them. */
  term: string;
  description: string;
  load: () => Promise<Command[]>;
}

const capability = (name: string) => async () =>
  (await import('../capability.ts'))
    .capabilityCommands((await import('../capabilities.ts')).capabilities)
    .filter((c) => c.name() === name);

// Each command's module is loaded only when it runs: `berth run` lives for weeks, and the sandbox's,
// explain's and uninstall's code would stay resident all that time; `berth --help` and `berth
// version` load none (a test checks that this list says what the modules do).
const COMMANDS: Record<string, Entry> = {
  run: {
    term: 'run [options]',
    description: 'Run the Berth controller manager',
    load: async () => [(await import('./run.ts')).runCommand()],
  },
  install: {
    term: 'install [options]',
    description:
      'Install (or upgrade) the CRDs with server-side apply, and wait until they are served; create the ' +
      "webhook configurations Berth registers into, and the admission policy that bounds Berth's Pod patches",
    load: async () => [(await import('./install.ts')).installCommand()],
  },
  manifests: {
    term: 'manifests [options]',
    description: 'Print the generated manifests as YAML (CRDs and RBAC come from the same code that runs)',
    load: async () => [(await import('./install.ts')).manifestsCommand()],
  },
  uninstall: {
    term: 'uninstall [options]',
    description:
      "The last step of uninstalling, once Berth's objects are deleted and Berth is removed: takes off what " +
      'Berth still has on nodes and pods, deletes its webhook configurations, certificate Secret, Lease and CRDs',
    load: async () => [(await import('./uninstall.ts')).uninstallCommand()],
  },
  explain: {
    term: 'explain [kind/name]',
    description: 'Explain what Berth does to an object, and why',
    load: async () => [(await import('./explain.ts')).explainCommand()],
  },
  plan: {
    term: 'plan [options]',
    description:
      "Show what applying Berth's objects would do now (nodes labelled, tainted, held; pods evicted, gated; instances granted), " +
      'or with --delete what deleting them would undo. Writes nothing. Exit code 0: no change, 2: changes, 1: error.',
    load: async () => [(await import('./plan.ts')).planCommand()],
  },
  ui: {
    term: 'ui [options]',
    description: "Serve Berth's read-only web page alone: informers and the page, no controller",
    load: async () => [(await import('./ui.ts')).uiCommand()],
  },
  rules: {
    term: 'rules',
    description: 'Derived node label rules',
    load: async () => [(await import('./plan.ts')).rulesTestCommand()],
  },
  gates: {
    term: 'gates',
    description: 'Startup gates: helpers for NodeStartupGates',
    load: capability('gates'),
  },
  agents: {
    term: 'agents',
    description: 'Agent placement: helpers for AgentPlacements',
    load: async () => [(await import('./plan.ts')).agentsTestCommand()],
  },
  arch: {
    term: 'arch',
    description: 'Architecture-aware placement: helpers for ArchPlacements',
    load: capability('arch'),
  },
  cells: {
    term: 'cells',
    description: 'Cells of a management plane: join them, list them',
    load: capability('cells'),
  },
  sandbox: {
    term: 'sandbox',
    description:
      'A local Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler) ' +
      'with kwok nodes, built from Go modules.',
    load: async () => [(await import('./sandbox.ts')).sandboxCommand()],
  },
  completion: {
    term: 'completion <shell>',
    description: 'Print a shell completion script (bash or zsh): source <(berth completion bash)',
    load: async () => [(await import('./completion.ts')).completionCommand(() => berthProgram())],
  },
  version: {
    term: 'version [options]',
    description: "Print Berth's version",
    load: async () => [(await import('./version.ts')).versionCommand()],
  },
};

/**
 * The `berth` program. Given the command about to run, only that command's module is loaded; given
 * none it knows (`--help`, `--version`, a typo), the command list alone, from COMMANDS. The docs'
 * test, the reference generator and completion build it whole (`only` undefined).
 */
export async function berthProgram(only?: string | null): Promise<Command> {
  const program = new Command()
    .name('berth')
    .description('A placement control plane for Kubernetes.')
    .version(version())
    .showHelpAfterError();
  const entry = only ? COMMANDS[only] : undefined;
  if (only === undefined) {
    const all = await Promise.all(Object.values(COMMANDS).map((e) => e.load()));
    for (const command of all.flat()) program.addCommand(command);
  } else if (entry) for (const command of await entry.load()) program.addCommand(command);
  else {
    for (const [name, e] of Object.entries(COMMANDS)) program.command(name).description(e.description);
    const help = new Help();
    program.configureHelp({ subcommandTerm: (c) => COMMANDS[c.name()]?.term ?? help.subcommandTerm(c) });
  }
  return program;
}
