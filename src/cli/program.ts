import { Command } from 'commander';
import { version } from './version.ts';

// Each command's module is loaded only when it runs (all of them for help): `berth run` lives for
// weeks, and the sandbox's, explain's and uninstall's code would stay resident all that time.
const builtin: Record<string, () => Promise<Command[]>> = {
  run: async () => [(await import('./run.ts')).runCommand()],
  install: async () => [(await import('./install.ts')).installCommand()],
  manifests: async () => [(await import('./install.ts')).manifestsCommand()],
  uninstall: async () => [(await import('./uninstall.ts')).uninstallCommand()],
  explain: async () => [(await import('./explain.ts')).explainCommand()],
  plan: async () => [(await import('./plan.ts')).planCommand()],
  ui: async () => [(await import('./ui.ts')).uiCommand()],
};
const capabilityCommands = async () =>
  (await import('../capability.ts')).capabilityCommands((await import('../capabilities.ts')).capabilities);
const sandbox = async () => [(await import('./sandbox.ts')).sandboxCommand()];

/** The `berth` program; given the command about to run, only that command's module is loaded.
 * The docs' test and reference generator build it whole, as `berth --help` does. */
export async function berthProgram(only?: string): Promise<Command> {
  const program = new Command()
    .name('berth')
    .description('A placement control plane for Kubernetes.')
    .version(version())
    .showHelpAfterError();
  const load = only !== undefined ? builtin[only] : undefined;
  const commands = load
    ? await load()
    : [
        ...(await Promise.all(Object.values(builtin).map((l) => l()))).flat(),
        ...(await capabilityCommands()),
        ...(await sandbox()),
      ];
  for (const command of commands) program.addCommand(command);
  return program;
}
