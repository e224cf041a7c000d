// A federation for tests: the run's sandbox is the management plane, two more sandboxes (with kwok
// nodes) are cells in Dallas and London, joined with `berth cells join`, each with its own Berth
// (`cellArgs`), and the management plane's Berth (`managementArgs`) can be stopped and started again.
import { secretName } from '../../src/cells/cli.ts';
import { type CellObject } from '../../src/cells/types.ts';
import { Cell } from '../../src/cells/crd.ts';
import { installCrds } from '../../src/cli/install.ts';
import { berthFederationHooks } from '../../src/cli/sandbox.ts';
import { cellRbacManifests } from '../../src/manifests.ts';
import { type WorkloadObject } from '../../src/federation/types.ts';
import { Workload } from '../../src/federation/crd.ts';
import { NAMESPACE } from '../../src/policy/namespace.ts';
import { Resources } from '../../src/runtime/api/meta.ts';
import type { KubeClient } from '../../src/runtime/client/client.ts';
import { Sandbox } from '../../src/sandbox/sandbox.ts';
import { startBerth, type BerthProcess } from './berth.ts';
import { addNodes, createNamespace, testSandbox, uniqueName } from './cluster.ts';

export const CITIES = ['DFW', 'LHR'] as const;
export type City = (typeof CITIES)[number];

export interface CellHandle {
  name: string;
  sandbox: Sandbox;
  client: KubeClient;
  berth: BerthProcess;
}

export interface Federation {
  sandbox: Sandbox;
  client: KubeClient;
  cells: Record<City, CellHandle>;
  management(): BerthProcess | undefined;
  startManagement(): Promise<void>;
  stopManagement(): Promise<void>;
  /** A new namespace of the management plane (`prefix`-...), which every cell serves. */
  namespace(prefix: string): Promise<string>;
  /** Stops every Berth, removes the cells and workloads left in `namespaces`, and destroys the cells' sandboxes. */
  down(namespaces: string[]): Promise<void>;
}

export async function startFederation(opts: {
  cellArgs: string[];
  managementArgs: string[];
}): Promise<Federation> {
  const sandbox = testSandbox();
  const client = sandbox.client();
  await installCrds(client);
  const cells = {} as Record<City, CellHandle>;
  let management: BerthProcess | undefined;
  const fed: Federation = {
    sandbox,
    client,
    cells,
    management: () => management,
    async startManagement() {
      management = await startBerth(sandbox, opts.managementArgs);
    },
    async stopManagement() {
      await management?.stop();
      management = undefined;
    },
    async namespace(prefix) {
      const ns = await createNamespace(client, prefix);
      for (const city of CITIES) await serveNamespace(client, cells[city].name, ns);
      return ns;
    },
    async down(namespaces) {
      await management?.stop();
      for (const city of CITIES) {
        const cell = cells[city];
        if (!cell) continue;
        await cell.berth?.stop();
        await client.delete(Cell.ref, cell.name).catch(() => {});
        await client.delete(Resources.secrets, secretName(cell.name), NAMESPACE).catch(() => {});
        cell.client?.close();
        await cell.sandbox.destroy();
      }
      for (const ns of namespaces) {
        // The workloads' finalizer has nobody left to release it.
        const left = await client
          .list<WorkloadObject>(Workload.ref, { namespace: ns })
          .catch(() => undefined);
        for (const w of left?.items ?? [])
          await client
            .patch(Workload.ref, w.metadata.name!, { metadata: { finalizers: null } }, { namespace: ns })
            .catch(() => {});
        await client.delete(Resources.namespaces, ns).catch(() => {});
      }
      client.close();
    },
  };
  try {
    await up(fed, opts.cellArgs);
    await fed.startManagement();
  } catch (e) {
    // What started is stopped: a failed start leaves no sandbox running.
    await fed.down([]);
    throw e;
  }
  return fed;
}

async function up(fed: Federation, cellArgs: string[]): Promise<void> {
  for (const city of CITIES) {
    const sb = new Sandbox(process.env[`BERTH_TEST_FED_${city}`] ?? `fed-${city.toLowerCase()}`);
    const name = uniqueName(city.toLowerCase());
    // Known before it starts, so that a failure from here on still destroys it.
    const cell = { name, sandbox: sb } as CellHandle;
    fed.cells[city] = cell;
    await sb.up({ fresh: true });
    const c = sb.client();
    cell.client = c;
    await installCrds(c);
    await addNodes(c, { prefix: `${city.toLowerCase()}-node`, count: 2 });
    cell.berth = await startBerth(sb, cellArgs);
    await joinAsCell(sb, name, city, fed.sandbox);
    // The tests' namespaces are made on the management plane only: Berth makes them in the cells.
    await fed.client.patch(Cell.ref, name, { spec: { createNamespaces: true } }, { fieldManager: 'test' });
  }
}

/** Adds `namespace` to the namespaces a Cell serves (as its admin would). */
export async function serveNamespace(client: KubeClient, cell: string, namespace: string): Promise<void> {
  const c = await client.get<CellObject>(Cell.ref, cell);
  const namespaces = [...new Set([...(c.spec.namespaces ?? []), namespace])];
  await client.patch(Cell.ref, cell, { spec: { namespaces } }, { fieldManager: 'test' });
}

/**
 * `berth cells join` of a cell sandbox to `management`, as a user runs it, with the kubeconfig of a
 * ServiceAccount bound to the cell role only (`berth manifests --cell`), never the cell's admin;
 * serving `namespaces` (and making them there as needed).
 */
export async function joinAsCell(
  cell: Sandbox,
  name: string,
  city: string,
  management: Sandbox,
  namespaces: readonly string[] = [],
): Promise<void> {
  const kubeconfig = await cell.mintServiceAccount(cellRbacManifests());
  await berthFederationHooks.join({ name, kubeconfig, city, namespaces }, management.kubeconfigPath);
}
