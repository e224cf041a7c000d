import { basename } from 'node:path';
import { isSea } from 'node:sea';
import { CommanderError, type Command } from 'commander';
import { berthProgram } from './program.ts';
import { describeError, EXIT, usageExitCode } from './errors.ts';

// A function, not top-level await: the single-file build (scripts/cli-binary.ts) bundles this module
// as CommonJS, which Node's single executable applications run.
async function main(): Promise<void> {
  // The command about to run (`berth help X` runs X's help): only its module is loaded.
  const [first, second] = process.argv.slice(2);
  const program = await berthProgram((first === 'help' ? second : first) ?? null);
  // Run by kubectl as a plugin (kubectl-berth on PATH): it is `kubectl berth` to the user.
  // A single executable's argv[1] is its resolved path; argv0 is the name it was run by (a symlink).
  const self = isSea() ? process.argv0 : process.argv[1];
  if (basename(self ?? '').startsWith('kubectl-')) program.name('kubectl berth');
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
}

void main();
