// `berth cells join` and `berth cells list`: join a cluster to the management plane as a cell (its
// kubeconfig checked against the cell first, with a warning for each grant beyond what the
// management plane needs there, then kept in a Secret in Berth's namespace, its Locations created
// if missing) and list the cells with what their probes say.
import { SUMMARIES } from '../command/summaries.ts';
import { Command } from 'commander';
import type { CommandContext, UninstallContext } from '../capability.ts';
import { readFile } from 'node:fs/promises';
import { findCondition } from '../runtime/api/conditions.ts';
import { Resources } from '../runtime/api/meta.ts';
import { EVERYONE_RULES, excessGrants, type PolicyRule } from '../runtime/api/rbac.ts';
import { isNotFound, type KubeClient } from '../runtime/client/client.ts';
import {
  asList,
  clientOf,
  clusterFlags,
  listOption,
  outputOption,
  print,
  withClient,
  type ClusterFlags,
  type Format,
} from '../command/flags.ts';
import { selfRules } from '../runtime/client/restmapper.ts';
import { errorText } from '../runtime/observability/log.ts';
import { berthNamespace } from '../policy/namespace.ts';
import { escapeControl, QUOTE_MAX } from '../policy/text.ts';
import { probeCell } from './controllers/cells.ts';
import { cellAccess, CELL_NAME_RULE, clusterNameOf } from './decide.ts';
import { kubeconfigClient } from './provider.ts';
import { CELL_LABEL, CELLS_MANAGER, KUBECONFIG_KEY, type CellObject, type LocationObject } from './types.ts';
import { Cell, cityCode, Location } from './crd.ts';

/** How long `berth cells join` waits for the cell to answer. */
const joinProbeTimeoutMs = 5000;

/** The Secret `berth cells join` keeps a cell's kubeconfig in. */
export const secretName = (cell: string): string => `cell-${cell}-kubeconfig`;

/**
 * What the cell's kubeconfig may do there beyond `needed` (what a management plane does in a cell),
 * as lines to warn with; none when it may do no more. A rules review answers for one namespace (and
 * the cluster-wide grants), so each of `namespaces` is reviewed; a grant is named once per resource,
 * with the namespaces it holds in unless it holds in all of them.
 */
async function excessAccess(
  cell: KubeClient,
  name: string,
  needed: PolicyRule[],
  namespaces: string[],
): Promise<string[]> {
  let reviews;
  try {
    const signal = AbortSignal.timeout(joinProbeTimeoutMs);
    reviews = await Promise.all(namespaces.map((ns) => selfRules(cell, ns, { signal })));
  } catch (e) {
    return [
      `warning: could not ask what the kubeconfig of cell ${name} may do there: ${escapeControl(errorText(e))}`,
    ];
  }
  const where = new Map<string, string[]>();
  reviews.forEach((review, i) => {
    for (const grant of excessGrants(review.rules, [...needed, ...EVERYONE_RULES]))
      where.set(grant, [...(where.get(grant) ?? []), namespaces[i]!]);
  });
  const excess = [...where].map(([grant, in_]) =>
    in_.length === namespaces.length ? grant : `${grant} (in ${in_.join(', ')})`,
  );
  return [
    ...(excess.length
      ? [
          `warning: the kubeconfig of cell ${name} may do more there than a management plane needs ` +
            '(berth manifests --cell prints the role it needs); beyond it:',
          // Resource names and URLs as the cell's rules review says them.
          ...excess.map((g) => `  ${escapeControl(g)}`),
        ]
      : []),
    ...(reviews.some((r) => r.incomplete)
      ? [`warning: cell ${name} did not list every rule of its kubeconfig (an authorizer that cannot)`]
      : []),
  ];
}

/**
 * `berth cells join`: what it prints once the cell has joined. With `check`, the kubeconfig's grants
 * in the cell are compared with what a management plane needs there, and any beyond are warned of.
 */
