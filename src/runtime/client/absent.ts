// Reading a cluster where some of Berth's CRDs are not installed (or deleted already).
import { crdName, type KubeObject, type ResourceRef } from '../api/meta.ts';
import { isNotFound, type KubeClient, type KubeList } from './client.ts';

type ListOptions = Parameters<KubeClient['list']>[1];

/**
 * The objects of a kind, or undefined where the apiserver does not serve it (404: its CRD not
 * installed, or deleted already).
 */
export async function servedItems(
  client: KubeClient,
  ref: ResourceRef,
  opts?: ListOptions,
): Promise<KubeObject[] | undefined> {
  try {
    return (await client.list(ref, opts)).items;
  } catch (err) {
    if (isNotFound(err)) return undefined;
    throw err;
  }
}

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
    // A built-in kind not served is an error, not a missing CRD.
    if (!ref.group.includes('.')) return client.list(ref, opts);
    const items = await servedItems(client, ref, opts);
    if (!items) missing.add(crdName(ref));
    return { apiVersion: 'v1', kind: 'List', metadata: {}, items: items ?? [] };
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
  `Not installed here: ${[...missing].sort().join(', ')} (read as no objects; install Berth's CRDs with berth install, or the Helm chart)`;
