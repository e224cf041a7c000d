// Queue keys that say which cluster they belong to (multicluster-runtime's mcreconcile.Request): a
// key of the local cluster stays as it is, so single-cluster controllers never see a difference; a
// key of another cluster reads `cluster://<name>/<key>`. Kubernetes names cannot contain ':', so no
// key of a local object starts that way.
import { isDnsLabel } from '../api/meta.ts';

/** The name of the cluster a manager is constructed with: the one that holds the leader lease. */
export const localCluster = 'local';

const scheme = 'cluster://';

/** Throws unless `name` is a DNS label (no '/', so a cluster key splits without ambiguity). */
export function checkClusterName(name: string): void {
  if (!isDnsLabel(name))
    throw new Error(`cluster name "${name}" must be a DNS label (lowercase letters, digits and '-')`);
}

/** The queue key of `key` in `cluster`. */
export function clusterKey(cluster: string, key: string): string {
  return cluster === localCluster ? key : `${scheme}${cluster}/${key}`;
}

/** The cluster and the key within it of a queue key made by clusterKey. */
export function splitClusterKey(queueKey: string): { cluster: string; key: string } {
  if (!queueKey.startsWith(scheme)) return { cluster: localCluster, key: queueKey };
  const slash = queueKey.indexOf('/', scheme.length);
  if (slash < 0) throw new Error(`queue key "${queueKey}" names a cluster but no key`);
  return { cluster: queueKey.slice(scheme.length, slash), key: queueKey.slice(slash + 1) };
}
