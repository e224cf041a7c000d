// What tests of node writes observe: every change of every label, annotation and taint of some
// nodes, as the apiserver reports them, whoever made it.
import type { KubeClient } from '../../src/runtime/client/client.ts';
import { Informer } from '../../src/runtime/cache/informer.ts';
import { Resources, type KubeObject } from '../../src/runtime/api/meta.ts';

/** A node's labels, annotations and taints (by key and effect), flattened: "label k" → value. */
export function nodeKeys(n: KubeObject): Map<string, string> {
  const out = new Map<string, string>();
  for (const [k, v] of Object.entries(n.metadata?.labels ?? {})) out.set(`label ${k}`, v);
  for (const [k, v] of Object.entries(n.metadata?.annotations ?? {})) out.set(`annotation ${k}`, v);
  const taints = (n['spec'] as { taints?: { key: string; value?: string; effect: string }[] } | undefined)
    ?.taints;
  for (const t of taints ?? []) out.set(`taint ${t.key}:${t.effect}`, t.value ?? '');
  return out;
}

/**
 * Watches the nodes matching `labelSelector` and records when each of their keys changed:
 * "<node> <kind> <key>" → times (ms). `most(windowMs)`: the most changes of one key within a window.
 */
export async function watchNodeKeys(client: KubeClient, labelSelector: string) {
  const changes = new Map<string, number[]>();
  const watch = new Informer({ client, ref: Resources.nodes, labelSelector, resyncMs: 0 });
  watch.addEventHandler({
    onUpdate: (a, b) => {
      const [before, after] = [nodeKeys(a), nodeKeys(b)];
      for (const k of new Set([...before.keys(), ...after.keys()])) {
        if (before.get(k) === after.get(k)) continue;
        const key = `${b.metadata!.name} ${k}`;
        changes.set(key, [...(changes.get(key) ?? []), Date.now()]);
      }
    },
  });
  watch.start();
  await watch.waitForSync();
  return {
    changes,
    stop: () => watch.stop(),
    most(windowMs: number): { key: string; count: number } {
      let worst = { key: '', count: 0 };
      for (const [key, times] of changes) {
        for (let i = 0, j = 0; i < times.length; i++) {
          while (j < times.length && times[j]! - times[i]! < windowMs) j++;
          if (j - i > worst.count) worst = { key, count: j - i };
        }
      }
      return worst;
    },
  };
}
