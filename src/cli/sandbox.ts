// `berth sandbox`: the local control plane, by hand; with `--cells`, a federation.
import { SUMMARIES } from '../command/summaries.ts';
import { Command, InvalidArgumentError, Option } from 'commander';
import { capabilities } from '../capabilities.ts';
import { capabilityCommands } from '../capability.ts';
import { cellRbacManifests, rbacManifests } from '../manifests.ts';
import {
  DEFAULT_KUBERNETES_MINOR,
  ensureBinaries,
  ensureRegistry,
  KUBERNETES_MINORS,
  kubernetesMinorOf,
  supportedKubernetes,
} from '../sandbox/build.ts';
import { Federation, SANDBOX_NAMESPACES, type FederationHooks } from '../sandbox/federation.ts';
import { readNodeFile, parseLabels, parseTaint, type NodeGroupInput } from '../sandbox/nodes.ts';
import { Sandbox } from '../sandbox/sandbox.ts';
import { abortOnSignals } from '../sandbox/wait.ts';
import { installCrds } from './install.ts';
import { durationOption, listOption } from '../command/flags.ts';

const log = (s: string) => process.stderr.write(`${s}\n`);
const nameOption = () => new Option('--name <name>', 'sandbox name').default('default');
/** --kubernetes-version: a minor the sandbox builds (`1.36`, `v1.36`, or its pinned patch). */
const kubernetesVersionOption = (what: string) =>
  new Option(
    '--kubernetes-version <minor>',
    `Kubernetes minor ${what}: ${Object.keys(KUBERNETES_MINORS).join(', ')}`,
  )
    .env('BERTH_KUBERNETES_VERSION')
    .argParser((v) => {
      const minor = kubernetesMinorOf(v);
      if (!minor) throw new InvalidArgumentError(`"${v}": ${supportedKubernetes()}`);
      return minor;
    });

/**
 * What a sandbox federation needs of Berth: its CRDs, the roles `berth manifests` prints (`--cell`
 * for the cells' kubeconfigs), and `berth cells join` itself (the cells capability's command, run
 * as a user runs it).
 */
export const berthFederationHooks: FederationHooks = {
  installCrds: (client) => installCrds(client),
  // A cell runs workloads in the namespaces of the Workloads sent to it, which the management plane
  // makes there on demand: in every namespace.
  rbac: () => rbacManifests(capabilities, { workloadNamespaces: ['*'] }),
  cellRbac: () => cellRbacManifests(),
  async join(cell, managementKubeconfig) {
    const cells = (await capabilityCommands(capabilities)).find((c) => c.name() === 'cells');
    if (!cells) throw new Error('berth has no cells command to join a cell with');
    await cells.parseAsync(
      [
        'join',
        cell.name,
        `--kubeconfig=${cell.kubeconfig}`,
        `--location=${cell.city}`,
        `--management-kubeconfig=${managementKubeconfig}`,
        ...(cell.namespaces.length
          ? [`--namespaces=${cell.namespaces.join(',')}`, '--create-namespaces']
          : []),
      ],
      { from: 'user' },
    );
  },
};

/** What the user runs next on a federation's management plane (with its quota controller when it grants). */
export const managementCommand = (sb: Sandbox, quotaSource = 'local'): string =>
  `berth run --kubeconfig ${sb.kubeconfigPath} --controllers=cells,federation${quotaSource === 'management' ? ',quota' : ''}`;

