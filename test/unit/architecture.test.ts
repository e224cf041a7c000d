// docs/architecture.md's table of rooms is the rule: every source file belongs to a room it lists,
// and imports only from its own room and the rooms the table says it may import. Reading the table
// from the document keeps the document true; a new folder or a new dependency changes both.
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';

const root = path.resolve(import.meta.dirname, '../..');
const src = path.join(root, 'src');

interface Room {
  name: string;
  mayImport: string[];
}

/** The rooms table of docs/architecture.md: `| \`room\` | holds | may import |`. */
function rooms(): Room[] {
  const doc = readFileSync(path.join(root, 'docs/architecture.md'), 'utf8');
  const table = doc.slice(doc.indexOf('| room'));
  const rows = table.split('\n').filter((l) => /^\| `/.test(l));
  return rows.map((row) => {
    const cells = row.split('|').map((c) => c.trim());
    const names = (s: string) => [...s.matchAll(/`([^`]+)`/g)].map((m) => m[1]!);
    return { name: names(cells[1]!)[0]!, mayImport: names(cells[3]!) };
  });
}

/** The room of a file: the longest room name that is its path below src (a folder or a file). */
function roomOf(file: string, all: Room[]): Room | undefined {
  const rel = path.relative(src, file).split(path.sep).join('/');
  return all
    .filter((r) => rel === r.name || rel.startsWith(`${r.name}/`))
    .sort((a, b) => b.name.length - a.name.length)[0];
}

const allows = (room: Room, target: Room): boolean =>
  target === room ||
  room.mayImport.some(
    (p) => p === target.name || (p.endsWith('/*') && target.name.startsWith(p.slice(0, -1))),
  );

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    return e.isDirectory() ? sources(p) : e.name.endsWith('.ts') ? [p] : [];
  });
}

test('the rooms table parses and names rooms that exist', () => {
  const all = rooms();
  assert.ok(all.length >= 15, `only ${all.length} rooms read from docs/architecture.md`);
  for (const r of all) {
    const files = sources(src).filter((f) => roomOf(f, all) === r);
    assert.ok(files.length > 0, `room ${r.name} has no source file`);
  }
});

test('every source file is in a room and imports only what its room may import', () => {
  const all = rooms();
  const problems: string[] = [];
  for (const file of sources(src)) {
    const room = roomOf(file, all);
    const rel = path.relative(root, file);
    if (!room) {
      problems.push(`${rel} is in no room of docs/architecture.md`);
      continue;
    }
    for (const m of readFileSync(file, 'utf8').matchAll(/(?:from|import)\s*\(?\s*'(\.{1,2}\/[^']+)'/g)) {
      const target = roomOf(path.resolve(path.dirname(file), m[1]!), all);
      if (!target) problems.push(`${rel} imports ${m[1]}, which is in no room`);
      else if (!allows(room, target)) problems.push(`${rel} (${room.name}) imports ${m[1]} (${target.name})`);
    }
  }
  assert.deepEqual(problems, []);
});

test('the check catches an import its room may not make', () => {
  const all = rooms();
  const runtime = all.find((r) => r.name === 'runtime/client')!;
  const labels = all.find((r) => r.name === 'labels')!;
  assert.equal(allows(runtime, labels), false, 'the runtime may not import a capability');
  assert.equal(allows(labels, runtime), true);
});

/** The capabilities' rooms: those src/capabilities.ts lists them from (the contract aside). */
function capabilityRooms(all: Room[]): Room[] {
  const list = path.join(src, 'capabilities.ts');
  const names = [...readFileSync(list, 'utf8').matchAll(/from\s*'(\.\/[^']+)'/g)].map((m) =>
    roomOf(path.resolve(src, m[1]!), all),
  );
  return all.filter((r) => names.includes(r) && r.name !== 'capability.ts');
}

/** The rooms `room`'s files import, read from the files themselves (not from the table). */
function importedRooms(room: Room, all: Room[]): Map<Room, string> {
  const out = new Map<Room, string>();
  for (const file of sources(src).filter((f) => roomOf(f, all) === room))
    for (const m of readFileSync(file, 'utf8').matchAll(/(?:from|import)\s*\(?\s*'(\.{1,2}\/[^']+)'/g)) {
      const target = roomOf(path.resolve(path.dirname(file), m[1]!), all);
      if (target && target !== room) out.set(target, `${path.relative(root, file)} imports ${m[1]}`);
    }
  return out;
}

test('the page reads the capabilities only through their contract (Capability.page), never their internals', () => {
  const all = rooms();
  const ui = all.find((r) => r.name === 'ui')!;
  const caps = capabilityRooms(all);
  assert.ok(caps.length >= 7, `only ${caps.length} capability rooms found`);
  assert.deepEqual(
    caps.filter((c) => allows(ui, c)).map((c) => c.name),
    [],
    'the table lets the page import a capability',
  );
  const reached = importedRooms(ui, all);
  assert.deepEqual(
    caps.filter((c) => reached.has(c)).map((c) => reached.get(c)),
    [],
    'the page imports a capability',
  );
});

test('the `berth` command is the top room: no other room imports it', () => {
  const all = rooms();
  const cli = all.filter((r) => r.name === 'cli' || r.name.startsWith('cli/'));
  const problems: string[] = [];
  for (const room of all.filter((r) => !cli.includes(r))) {
    for (const c of cli) if (allows(room, c)) problems.push(`the table lets ${room.name} import ${c.name}`);
    for (const [target, where] of importedRooms(room, all)) if (cli.includes(target)) problems.push(where);
  }
  assert.deepEqual(problems, []);
});

