// The docs stay true: every `berth` command in their code blocks parses against the real program
// (its commands and flags exist), the generated reference is current, and every relative link
// leads to a file. The demo's commands are run by CI itself (the README's first commands).
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { describe, test } from 'node:test';
import { type Command, CommanderError } from 'commander';
import { REFERENCE_FILES } from '../../scripts/docs-reference.ts';
import { EXIT } from '../../src/cli/errors.ts';
import { berthProgram } from '../../src/cli/program.ts';
import { explainerOf } from '../../src/explain.ts';
import { packageRoot } from '../../src/sandbox/paths.ts';

import {
  berthCommands,
  codeBlockLines,
  docsExplainCommands,
  DOCS,
  explainFixtures,
  read,
} from '../helpers/docs.ts';

const root = packageRoot();
/** The kinds `berth explain` had before issue 51: their docs commands name the demo's objects. */
const EXPLAINED_BEFORE = ['node', 'pod', 'instance', 'workloaddeployment', 'workload'];

/** The program with every leaf command's action a no-op and every exit thrown, its output swallowed. */
async function parsingProgram(): Promise<Command> {
  const program = await berthProgram();
  const prepare = (command: Command): void => {
    command.exitOverride().configureOutput({ writeOut: () => {}, writeErr: () => {} });
    if (command.commands.length === 0) command.action(() => {});
    command.commands.forEach(prepare);
  };
  prepare(program);
  return program;
}

async function parses(args: string[]): Promise<void> {
  try {
    await (await parsingProgram()).parseAsync(args, { from: 'user' });
  } catch (e) {
    if (e instanceof CommanderError && ['commander.helpDisplayed', 'commander.version'].includes(e.code))
      return;
    throw e;
  }
}

describe('docs', () => {
  test('every berth command in the docs parses against the program', async () => {
    const commands = DOCS.flatMap((file) => berthCommands(read(file)).map((args) => ({ file, args })));
    assert.ok(commands.length > 30, `only ${commands.length} commands found`);
    const failures: string[] = [];
    for (const { file, args } of commands) {
      await parses(args).catch((e: unknown) =>
        failures.push(`${file}: berth ${args.join(' ')}: ${e instanceof Error ? e.message : String(e)}`),
      );
    }
    assert.deepEqual(failures, []);
  });

  test('every berth explain of a policy kind, Cell or Location in the docs is run by docs-explain.test.ts', () => {
    const shown = docsExplainCommands();
    assert.ok(shown.length >= 7, `only ${shown.length} explain commands found`);
    const unrun = shown
      .map(({ file, args }) => ({ file, args, kind: explainerOf(args[1] ?? '')?.name }))
      .filter(({ kind }) => !kind || !(EXPLAINED_BEFORE.includes(kind) || kind in explainFixtures))
      .map(({ file, args }) => `${file}: berth ${args.join(' ')}`);
    assert.deepEqual(unrun, [], 'add a fixture of the kind to test/helpers/docs.ts explainFixtures');
  });

  test("every berth example in the commands' help parses against the program", async () => {
    const all = (c: Command): Command[] => [c, ...c.commands.filter((s) => s.name() !== 'help').flatMap(all)];
    const examples = all(await berthProgram()).flatMap((c) =>
      berthCommands(`\`\`\`sh\n${c.helpInformation().split('\nExamples:\n')[1] ?? ''}\`\`\`\n`),
    );
    assert.ok(examples.length > 40, `only ${examples.length} examples found`);
    const failures: string[] = [];
    for (const args of examples)
      await parses(args).catch((e: unknown) =>
        failures.push(`berth ${args.join(' ')}: ${e instanceof Error ? e.message : String(e)}`),
      );
    assert.deepEqual(failures, []);
  });

  test('no doc tells anyone to run npx berth, which outside a checkout runs a package not ours', () => {
    // Prose may warn against it (`npx berth` alone); decisions are records of their time.
    const told = [
      ...DOCS.filter((f) => !f.startsWith('docs/decisions/')),
      'DEVELOPERS.md',
      'deploy/README.md',
    ].filter(
      (file) =>
        codeBlockLines(read(file)).some((l) => /\bnpx berth\b/.test(l)) ||
        /`npx berth [^`]+`/.test(read(file)),
    );
    assert.deepEqual(told, []);
  });

  test('the exit codes page lists every code berth exits with, and no other', () => {
    const listed = [...read('docs/reference/exit-codes.md').matchAll(/^\| (\d+) +\|/gm)].map((m) =>
      Number(m[1]),
    );
    assert.deepEqual(listed, [...new Set(Object.values(EXIT))].sort());
  });

  test('the parse check refuses an unknown command, flag or option value', async () => {
    await assert.rejects(parses(['sandbox', 'upp']));
    await assert.rejects(parses(['run', '--no-such-flag']));
    await assert.rejects(parses(['explain']), /help|command/i);
    await parses(['run', '--help']);
  });

  test('commands are found in code blocks only, continuations joined and comments dropped', () => {
    const md = [
      'Prose: `berth nothing`.',
      '```sh',
      'berth sandbox up --nodes 4 \\',
      "  --node-labels 'pool=edge' # a comment",
      'kubectl get nodes',
      '```',
      '```text',
      'berth help output',
      '```',
    ].join('\n');
    assert.deepEqual(berthCommands(md), [['sandbox', 'up', '--nodes', '4', '--node-labels', 'pool=edge']]);
  });

  test('docs/reference is what npm run docs:reference writes', async () => {
    for (const [file, make] of Object.entries(REFERENCE_FILES))
      assert.equal(read(file), await make(), `${file} is stale: run npm run docs:reference`);
  });

  test('every relative link in the docs leads to a file', () => {
    const broken: string[] = [];
    for (const file of DOCS) {
      const markdown = read(file).replace(/```[\s\S]*?```/g, '');
      for (const [, target] of markdown.matchAll(/\]\(([^)\s]+)\)/g)) {
        const path = target!.split('#')[0]!;
        if (path === '' || /^[a-z]+:/.test(path)) continue;
        const resolved = join(dirname(file), decodeURIComponent(path));
        if (!existsSync(join(root, resolved))) broken.push(`${file}: ${target} (${relative('.', resolved)})`);
      }
    }
    assert.deepEqual(broken, []);
  });
});
