import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { test } from 'node:test';

/** What a child process logs with the format given (its stdout). */
const logged = (format: 'json' | 'text') =>
  spawnSync(
    process.execPath,
    [
      '--input-type=module',
      '-e',
      `const { rootLogger, setLogFormat } = await import(${JSON.stringify(new URL('../../../src/runtime/observability/log.ts', import.meta.url).href)});
       setLogFormat('${format}');
       rootLogger.child({ controller: 'c' }).warn({ node: 'n' }, 'held back');`,
    ],
    { encoding: 'utf8', env: { ...process.env, BERTH_LOG_LEVEL: 'info' } },
  ).stdout;

test('json logs name the level; text logs are one readable line an entry', () => {
  const line = JSON.parse(logged('json')) as Record<string, unknown>;
  assert.equal(line['level'], 'warn');
  assert.equal(line['msg'], 'held back');
  assert.equal(line['controller'], 'c');
  const text = logged('text');
  assert.equal(text.trimEnd().split('\n').length, 1, text);
  assert.match(text, /WARN: held back .*"controller":"c".*"node":"n"/);
});