// Over 80 lines: the sandbox's subcommands declared in one place, each a flat chain of options and a short action.
export function sandboxCommand(): Command {
  const cmd = new Command('sandbox').description(SUMMARIES.sandbox.description);

  cmd
    .command('build')
    .description('Build the control plane binaries from the pinned Go modules (cached; a no-op when built)')
    .option('--registry', 'also build the OCI registry', false)
    .addOption(kubernetesVersionOption(`to build (default: ${DEFAULT_KUBERNETES_MINOR})`))
    .action(async (o) => {
      const started = Date.now();
      const interrupt = abortOnSignals();
      try {
        const b = await ensureBinaries(
          log,
          interrupt.signal,
          o.kubernetesVersion ?? DEFAULT_KUBERNETES_MINOR,
        );
        if (o.registry) await ensureRegistry(log, interrupt.signal);
        log(`control plane ${b.kubernetesVersion} ready in ${((Date.now() - started) / 1000).toFixed(1)} s`);
      } finally {
        interrupt.release();
      }
    });

  cmd
    .command('up')
    .description(
      'Build (first time only) and start the sandbox, or reuse the running one; then ensure the nodes exist',
    )
    .addOption(nameOption())
    .option('--nodes <n>', 'number of kwok nodes to ensure', (v) => Number.parseInt(v, 10), 0)
    .option('--node-prefix <prefix>', 'node name prefix', 'kwok-node')
    .option(
      '--arch <arch>',
      'architecture of the --nodes nodes (status.nodeInfo.architecture and kubernetes.io/arch)',
      'amd64',
    )
    .option('--node-labels <k=v,...>', 'labels of the --nodes nodes', '')
    .addOption(listOption('--node-taint <key[=value]:Effect>', 'taints of the --nodes nodes', []))
    .option(
      '--node-file <file>',
      'YAML file of node groups: nodes: [{prefix, count, arch, labels, annotations, taints}]',
    )
    .option('--fresh', 'delete the existing sandbox of this name and start clean', false)
    .addOption(
      kubernetesVersionOption(
        `to run (default: the one the sandbox runs, else ${DEFAULT_KUBERNETES_MINOR}; another needs --fresh)`,
      ),
    )
    .option(
      '--registry',
      'also run an OCI registry with token auth on 127.0.0.1 (building it the first time)',
      false,
    )
    .option(
      '--audit',
      "kube-apiserver logs service accounts' requests to logs/audit.log (when the control plane starts; " +
        'npm run rbac:audit reads it)',
      false,
    )
    .addOption(
      durationOption(
        '--timeout <duration>',
        'how long the control plane and nodes may take to start (a build does not count)',
        300,
        1,
      ),
    )
    .addOption(
      listOption(
        '--cells <codes>',
        'also start a cell per city code (DFW,LHR,NRT): sandboxes NAME-dfw, ... with kwok nodes, the CRDs and a ' +
          'Berth running the workloads controllers, joined to this sandbox as their management plane',
      ),
    )
    .option('--cell-nodes <n>', 'kwok nodes in each cell', (v) => Number.parseInt(v, 10), 2)
    .addOption(
      new Option(
        '--quota-source <where>',
        "who grants the cells' instances quota: each cell from its own Quotas (local), or the management " +
          "plane's quota controller from its Quotas, across the cells (management: the cells' Berths run " +
          'with --quota-source=management, restarted if they ran otherwise)',
      )
        .choices(['local', 'management'])
        .default('local'),
    )
    .addOption(
      listOption(
        '--cell-namespaces <names>',
        "the management plane's namespaces the cells serve (and may create)",
        SANDBOX_NAMESPACES,
      ),
    )
    .action(async (o) => {
      const groups: NodeGroupInput[] = o.nodeFile ? readNodeFile(o.nodeFile) : [];
      if (o.nodes > 0) {
        groups.push({
          prefix: o.nodePrefix,
          count: o.nodes,
          arch: o.arch,
          labels: parseLabels(o.nodeLabels),
          taints: (o.nodeTaint as string[]).map(parseTaint),
        });
      }
      const upOptions = {
        nodes: groups,
        fresh: o.fresh,
        registry: o.registry,
        audit: o.audit,
        ...(o.kubernetesVersion ? { kubernetesVersion: o.kubernetesVersion as string } : {}),
      };
      const federation = o.cells === undefined ? undefined : new Federation(o.name);
      const sb = federation?.management ?? new Sandbox(o.name);
      const started = Date.now();
      const interrupt = abortOnSignals();
      const timeoutMs = o.timeout * 1000;
      if (!federation) {
        await sb.up({ ...upOptions, log, timeoutMs, signal: interrupt.signal }).finally(interrupt.release);
      } else {
        // Fresh is the whole federation's: its old cells go with the management plane.
        if (o.fresh) await federation.down(true);
        const cells = await federation
          .up(berthFederationHooks, {
            cities: o.cells as string[],
            cellNodes: o.cellNodes,
            namespaces: o.cellNamespaces as string[],
            management: { ...upOptions, fresh: false },
            quotaSource: o.quotaSource,
            log,
            timeoutMs,
            signal: interrupt.signal,
          })
          .finally(interrupt.release);
        for (const c of cells)
          log(
            `cell ${c.name} (${c.city}): sandbox ${c.sandbox.name} at ${c.sandbox.server}, its Berth running`,
          );
      }
      log(
        `sandbox ${sb.name} (Kubernetes ${sb.kubernetesVersion}) is up in ${((Date.now() - started) / 1000).toFixed(1)} s: ${sb.server}`,
      );
      log(`kubectl --kubeconfig ${sb.kubeconfigPath} get nodes`);
      const r = sb.registry;
      if (r) {
        log(`registry ${r.host} (CA ${r.caPath}; push as ${r.push.username}, see berth sandbox status)`);
        // On 127.0.0.1, Berth reads it only where its configuration allows it (allowPrivate).
        log(`  Berth reads it with --arch-registries=${r.registriesPath}`);
      }
      if (federation) {
        log(`next, run the management plane's Berth:`);
        log(`  ${managementCommand(sb, o.quotaSource)}`);
        log(`  kubectl --kubeconfig ${sb.kubeconfigPath} get cells,workloads -A`);
      }
    });

  cmd
    .command('down')
    .description(
      'Stop every process of the sandbox and of its cells, if it has any (the data stays for the next up unless --purge)',
    )
    .addOption(nameOption())
    .option('--purge', 'also delete its data and certificates', false)
    .action(async (o) => {
      const federation = new Federation(o.name);
      const cells = federation.cells.map((c) => c.sandbox.name);
      await federation.down(o.purge);
      log(`sandbox ${o.name} is down${cells.length ? `, and its cells ${cells.join(', ')}` : ''}`);
    });

  cmd
    .command('status')
    .description('Show the processes, ports and health of the sandbox, and of its cells if it has any')
    .addOption(nameOption())
    .option('-o, --output <format>', 'text or json', 'text')
    .action(async (o) => {
      const sb = new Sandbox(o.name);
      if (!sb.exists) {
        process.stdout.write(
          o.output === 'json' ? '{"exists":false}\n' : `sandbox ${sb.name} does not exist\n`,
        );
        process.exitCode = 3;
        return;
      }
      const procs = sb.status();
      const ready = await sb.apiserverReady();
      const cells = await Promise.all(
        new Federation(sb.name).cells.map(async (c) => ({
          city: c.city,
          name: c.name,
          sandbox: c.sandbox.name,
          exists: c.sandbox.exists,
          ready: c.sandbox.exists && (await c.sandbox.apiserverReady()),
          ...(c.sandbox.exists ? { server: c.sandbox.server, kubeconfig: c.sandbox.kubeconfigPath } : {}),
          processes: c.sandbox.status(),
        })),
      );
      if (o.output === 'json') {
        process.stdout.write(
          JSON.stringify({
            exists: true,
            name: sb.name,
            server: sb.server,
            kubernetesVersion: sb.kubernetesVersion,
            ready,
            kubeconfig: sb.kubeconfigPath,
            processes: procs,
            ...(sb.registry ? { registry: sb.registry } : {}),
            ...(cells.length ? { cells } : {}),
          }) + '\n',
        );
      } else {
        process.stdout.write(
          `sandbox ${sb.name}: ${ready ? 'ready' : 'not ready'} at ${sb.server} (Kubernetes ${sb.kubernetesVersion})\n`,
        );
        for (const p of procs) {
          process.stdout.write(
            `  ${p.name.padEnd(24)} ${p.running ? `running pid ${p.pid}` : 'stopped'}  port ${p.port}\n`,
          );
        }
        process.stdout.write(`  kubeconfig: ${sb.kubeconfigPath}\n`);
        const r = sb.registry;
        if (r) {
          process.stdout.write(`  registry: ${r.host} (token service ${r.realm}, CA ${r.caPath})\n`);
          process.stdout.write(`  registry for Berth: --arch-registries=${r.registriesPath}\n`);
          process.stdout.write(`  registry push user: ${r.push.username} (password in -o json)\n`);
        }
        for (const c of cells) {
          const berth = c.processes.find((p) => p.name === 'berth');
          process.stdout.write(
            `  cell ${c.name} (${c.city}): sandbox ${c.sandbox} ${c.ready ? `ready at ${c.server}` : 'not ready'}, ` +
              `berth ${berth?.running ? `running pid ${berth.pid}` : 'stopped'}\n`,
          );
        }
      }
      if (!ready || cells.some((c) => !c.ready)) process.exitCode = 3;
    });

  cmd
    .command('kubeconfig')
    .description("Print the path of the sandbox's admin kubeconfig")
    .addOption(nameOption())
    .action((o) => {
      const sb = new Sandbox(o.name);
      if (!sb.exists) throw new Error(`sandbox ${sb.name} does not exist: run berth sandbox up`);
      process.stdout.write(`${sb.kubeconfigPath}\n`);
    });

  cmd
    .command('user <username>')
    .description('Mint a user (client certificate, no RBAC granted) and print the path of its kubeconfig')
    .addOption(nameOption())
    .addOption(listOption('--group <groups>', 'groups of the user', []))
    .action(async (username: string, o) => {
      const sb = new Sandbox(o.name);
      if (!sb.exists) throw new Error(`sandbox ${sb.name} does not exist: run berth sandbox up`);
      process.stdout.write(`${await sb.mintUser(username, o.group)}\n`);
    });

  return cmd;
}
