// Maps a kind to its resource through API discovery, for controllers that act on objects of kinds
// they learn at run time (the owners that agent placement puts finalizers on).
import type { KubeClient } from './kube.ts';
import type { ResourceRef } from './types.ts';

interface APIResourceList {
  resources: { name: string; kind: string; namespaced: boolean }[];
}

export class RestMapper {
  private readonly client: KubeClient;
  private readonly cache = new Map<string, Promise<ResourceRef>>();

  constructor(client: KubeClient) {
    this.client = client;
  }

  /** The resource of `kind` in `apiVersion` ("apps/v1", "v1"); cached, and retried after a failure. */
  resolve(apiVersion: string, kind: string): Promise<ResourceRef> {
    const key = `${apiVersion}/${kind}`;
    let found = this.cache.get(key);
    if (!found) {
      found = this.lookup(apiVersion, kind);
      this.cache.set(key, found);
      found.catch(() => this.cache.delete(key));
    }
    return found;
  }

  private async lookup(apiVersion: string, kind: string): Promise<ResourceRef> {
    const [group, version] = apiVersion.includes('/') ? apiVersion.split('/') : ['', apiVersion];
    const list = await this.client.request<APIResourceList>(
      'GET',
      group ? `/apis/${group}/${version}` : `/api/${version}`,
    );
    const r = list.resources.find((x) => x.kind === kind && !x.name.includes('/'));
    if (!r) throw new Error(`the API has no kind ${kind} in ${apiVersion}`);
    return { group: group!, version: version!, resource: r.name, kind, namespaced: r.namespaced };
  }
}
