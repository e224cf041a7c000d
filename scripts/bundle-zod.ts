// Part of `npm run build`, after tsc: dist/runtime/platform/zod.js is that module bundled with what
// it names of zod, and nothing else of the package (decision 0055). esbuild's default charset writes
// every non-ASCII character as an escape, so V8 keeps the source at one byte a character.
//
//   node scripts/bundle-zod.ts [--out FILE]     (dist/runtime/platform/zod.js unless given)
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { build } from 'esbuild';
import { packageRoot } from '../src/sandbox/paths.ts';

const root = packageRoot();

/** Writes the bundle (and its source map, over the one tsc wrote) to `outfile`. */
export async function bundleZod(
  outfile = join(root, 'dist', 'runtime', 'platform', 'zod.js'),
): Promise<void> {
  await build({
    entryPoints: [join(root, 'src', 'runtime', 'platform', 'zod.ts')],
    outfile,
    bundle: true,
    format: 'esm',
    platform: 'node',
    target: 'node24',
    // Whitespace and syntax only: names stay as zod's sources spell them, for a stack trace.
    minifyWhitespace: true,
    minifySyntax: true,
    sourcemap: true,
    sourcesContent: false,
    logLevel: 'warning',
  });
}

if (import.meta.main) {
  const { values } = parseArgs({ options: { out: { type: 'string' } } });
  await bundleZod(values.out);
}