export async function joinCell(
  name: string,
  o: Record<string, unknown>,
  check?: { needed: PolicyRule[]; warn: (line: string) => void },
): Promise<string> {
  if (!clusterNameOf(name)) throw new Error(`cell name "${name}" must be ${CELL_NAME_RULE}`);
  const locations = o['location'] as string[];
  for (const c of locations)
    if (!cityCode.safeParse(c).success) throw new Error(`location "${c}" is not a city code such as DFW`);
  const file = String(o['kubeconfig']);
  const text = await readFile(file, 'utf8').catch((e: unknown) => {
    throw new Error(`cannot read ${file}: ${errorText(e)}`);
  });
  const { probe, origin } = await probeJoining(name, file, text, o, check);
  await registerCell(name, text, locations, o);
  return (
    `cell ${name} joined: Kubernetes ${probe.version} at ${origin}, serving ${locations.join(', ')}` +
    (!probe.crdsInstalled
      ? "; Berth's cell CRDs are not installed there yet (berth install), so it is not Ready"
      : probe.denied?.length
        ? `; its credentials may not ${probe.denied.join(', ')} there (README, Cells), so it is not Ready`
        : '')
  );
}

/** The cell as its kubeconfig reaches it: refused unless it answers as a cell can; grants beyond `check` warned of. */
async function probeJoining(
  name: string,
  file: string,
  text: string,
  o: Record<string, unknown>,
  check?: { needed: PolicyRule[]; warn: (line: string) => void },
) {
  let cell: KubeClient;
  try {
    cell = kubeconfigClient(text, 'berth-cells-join');
  } catch (e) {
    throw new Error(`cannot use ${file} for cell ${name}: ${errorText(e)}`, { cause: e });
  }
  let probe;
  try {
    probe = await probeCell(cell, joinProbeTimeoutMs, cellAccess);
    if (!probe.ok)
      throw new Error(
        `cell ${name} at ${cell.server.origin}: ${probe.reason}: ${escapeControl(probe.message)}`,
      );
    // The namespaces the Cell serves, kube-system and Berth's: where a grant beyond the cell role matters.
    const reviewed = new Set([
      'kube-system',
      String(o['berthNamespace']),
      ...((o['namespaces'] as string[]) ?? []),
    ]);
    if (check)
      for (const line of await excessAccess(cell, name, check.needed, [...reviewed])) check.warn(line);
  } finally {
    cell.close();
  }
  return { probe, origin: cell.server.origin };
}

/** On the management plane: the cell's kubeconfig Secret, its Locations if new, and the Cell. */
async function registerCell(
  name: string,
  text: string,
  locations: string[],
  o: Record<string, unknown>,
): Promise<void> {
  const mgmt = await clientOf(
    {
      ...(o['managementKubeconfig'] ? { kubeconfig: o['managementKubeconfig'] as string } : {}),
      ...(o['managementContext'] ? { context: o['managementContext'] as string } : {}),
    },
    'berth-cells-join',
  );
  const ns = String(o['berthNamespace']);
  try {
    const apply = { fieldManager: CELLS_MANAGER, force: true };
    await mgmt.apply(
      Resources.namespaces,
      { apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns } },
      apply,
    );
    await mgmt.apply(
      Resources.secrets,
      {
        apiVersion: 'v1',
        kind: 'Secret',
        type: 'Opaque',
        metadata: { name: secretName(name), namespace: ns, labels: { [CELL_LABEL]: name } },
        data: { [KUBECONFIG_KEY]: Buffer.from(text).toString('base64') },
      },
      apply,
    );
    const existing = (await mgmt.list<LocationObject>(Location.ref)).items;
    for (const code of locations) {
      if (existing.some((l) => l.spec.cityCode === code)) continue;
      await mgmt.create(
        Location.ref,
        {
          apiVersion: Location.apiVersion,
          kind: Location.kind,
          metadata: { name: code.toLowerCase() },
          spec: { cityCode: code },
        },
        { fieldManager: CELLS_MANAGER },
      );
    }
    await mgmt.apply(
      Cell.ref,
      {
        apiVersion: Cell.apiVersion,
        kind: Cell.kind,
        metadata: { name },
        spec: {
          kubeconfigSecretRef: { namespace: ns, name: secretName(name), key: KUBECONFIG_KEY },
          locations,
          // Only when given: a join again leaves the namespaces an admin listed since.
          ...(o['namespaces'] ? { namespaces: o['namespaces'] } : {}),
          ...(o['createNamespaces'] ? { createNamespaces: true } : {}),
        },
      },
      apply,
    );
  } catch (e) {
    if (isNotFound(e))
      throw new Error(
        'the management plane does not serve Cells and Locations: run berth install there first',
        { cause: e },
      );
    throw e;
  } finally {
    mgmt.close();
  }
}

