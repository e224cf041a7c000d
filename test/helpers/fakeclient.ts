// A stand-in KubeClient for unit tests of writers: it records every server-side apply body and
// answers with a fresh resourceVersion, as the apiserver would.
import type { KubeClient } from '../../src/runtime/client/client.ts';
import type { KubeObject } from '../../src/runtime/api/meta.ts';

export function applyRecorder(): { client: KubeClient; applied: KubeObject[] } {
  const applied: KubeObject[] = [];
  const client = {
    apply: (_ref: unknown, body: KubeObject) => {
      applied.push(body);
      return Promise.resolve({ metadata: { resourceVersion: String(applied.length + 1) } });
    },
  } as unknown as KubeClient;
  return { client, applied };
}
