// `berth arch inspect IMAGE`: the platforms an image's registry lists, read as the controller reads
// them. `berth arch clean`: takes off every taint Berth's Taints mode put on nodes and every gate it left
// on pods, and says which tolerations stay (a running pod's tolerations cannot be removed); `berth
// uninstall` runs the same clean and takes Berth's records off the pods too.
import { SUMMARIES } from '../command/summaries.ts';
import { Command } from 'commander';
import { readFileSync } from 'node:fs';
import {
  loadRegistriesConfig,
  pullSecretFromFile,
  RegistryClient,
  type RegistryClientOptions,
} from '../registry/index.ts';
import { releaseNodes, type ReleaseOptions } from '../policy/nodes/release.ts';
import type { JsonPatchOp } from '../runtime/api/jsonpatch.ts';
import { servedItems } from '../runtime/client/absent.ts';
import { isNotFound, type KubeClient } from '../runtime/client/client.ts';
import { Resources } from '../runtime/api/meta.ts';

import {
  contextOption,
  dryRunOption,
  kubeconfigOption,
  listOption,
  withClient,
  sayStep,
} from '../command/flags.ts';
import { gated, releasePatch, UNLABELLED_UNBOUND } from './decide/patches.ts';
import { parsePolicies } from './decide/parse.ts';
import { recordsPatch } from './decide/status.ts';
import { type ArchPod } from './decide/pods.ts';
import { ARCH_TAINT, FIELD_MANAGER, STATE_LABEL } from './types.ts';
import { ArchPlacement } from './crd.ts';

/** The registry client's options from the registries flags (`berth run`'s and `berth arch inspect`'s). */
export function registryOptions(o: { registries?: unknown; registryCa?: unknown }): RegistryClientOptions {
  return {
    ...(typeof o.registries === 'string' ? { hosts: loadRegistriesConfig(o.registries) } : {}),
    ...(typeof o.registryCa === 'string' ? { defaultCa: readFileSync(o.registryCa, 'utf8') } : {}),
    userAgent: 'berth',
  };
}

export function archCommand(): Command {
  const cmd = new Command('arch').description(SUMMARIES.arch.description);
  cmd
    .command('inspect <image>')
    .description('Print the platforms an image supports, read from its registry without pulling it')
    .addOption(
      listOption(
        '--pull-secret <files>',
        'pull Secrets (YAML or JSON) or docker config.json files to log in with',
      ),
    )
    .option(
      '--registries <file>',
      'registries configuration: mirrors, CAs, insecure registries, registries on private addresses (allowPrivate)',
    )
    .option('--registry-ca <file>', 'a PEM bundle trusted by every registry that names no CA of its own')
    .option('--always', 'revalidate the tag, as for imagePullPolicy: Always', false)
    .action(async (image: string, o) => {
      const client = new RegistryClient(registryOptions(o));
      const pullSecrets = ((o.pullSecret as string[] | undefined) ?? []).map((f) =>
        pullSecretFromFile(readFileSync(f, 'utf8'), f),
      );
      const i = await client.inspect(image, { pullSecrets, revalidate: o.always });
      process.stdout.write(`${i.reference}\n  digest ${i.digest} (from ${i.registry})\n`);
      for (const p of i.platforms)
        process.stdout.write(`  ${p.os}/${p.architecture}${p.variant ? `/${p.variant}` : ''}\n`);
    });
  cmd
    .command('clean')
    .description(
      'Remove every arch taint Berth set on nodes and every arch gate on pods; list the tolerations that stay',
    )
    .option(
      '--force',
      'clean even while an ArchPlacement in Taints mode exists (Berth would taint again)',
      false,
    )
    .addOption(dryRunOption())
    .addOption(kubeconfigOption())
    .addOption(contextOption())
    .action((o) =>
      withClient(o, (client) =>
        cleanArch(client, { force: o.force, dryRun: !!o.dryRun, say: sayStep(!!o.dryRun) }),
      ),
    );
  return cmd;
}

export interface CleanOptions extends ReleaseOptions {
  /** Clean even while an ArchPlacement exists. */
  force?: boolean;
  /** Also take Berth's state label and annotations off every pod it gated (uninstalling). */
  records?: boolean;
}

/**
 * Takes off every arch taint Berth set on nodes and every arch gate on pods; with `records`, its label
 * and annotations from the pods too. Says which tolerations stay.
 */
export async function cleanArch(client: KubeClient, o: CleanOptions): Promise<void> {
  // Not served: its CRD is gone already (a kustomize install's delete takes it before berth
  // uninstall runs), and with it every policy.
  const { policies } = parsePolicies((await servedItems(client, ArchPlacement.ref)) ?? []);
  const live = policies.filter((p) => !p.deleting);
  if (live.length && !o.force)
    throw new Error(
      `ArchPlacements still exist (${live.map((p) => `${p.name}: ${p.spec.mode}`).join(', ')}): ` +
        'delete them first (Berth releases their pods), or pass --force',
    );
  await releaseNodes(client, FIELD_MANAGER, o);
  // A gated pod whose state label was taken off is among the unbound pods without it.
  const pods = [
    ...((await client.list(Resources.pods, { query: { labelSelector: STATE_LABEL } })).items as ArchPod[]),
    ...((await client.list(Resources.pods, { query: UNLABELLED_UNBOUND })).items as ArchPod[]).filter(gated),
  ];
  for (const pod of pods) {
    const [name, namespace] = [pod.metadata!.name!, pod.metadata!.namespace!];
    const at = `${namespace}/${name}`;
    const write = (patch: JsonPatchOp[]) =>
      o.dryRun || !patch.length
        ? Promise.resolve()
        : client.patch(Resources.pods, name, patch, { namespace, type: 'json', fieldManager: FIELD_MANAGER });
    try {
      let now = pod;
      if (gated(pod)) {
        await write(releasePatch(pod, 'released by berth arch clean'));
        // The records patch tests what it removes: against the pod as the release left it.
        if (!o.dryRun) now = await client.get<ArchPod>(Resources.pods, name, namespace);
        o.say(`pod ${at}: gate removed, released unplaced`);
      }
      if (o.records) {
        await write(recordsPatch(now));
        o.say(`pod ${at}: removed ${STATE_LABEL} and Berth's annotations`);
      }
    } catch (e) {
      // A pod deleted meanwhile carries nothing any more.
      if (!isNotFound(e)) throw e;
    }
  }
  // Tolerations can be added to a pod, never removed: they stay, harmless once no node has the taint.
  const tolerating = ((await client.list(Resources.pods)).items as ArchPod[]).filter((p) =>
    (p.spec.tolerations ?? []).some((t) => t.key === ARCH_TAINT),
  );
  for (const p of tolerating)
    o.say(
      `pod ${p.metadata!.namespace}/${p.metadata!.name}: keeps its ${ARCH_TAINT} tolerations ` +
        '(a pod’s tolerations cannot be removed; harmless without the taints; recreate the pod to drop them)',
    );
}
