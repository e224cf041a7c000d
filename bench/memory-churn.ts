// Resident memory of Berth against a tenant who churns its own pod's annotation (issue 59):
// `npm run bench:memory-churn -- --rewrites 300 --kb 200`. Berth runs as its image does (compiled,
// with the Dockerfile's Node flags and environment, the capabilities a cluster runs by default)
// in a sandbox of its own with a pod in a namespace of its own. Its RSS is taken once it settled
// (the median of 5 samples a second apart, after 5 s of quiet): the baseline; then the pod's
// annotation is rewritten `--rewrites` times with distinct values of `--kb` KB each (RSS sampled
// after each: the peak), the pod deleted, and after `--settle` seconds the RSS settled again: the
// after. The target: after within 10% of the baseline (ratio ≤ 1.1).
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { installCrds } from '../src/cli/install.ts';
import { Resources } from '../src/runtime/api/meta.ts';
import { startBerth } from '../test/helpers/berth.ts';
import { benchSandbox, report, round, waitForValue } from './lib.ts';

const { values } = parseArgs({
  options: {
    rewrites: { type: 'string', default: '300' },
    kb: { type: 'string', default: '200' },
    settle: { type: 'string', default: '20' },
  },
});
const rewrites = Number(values.rewrites);
const kb = Number(values.kb);
const settleMs = Number(values.settle) * 1000;
if (!(rewrites > 0) || !(kb > 0 && kb <= 250) || !(settleMs >= 0))
  throw new Error('--rewrites > 0, --kb in (0, 250] (one object holds 256 KB), --settle ≥ 0 seconds');

const NS = 'bench-tenant';
const POD = 'churn';
const sb = await benchSandbox('bench-memory-churn', [{ prefix: 'n', count: 3 }]);
const client = sb.client();
await installCrds(client);
await client.create(Resources.namespaces, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS } });

const rssOf = (pid: number) =>
  Number(readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+)/)![1]) / 1024;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** The median of 5 samples a second apart, after 5 s of quiet. */
async function settledRss(pid: number): Promise<number> {
  await sleep(5000);
  const samples: number[] = [];
  for (let i = 0; i < 5; i++) {
    samples.push(rssOf(pid));
    await sleep(1000);
  }
  return samples.sort((a, b) => a - b)[2]!;
}

const berth = await startBerth(sb, [], { compiled: true });
let result: object | undefined;
try {
  const cachedPods = () => berth.metric('berth_informer_objects', (l) => l.includes('resource="pods"'));
  const before = await cachedPods();
  await client.create(Resources.pods, {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name: POD, namespace: NS },
    spec: { nodeSelector: { 'bench.berth.dev/none': 'true' }, containers: [{ name: 'c', image: 'pause:1' }] },
  });
  // Berth's first load streams in (WatchList), so `before` may be read while it still fills: the pod
  // is cached once the count rises, and seen deleted once it falls below the count it had then.
  const withPod = await waitForValue('Berth caching the pod', async () => {
    const n = await cachedPods();
    return n > before ? n : undefined;
  });
  const baseline = await settledRss(berth.pid);
  const internedBefore = await berth.metric('berth_interned_characters');
  console.log(`baseline: ${round(baseline)} MB`);
  let peak = baseline;
  const t0 = performance.now();
  for (let i = 0; i < rewrites; i++) {
    const value = randomBytes((kb * 1024) / 2).toString('hex');
    await client.patch(
      Resources.pods,
      POD,
      { metadata: { annotations: { 'bench.berth.dev/blob': value } } },
      { namespace: NS, type: 'merge' },
    );
    peak = Math.max(peak, rssOf(berth.pid));
  }
  console.log(
    `${rewrites} rewrites of ${kb} KB in ${round((performance.now() - t0) / 1000)} s; peak ${round(peak)} MB`,
  );
  await client.delete(Resources.pods, POD, NS, { gracePeriodSeconds: 0 });
  await waitForValue('Berth seeing the pod deleted', async () =>
    (await cachedPods()) < withPod ? true : undefined,
  );
  await sleep(settleMs);
  const after = await settledRss(berth.pid);
  const internedAfter = await berth.metric('berth_interned_characters');
  console.log(
    `after ${values.settle} s: ${round(after)} MB (interned characters ${internedBefore} → ${internedAfter})`,
  );
  result = {
    rewrites,
    kb,
    baselineMB: round(baseline),
    peakMB: round(peak),
    afterMB: round(after),
    ratio: round(after / baseline, 3),
    internedBefore,
    internedAfter,
  };
} finally {
  await berth.stop();
  client.close();
  await sb.destroy();
}
report(result);