/** `berth uninstall`: the Secrets `berth cells join` kept the cells' kubeconfigs in (their credentials). */
export async function forgetCells(client: KubeClient, o: UninstallContext): Promise<void> {
  const secrets = await client.list(Resources.secrets, {
    namespace: o.namespace,
    query: { labelSelector: CELL_LABEL },
  });
  for (const s of secrets.items) {
    const name = s.metadata!.name!;
    if (!o.dryRun)
      await client.delete(Resources.secrets, name, o.namespace).catch((e: unknown) => {
        if (!isNotFound(e)) throw e;
      });
    o.say(
      `Secret ${o.namespace}/${name}: deleted (the kubeconfig of cell ${s.metadata!.labels![CELL_LABEL]})`,
    );
  }
}

/** `berth cells list` as a table. */
export function cellsTable(cells: CellObject[]): string {
  const rows = [['NAME', 'LOCATIONS', 'REACHABLE', 'READY', 'VERSION', 'REASON']];
  for (const c of cells) {
    const conds = c.status?.conditions;
    const ready = findCondition(conds, 'Ready');
    rows.push([
      c.metadata.name!,
      c.spec.locations.join(',') || '<none>',
      findCondition(conds, 'Reachable')?.status ?? 'Unknown',
      ready?.status ?? 'Unknown',
      // As a cell said it (a Cell written before its probe escaped it, too).
      escapeControl(c.status?.serverVersion ?? '<unknown>', QUOTE_MAX),
      ready?.reason ?? '',
    ]);
  }
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  return rows
    .map((r) =>
      r
        .map((v, i) => v.padEnd(widths[i]!))
        .join('   ')
        .trimEnd(),
    )
    .join('\n');
}

export function cellsCommand(ctx: Pick<CommandContext, 'cellRules'>): Command {
  const cmd = new Command('cells').description(SUMMARIES.cells.description);
  cmd
    .command('join <name>')
    .description(
      "Join a cluster as a cell: check that it answers, keep its kubeconfig in a Secret in Berth's namespace, " +
        'create its Locations if missing, and create the Cell',
    )
    .requiredOption(
      '--kubeconfig <file>',
      "the cell's kubeconfig (its current context; credentials embedded)",
    )
    .addOption(listOption('--location <codes>', 'the city codes the cell serves (DFW)').makeOptionMandatory())
    .option(
      '--management-kubeconfig <file>',
      'kubeconfig of the management plane (default: $KUBECONFIG, ~/.kube/config)',
    )
    .option(
      '--management-context <name>',
      "the management plane's kubeconfig context (default: its current one)",
    )
    .addOption(
      listOption(
        '--namespaces <names>',
        "the management plane's namespaces the cell serves (none: no Workload is placed there)",
      ),
    )
    .option('--create-namespaces', 'let Berth create a namespace it serves that the cell lacks')
    .option('--berth-namespace <ns>', "Berth's namespace on the management plane", berthNamespace())
    .action(async (name: string, o: Record<string, unknown>) => {
      const warn = (line: string) => process.stderr.write(`${line}\n`);
      process.stdout.write(`${await joinCell(name, o, { needed: ctx.cellRules(), warn })}\n`);
    });
  const list = cmd
    .command('list')
    .description('List the cells with their locations, whether they answer and are Ready, and their version');
  clusterFlags(list, 'kubeconfig of the management plane (default: $KUBECONFIG, ~/.kube/config)')
    .addOption(outputOption())
    .action(async (o: ClusterFlags & { output: Format }) => {
      const cells = await withClient(o, async (mgmt) => (await mgmt.list<CellObject>(Cell.ref)).items);
      await print(o.output, asList(cells), () => (cells.length ? cellsTable(cells) : 'no cells'));
    });
  return cmd;
}
