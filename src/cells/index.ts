import type { Capability } from '../capability.ts';
import { durationOption } from '../command/flags.ts';
import { POLICY_GROUP } from '../policy/kinds.ts';
import { CELL, defaultTiming, LOCATION } from './types.ts';

// What every `berth` command reads of cells; what runs is loaded when called (setup.ts, cli.ts,
// explain.ts, view.ts), so a Berth that does not run them loads none of it.
export const cellsCapability: Capability = {
  name: 'cells',
  description:
    'Cells on a management plane: Locations by city code, Cells reached by a kubeconfig Secret, probed for Reachable and Ready',
  roles: ['management'],
  commands: async (ctx) => [(await import('./cli.ts')).cellsCommand(ctx)],
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
  kinds: [LOCATION, CELL],
  crds: async () => {
    const crd = await import('./crd.ts');
    return [crd.Location, crd.Cell];
  },
  // Kept Cells keep the kubeconfig Secrets they name.
  uninstall: async (ctx) => {
    if (!ctx.keepCrds) await (await import('./cli.ts')).forgetCells(ctx.client, ctx);
  },
  page: async () => (await import('./view.ts')).cellsPage,
  explainKinds: [
    {
      name: 'cell',
      aliases: [],
      resource: CELL,
      status: true,
      description: 'Whether a Cell answers (Reachable, Ready, since when, last contact) and what it serves',
      explain: async ({ client, object }) => (await import('./explain.ts')).explainCellObject(client, object),
    },
    {
      name: 'location',
      aliases: ['loc'],
      resource: LOCATION,
      description: "Which Cells serve a Location's city, and how each answers",
      explain: async ({ client, object }) =>
        (await import('./explain.ts')).explainLocationObject(client, object),
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
  setup: async (ctx) => (await import('./setup.ts')).setup(ctx),
};
