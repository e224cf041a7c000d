// The docs stay true: every `berth` command in their code blocks parses against the real program
// (its commands and flags exist), the generated reference is current, and every relative link
// leads to a file. The demo's commands are run by CI itself (the README's first commands).
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { describe, test } from 'node:test';
import { type Command, CommanderError } from 'commander';
import { REFERENCE_FILES } from '../../scripts/docs-reference.ts';
import { berthProgram } from '../../src/cli/program.ts';
import { packageRoot } from '../../src/sandbox/paths.ts';

const root = packageRoot();

function markdownFiles(dir: string): string[] {
  return readdirSync(join(root, dir), { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? markdownFiles(join(dir, e.name)) : e.name.endsWith('.md') ? [join(dir, e.name)] : [],
  );
}

const DOCS = ['README.md', 'CHANGELOG.md', ...markdownFiles('docs')];
const read = (file: string): string => readFileSync(join(root, file), 'utf8');

/** The code blocks of a Markdown file, but `text` ones (help output, logs): their lines, continuations joined. */
function codeBlockLines(markdown: string): string[] {
  const lines: string[] = [];
  let fence: string | undefined;
  for (const line of markdown.split('\n')) {
    const open = /^\s*(```+)\s*(\S*)/.exec(line);
    if (fence === undefined) {
      if (open) fence = open[2] === 'text' ? 'skip' : open[1];
      continue;
    }
    if (open && line.trim() === (fence === 'skip' ? line.trim().replace(/[^`]/g, '') : fence)) {
      fence = undefined;
      continue;
    }
    if (fence === 'skip') continue;
    const last = lines.at(-1);
    if (last?.endsWith('\\')) lines[lines.length - 1] = `${last.slice(0, -1)} ${line.trim()}`;
    else lines.push(line.trim());
  }
  return lines;
}

/** A command line's words, as a POSIX shell splits them (quotes, escapes), up to an unquoted `#`. */
function shellWords(line: string): string[] {
  const words: string[] = [];
  let word: string | undefined;
  for (let i = 0; i < line.length; i++) {
    const c = line[i]!;
    if (c === "'" || c === '"') {
      const end = line.indexOf(c, i + 1);
      assert.ok(end > i, `unbalanced quote in ${line}`);
      word = (word ?? '') + line.slice(i + 1, end);
      i = end;
    } else if (c === '\\' && i + 1 < line.length) word = (word ?? '') + line[++i];
    else if (/\s/.test(c)) {
      if (word !== undefined) words.push(word);
      word = undefined;
    } else if (c === '#' && word === undefined) break;
    else word = (word ?? '') + c;
  }
  if (word !== undefined) words.push(word);
  return words;
}

/** Each `npx berth …` or `berth …` command in a file's code blocks: the arguments after `berth`. */
function berthCommands(markdown: string): string[][] {
  return codeBlockLines(markdown)
    .map(shellWords)
    .map((words) => (words[0] === 'npx' ? words.slice(1) : words))
    .filter((words) => words[0] === 'berth')
    .map((words) => words.slice(1));
}

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

  test('the parse check refuses an unknown command, flag or option value', async () => {
    await assert.rejects(parses(['sandbox', 'upp']));
    await assert.rejects(parses(['run', '--no-such-flag']));
    await assert.rejects(parses(['explain']), /help|command/i);
    await parses(['run', '--help']);
  });

  test('commands are found in code blocks only, continuations joined and comments dropped', () => {
    const md = [
      'Prose: `npx berth nothing`.',
      '```sh',
      'npx berth sandbox up --nodes 4 \\',
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
