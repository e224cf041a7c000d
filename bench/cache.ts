// Resident memory per cached pod: 10,000 pods on kwok nodes, cached by an informer with the slim
// pod transform that Berth's controllers share.
//
// Method: two child processes read the same pods the same way (paginated list, slim transform).
// One keeps them in an Informer, the other drops each page. After garbage collection, the
// difference in live heap is what caching costs per pod: memory that stays resident for as long as
// the cache lives. The difference in process RSS is printed too, but at this size it is dominated
// by allocator noise (tens of MB either way between identical runs), so it is not the measure.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Informer } from '../src/runtime/cache/informer.ts';
import { KubeClient } from '../src/runtime/client/client.ts';
import { interning } from '../src/policy/intern.ts';
import { slimPod, type SlimPod } from '../src/policy/slim.ts';
import { Resources, type KubeObject } from '../src/runtime/api/meta.ts';
import { benchSandbox, forEachLimit, report, round } from './lib.ts';

const { values } = parseArgs({
  options: {
    pods: { type: 'string', default: '10000' },
    nodes: { type: 'string', default: '100' },
    probe: { type: 'string' },
    kubeconfig: { type: 'string' },
  },
});
const ns = 'bench';

async function settle(): Promise<NodeJS.MemoryUsage> {
  const gc = (globalThis as { gc?: () => void }).gc!;
  for (let i = 0; i < 3; i++) {
    gc();
    await new Promise((r) => setTimeout(r, 200));
  }
  return process.memoryUsage();
}

if (values.probe) {
  const client = KubeClient.fromFile(values.kubeconfig);
  let kept: Informer<SlimPod> | undefined;
  if (values.probe === 'retain') {
    // As Berth's shared pod informer caches them: interned, each value counted while it is cached.
    const slim = interning('slim-pod', slimPod);
    kept = new Informer<SlimPod>({
      client,
      ref: Resources.pods,
      namespace: ns,
      transform: slim.fn,
      lifecycle: slim.lifecycle,
    });
    kept.start();
    await kept.waitForSync();
  } else {
    let cont: string | undefined;
    do {
      const page = await client.list<KubeObject>(Resources.pods, {
        namespace: ns,
        query: { limit: 500, continue: cont },
      });
      page.items.map(slimPod);
      cont = page.metadata.continue || undefined;
    } while (cont);
  }
  const mem = await settle();
  process.stdout.write(
    JSON.stringify({ rss: mem.rss, heapUsed: mem.heapUsed, pods: kept?.size ?? 0 }) + '\n',
  );
  await kept?.stop();
  client.close();
} else {
  const podCount = Number(values.pods);
  const nodeCount = Number(values.nodes);
  const sb = await benchSandbox('bench-cache', [{ prefix: 'cache', count: nodeCount }]);
  const client = sb.client();
  let result: object | undefined;
  try {
    await client.create(Resources.namespaces, {
      apiVersion: 'v1',
      kind: 'Namespace',
      metadata: { name: ns },
    });
    const owner = await client.create(Resources.configMaps, {
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name: 'owner', namespace: ns },
    });
    const started = performance.now();
    // Pods shaped like a Deployment's: labels, a controller owner reference, bound to a node.
    await forEachLimit([...Array(podCount).keys()], 48, async (i) => {
      await client.create(Resources.pods, {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: {
          name: `web-7d9f8c6b5-${i.toString(36).padStart(5, '0')}`,
          namespace: ns,
          labels: { app: `web-${i % 100}`, 'pod-template-hash': '7d9f8c6b5', tier: 'frontend' },
          ownerReferences: [
            {
              apiVersion: 'v1',
              kind: 'ConfigMap',
              name: 'owner',
              uid: owner.metadata!.uid!,
              controller: true,
            },
          ],
        },
        spec: {
          nodeName: `cache-${i % nodeCount}`,
          containers: [{ name: 'web', image: 'registry.example/web:1.2.3' }],
        },
      });
    });
    console.log(`created ${podCount} pods in ${((performance.now() - started) / 1000).toFixed(1)} s`);
    // Let kwok move them to Running so the cached objects carry a realistic status.
    await new Promise((r) => setTimeout(r, 10_000));
    const probe = (mode: string) => {
      const r = spawnSync(
        process.execPath,
        [
          '--expose-gc',
          // A small young generation, the same in both probes, keeps its size out of the difference.
          '--max-semi-space-size=1',
          fileURLToPath(import.meta.url),
          `--probe=${mode}`,
          `--kubeconfig=${sb.kubeconfigPath}`,
        ],
        {
          encoding: 'utf8',
        },
      );
      if (r.status !== 0) throw new Error(`probe ${mode} failed: ${r.stderr}`);
      return JSON.parse(r.stdout.trim().split('\n').pop()!) as {
        rss: number;
        heapUsed: number;
        pods: number;
      };
    };
    const runs = [1, 2, 3].map(() => ({ discard: probe('discard'), retain: probe('retain') }));
    const per = runs.map((r) => ({
      bytesPerPod: (r.retain.heapUsed - r.discard.heapUsed) / r.retain.pods,
      rssDeltaPerPod: (r.retain.rss - r.discard.rss) / r.retain.pods,
      rssMB: r.retain.rss / 2 ** 20,
    }));
    for (const p of per) {
      console.log(
        `cached ${podCount} pods: ${Math.round(p.bytesPerPod)} B/pod retained in the heap; process RSS ${round(p.rssMB)} MB ` +
          `(RSS difference ${Math.round(p.rssDeltaPerPod)} B/pod, allocator noise included)`,
      );
    }
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[1]!;
    result = {
      pods: runs[0]!.retain.pods,
      rssMB: round(median(per.map((p) => p.rssMB))),
      bytesPerPod: Math.round(median(per.map((p) => p.bytesPerPod))),
    };
  } finally {
    client.close();
    await sb.destroy();
  }
  report(result);
}
