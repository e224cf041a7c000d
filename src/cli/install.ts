// `berth install` and `berth manifests`: the CRDs and RBAC generated from code.
import { Command, Option } from 'commander';
import { stringify } from 'yaml';
import { KubeClient } from '../runtime/client/client.ts';
import { Resources, type KubeObject } from '../runtime/api/meta.ts';
import { hasCondition } from '../runtime/api/conditions.ts';
import { controllersOption, runningCapabilities } from '../capability.ts';
import { capabilities } from '../capabilities.ts';
import { crdManifests, rbacManifests } from '../manifests.ts';

const FIELD_MANAGER = 'berth-install';

/** Applies every CRD with server-side apply and waits until the apiserver serves them. */
export async function installCrds(client: KubeClient, log: (s: string) => void = () => {}): Promise<void> {
  const crds = crdManifests();
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

export function installCommand(): Command {
  return new Command('install')
    .description('Install (or upgrade) the CRDs with server-side apply, and wait until they are served')
    .option('--kubeconfig <path>', 'kubeconfig to use')
    .action(async (o) => {
      const client = KubeClient.fromFile(o.kubeconfig);
      try {
        await installCrds(client, (s) => process.stderr.write(`${s}\n`));
      } finally {
        client.close();
      }
    });
}

export function manifestsCommand(): Command {
  return new Command('manifests')
    .description('Print the generated manifests as YAML (CRDs and RBAC come from the same code that runs)')
    .addOption(new Option('--kind <kind>', 'what to print').choices(['all', 'crds', 'rbac']).default('all'))
    .option(
      '--finalizer-owner <kinds...>',
      "owner kinds an AgentPlacement's finalizer may be put on, as resource.group (deployments.apps); " +
        'the ClusterRole lets Berth watch and patch them (default: none)',
      [],
    )
    .addOption(
      controllersOption(
        capabilities,
        'the controllers the install runs (`berth run --controllers`): the ClusterRole grants only theirs',
        capabilities.map((c) => c.name),
      ),
    )
    .option('--install-crds', 'let Berth write its own CRDs (`berth run --install-crds`)', false)
    .option(
      '--pull-secret-namespace <namespaces...>',
      "namespaces whose pods' imagePullSecrets Berth may read (architecture-aware placement), a Role " +
        "in each; * for every namespace (default: none, only --arch-pull-secret's in Berth's namespace)",
      [],
    )
    .action((o) => {
      const rbac = {
        finalizerOwners: o.finalizerOwner as string[],
        installCrds: o.installCrds as boolean,
        pullSecretNamespaces: o.pullSecretNamespace as string[],
      };
      const docs: KubeObject[] = [
        ...(o.kind !== 'rbac' ? crdManifests() : []),
        ...(o.kind !== 'crds' ? rbacManifests(runningCapabilities(capabilities, o), rbac) : []),
      ];
      process.stdout.write(docs.map((d) => stringify(d, { lineWidth: 0 })).join('---\n'));
    });
}
