// A gated pod whose image read is given up at Berth's own bound across registries (the registry
// client's Bounded) is retried, and the pod gets a Warning InspectionBounded saying so. Against a
// stand-in apiserver: the informers' lists and watches, and the events Berth posts.
import { ApiError } from '../../../src/runtime/client/client.ts';
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { archCapability } from '../../../src/arch/index.ts';
import { setupArch } from '../../../src/arch/setup.ts';
import type { ArchPod } from '../../../src/arch/decide/pods.ts';
import { POLICY_ANNOTATION, SCHEDULING_GATE, STATE_LABEL } from '../../../src/arch/types.ts';
import { ArchPlacement } from '../../../src/arch/crd.ts';
import { declaringAnnotations } from '../../../src/capability.ts';
import { PolicyKit } from '../../../src/policy/kit.ts';
import { InspectionError, type ImageInspector } from '../../../src/registry/types.ts';
import { resourcePath, type KubeClient } from '../../../src/runtime/client/client.ts';
import { Resources } from '../../../src/runtime/api/meta.ts';
import { rootLogger } from '../../../src/runtime/observability/log.ts';
import { Manager } from '../../../src/runtime/manager/manager.ts';
import { waitFor } from '../../helpers/wait.ts';

// The pods' annotations arch reads (its policy's name among them), as `berth run` keeps them.
declaringAnnotations([archCapability]);

const pod: ArchPod = {
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: {
    name: 'web-1',
    namespace: 'apps',
    uid: 'u1',
    resourceVersion: '1',
    labels: { [STATE_LABEL]: 'Gated' },
    annotations: { [POLICY_ANNOTATION]: 'web' },
  },
  spec: {
    containers: [{ name: 'c', image: 'registry.example/web:1' }],
    schedulingGates: [{ name: SCHEDULING_GATE }],
  },
};

const policy = {
  apiVersion: ArchPlacement.apiVersion,
  kind: ArchPlacement.kind,
  metadata: { name: 'web', uid: 'p1', generation: 1, resourceVersion: '1' },
  spec: {},
};

test("an inspection given up at Berth's bound across registries puts a Warning InspectionBounded on the pod", async () => {
  const events: { reason?: string; note?: string; regarding?: { name?: string } }[] = [];
  const list = (items: unknown[]) => ({
    apiVersion: 'v1',
    kind: 'List',
    metadata: { resourceVersion: '1' },
    items: structuredClone(items),
  });
  const lists = new Map<string, unknown[]>([
    [resourcePath(Resources.pods), [pod]],
    [resourcePath(ArchPlacement.ref), [policy]],
  ]);
  const client = {
    request: (method: string, path: string, opts: { body?: (typeof events)[number] }) => {
      if (method === 'POST' && path.endsWith('/events')) events.push(opts.body!);
      return Promise.resolve(method === 'GET' ? list(lists.get(path) ?? []) : (opts.body ?? {}));
    },
    // Watches that send nothing until they are stopped.
    async *stream(_path: string, opts: { signal?: AbortSignal; query?: Record<string, unknown> }) {
      // An apiserver without WatchList: the informers list.
      if (opts.query?.['sendInitialEvents']) throw new ApiError(422, 'Invalid', 'no WatchList', {});
      await new Promise<void>((r) => opts.signal?.addEventListener('abort', () => r(), { once: true }));
      yield* [];
    },
    close: () => {},
  } as unknown as KubeClient;
  const inspector = {
    cached: () => undefined,
    known: () => ({}),
    onLearn: () => {},
    inspect: (image: string) =>
      Promise.reject(
        new InspectionError('Bounded', image, "given up while registry reads waited for Berth's bound", true),
      ),
  } as unknown as ImageInspector;

  const manager = new Manager({
    client,
    metricsBindAddress: '0',
    healthBindAddress: '0',
    logger: rootLogger.child({}, { level: 'silent' }),
  });
  const arch = setupArch(new PolicyKit(manager), { inspector, berthNamespace: 'berth-system' });
  manager.cluster().start();
  const stop = new AbortController();
  try {
    await manager.cluster().waitForCacheSync();
    await arch.podController.start(stop.signal);
    const warned = await waitFor('the Warning', () => events.find((e) => e.reason === 'InspectionBounded'), {
      timeoutMs: 5000,
    });
    assert.equal(warned.regarding?.name, 'web-1');
    assert.match(warned.note ?? '', /Berth's bound.*; retrying$/);
  } finally {
    stop.abort();
    await arch.podController.stop();
    await manager.cluster().stop();
  }
});
