// The page: `berth run --ui-bind-address` serves it beside the controllers; `berth ui` serves it
// alone, with only the informers it reads (no controller, no lease, no write).
import { SUMMARIES } from '../command/summaries.ts';
import { Command, Option } from 'commander';
import { controllersOption, runningCapabilities, type Capability } from '../capability.ts';
import { capabilities } from '../capabilities.ts';
import { berthNamespace, LEADER_ELECTION_ID } from '../policy/namespace.ts';
import { Resources } from '../runtime/api/meta.ts';
import { isNotFound, KubeClient } from '../runtime/client/client.ts';
import type { Lease } from '../runtime/leaderelection/elector.ts';
import { Manager } from '../runtime/manager/manager.ts';
import { rootLogger } from '../runtime/observability/log.ts';
import { UiServer, type About } from '../ui/server.ts';
import { version } from './version.ts';
import { DEFAULT_ADDRESSES } from './addresses.ts';
import { logOptions, useLogOptions } from './log.ts';
import { BERTH_NAMESPACE, berthNamespaceFlag, clientOf, clusterFlags, listOption } from '../command/flags.ts';
import { defaultPoolLabels } from '../ui/view.ts';

/** The page's flags, the same on `berth run` and `berth ui`. */
export function uiOptions(defaultBind: string): Option[] {
  return [
    new Option('--ui-bind-address <addr>', 'address of the read-only web page ("0" turns it off)').default(
      defaultBind,
    ),
    listOption(
      '--ui-pool-labels <keys>',
      "node labels that name a node's pool, the first present wins",
      defaultPoolLabels,
    ),
    listOption(
      '--ui-allowed-hosts <names>',
      'host names the page answers to besides localhost and IP addresses (a guard against DNS rebinding; default: none)',
    ),
  ];
}

type Leader = Pick<About, 'leader' | 'onLeaderChange'>;

/** berth run's leader: as its own elector sees the Lease, told at once of a new holder; without election it acts alone. */
export function electedLeader(manager: Manager): Leader {
  return {
    leader: () => {
      const l = manager.leadership();
      return Promise.resolve(
        l
          ? {
              holder: l.holder,
              self: l.holder !== '' && l.holder === l.identity,
              note: l.holder ? 'from its elector' : 'its elector has seen no holder of the Lease yet',
            }
          : {
              holder: '',
              self: true,
              note: 'no leader election (--leader-elect off): this Berth acts alone',
            },
      );
    },
    onLeaderChange: (fn) => manager.onNewLeader(fn),
  };
}

/** berth ui's leader: it campaigns for nothing, so it reads the Lease when the page asks. */
function leaseLeader(client: KubeClient, namespace: string): Leader {
  return {
    leader: async () => {
      const lease = await client
        .get<Lease>(Resources.leases, LEADER_ELECTION_ID, namespace)
        .catch((e: unknown) => (isNotFound(e) ? undefined : Promise.reject(e)));
      const spec = lease?.spec;
      if (!spec?.holderIdentity)
        return {
          holder: '',
          self: false,
          note: `no holder of Lease ${namespace}/${LEADER_ELECTION_ID}`,
        };
      const renewed = spec.renewTime ? Date.parse(spec.renewTime) : NaN;
      const stale = renewed + (spec.leaseDurationSeconds ?? 0) * 1000 < Date.now();
      return {
        holder: spec.holderIdentity,
        self: false,
        note: `Lease ${namespace}/${LEADER_ELECTION_ID}${stale ? `, expired (renewed ${spec.renewTime ?? 'never'})` : ''}`,
      };
    },
  };
}

/** Adds the page to the manager, showing the policies of `enabled`; undefined when it is off. */
export function addUi(
  manager: Manager,
  o: Record<string, unknown>,
  enabled: Capability[],
  leader: Leader,
): UiServer | undefined {
  if (o['uiBindAddress'] === '0') return undefined;
  const ui = new UiServer(manager, {
    bindAddress: String(o['uiBindAddress']),
    capabilities: enabled,
    poolLabels: o['uiPoolLabels'] as string[],
    allowedHosts: ((o['uiAllowedHosts'] as string[] | undefined) ?? []).map((h) => h.toLowerCase()),
    options: o,
    berthNamespace: (o['berthNamespace'] as string | undefined) ?? berthNamespace(),
    about: { version: version(), controllers: enabled.map((c) => c.name), ...leader },
    log: rootLogger.child({ component: 'ui' }),
  });
  manager.addRunnable(ui);
  return ui;
}

export function uiCommand(): Command {
  const cmd = new Command('ui')
    .description(SUMMARIES.ui.description)
    .option('--label-dir <dir>', 'the rule directory Berth runs with, for explain (k8s-auto-labeller files)')
    .addOption(
      // The default of every command (berth run's): a management plane's page names its own.
      controllersOption(
        capabilities,
        'the controllers of the Berth it shows: the page lists their policies, and explains with them',
      ),
    );
  clusterFlags(cmd, 'kubeconfig to use (default: $KUBECONFIG, ~/.kube/config, or in-cluster)');
  // Where the Berth it shows runs: its Lease, and the namespace its policies leave alone.
  berthNamespaceFlag(cmd, BERTH_NAMESPACE, berthNamespace());
  for (const opt of [...uiOptions(DEFAULT_ADDRESSES.ui), ...logOptions()]) cmd.addOption(opt);
  return cmd.action(async (o) => {
    useLogOptions(o);
    const client = await clientOf(o, 'berth-ui');
    const manager = new Manager({ client, metricsBindAddress: '0', healthBindAddress: '0' });
    const ui = addUi(manager, o, runningCapabilities(capabilities, o), leaseLeader(client, o.berthNamespace));
    if (!ui) throw new Error('--ui-bind-address 0: there is nothing to serve');
    for (const sig of ['SIGTERM', 'SIGINT'] as const) process.once(sig, () => void manager.stop(0));
    await manager.start();
    process.stdout.write(`Berth's page: http://localhost:${ui.port}/\n`);
    process.exitCode = await manager.done;
  });
}
