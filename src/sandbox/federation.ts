// A federation on one machine: a management plane and one cell sandbox per city beside it, each
// cell with kwok nodes, Berth's CRDs and its own Berth (the workloads controllers, as a process of
// the cell's sandbox), joined to the management plane. `berth sandbox up --cells`, the demo's step 6,
// the federation benchmark and the tests all start it here. What is Berth's own (its CRDs, its roles,
// `berth cells join`) comes in as hooks, since the sandbox sits below the capabilities.
import { DNS1123_LABEL, type KubeObject } from '../runtime/api/meta.ts';
import type { KubeClient } from '../runtime/client/client.ts';
import { Sandbox, type UpOptions } from './sandbox.ts';

/** What a federation needs of Berth: given by its caller (src/cli/sandbox.ts, berthFederationHooks). */
export interface FederationHooks {
  /** Installs Berth's CRDs in a cluster. */
  installCrds(client: KubeClient): Promise<void>;
  /** The roles a cell's Berth runs under, as `berth manifests` prints them. */
  rbac(): KubeObject[];
  /** The role the management plane's kubeconfig is bound to in a cell, as `berth manifests --cell` prints it. */
  cellRbac(): KubeObject[];
  /**
   * Joins a cell to the management plane, as `berth cells join` does, serving `namespaces` and
   * creating them there as needed; says what it did.
   */
  join(
    cell: { name: string; kubeconfig: string; city: string; namespaces: readonly string[] },
    managementKubeconfig: string,
  ): Promise<void>;
}

export interface FederationUpOptions extends Pick<UpOptions, 'log' | 'signal' | 'timeoutMs'> {
  /** City codes (DFW): one cell each. */
  cities: string[];
  /** kwok nodes in each cell. */
  cellNodes?: number;
  /** The management plane's namespaces the cells serve (default SANDBOX_NAMESPACES). */
  namespaces?: readonly string[];
  /** What the management plane's own `up` is given (its nodes, its registry). */
  management?: Pick<UpOptions, 'nodes' | 'registry' | 'fresh' | 'audit' | 'kubernetesVersion'>;
  /**
   * Who grants the cells' instances quota (their Berths' --quota-source): each cell from its own
   * Quotas (local, the default), or the management plane's quota controller from its Quotas,
   * counted across the cells (management).
   */
  quotaSource?: 'local' | 'management';
}

/** A cell as `up` left it: the city, the name it is joined as, and its sandbox. */
export interface FederationCell {
  city: string;
  name: string;
  sandbox: Sandbox;
}

/** The name a city's cell is joined as: the management plane is the federation's own, so the city says it. */
export const cellName = (city: string): string => city.toLowerCase();
/** The sandbox of a city's cell: `<management>-<city>`. */
export const cellSandboxName = (management: string, city: string): string =>
  `${management}-${city.toLowerCase()}`;
/**
 * The cities of `--cells DFW,lhr, DFW`: trimmed, upper-cased, each once, in order. Each must make a
 * sandbox name with the management plane's (`berth cells join` checks the code itself).
 */
export function federationCities(management: string, codes: readonly string[]): string[] {
  const cities = [...new Set(codes.map((c) => c.trim().toUpperCase()).filter(Boolean))];
  if (cities.length === 0) throw new Error('a federation needs at least one city code, such as DFW');
  for (const city of cities) {
    const name = cellSandboxName(management, city);
    if (!DNS1123_LABEL.test(name))
      throw new Error(`city code "${city}" makes the sandbox name "${name}", which is not a DNS label`);
  }
  return cities;
}

/**
 * The namespaces a sandbox's cells serve unless told otherwise: the README's examples' and the
 * demo's. A cell serves no namespace it was not told to (decision 27), so a federation to try
 * things on names these.
 */
export const SANDBOX_NAMESPACES = ['shop', 'berth-demo'] as const;

/** How long the management plane's token for a cell lasts: a sandbox federation may run for weeks. */
const CELL_TOKEN_SECONDS = 90 * 24 * 3600;

/** The flags of a cell's Berth: it runs what the management plane sends it, granted quota as told. */
export const cellBerthArgs = (quotaSource: 'local' | 'management' = 'local'): string[] => [
  '--controllers=workloads',
  `--quota-source=${quotaSource}`,
];

export class Federation {
  readonly management: Sandbox;

  constructor(name: string) {
    this.management = new Sandbox(name);
  }

  /** The cells the management plane has recorded, each with its sandbox read afresh. */
  get cells(): FederationCell[] {
    return this.management.cells.map((c) => ({
      city: c.city,
      name: cellName(c.city),
      sandbox: new Sandbox(c.sandbox),
    }));
  }

  /**
   * Starts (or reuses) the management plane and a cell per city, each cell with its nodes, the CRDs,
   * its Berth and its join; every step is idempotent, so `up` again starts what stopped and adds
   * the cities that are new, never a second cell for a city. The cells start side by side.
   */
  async up(hooks: FederationHooks, opts: FederationUpOptions): Promise<FederationCell[]> {
    const log = opts.log ?? (() => {});
    const mgmt = this.management;
    const timeoutMs = opts.timeoutMs ?? 300_000;
    // Checked before anything starts.
    const cities = federationCities(mgmt.name, opts.cities);
    await mgmt.up({ ...opts.management, log, timeoutMs, ...(opts.signal ? { signal: opts.signal } : {}) });
    const client = mgmt.client();
    try {
      await hooks.installCrds(client);
    } finally {
      client.close();
    }
    const cells = cities.map((city) => ({
      city,
      name: cellName(city),
      sandbox: new Sandbox(cellSandboxName(mgmt.name, city)),
    }));
    // Recorded before they start: a start that fails half-way still leaves them to `down`.
    for (const c of cells) mgmt.addCell({ city: c.city, sandbox: c.sandbox.name });
    await Promise.all(
      cells.map(async ({ city, name, sandbox }) => {
        const say = (s: string) => log(`${sandbox.name}: ${s}`);
        await sandbox.up({
          nodes: [{ prefix: `${name}-node`, count: opts.cellNodes ?? 2 }],
          // The cells run the management plane's Kubernetes.
          ...(mgmt.kubernetesVersion ? { kubernetesVersion: mgmt.kubernetesVersion } : {}),
          log: say,
          timeoutMs,
          ...(opts.signal ? { signal: opts.signal } : {}),
        });
        const c = sandbox.client();
        try {
          await hooks.installCrds(c);
        } finally {
          c.close();
        }
        const args = cellBerthArgs(opts.quotaSource);
        await sandbox.startBerth(hooks.rbac(), args, Date.now() + timeoutMs, opts.signal);
        say(`berth is running (${args.join(' ')}), log ${sandbox.dir}/logs/berth.log`);
        // Joined with an identity of the cell role only, never the cell's admin: the management
        // plane's Berth holds it. It lives as long as the cell's own Berth's.
        const kubeconfig = await sandbox.mintServiceAccount(hooks.cellRbac(), CELL_TOKEN_SECONDS);
        const namespaces = opts.namespaces ?? SANDBOX_NAMESPACES;
        await hooks.join({ name, kubeconfig, city, namespaces }, mgmt.kubeconfigPath);
      }),
    );
    return cells;
  }

  /** Stops the cells and then the management plane; `purge` deletes their data too. */
  async down(purge = false): Promise<void> {
    for (const { sandbox } of this.cells) await (purge ? sandbox.destroy() : sandbox.down());
    await (purge ? this.management.destroy() : this.management.down());
  }
}
