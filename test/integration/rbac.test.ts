// test-driver: alone — it runs every capability's controllers, which would act on the policies of
// the files beside it, and registers the webhook configurations `berth run` registers by default.
//
// Berth as a user installs it: `berth run --leader-elect` with every capability and its webhooks,
// under a ServiceAccount bound only to the roles `berth manifests` generates. It leads (its Lease,
// by name, in its namespace), keeps its webhook certificate in its Secret, registers its webhook
// configurations, and no request of it is refused.
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import {
  LEADER_ELECTION_ID,
  NAMESPACE,
  WEBHOOK_CERT_SECRET,
  WEBHOOK_CONFIGURATION,
} from '../../src/policy/namespace.ts';
import { Resources, type KubeObject } from '../../src/runtime/api/meta.ts';
import { freePorts } from '../../src/sandbox/sandbox.ts';
import { capabilities } from '../../src/capabilities.ts';
import { berthKubeconfig, removeBerthIdentity, startBerth, type BerthProcess } from '../helpers/berth.ts';
import { testSandbox } from '../helpers/cluster.ts';
import { holdsFor, waitFor } from '../helpers/wait.ts';

const sandbox = testSandbox();
const client = sandbox.client();
let berth: BerthProcess | undefined;

after(async () => {
  await berth?.stop();
  await client.delete(Resources.mutatingWebhookConfigurations, WEBHOOK_CONFIGURATION).catch(() => {});
  await client.delete(Resources.validatingWebhookConfigurations, WEBHOOK_CONFIGURATION).catch(() => {});
  await client.delete(Resources.leases, LEADER_ELECTION_ID, NAMESPACE).catch(() => {});
  await client.delete(Resources.secrets, WEBHOOK_CERT_SECRET, NAMESPACE).catch(() => {});
  client.close();
});

test('every capability, leader election and webhooks run with only the generated roles: nothing is refused', async () => {
  berth = await startBerth(
    sandbox,
    // Lease renewals every second: several of them within the test. The webhook certificate in
    // the shared Secret, as behind a Service (registered by URL here).
    [
      '--leader-elect',
      '--lease-duration=4',
      '--renew-deadline=3',
      '--retry-period=1',
      `--webhook-cert-secret=${WEBHOOK_CERT_SECRET}`,
      '--log-level=info',
    ],
    { capture: true },
  );
  const pid = berth.pid;
  const lease = await waitFor('Berth to hold its Lease', async () => {
    const l = await client.get(Resources.leases, LEADER_ELECTION_ID, NAMESPACE).catch(() => undefined);
    const holder = (l?.['spec'] as { holderIdentity?: string } | undefined)?.holderIdentity;
    return holder?.endsWith(`_${pid}`) && l;
  });
  await waitFor('its webhook certificate in its Secret', () =>
    client.get(Resources.secrets, WEBHOOK_CERT_SECRET, NAMESPACE).then(
      () => true,
      () => false,
    ),
  );
  const configs = await waitFor('its webhook configurations registered', async () => {
    const got = await Promise.all(
      [Resources.mutatingWebhookConfigurations, Resources.validatingWebhookConfigurations].map((ref) =>
        client.get(ref, WEBHOOK_CONFIGURATION).catch(() => undefined),
      ),
    );
    return got.every(Boolean) && (got as KubeObject[]);
  });
  assert.ok(configs.every((c) => ((c['webhooks'] as unknown[] | undefined) ?? []).length > 0));
  // Renewed since: Berth may update its Lease, not only create it.
  await waitFor(
    'the Lease renewed',
    async () =>
      (await client.get(Resources.leases, LEADER_ELECTION_ID, NAMESPACE)).metadata?.resourceVersion !==
      lease.metadata?.resourceVersion,
  );
  assert.equal(await berth.metric('leader_election_master_status'), 1);
  // RBAC's refusal names the user; a 403 for another cause (a namespace another test is deleting,
  // whose leftovers this Berth sees too) is not one of the roles'.
  assert.doesNotMatch(berth.output(), /forbidden: User .* cannot /i);
});

test('a management plane under only the roles of its controllers (cells, federation, quota), its page included: nothing is refused', async () => {
  const controllers = ['cells', 'federation', 'quota'];
  const [ui] = await freePorts(1);
  const mgmt = await startBerth(
    sandbox,
    [
      `--controllers=${controllers.join(',')}`,
      `--ui-bind-address=127.0.0.1:${ui}`,
      '--webhook-bind-address=0',
      '--log-level=info',
    ],
    {
      capture: true,
      kubeconfig: await berthKubeconfig(
        sandbox,
        { name: 'berth-management' },
        capabilities.filter((c) => controllers.includes(c.name)),
      ),
    },
  );
  try {
    // Ready: its caches (the page's nodes, pods and events with them) have listed; the page answers.
    assert.equal((await fetch(`http://127.0.0.1:${ui}/`)).status, 200);
    await holdsFor('no request refused', () => !/forbidden: User .* cannot /i.test(mgmt.output()), 3000);
  } finally {
    await mgmt.stop();
    await removeBerthIdentity(client, { name: 'berth-management' });
  }
});
