// Maps a kind to its resource through API discovery, for controllers that act on objects of kinds
// they learn at run time (the owners that agent placement puts finalizers on), and asks the
// apiserver what this client may do with them.
import { isNotFound, type KubeClient, type RequestOptions } from './client.ts';
import type { ResourceRef } from '../api/meta.ts';
import type { PolicyRule } from '../api/rbac.ts';

interface APIResourceList {
  resources: { name: string; kind: string; namespaced: boolean }[];
}

/** The API serves no such kind: its group or version is unknown, or has no resource of that kind. */
export class UnknownKindError extends Error {}

export class RestMapper {
  private readonly client: KubeClient;
  private readonly cache = new Map<string, Promise<ResourceRef>>();

  constructor(client: KubeClient) {
    this.client = client;
  }

  /**
   * The resource of `kind` in `apiVersion` ("apps/v1", "v1"); cached, and retried after a failure.
   * Rejects with UnknownKindError when the API does not serve it.
   */
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

  /** Drops what is cached about `kind` in every version of `group` (its CRD changed or went). */
  forget(group: string, kind: string): void {
    for (const key of this.cache.keys()) {
      const parts = key.split('/');
      const keyGroup = parts.length === 3 ? parts[0] : '';
      if (keyGroup === group && parts.at(-1) === kind) this.cache.delete(key);
    }
  }

  private async lookup(apiVersion: string, kind: string): Promise<ResourceRef> {
    const [group, version] = apiVersion.includes('/') ? apiVersion.split('/') : ['', apiVersion];
    const list = await this.client
      .request<APIResourceList>('GET', group ? `/apis/${group}/${version}` : `/api/${version}`)
      .catch((e: unknown) => {
        if (isNotFound(e)) throw new UnknownKindError(`the API serves no ${apiVersion}`);
        throw e;
      });
    const r = list.resources.find((x) => x.kind === kind && !x.name.includes('/'));
    if (!r) throw new UnknownKindError(`the API has no kind ${kind} in ${apiVersion}`);
    return { group: group!, version: version!, resource: r.name, kind, namespaced: r.namespaced };
  }
}

/**
 * The verbs on `ref` (in `namespace`, or in every one; on the object `name`, or on every one) that
 * this client's user may not use (SelfSubjectAccessReview).
 */
export async function deniedVerbs(
  client: KubeClient,
  ref: Pick<ResourceRef, 'group' | 'resource'>,
  verbs: string[],
  namespace?: string,
  opts: RequestOptions = {},
  name?: string,
): Promise<string[]> {
  const answers = await Promise.all(
    verbs.map((verb) =>
      client.request<{ status?: { allowed?: boolean } }>(
        'POST',
        '/apis/authorization.k8s.io/v1/selfsubjectaccessreviews',
        {
          ...opts,
          body: {
            apiVersion: 'authorization.k8s.io/v1',
            kind: 'SelfSubjectAccessReview',
            spec: {
              resourceAttributes: {
                group: ref.group,
                resource: ref.resource,
                verb,
                ...(namespace ? { namespace } : {}),
                ...(name ? { name } : {}),
              },
            },
          },
        },
      ),
    ),
  );
  return verbs.filter((_, i) => !answers[i]!.status?.allowed);
}

/**
 * What this client's user may do in `namespace` (SelfSubjectRulesReview): the rules bound there and
 * cluster-wide; `incomplete` when an authorizer could not list its rules (a webhook authorizer).
 */
export async function selfRules(
  client: KubeClient,
  namespace: string,
  opts: RequestOptions = {},
): Promise<{ rules: PolicyRule[]; incomplete: boolean }> {
  const review = await client.request<{
    status?: { resourceRules?: PolicyRule[]; nonResourceRules?: PolicyRule[]; incomplete?: boolean };
  }>('POST', '/apis/authorization.k8s.io/v1/selfsubjectrulesreviews', {
    ...opts,
    body: {
      apiVersion: 'authorization.k8s.io/v1',
      kind: 'SelfSubjectRulesReview',
      spec: { namespace },
    },
  });
  const s = review.status ?? {};
  return { rules: [...(s.resourceRules ?? []), ...(s.nonResourceRules ?? [])], incomplete: !!s.incomplete };
}