/**
 * What loading `file` loads: the specifiers of its static imports and re-exports, except those the
 * compiler erases (`import type`, `export type`). An `import { type X }` stays, as an empty import
 * of its module (verbatimModuleSyntax, and Node's type stripping alike), so it loads the module.
 */
function valueImports(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  return [...text.matchAll(/^(?:import|export)\s+(type\s+)?(?:[^'";]*?\s+from\s+)?'([^']+)'/gm)]
    .filter((m) => !m[1])
    .map((m) => m[2]!);
}

/** A package's name from a specifier (`zod/v4` is zod, `@peculiar/x509` stays whole). */
const packageOf = (spec: string): string =>
  spec
    .split('/')
    .slice(0, spec.startsWith('@') ? 2 : 1)
    .join('/');

/**
 * Every module `roots` load, each with the chain that first reaches it (for the message), and the
 * packages as `package:<name>`. Packages are not followed: they are named by what imports them.
 */
function loadedFrom(roots: string[]): Map<string, string[]> {
  const reached = new Map<string, string[]>();
  const todo: [string, string[]][] = roots.map((r) => [r, [path.relative(root, r)]]);
  for (let next = todo.shift(); next; next = todo.shift()) {
    const [file, chain] = next;
    if (reached.has(file)) continue;
    reached.set(file, chain);
    for (const spec of valueImports(file)) {
      if (spec.startsWith('.')) {
        const target = path.resolve(path.dirname(file), spec);
        todo.push([target, [...chain, path.relative(root, target)]]);
      } else if (!spec.startsWith('node:')) {
        const name = `package:${packageOf(spec)}`;
        if (!reached.has(name)) reached.set(name, [...chain, name]);
      }
    }
  }
  return reached;
}

/** The modules the webhook thread imports: those that declare a handler it runs (`threadHandler(import.meta.url, …)`). */
const threadHandlerModules = (): string[] =>
  sources(src).filter((f) => /threadHandler(?:<[^>]*>)?\(\s*import\.meta\.url/.test(readFileSync(f, 'utf8')));

test('the webhook thread loads what serving and the pure admission decisions need: no zod, no yaml, no client, cache or controller', () => {
  const handlers = threadHandlerModules();
  assert.ok(handlers.length >= 3, `only ${handlers.length} thread handler modules found`);
  const loaded = loadedFrom([path.join(src, 'runtime/webhook/thread.ts'), ...handlers]);
  const forbidden = [
    'package:zod',
    'package:yaml',
    'package:@peculiar/',
    ...['client', 'cache', 'controller', 'cluster', 'manager', 'leaderelection', 'events'].map(
      (room) => `src/runtime/${room}/`,
    ),
  ];
  const problems = [...loaded]
    .filter(([m]) =>
      forbidden.some((f) => (m.startsWith('package:') ? m : path.relative(root, m)).startsWith(f)),
    )
    .map(([, chain]) => chain.join(' -> '));
  assert.deepEqual(problems, []);
});

test("the capability list loads no zod: the capabilities' CRDs load with what installs or runs them", () => {
  // Every command reads the list; a Berth running one capability builds no other's schemas
  // (test/unit/capabilities.test.ts: which crd.ts `berth run` loads).
  assert.equal(
    loadedFrom([path.join(src, 'capabilities.ts')])
      .get('package:zod')
      ?.join(' -> '),
    undefined,
  );
});

test("zod's values come through runtime/platform/zod.ts only, the module the build bundles alone", () => {
  // Any other module importing zod would load the whole package beside the bundle (decision 0055).
  const zodModule = path.join(src, 'runtime/platform/zod.ts');
  const importers = sources(src).filter(
    (f) => f !== zodModule && valueImports(f).some((spec) => packageOf(spec) === 'zod'),
  );
  assert.deepEqual(
    importers.map((f) => path.relative(root, f)),
    [],
  );
  assert.ok(valueImports(zodModule).includes('zod'));
});

test('re2js loads with the first pattern compiled: no module imports it', () => {
  // A Berth whose rules match no InRegexp never needs its source and tables (decision 0053).
  assert.equal(loadedFrom(sources(src)).get('package:re2js')?.join(' -> '), undefined);
});

test('the import walk follows what loads a module, and not what the compiler erases', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'walk-'));
  const files: Record<string, string> = {
    'a.ts': [
      "import type { B } from './b.ts';",
      "import { type C } from './c.ts';",
      "import {\n  d,\n  type D,\n} from './d.ts';",
      "export * from './e.ts';",
      "export type { F } from './f.ts';",
      "import { z } from 'zod/v4';",
      "import { readFileSync } from 'node:fs';",
      "// import { g } from './g.ts';",
    ].join('\n'),
    ...Object.fromEntries(['b', 'c', 'd', 'e', 'f', 'g'].map((n) => [`${n}.ts`, `export const ${n} = 1;`])),
  };
  try {
    for (const [name, text] of Object.entries(files)) writeFileSync(path.join(dir, name), text);
    const loaded = [...loadedFrom([path.join(dir, 'a.ts')]).keys()].map((m) =>
      m.startsWith('package:') ? m : path.basename(m),
    );
    assert.deepEqual(loaded.sort(), ['a.ts', 'c.ts', 'd.ts', 'e.ts', 'package:zod']);
  } finally {
    rmSync(dir, { recursive: true });
  }
  const crd = loadedFrom([path.join(src, 'labels/crd.ts')]);
  assert.ok(
    crd.has('package:zod') && crd.has(path.join(src, 'runtime/api/crd.ts')),
    "a capability's CRD loads both",
  );
});
