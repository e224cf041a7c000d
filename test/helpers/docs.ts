// The docs' code blocks as commands: what test/unit/docs.test.ts parses against the program and
// test/integration/docs-explain.test.ts runs against the sandbox.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { NAMESPACE } from '../../src/policy/namespace.ts';
import { packageRoot } from '../../src/sandbox/paths.ts';

const root = packageRoot();

function markdownFiles(dir: string): string[] {
  return readdirSync(join(root, dir), { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? markdownFiles(join(dir, e.name)) : e.name.endsWith('.md') ? [join(dir, e.name)] : [],
  );
}

export const DOCS = ['README.md', 'CHANGELOG.md', ...markdownFiles('docs')];
export const read = (file: string): string => readFileSync(join(root, file), 'utf8');

/** The code blocks of a Markdown file, but `text` ones (help output, logs): their lines, continuations joined. */
export function codeBlockLines(markdown: string): string[] {
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
export function shellWords(line: string): string[] {
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

/** Each `berth …` command in a file's code blocks: the arguments after `berth`. */
export function berthCommands(markdown: string): string[][] {
  return codeBlockLines(markdown)
    .map(shellWords)
    .filter((words) => words[0] === 'berth')
    .map((words) => words.slice(1));
}

/** Each `berth explain KIND …` command of the docs, with the file that shows it. */
export const docsExplainCommands = (): { file: string; args: string[] }[] =>
  DOCS.flatMap((file) =>
    berthCommands(read(file))
      .filter((args) => args[0] === 'explain')
      .map((args) => ({ file, args })),
  );

/** The kinds `berth explain` gained for issue 51, and a spec of each that is enough to explain it. */
export const explainFixtures: Record<string, (name: string) => object> = {
  nodelabelrule: () => ({
    match: { anyOf: [{ label: 'nvidia.com/gpu.present', operator: 'Exists' }] },
    labels: { 'accelerators/gpu': 'true' },
  }),
  nodestartupgate: () => ({
    taint: { key: 'example.com/warmup', effect: 'NoSchedule' },
    nodeSelector: { matchLabels: { 'example.com/warmup': 'true' } },
    requirements: { pods: [{ namespace: 'kube-system', selector: { matchLabels: { app: 'warmup' } } }] },
  }),
  agentplacement: (name) => ({
    namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'shop' } },
    podSelector: { matchLabels: { app: name } },
    owner: { controllerRef: true },
    nodeLabel: { key: `example.com/${name}`, value: 'true' },
    claimAnnotationPrefix: `example.com/${name}.claim-`,
  }),
  archplacement: () => ({
    namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'shop' } },
    podSelector: { matchLabels: { app: 'web' } },
    mode: 'NodeAffinity',
  }),
  quota: () => ({ instances: 4 }),
  cell: (name) => ({
    locations: [name.toUpperCase().slice(0, 3).padEnd(3, 'X')],
    kubeconfigSecretRef: { namespace: NAMESPACE, name: `${name}-kubeconfig` },
  }),
  location: () => ({ cityCode: 'DFW', class: 'edge' }),
};
