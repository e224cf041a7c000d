// `berth install` and `berth manifests`: the CRDs, RBAC and empty webhook configurations generated from code.
import { SUMMARIES } from '../command/summaries.ts';
import { Command, Option } from 'commander';
import { yaml } from '../runtime/platform/yaml.ts';
import type { KubeClient } from '../runtime/client/client.ts';
import { resourceOfKind, Resources, type KubeObject } from '../runtime/api/meta.ts';
import { hasCondition } from '../runtime/api/conditions.ts';
import { configurationRef, emptyWebhookConfigurations } from '../runtime/webhook/registration.ts';
import { berthNamespace, WEBHOOK_CONFIGURATION } from '../policy/namespace.ts';
import { controllersOption, runningCapabilities } from '../capability.ts';
import { berthNamespaceFlag, clusterFlags, listOption, withClient } from '../command/flags.ts';
import { allowUnsupportedOption, checkKubernetesVersion } from './kubernetes-version.ts';
import { capabilities } from '../capabilities.ts';
import { cellRbacManifests, crdManifests, podPatchPolicyManifests, rbacManifests } from '../manifests.ts';

const FIELD_MANAGER = 'berth-install';

/** Applies every CRD with server-side apply and waits until the apiserver serves them. */
export async function installCrds(client: KubeClient, log: (s: string) => void = () => {}): Promise<void> {
  const crds = await crdManifests();
  for (const crd of crds) {
    await client.apply(Resources.crds, crd, { fieldManager: FIELD_MANAGER, force: true });
    log(`applied ${crd.metadata!.name}`);
  }
  const deadline = Date.now() + 60_000;
  for (const crd of crds) {
    for (;;) {
      const got = await client.get(Resources.crds, crd.metadata!.name!);
      if (hasCondition(got, 'Established')) break;
      if (Date.now() > deadline) throw new Error(`CRD ${crd.metadata!.name} was not established within 60 s`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }
}

/**
 * Creates Berth's webhook configurations, empty, where missing (emptyWebhookConfigurations). Applied
 * with no webhooks, so the ones Berth registered stay (their fields are another manager's).
 */
export async function installWebhookConfigurations(
  client: KubeClient,
  log: (s: string) => void = () => {},
  name: string = WEBHOOK_CONFIGURATION,
): Promise<void> {
  for (const config of emptyWebhookConfigurations(name)) {
    await client.apply(configurationRef(config), config, { fieldManager: FIELD_MANAGER, force: true });
    log(`applied ${config.kind} ${config.metadata!.name}`);
  }
}

/**
 * Applies the ValidatingAdmissionPolicy that bounds Berth's writes to existing Pods, and its binding
 * (podPatchPolicyManifests), for Berth's ServiceAccount `opts.name` in `opts.namespace`.
 */
export async function installPodPatchPolicy(
  client: KubeClient,
  log: (s: string) => void = () => {},
  opts: { name?: string; namespace?: string } = {},
): Promise<void> {
  for (const o of podPatchPolicyManifests(opts)) {
    await client.apply(resourceOfKind(o.kind!), o, { fieldManager: FIELD_MANAGER, force: true });
    log(`applied ${o.kind} ${o.metadata!.name}`);
  }
}

export function installCommand(): Command {
  const cmd = new Command('install')
    .description(SUMMARIES.install.description)
    .option(
      '--crds-only',
      "only the CRDs (the Helm chart's pre-install and pre-upgrade hook: the chart makes the rest, named after its release)",
      false,
    )
    .addOption(allowUnsupportedOption())
    .action((o) =>
      withClient(o, async (client) => {
        const log = (s: string) => process.stderr.write(`${s}\n`);
        await checkKubernetesVersion(client, o.allowUnsupportedKubernetes, (s) => log(`warning: ${s}`));
        await installCrds(client, log);
        if (o.crdsOnly) return;
        await installWebhookConfigurations(client, log);
        await installPodPatchPolicy(client, log, { namespace: o.berthNamespace });
      }),
    );
  return clusterFlags(berthNamespaceFlag(cmd, BERTH_NAMESPACE, berthNamespace()));
}

/** What --berth-namespace says on install and manifests. */
const BERTH_NAMESPACE = "Berth's namespace: where its ServiceAccount, Lease and webhook certificate are";

export function manifestsCommand(): Command {
  const cmd = new Command('manifests')
    .description(SUMMARIES.manifests.description)
    .addOption(
      new Option('--kind <kind>', 'what to print')
        .choices(['all', 'crds', 'rbac', 'webhooks'])
        .default('all'),
    )
    .addOption(
      listOption(
        '--finalizer-owner <kinds>',
        "owner kinds an AgentPlacement's finalizer may be put on, as resource.group (deployments.apps); " +
          'the ClusterRole lets Berth watch and patch them (default: none)',
      ),
    )
    .addOption(
      controllersOption(
        capabilities,
        'the controllers the install runs (`berth run --controllers`): the ClusterRole grants only theirs; ' +
          'with --cell, those that act in cells by default',
      ),
    )
    .option('--install-crds', 'let Berth write its own CRDs (`berth run --install-crds`)', false)
    .addOption(
      listOption(
        '--pull-secret-namespace <namespaces>',
        "namespaces whose pods' imagePullSecrets Berth may read (architecture-aware placement), a Role " +
          'in each; * for every namespace (default: none)',
      ),
    )
    .option(
      '--arch-pull-secret <namespace/name>',
      '`berth run --arch-pull-secret`: a Role in its namespace lets Berth read that Secret, by name',
    )
    .addOption(
      listOption(
        '--workload-namespace <namespaces>',
        'namespaces where the workloads controllers create Instances and create, patch and delete Pods, a RoleBinding in each; ' +
          '* for every namespace (default: none)',
      ),
    )
    .option(
      '--cell',
      "print instead the role a cell's kubeconfig needs: what a management plane running --controllers does there",
      false,
    )
    .action(async (o, cmd: Command) => {
      const running = runningCapabilities(capabilities, o);
      if (o.cell) {
        // What a management plane does in a cell is its management capabilities' (cellRbac).
        const given = cmd.getOptionValueSource('controllers') !== 'default';
        process.stdout.write(yamlDocuments(cellRbacManifests(given ? running : capabilities)));
        return;
      }
      const namespace = o.berthNamespace as string;
      const rbac = {
        namespace,
        finalizerOwners: (o.finalizerOwner as string[] | undefined) ?? [],
        installCrds: o.installCrds as boolean,
        pullSecretNamespaces: (o.pullSecretNamespace as string[] | undefined) ?? [],
        workloadNamespaces: (o.workloadNamespace as string[] | undefined) ?? [],
        ...(o.archPullSecret ? { archPullSecret: o.archPullSecret as string } : {}),
      };
      const kinds = o.kind === 'all' ? ['crds', 'rbac', 'webhooks'] : [o.kind as string];
      const docs: KubeObject[] = [
        ...(kinds.includes('crds') ? await crdManifests() : []),
        ...(kinds.includes('rbac')
          ? [...rbacManifests(running, rbac), ...podPatchPolicyManifests({ namespace })]
          : []),
        ...(kinds.includes('webhooks') ? emptyWebhookConfigurations(WEBHOOK_CONFIGURATION) : []),
      ];
      process.stdout.write(yamlDocuments(docs));
    });
  return berthNamespaceFlag(cmd, BERTH_NAMESPACE, berthNamespace());
}

const yamlDocuments = (docs: KubeObject[]): string =>
  docs.map((d) => yaml().stringify(d, { lineWidth: 0 })).join('---\n');
