// How clusters come and go while Berth runs (multicluster-runtime's Provider and Aware): a provider
// engages the clusters it finds (from Secrets, from a list) on a ClusterSet, the manager, and
// disengages them when they go; whatever is Aware learns of each and starts or stops its work there.
import type { Cluster } from './cluster.ts';

/** What a provider engages clusters on: the manager. */
export interface ClusterSet {
  /** Adds a running cluster; throws if one of that name is engaged already. */
  engage(cluster: Cluster): void;
  /** Stops the cluster's informers and every watch on it; its keys leave the queues. */
  disengage(name: string): Promise<void>;
}

export interface Provider {
  name: string;
  /** Engages and disengages clusters on `clusters` as they come and go, until `signal` aborts. */
  run(clusters: ClusterSet, signal: AbortSignal): Promise<void>;
  /**
   * Whether a cluster of that name is one of this provider's, engaged or not (a cell that does not
   * answer still is); false only once the provider is sure it is not (what it reads has listed),
   * undefined while it cannot tell.
   */
  knows?(cluster: string): boolean | undefined;
  /**
   * Whether one of this provider's clusters serves a namespace (a cell: its Cell lists it). What a
   * cluster's objects in a namespace it does not serve say is not counted for that namespace.
   */
  serves?(cluster: string, namespace: string): boolean;
}

/** A component that works on every engaged cluster (a controller's watches). */
export interface Aware {
  /**
   * Called once for each cluster, the local one included, before its informers start (so those it
   * asks for now count for /readyz); `signal` aborts when the cluster is disengaged.
   */
  engage(cluster: Cluster, signal: AbortSignal): void;
}
