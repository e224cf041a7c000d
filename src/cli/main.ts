import { berthProgram } from './program.ts';

const program = await berthProgram(process.argv[2]);
try {
  await program.parseAsync(process.argv);
} catch (e) {
  process.stderr.write(`berth: ${e instanceof Error ? e.message : String(e)}\n`);
  process.exitCode = 1;
}
