import type { Capability } from '../capability.ts';
import { durationOption } from '../command/flags.ts';
import { POLICY_GROUP } from '../policy/crd.ts';
import { Resources, type KubeObject } from '../runtime/api/meta.ts';
import { cellsCommand, forgetCells } from './cli.ts';
import { Trigger } from '../runtime/controller/trigger.ts';
import { defaultTiming, setupCellReconciler } from './controllers/cells.ts';
import { CellProvider } from './provider.ts';
import { explainCellObject, explainLocationObject } from './explain.ts';
import { Cell, Location, type CellObject } from './types.ts';
import { cellsPage } from './view.ts';

export const cellsCapability: Capability = {
  name: 'cells',
  description:
    'Cells on a management plane: Locations by city code, Cells reached by a kubeconfig Secret, probed for Reachable and Ready',
  roles: ['management'],
  commands: (ctx) => [cellsCommand(ctx)],
  options: () => [
    durationOption(
      '--cell-probe-period <duration>',
      'how often each cell is probed',
      defaultTiming.probePeriodMs / 1000,
      0.001,
    ),
    durationOption(
      '--cell-unreachable-after <duration>',
      'how long a cell may go without answering before it is Reachable=False (Unreachable)',
      defaultTiming.unreachableAfterMs / 1000,
      0.001,
    ),
  ],
  crds: [Location, Cell],
  // Kept Cells keep the kubeconfig Secrets they name.
  uninstall: (ctx) => (ctx.keepCrds ? Promise.resolve() : forgetCells(ctx.client, ctx)),
  page: cellsPage,
  explainKinds: [
    {
      name: 'cell',
      aliases: [],
      resource: Cell.ref,
      status: true,
      description: 'Whether a Cell answers (Reachable, Ready, since when, last contact) and what it serves',
      explain: ({ client, object }) => explainCellObject(client, object),
    },
    {
      name: 'location',
      aliases: ['loc'],
      resource: Location.ref,
      description: "Which Cells serve a Location's city, and how each answers",
      explain: ({ client, object }) => explainLocationObject(client, object),
    },
  ],
  // The probe controller watches cells and patches their status; the page's map of cells by city
  // watches Locations too. `berth cells join` writes Locations with its user's credentials.
  rbac: [
    { apiGroups: [POLICY_GROUP], resources: ['cells', 'locations'], verbs: ['list', 'watch'] },
    { apiGroups: [POLICY_GROUP], resources: ['cells/status'], verbs: ['patch'] },
  ],
  // The cells' kubeconfigs: read only in Berth's own namespace.
  namespaceRbac: [{ apiGroups: [''], resources: ['secrets'], verbs: ['get', 'list', 'watch'] }],
  setup({ manager, options, berthNamespace }) {
    const log = manager.log.child({ capability: 'cells' });
    const cells = manager.informer<CellObject>(Cell.ref);
    const secrets = manager.informer<KubeObject & { data?: Record<string, string> }>(Resources.secrets, {
      namespace: berthNamespace,
    });
    // A cell the provider engaged, engaged again or gave up on is probed now.
    const probes = new Trigger();
    const provider = new CellProvider({
      cells,
      secrets,
      berthNamespace,
      onChange: (cell) => probes.send(cell),
      log,
    });
    setupCellReconciler(manager, {
      cells,
      provider,
      timing: {
        ...defaultTiming,
        probePeriodMs: Number(options['cellProbePeriod'] ?? defaultTiming.probePeriodMs / 1000) * 1000,
        unreachableAfterMs:
          Number(options['cellUnreachableAfter'] ?? defaultTiming.unreachableAfterMs / 1000) * 1000,
      },
      log,
      probes,
    });
    manager.addProvider(provider);
    return {};
  },
};
