// The labels controller and its evictor in the test's process, against a sandbox, as the eviction
// tests run them: a high cluster cap and a short retry, so that the tests wait on evictions, not
// on the caps.
import { setupEvictController } from '../../src/labels/controllers/evict.ts';
import { setupLabels } from '../../src/labels/setup.ts';
import { PolicyKit } from '../../src/policy/kit.ts';
import { Resources } from '../../src/runtime/api/meta.ts';
import { isNotFound, type KubeClient } from '../../src/runtime/client/client.ts';
import { Manager } from '../../src/runtime/manager/manager.ts';
import type { Sandbox } from '../../src/sandbox/sandbox.ts';
import { berthClient } from './berth.ts';

/** A started manager running the labels controller and the evictor (Berth's namespace: berth-system). */
export async function startEvictor(sandbox: Sandbox): Promise<Manager> {
  const manager = new Manager({
    client: await berthClient(sandbox),
    metricsBindAddress: '0',
    healthBindAddress: '0',
  });
  const labels = setupLabels(new PolicyKit(manager), { workers: 4 });
  setupEvictController(labels, {
    berthNamespace: 'berth-system',
    maxPerMinute: 600,
    workers: 4,
    retryBaseMs: 500,
  });
  await manager.start();
  await manager.waitForCacheSync();
  return manager;
}

/** Whether the pod (by uid) is still there and not terminating. */
export async function untouched(client: KubeClient, ns: string, name: string, uid: string): Promise<boolean> {
  try {
    const p = await client.get(Resources.pods, name, ns);
    return p.metadata?.uid === uid && !p.metadata?.deletionTimestamp;
  } catch (e) {
    if (isNotFound(e)) return false;
    throw e;
  }
}
