import { Command } from 'commander';
import { agentsCommand } from './agents.ts';
import { explainCommand } from './explain.ts';
import { gatesCommand } from './gates.ts';
import { installCommand, manifestsCommand } from './install.ts';
import { rulesCommand } from './rules.ts';
import { runCommand } from './run.ts';
import { sandboxCommand } from './sandbox.ts';
import { version } from './version.ts';

const program = new Command()
  .name('berth')
  .description('A placement control plane for Kubernetes.')
  .version(version())
  .showHelpAfterError();

program.addCommand(runCommand());
program.addCommand(installCommand());
program.addCommand(manifestsCommand());
program.addCommand(explainCommand());
program.addCommand(rulesCommand());
program.addCommand(gatesCommand());
program.addCommand(agentsCommand());
program.addCommand(sandboxCommand());

try {
  await program.parseAsync(process.argv);
} catch (e) {
  process.stderr.write(`berth: ${e instanceof Error ? e.message : String(e)}\n`);
  process.exitCode = 1;
}
