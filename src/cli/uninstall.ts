// `berth uninstall`: the last step of the documented uninstall (deploy/README.md), once every object of
// Berth's kinds was deleted while Berth ran (its finalizers release what the policies held) and Berth
// itself is removed. Takes back what Berth made at run time, which no manifest of its install names:
// what each capability still has on nodes and pods, the webhook configurations it registered, the
// Secret of its webhook certificate and its leader-election Lease; then the CRDs.
import { SUMMARIES } from '../command/summaries.ts';
import { Command } from 'commander';
import { setTimeout as sleep } from 'node:timers/promises';
import { capabilities } from '../capabilities.ts';

import {
  berthNamespaceFlag,
  clusterFlags,
  dryRunOption,
  durationOption,
  withClient,
  sayStep,
} from '../command/flags.ts';
import { berthNamespace, LEADER_ELECTION_ID, WEBHOOK_CERT_SECRET } from '../policy/namespace.ts';
import type { Condition } from '../runtime/api/conditions.ts';
import { crdName, Resources, type ResourceRef } from '../runtime/api/meta.ts';
import { servedItems } from '../runtime/client/absent.ts';
import { exists, isNotFound, type KubeClient } from '../runtime/client/client.ts';
import { webhookConfigLabels } from '../runtime/webhook/registration.ts';

export interface UninstallOptions {
  /** Berth's namespace: where its Secret and Lease are. */
  namespace: string;
  webhookCertSecret: string;
  leaderElectionId: string;
  dryRun: boolean;
  /**
   * Leave the CRDs, and so the objects of Berth's kinds, for a later install (the Helm chart's
   * `crds.keep`): what Berth made at run time is taken back all the same, and what a kept object
   * holds (an owner's finalizer) waits for a Berth running again.
   */
  keepCrds?: boolean;
  /** How long to wait for the deleted CRDs to be gone (the apiserver first deletes their objects); 0: not at all. */
  timeoutMs: number;
  say: (line: string) => void;
}

export async function uninstall(client: KubeClient, o: UninstallOptions): Promise<void> {
  const left: string[] = [];
  for (const c of capabilities)
    for (const r of c.kinds) {
      // Not served (its CRD deleted already): none left.
      const n = (await servedItems(client, r))?.length ?? 0;
      if (n) left.push(`${n} ${r.resource}`);
    }
  // Only a running Berth takes back what a policy holds (a gate's taints, an owner's finalizer).
  if (left.length && o.keepCrds)
    o.say(`kept with the CRDs: ${left.join(', ')} (what they hold waits for Berth to run again)`);
  else if (left.length)
    throw new Error(
      `objects of Berth's kinds still exist (${left.join(', ')}): delete them while Berth runs ` +
        '(deploy/README.md, "Uninstalling"), then run berth uninstall',
    );
  const ctx = { client, namespace: o.namespace, say: o.say, dryRun: o.dryRun, keepCrds: !!o.keepCrds };
  for (const c of capabilities) await c.uninstall?.(ctx);
  const remove = async (ref: ResourceRef, name: string, namespace?: string) => {
    const what = `${ref.kind} ${namespace ? `${namespace}/` : ''}${name}`;
    if (o.dryRun) return o.say(`${what}: deleted`);
    await client.delete(ref, name, namespace).then(
      () => o.say(`${what}: deleted`),
      (e: unknown) => {
        if (!isNotFound(e)) throw e;
      },
    );
  };
  const labelSelector = Object.entries(webhookConfigLabels)
    .map(([k, v]) => `${k}=${v}`)
    .join(',');
  for (const ref of [Resources.mutatingWebhookConfigurations, Resources.validatingWebhookConfigurations])
    for (const w of (await client.list(ref, { query: { labelSelector } })).items)
      await remove(ref, w.metadata!.name!);
  for (const [ref, name] of [
    [Resources.secrets, o.webhookCertSecret],
    [Resources.leases, o.leaderElectionId],
  ] as const)
    if (await exists(client, ref, name, o.namespace)) await remove(ref, name, o.namespace);
  if (o.keepCrds) return;
  const crds: string[] = [];
  for (const c of capabilities)
    for (const name of c.kinds.map(crdName))
      if (await exists(client, Resources.crds, name)) {
        await remove(Resources.crds, name);
        crds.push(name);
      }
  if (!o.dryRun && o.timeoutMs > 0) await crdsGone(client, crds, o);
}

/**
 * Waits, as `kubectl delete` does, until the apiserver has finalized every deleted CRD (it deletes
 * the CRD's objects first): a CRD held longer, by an object's finalizer or a failed deletion, is
 * named with the apiserver's own reason rather than left for the user to find half-removed.
 */
export async function crdsGone(
  client: KubeClient,
  names: string[],
  o: Pick<UninstallOptions, 'timeoutMs'>,
): Promise<void> {
  const deadline = Date.now() + o.timeoutMs;
  let left = names;
  for (;;) {
    const still: string[] = [];
    for (const name of left) if (await exists(client, Resources.crds, name)) still.push(name);
    left = still;
    if (!left.length) return;
    if (Date.now() >= deadline) break;
    await sleep(250);
  }
  const why = await Promise.all(
    left.map(async (name) => {
      const crd = await client.get(Resources.crds, name).catch(() => undefined);
      const terminating = (crd?.status as { conditions?: Condition[] } | undefined)?.conditions?.find(
        (c) => c.type === 'Terminating',
      );
      return `${name}${terminating?.message ? ` (${terminating.message})` : ''}`;
    }),
  );
  throw new Error(
    `deleted CRDs still present after ${o.timeoutMs / 1000} s: ${why.join('; ')}. ` +
      'The apiserver removes a CRD once its objects are gone; an object held by a finalizer keeps it',
  );
}

export function uninstallCommand(): Command {
  const cmd = new Command('uninstall')
    .description(SUMMARIES.uninstall.description)
    .option('--webhook-cert-secret <name>', 'the Secret of the webhook certificate', WEBHOOK_CERT_SECRET)
    .option('--leader-election-id <name>', 'the leader-election Lease', LEADER_ELECTION_ID)
    .addOption(dryRunOption())
    .option(
      '--keep-crds',
      "keep the CRDs and the objects of Berth's kinds (the Helm chart's crds.keep); take back the rest",
      false,
    )
    .addOption(
      // A CRD's deletion lists its objects through storage that may still be initializing, with a
      // doubling backoff: on a loaded apiserver well over 30 s.
      durationOption(
        '--timeout <duration>',
        'how long to wait for the deleted CRDs to be gone (0: do not wait)',
        120,
      ),
    )
    .action((o) =>
      withClient(o, (client) =>
        uninstall(client, {
          namespace: o.berthNamespace,
          webhookCertSecret: o.webhookCertSecret,
          leaderElectionId: o.leaderElectionId,
          dryRun: !!o.dryRun,
          keepCrds: o.keepCrds,
          timeoutMs: o.timeout * 1000,
          say: sayStep(!!o.dryRun),
        }),
      ),
    );
  return clusterFlags(
    berthNamespaceFlag(cmd, "Berth's namespace (its Secret and Lease)", berthNamespace(), ['--namespace']),
  );
}
