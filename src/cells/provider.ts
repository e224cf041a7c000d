// The cells Provider: engages each Cell whose Secret holds a usable kubeconfig as a cluster of the
// manager (`cell-<name>`), re-engages it when the kubeconfig changes, and disengages it when the
// Cell or its Secret goes. A Cell it cannot engage is remembered with why (SecretMissing,
// BadKubeconfig, InvalidName), for the cell controller to report; nothing else is disturbed.
import { createHash } from 'node:crypto';
import type { KubeObject } from '../runtime/api/meta.ts';
import type { Informer } from '../runtime/cache/informer.ts';
import { KubeClient, type ClientOptions } from '../runtime/client/client.ts';
import { kubeconfigAccess, parseKubeconfig, type Kubeconfig } from '../runtime/client/kubeconfig.ts';
import { Cluster } from '../runtime/cluster/cluster.ts';
import type { ClusterSet, Provider } from '../runtime/cluster/provider.ts';
import { errorText, type Logger } from '../runtime/observability/log.ts';
import { CELL_NAME_RULE, clusterNameOf, kubeconfigProblem, type Failure, type Refusal } from './decide.ts';
import type { CellObject } from './types.ts';

type Secret = KubeObject & { data?: Record<string, string> };

/** How Berth reaches a cell: the cluster it is engaged as, or why it is not. */
export type CellAccess = { cluster: string } | { failure: Failure };

/** A client of the cluster a kubeconfig's current context names; throws, saying why, when Berth cannot use it. */
export function kubeconfigClient(
  text: string,
  userAgent = 'berth-cells',
  onRefused?: ClientOptions['onRefused'],
): KubeClient {
  let kc: Kubeconfig;
  try {
    kc = parseKubeconfig(text);
  } catch (e) {
    throw new Error(`it is not a kubeconfig (${errorText(e).split('\n')[0]})`, { cause: e });
  }
  const problem = kubeconfigProblem(kc);
  if (problem) throw new Error(problem);
  // Requests at once into one cell: as many as the federation controller has workers, each writing
  // one WorkloadDeployment into each of its cells at a time.
  return new KubeClient(kubeconfigAccess(kc), {
    userAgent,
    maxInFlight: 16,
    ...(onRefused ? { onRefused } : {}),
  });
}

export class CellProvider implements Provider {
  readonly name = 'cells';
  private readonly cells: Informer<CellObject>;
  private readonly secrets: Informer<Secret>;
  private readonly berthNamespace: string;
  private readonly onChange: (cell: string) => void;
  private readonly log: Logger;
  /** Engaged cells: their cluster and the hash of the kubeconfig it was made from. */
  private readonly engaged = new Map<string, { cluster: string; hash: string }>();
  private readonly failures = new Map<string, Failure>();
  /** The last answer of each cell refused for its size, and when: the cell controller reports it. */
  private readonly refusals = new Map<string, Refusal>();
  /** Engagements change one at a time, in the order their causes arrived. */
  private chain: Promise<void> = Promise.resolve();

  constructor(o: {
    cells: Informer<CellObject>;
    secrets: Informer<Secret>;
    berthNamespace: string;
    onChange: (cell: string) => void;
    log: Logger;
  }) {
    this.cells = o.cells;
    this.secrets = o.secrets;
    this.berthNamespace = o.berthNamespace;
    this.onChange = o.onChange;
    this.log = o.log;
    // The Cells that name a Secret, so that a Secret's change reaches exactly them.
    this.cells.addIndexer('secret', (c) => {
      const r = c.spec.kubeconfigSecretRef;
      return [`${r.namespace}/${r.name}`];
    });
  }

  /** How the cell is reached now; undefined until the provider has looked at it. */
  access(cell: string): CellAccess | undefined {
    const e = this.engaged.get(cell);
    if (e) return { cluster: e.cluster };
    const f = this.failures.get(cell);
    return f ? { failure: f } : undefined;
  }

  /** The last answer of the cell refused for its size (ResponseTooLarge), if any since it was engaged. */
  refused(cell: string): Refusal | undefined {
    return this.refusals.get(cell);
  }

  /** A cluster is a cell's while a Cell of that cluster name exists and is not being deleted. */
  knows(cluster: string): boolean | undefined {
    if (!this.cells.hasSynced()) return undefined;
    return this.cells
      .list()
      .some((c) => !c.metadata.deletionTimestamp && clusterNameOf(c.metadata.name!) === cluster);
  }

