// Event-to-reconcile latency under a burst of 1,000 object changes, excluding the reconcile's own
// work (the reconciler does nothing). Measured from the moment the informer receives the watch event
// to the moment a worker starts the reconcile; the write-to-reconcile latency, which includes the
// apiserver and the watch, is printed too.
import { parseArgs } from 'node:util';
import { Controller } from '../src/runtime/controller/controller.ts';
import { keyOf } from '../src/runtime/cache/informer.ts';
import { Manager } from '../src/runtime/manager/manager.ts';
import { Resources, type KubeObject } from '../src/runtime/api/meta.ts';
import { benchSandbox, forEachLimit, percentile, round, report } from './lib.ts';

const { values } = parseArgs({
  options: { changes: { type: 'string', default: '1000' }, workers: { type: 'string', default: '2' } },
});
const changes = Number(values.changes);
const SENT = 'bench.berth.dev/sent-at';
type Stamped = KubeObject & { receivedAt?: number };

const sb = await benchSandbox('bench-latency');
let result: object | undefined;
const client = sb.client();
const manager = new Manager({ client, metricsBindAddress: '0', healthBindAddress: '0' });
try {
  const ns = 'bench';
  await client.create(Resources.namespaces, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns } });
  const informer = manager.informer<Stamped>(Resources.configMaps, {
    namespace: ns,
    labelSelector: 'bench=latency',
    // The transform runs as the event arrives: the moment to measure from.
    transform: { name: 'stamp', fn: (o) => Object.assign(o, { receivedAt: performance.now() }) },
  });
  const eventToReconcile: number[] = [];
  const writeToReconcile: number[] = [];
  let done!: () => void;
  const finished = new Promise<void>((r) => (done = r));
  manager.add(
    new Controller({
      name: 'bench-latency',
      workers: Number(values.workers),
      reconciler: {
        async reconcile(key) {
          const now = performance.now();
          const obj = informer.get(key);
          if (!obj?.receivedAt) return;
          eventToReconcile.push(now - obj.receivedAt);
          writeToReconcile.push(performance.timeOrigin + now - Number(obj.metadata?.annotations?.[SENT]));
          if (eventToReconcile.length === changes) done();
        },
      },
    }).watch(informer, keyOf),
  );
  await manager.start();
  await manager.waitForCacheSync();

  const started = performance.now();
  await forEachLimit([...Array(changes).keys()], 32, async (i) => {
    await client.create(Resources.configMaps, {
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: {
        name: `c-${i}`,
        namespace: ns,
        labels: { bench: 'latency' },
        annotations: { [SENT]: String(performance.timeOrigin + performance.now()) },
      },
      data: { i: String(i) },
    });
  });
  const burstSeconds = (performance.now() - started) / 1000;
  await finished;
  const r = {
    changes,
    p50ms: round(percentile(eventToReconcile, 50), 2),
    p99ms: round(percentile(eventToReconcile, 99), 2),
    maxMs: round(Math.max(...eventToReconcile), 2),
    writeToReconcileP50ms: round(percentile(writeToReconcile, 50), 1),
    writeToReconcileP99ms: round(percentile(writeToReconcile, 99), 1),
  };
  console.log(`burst of ${changes} creates sent in ${burstSeconds.toFixed(2)} s`);
  console.log(`event to reconcile: p50 ${r.p50ms} ms, p99 ${r.p99ms} ms, max ${r.maxMs} ms`);
  console.log(
    `write to reconcile (apiserver and watch included): p50 ${r.writeToReconcileP50ms} ms, p99 ${r.writeToReconcileP99ms} ms`,
  );
  result = r;
} finally {
  await manager.stop();
  await sb.destroy();
}
report(result);
