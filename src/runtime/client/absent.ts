// Reading a cluster where some of Berth's CRDs are not installed, for the read-only commands.
import type { KubeObject, ResourceRef } from '../api/meta.ts';
import { isNotFound, type KubeClient, type KubeList } from './client.ts';

type ListOptions = Parameters<KubeClient['list']>[1];

/**
 * A client for read-only commands (explain, dry runs): a list of a custom resource whose CRD is not installed
 * (a rule-file-only cluster, an install without CRDs) answers no objects and is noted in
 * `missing`, as Berth's informers take it, instead of failing the whole command. Each list is
 * read once for the command: several capabilities ask for the same (the gates, for their own lines
 * and for who owns which key), and one answer keeps them consistent.
 */
export function withoutMissingCrds(client: KubeClient, missing: Set<string>): KubeClient {
  const read = new Map<string, Promise<KubeList<KubeObject>>>();
  const listOrNone = async (ref: ResourceRef, opts: ListOptions): Promise<KubeList<KubeObject>> => {
    try {
      return await client.list(ref, opts);
    } catch (err) {
      if (!isNotFound(err) || !ref.group.includes('.')) throw err;
      missing.add(`${ref.resource}.${ref.group}`);
      return { apiVersion: 'v1', kind: 'List', metadata: {}, items: [] };
    }
  };
  const list = (ref: ResourceRef, opts: ListOptions = {}): Promise<KubeList<KubeObject>> => {
    const key = JSON.stringify([ref.group, ref.version, ref.resource, opts]);
    let answer = read.get(key);
    if (!answer) read.set(key, (answer = listOrNone(ref, opts)));
    return answer;
  };
  return new Proxy(client, {
    get: (target, prop) => {
      if (prop === 'list') return list;
      const value: unknown = Reflect.get(target, prop, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

/** The line a read-only command prints for the CRDs `withoutMissingCrds` found missing. */
export const missingCrdsLine = (missing: ReadonlySet<string>): string =>
  `Not installed here: ${[...missing].sort().join(', ')} (read as no objects; install Berth's CRDs with npx berth install, or the Helm chart)`;
