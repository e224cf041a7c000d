import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Registry, collectDefaultMetrics } from 'prom-client';
import { addMetricsSource, metricsText, registry } from '../../../src/runtime/observability/metrics.ts';

const names = (text: string) =>
  new Set(
    text.split('\n').flatMap((l) => (l.startsWith('# TYPE ') ? [l.split(' ').slice(2, 4).join(' ')] : [])),
  );

test("the process's metrics are prom-client's default ones, of the same names and types", async () => {
  const theirs = new Registry();
  collectDefaultMetrics({ register: theirs });
  const ours = names(await registry.metrics());
  for (const metric of names(await theirs.metrics())) assert.ok(ours.has(metric), `${metric} missing`);
});

test('process CPU counts up between scrapes, user and system adding to the total', async () => {
  const read = async () => {
    const text = await registry.metrics();
    const value = (name: string) => Number(text.match(new RegExp(`^${name} (\\S+)$`, 'm'))?.[1]);
    return ['user', 'system', ''].map((k) => value(`process_cpu_${k ? k + '_' : ''}seconds_total`));
  };
  const before = await read();
  // 50 ms on a core, however long the machine makes that take.
  const start = process.cpuUsage();
  while (process.cpuUsage(start).user < 50_000);
  const [user, system, total] = await read();
  assert.ok(total! - before[2]! >= 0.04, `${before[2]} then ${total}`);
  assert.ok(Math.abs(user! + system! - total!) < 1e-6);
});

test("/metrics sums another thread's registry into this one's", async () => {
  const counter = { name: 'berth_test_total', help: 'h', type: 'counter', aggregator: 'sum' };
  const remove = addMetricsSource(async () => [{ ...counter, values: [{ value: 2, labels: {} }] }]);
  const again = addMetricsSource(async () => [{ ...counter, values: [{ value: 3, labels: {} }] }]);
  try {
    assert.match(await metricsText(), /^berth_test_total 5$/m);
    assert.match(await metricsText(), /^process_cpu_seconds_total /m);
  } finally {
    remove();
    again();
  }
});
