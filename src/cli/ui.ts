// The page: `berth run --ui-bind-address` serves it beside the controllers; `berth ui` serves it
// alone, with only the informers it reads (no controller, no lease, no write).
import { Command, Option } from 'commander';
import { commaList, controllersOption, runningCapabilities, type Capability } from '../capability.ts';
import { capabilities } from '../capabilities.ts';
import { berthNamespace } from '../policy/namespace.ts';
import { Manager } from '../runtime/manager/manager.ts';
import { rootLogger } from '../runtime/observability/log.ts';
import { UiServer } from '../ui/server.ts';
import { DEFAULT_ADDRESSES } from './addresses.ts';
import { clientOf, clusterFlags } from './flags.ts';
import { defaultPoolLabels } from '../ui/view.ts';

/** The page's flags, the same on `berth run` and `berth ui`. */
export function uiOptions(defaultBind: string): Option[] {
  return [
    new Option('--ui-bind-address <addr>', 'address of the read-only web page ("0" turns it off)').default(
      defaultBind,
    ),
    new Option('--ui-pool-labels <keys>', "node labels that name a node's pool, the first present wins")
      .default(defaultPoolLabels, defaultPoolLabels.join(','))
      .argParser(commaList),
    new Option(
      '--ui-allowed-hosts <names>',
      'host names the page answers to besides localhost and IP addresses (a guard against DNS rebinding)',
    )
      .default([], 'none')
      .argParser(commaList),
  ];
}

/** Adds the page to the manager, showing the policies of `enabled`; undefined when it is off. */
export function addUi(
  manager: Manager,
  o: Record<string, unknown>,
  enabled: Capability[],
): UiServer | undefined {
  if (o['uiBindAddress'] === '0') return undefined;
  const ui = new UiServer(manager, {
    bindAddress: String(o['uiBindAddress']),
    kinds: enabled.flatMap((c) => c.crds),
    poolLabels: o['uiPoolLabels'] as string[],
    allowedHosts: (o['uiAllowedHosts'] as string[]).map((h) => h.toLowerCase()),
    options: o,
    berthNamespace: berthNamespace(),
    log: rootLogger.child({ component: 'ui' }),
  });
  manager.addRunnable(ui);
  return ui;
}

export function uiCommand(): Command {
  const cmd = new Command('ui')
    .description("Serve Berth's read-only web page alone: informers and the page, no controller")
    .option('--label-dir <dir>', 'the rule directory Berth runs with, for explain (k8s-auto-labeller files)')
    .addOption(
      // The default of every command (berth run's): a management plane's page names its own.
      controllersOption(
        capabilities,
        'the controllers of the Berth it shows: the page lists their policies, and explains with them',
      ),
    );
  clusterFlags(cmd, 'kubeconfig to use (default: $KUBECONFIG, ~/.kube/config, or in-cluster)');
  for (const opt of uiOptions(DEFAULT_ADDRESSES.ui)) cmd.addOption(opt);
  return cmd.action(async (o) => {
    const manager = new Manager({
      client: await clientOf(o, 'berth-ui'),
      metricsBindAddress: '0',
      healthBindAddress: '0',
    });
    const ui = addUi(manager, o, runningCapabilities(capabilities, o));
    if (!ui) throw new Error('--ui-bind-address 0: there is nothing to serve');
    for (const sig of ['SIGTERM', 'SIGINT'] as const) process.once(sig, () => void manager.stop(0));
    await manager.start();
    process.stdout.write(`Berth's page: http://localhost:${ui.port}/\n`);
    process.exitCode = await manager.done;
  });
}
