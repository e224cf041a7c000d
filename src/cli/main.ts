import { basename } from 'node:path';
import { CommanderError, type Command } from 'commander';
import { berthProgram } from './program.ts';
import { describeError, EXIT, usageExitCode } from './errors.ts';

// The command about to run (`berth help X` runs X's help): only its module is loaded.
const [first, second] = process.argv.slice(2);
const program = await berthProgram((first === 'help' ? second : first) ?? null);
// Run by kubectl as a plugin (kubectl-berth on PATH): it is `kubectl berth` to the user.
if (basename(process.argv[1] ?? '').startsWith('kubectl-')) program.name('kubectl berth');
const override = (c: Command): void => {
  c.exitOverride();
  c.commands.forEach(override);
};
override(program);
try {
  await program.parseAsync(process.argv);
} catch (e) {
  if (e instanceof CommanderError)
    // Help and version asked for exit 0; a usage error (commander said what) exits 2, or 1 for plan.
    process.exitCode = e.exitCode === 0 ? EXIT.ok : usageExitCode(first);
  else {
    const { message, exitCode } = describeError(e);
    process.stderr.write(`berth: ${message}\n`);
    process.exitCode = exitCode;
  }
}