  /** A cell serves the namespaces its Cell lists (spec.namespaces); none while its Cell is being deleted. */
  serves(cluster: string, namespace: string): boolean {
    return this.cells
      .list()
      .some(
        (c) =>
          !c.metadata.deletionTimestamp &&
          clusterNameOf(c.metadata.name!) === cluster &&
          c.spec.namespaces.includes(namespace),
      );
  }

  async run(clusters: ClusterSet, signal: AbortSignal): Promise<void> {
    await Promise.all([this.cells.waitForSync(signal), this.secrets.waitForSync(signal)]);
    const sync = (cell: string) => {
      this.chain = this.chain.then(() => (signal.aborted ? undefined : this.sync(clusters, cell)));
    };
    const bySecret = (s: Secret) => {
      for (const c of this.cells.byIndex('secret', `${s.metadata!.namespace}/${s.metadata!.name}`))
        sync(c.metadata.name!);
    };
    // Handlers added after the sync replay every cached object as an add.
    this.cells.addEventHandler({
      onAdd: (c) => sync(c.metadata.name!),
      onUpdate: (_, c) => sync(c.metadata.name!),
      onDelete: (c) => sync(c.metadata.name!),
    });
    this.secrets.addEventHandler({ onAdd: bySecret, onUpdate: (_, s) => bySecret(s), onDelete: bySecret });
    await new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
  }

  private async sync(clusters: ClusterSet, name: string): Promise<void> {
    const cell = this.cells.get(name);
    const wanted = cell && !cell.metadata.deletionTimestamp ? this.wanted(cell) : undefined;
    const current = this.engaged.get(name);
    if (current && (!wanted || 'failure' in wanted || wanted.hash !== current.hash)) {
      this.engaged.delete(name);
      await clusters
        .disengage(current.cluster)
        .catch((e: unknown) =>
          this.log.error({ cell: name, err: errorText(e) }, 'could not disengage the cell'),
        );
    }
    if (!wanted) {
      this.failures.delete(name);
      this.refusals.delete(name);
    } else if ('failure' in wanted) this.fail(name, wanted.failure);
    else if (this.engaged.get(name)?.hash !== wanted.hash) {
      try {
        const client = kubeconfigClient(wanted.text, undefined, (e) => {
          this.refusals.set(name, { at: Date.now(), message: e.message });
          this.onChange(name);
        });
        clusters.engage(new Cluster({ name: wanted.cluster, client, logger: this.log }));
        this.engaged.set(name, { cluster: wanted.cluster, hash: wanted.hash });
        this.failures.delete(name);
      } catch (e) {
        this.fail(name, {
          reason: 'BadKubeconfig',
          message: `the kubeconfig cannot be used: ${errorText(e)}`,
        });
      }
    }
    this.onChange(name);
  }

  private fail(cell: string, f: Failure): void {
    const was = this.failures.get(cell);
    if (was?.reason !== f.reason || was.message !== f.message)
      this.log.warn({ cell, reason: f.reason, problem: f.message }, 'cell not engaged');
    this.failures.set(cell, f);
  }

  /** The cluster a cell should be engaged as, with the kubeconfig it is made from, or why it cannot be. */
  private wanted(cell: CellObject): { cluster: string; text: string; hash: string } | { failure: Failure } {
    const cluster = clusterNameOf(cell.metadata.name!);
    if (!cluster)
      return {
        failure: {
          reason: 'InvalidName',
          message: `the cell's name cannot name a cluster: use ${CELL_NAME_RULE}`,
        },
      };
    const ref = cell.spec.kubeconfigSecretRef;
    if (ref.namespace !== this.berthNamespace)
      return {
        failure: {
          reason: 'SecretMissing',
          message: `Berth reads kubeconfig Secrets only in its own namespace ${this.berthNamespace}, not ${ref.namespace}`,
        },
      };
    const secret = this.secrets.get(`${ref.namespace}/${ref.name}`);
    if (!secret)
      return {
        failure: { reason: 'SecretMissing', message: `Secret ${ref.namespace}/${ref.name} not found` },
      };
    const data = secret.data?.[ref.key];
    if (!data)
      return {
        failure: {
          reason: 'BadKubeconfig',
          message: `Secret ${ref.namespace}/${ref.name} has no key "${ref.key}"`,
        },
      };
    const text = Buffer.from(data, 'base64').toString('utf8');
    return { cluster, text, hash: createHash('sha256').update(text).digest('hex') };
  }
}
