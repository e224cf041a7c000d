// The build's zod (scripts/bundle-zod.ts, decision 0055): the same exports as the module it bundles,
// whole in itself, one byte a character, without the package's locales, and zod's English messages.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { pathToFileURL } from 'node:url';
import { bundleZod } from '../../../scripts/bundle-zod.ts';
import * as source from '../../../src/runtime/platform/zod.ts';

test("the build's zod is its module bundled alone: same exports, ASCII, no locales, English messages", async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'zod-bundle-'));
  try {
    const file = path.join(dir, 'zod.js');
    await bundleZod(file);
    const text = readFileSync(file, 'utf8');
    assert.ok(
      !/[\u0080-\uffff]/.test(text),
      'a character beyond ASCII: V8 would keep the source at two bytes',
    );
    assert.ok(!/\bfrom\s*["']zod/.test(text), 'the bundle imports the package');
    // The package's sources are some 830 KB, its 64 locales 330 KB of them.
    assert.ok(text.length < 250_000, `${text.length} characters`);
    const bundled = (await import(pathToFileURL(file).href)) as typeof source;
    assert.deepEqual(Object.keys(bundled).sort(), Object.keys(source).sort());
    const r = bundled.object({ a: bundled.string() }).safeParse({ a: 1 });
    assert.equal(r.success, false);
    assert.match(bundled.prettifyError(r.error!), /expected string, received number/);
  } finally {
    rmSync(dir, { recursive: true });
  }
});
