// The apiserver's Warning headers: parsed as client-go does, each text logged once, all counted.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { restMetrics } from '../../../src/runtime/observability/metrics.ts';
import { parseWarnings, WarningLog } from '../../../src/runtime/client/warnings.ts';
import { setLogLevel } from '../../../src/runtime/observability/log.ts';

setLogLevel('silent');

test('the 299 warnings of each header value are read, escapes undone, several in one value', () => {
  assert.deepEqual(
    parseWarnings([
      '299 - "policy/v1beta1 PodDisruptionBudget is deprecated in v1.21+, unavailable in v1.25+"',
      '299 - "unknown field \\"spec.foo\\"", 299 - "second, with a comma" "Sat, 28 Nov 2026 06:00:00 GMT"',
      '199 agent "a miscellaneous warning, not the apiserver\'s kind"',
      'not a warning at all',
    ]),
    [
      'policy/v1beta1 PodDisruptionBudget is deprecated in v1.21+, unavailable in v1.25+',
      'unknown field "spec.foo"',
      'second, with a comma',
    ],
  );
});

async function counted(host: string): Promise<number> {
  const m = await restMetrics.warnings.get();
  return m.values.find((v) => v.labels.host === host)?.value ?? 0;
}

test('each text is logged the first time only, and every warning is counted', async () => {
  const log = new WarningLog();
  const a = '299 - "apps/v1beta1 is gone"';
  const b = '299 - "another"';
  assert.deepEqual(log.note('h1', [a]), ['apps/v1beta1 is gone']);
  assert.deepEqual(log.note('h1', [a, b]), ['another']);
  assert.deepEqual(log.note('h2', [a]), [], 'a text is news once, whichever apiserver sent it');
  assert.equal(await counted('h1'), 3);
  assert.equal(await counted('h2'), 1);
});

test('an apiserver that sends endless new texts stops being logged, still counted, and long texts are cut', async () => {
  const log = new WarningLog();
  for (let i = 0; i < 1000; i++) log.note('flood', [`299 - "text ${i}"`]);
  assert.deepEqual(log.note('flood', ['299 - "one more"']), []);
  assert.equal(await counted('flood'), 1001);
  const long = new WarningLog().note('long', [`299 - "${'x'.repeat(2000)}"`]);
  assert.equal(long[0]!.length, 513);
});
