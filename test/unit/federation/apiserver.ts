// A stand-in apiserver for the federation controllers' tests: lists answered, watches fed by the
// test, writes recorded (shared by the deletion and mirror tests).
import assert from 'node:assert/strict';
import { EventEmitter, on } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import type { KubeObject } from '../../../src/runtime/api/meta.ts';
import { ApiError, type KubeClient } from '../../../src/runtime/client/client.ts';

type WatchEvent = { type: 'ADDED' | 'MODIFIED' | 'DELETED'; object: KubeObject };

/**
 * An apiserver holding `objects` by resource: lists answer once `listed` resolves, watches yield
 * what `push` sends, and every server-side apply, delete and POST (an Event's create) is recorded.
 */
export function apiserver(
  objects: Record<string, KubeObject[]>,
  listed: Promise<void> = Promise.resolve(),
  /** What a GET finds, by resource, when the lists are behind; the listed objects otherwise. */
  live: Record<string, KubeObject[]> = objects,
) {
  const feed = new EventEmitter();
  const watching = new Set<string>();
  const applies: KubeObject[] = [];
  const deletes: string[] = [];
  const gets: string[] = [];
  const posts: KubeObject[] = [];
  const resourceOf = (path: string) => path.split('/').at(-1)!;
  const client = {
    request: async (method: string, path: string, opts: { signal?: AbortSignal; body?: unknown } = {}) => {
      if (method === 'POST') posts.push(opts.body as KubeObject);
      if (method !== 'GET') return {};
      // A cluster stopped while its list waits stops waiting, as a socket would.
      await Promise.race([listed, abortion(opts.signal)]);
      return {
        kind: 'List',
        apiVersion: 'berth.dev/v1alpha1',
        metadata: { resourceVersion: '1' },
        items: structuredClone(objects[resourceOf(path)] ?? []),
      };
    },
    async *stream(path: string, opts: { signal?: AbortSignal; query?: Record<string, unknown> }) {
      // An apiserver without WatchList: the informers list (and wait for `listed`).
      if (opts.query?.['sendInitialEvents']) throw new ApiError(422, 'Invalid', 'no WatchList', {});
      const resource = resourceOf(path);
      const events = on(feed, resource, opts.signal ? { signal: opts.signal } : {});
      watching.add(resource);
      try {
        for await (const [ev] of events) yield ev as WatchEvent;
      } catch (e) {
        if (!opts.signal?.aborted) throw e;
      }
    },
    get: async (ref: { resource: string }, name: string) => {
      gets.push(`${ref.resource}/${name}`);
      const found = live[ref.resource]?.find((o) => o.metadata?.name === name);
      if (!found) throw new ApiError(404, 'NotFound', `${ref.resource} "${name}" not found`, {});
      return structuredClone(found);
    },
    delete: (_ref: unknown, name: string) => {
      deletes.push(name);
      return Promise.resolve({});
    },
    apply: (_ref: unknown, body: KubeObject) => {
      applies.push(body);
      return Promise.resolve({
        ...body,
        metadata: { ...body.metadata, resourceVersion: String(applies.length + 1) },
      });
    },
    close: () => {},
  } as unknown as KubeClient;
  return {
    client,
    applies,
    deletes,
    gets,
    posts,
    async push(resource: string, ev: WatchEvent) {
      await until(`a watch of ${resource}`, () => watching.has(resource));
      feed.emit(resource, ev);
    },
  };
}

const abortion = (signal: AbortSignal | undefined) =>
  new Promise<never>((_, reject) =>
    signal?.addEventListener('abort', () => reject(signal.reason as Error), { once: true }),
  );

export async function until(what: string, ok: () => boolean, ms = 3000): Promise<void> {
  for (const end = Date.now() + ms; !ok(); await sleep(10))
    if (Date.now() > end) assert.fail(`not within ${ms} ms: ${what}`);
}
