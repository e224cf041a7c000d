import { Command } from 'commander';
import { capabilities } from '../capabilities.ts';
import { explainCommand } from './explain.ts';
import { installCommand, manifestsCommand } from './install.ts';
import { runCommand } from './run.ts';
import { sandboxCommand } from './sandbox.ts';
import { uiCommand } from './ui.ts';
import { uninstallCommand } from './uninstall.ts';
import { version } from './version.ts';

const program = new Command()
  .name('berth')
  .description('A placement control plane for Kubernetes.')
  .version(version())
  .showHelpAfterError();

program.addCommand(runCommand());
program.addCommand(installCommand());
program.addCommand(manifestsCommand());
program.addCommand(uninstallCommand());
program.addCommand(explainCommand());
program.addCommand(uiCommand());
for (const c of capabilities) for (const command of c.commands?.() ?? []) program.addCommand(command);
program.addCommand(sandboxCommand());

try {
  await program.parseAsync(process.argv);
} catch (e) {
  process.stderr.write(`berth: ${e instanceof Error ? e.message : String(e)}\n`);
  process.exitCode = 1;
}
