// test-driver: alone — its `berth run` registers the webhook configuration named berth.
//
// Registry egress as a tenant meets it (docs/security.md, decision 0025): a namespace user with
// only `edit` in one namespace names images, and Berth (its own process, its own identity) reads
// them for an ArchPlacement the cluster admin wrote. An image naming a loopback, link-local or
// private address is refused without a connection; the tenant's HTTPS registry, whose Bearer realm
// points at a plain-http token server on loopback, gets no token and the token server no request.
// What the tenant reads back (the pod's events) names the registry and the reason, never a body.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import { createServer, type AddressInfo, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { stringify as toYaml } from 'yaml';
import { gated } from '../../src/arch/decide/patches.ts';
import { type ArchPod } from '../../src/arch/decide/pods.ts';
import { FAILURE_ANNOTATION, STATE_LABEL } from '../../src/arch/types.ts';
import { ArchPlacement } from '../../src/arch/crd.ts';
import { installCrds } from '../../src/cli/install.ts';
import { KubeClient } from '../../src/runtime/client/client.ts';
import { Resources, type ResourceRef } from '../../src/runtime/api/meta.ts';
import { createCertificateAuthority } from '../../src/runtime/webhook/certificates.ts';
import { startBerth, type BerthProcess } from '../helpers/berth.ts';
import {
  createAdmitted,
  createNamespace,
  deleteNamespace,
  testSandbox,
  uniqueName,
  untilAllowed,
} from '../helpers/cluster.ts';
import { waitFor } from '../helpers/wait.ts';

const sandbox = testSandbox();
const admin = sandbox.client();
const id = uniqueName('egress');
const work = mkdtempSync(join(tmpdir(), 'berth-egress-it-'));
/** What the tenant's servers write in their bodies: no event may repeat it. */
const MARK = `internal-${id}`;
/** Events as `kubectl describe pod` reads them: what a namespace user with `edit` may read. */
const coreEvents: ResourceRef = {
  group: '',
  version: 'v1',
  resource: 'events',
  kind: 'Event',
  namespaced: true,
};

interface Listener {
  host: string;
  port: number;
  connections: number;
  /** Each request's path and Authorization ('' when none). */
  requests: { path: string; authorization: string }[];
  close(): void;
}

/** Counts what reaches `server` once it listens on 127.0.0.1. */
async function listen(server: Server, requests: Listener['requests'] = []): Promise<Listener> {
  const l = { host: '', port: 0, connections: 0, requests, close: () => server.close() };
  server.on('connection', () => l.connections++);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  l.port = (server.address() as AddressInfo).port;
  l.host = `127.0.0.1:${l.port}`;
  return l;
}

/** An HTTP(S) server answering every request with `answer`, and recording it. */
function serving(answer: (res: http.ServerResponse) => void, tls?: { cert: string; key: string }) {
  const requests: Listener['requests'] = [];
  const handler: http.RequestListener = (req, res) => {
    requests.push({ path: req.url ?? '', authorization: req.headers.authorization ?? '' });
    answer(res);
  };
  return listen(tls ? https.createServer(tls, handler) : http.createServer(handler), requests);
}

/** A registry that answers every request 401, naming `realm`, with a body of its own words. */
const challenging = (realm: string) => (res: http.ServerResponse) => {
  res.writeHead(401, {
    'content-type': 'application/json',
    'www-authenticate': `Bearer realm="${realm}",service="tenant"`,
  });
  res.end(JSON.stringify({ errors: [{ code: 'UNAUTHORIZED', message: MARK }] }));
};
const tokenAnswer = (res: http.ServerResponse) => {
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ token: `internal-token-${MARK}` }));
};

let ns: string;
let tenant: KubeClient;
let berth: BerthProcess | undefined;
const listeners: Listener[] = [];
/** A port on loopback that counts the connections Berth would make to it: nothing answers there. */
let scanned: Listener;
/** The tenant's registry whose realm is plain http on loopback, and that token server. */
let plainRealm: { registry: Listener; tokens: Listener };
/** The tenant's registry whose realm is https on `localhost`, and that token server. */
let loopbackRealm: { registry: Listener; tokens: Listener };
/** A registry the admin allows, which an ArchPlacement's `registries` leaves out. */
let unlisted: Listener;
/** The tenant's namespace's policy, and one that lists registries for the pods labelled LISTED. */
const policies = [`${id}-tenant`, `${id}-listed`];
const LISTED = 'egress.berth.test/listed';

before(async () => {
  await installCrds(admin);
  ns = await createNamespace(admin, id);
  // The tenant: a user with `edit` in its namespace only, as a cluster gives a team.
  const user = `${id}-user`;
  tenant = KubeClient.fromFile(await sandbox.mintUser(user));
  await admin.create(Resources.roleBindings, {
    apiVersion: 'rbac.authorization.k8s.io/v1',
    kind: 'RoleBinding',
    metadata: { name: user, namespace: ns },
    roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'edit' },
    subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: user }],
  });
  await untilAllowed(tenant, ns, 'create', 'pods');

  // The tenant's certificate, trusted by Berth as a public one would be.
  const ca = await createCertificateAuthority(`${id}-ca`);
  const pair = await ca.issue({
    commonName: 'tenant',
    dnsNames: ['localhost'],
    ipAddresses: ['127.0.0.1'],
    usage: 'server',
  });
  const tls = { cert: pair.certPem, key: pair.keyPem };
  const caFile = join(work, 'ca.pem');
  writeFileSync(caFile, ca.certPem);

  scanned = await listen(createServer((socket) => socket.destroy()));
  const plainTokens = await serving(tokenAnswer);
  const httpsTokens = await serving(tokenAnswer, tls);
  plainRealm = {
    registry: await serving(challenging(`http://${plainTokens.host}/token`), tls),
    tokens: plainTokens,
  };
  loopbackRealm = {
    registry: await serving(challenging(`https://localhost:${httpsTokens.port}/token`), tls),
    tokens: httpsTokens,
  };
  unlisted = await serving((res) => res.writeHead(404).end(), tls);
  listeners.push(scanned, plainTokens, httpsTokens, plainRealm.registry, loopbackRealm.registry, unlisted);

  // The admin allows the tenant's two registries as if they were public hosts (they are on
  // loopback here only because the test has no other address): what their answers name is
  // checked all the same. The scanned port is not allowed, as no address is by default.
  const registriesFile = join(work, 'registries.yaml');
  writeFileSync(
    registriesFile,
    toYaml({
      registries: {
        [plainRealm.registry.host]: { allowPrivate: true },
        [loopbackRealm.registry.host]: { allowPrivate: true },
        [unlisted.host]: { allowPrivate: true },
      },
    }),
  );
  const inNamespace = { namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': ns } } };
  const specs = [
    { ...inNamespace, onFailure: { action: 'Release', retries: 0 } },
    {
      ...inNamespace,
      podSelector: { matchLabels: { [LISTED]: 'true' } },
      registries: ['ghcr.io', '*.corp.example'],
      priority: 10,
    },
  ];
  for (const [i, name] of policies.entries())
    await admin.apply(
      ArchPlacement.ref,
      { apiVersion: ArchPlacement.apiVersion, kind: ArchPlacement.kind, metadata: { name }, spec: specs[i] },
      { fieldManager: 'test-admin', force: true },
    );
  berth = await startBerth(
    sandbox,
    [
      '--controllers=arch',
      `--arch-registry-ca=${caFile}`,
      `--arch-registries=${registriesFile}`,
      '--log-level=info',
    ],
    { capture: true },
  );
});

after(async () => {
  await berth?.stop();
  // Berth is gone: its finalizer off by hand (deploy/README's last resort), then the rest.
  for (const name of policies) {
    await admin
      .patch(ArchPlacement.ref, name, { metadata: { finalizers: null } }, { type: 'merge' })
      .catch(() => {});
    await admin.delete(ArchPlacement.ref, name).catch(() => {});
  }
  await admin.delete(Resources.mutatingWebhookConfigurations, 'berth').catch(() => {});
  if (ns) await deleteNamespace(admin, ns);
  tenant?.close();
  for (const l of listeners) l.close();
  rmSync(work, { recursive: true, force: true });
  admin.close();
});

/** The tenant creates a pod of `image`; it is gated at admission (created again until it is). */
const tenantPod = (image: string, labels: Record<string, string> = {}) => {
  const name = uniqueName('pod');
  return createAdmitted(
    tenant,
    { namespace: ns, name },
    async () =>
      (await tenant.create(Resources.pods, {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name, namespace: ns, labels },
        spec: { containers: [{ name: 'c', image }] },
      })) as ArchPod,
    gated,
  );
};

/** The pod once Berth released it, its failure annotation, and its Warning as the tenant reads it. */
async function released(pod: ArchPod) {
  const name = pod.metadata!.name!;
  const settled = await waitFor(
    `pod ${ns}/${name} released`,
    async () => {
      const p = await tenant.get<ArchPod>(Resources.pods, name, ns);
      return p.metadata?.labels?.[STATE_LABEL] === 'Failed' && !gated(p) && p;
    },
    { observe: () => berth?.output().slice(-3000) },
  );
  const event = await waitFor(`the Warning on pod ${ns}/${name}`, async () =>
    (
      await tenant.list<{ involvedObject: { name: string }; type: string; reason: string; message: string }>(
        coreEvents,
        { namespace: ns },
      )
    ).items.find(
      (e) => e.involvedObject.name === name && e.type === 'Warning' && e.reason === 'InspectionFailed',
    ),
  );
  return { failure: settled.metadata!.annotations![FAILURE_ANNOTATION]!, note: event.message };
}

test('an image naming a loopback, link-local or private address is refused without a connection', async () => {
  const images = [
    `127.0.0.1:${scanned.port}/x:1`,
    `localhost:${scanned.port}/x:1`,
    '169.254.169.254/latest:1',
    '10.0.0.1:5000/x:1',
  ];
  for (const image of images) {
    const registry = image.slice(0, image.indexOf('/'));
    const { failure, note } = await released(await tenantPod(image));
    assert.match(failure, /^AddressNotAllowed: /, image);
    assert.ok(note.includes(registry), `the Warning names ${registry}: ${note}`);
    assert.match(note, /AddressNotAllowed: .*(loopback|link-local|private \(RFC 1918\)) address/);
    assert.match(note, /unless the registries configuration allows the registry \(allowPrivate\)/);
  }
  assert.equal(scanned.connections, 0, 'no connection reached the scanned port');
});

test("the tenant's registry gets no token from a plain-http realm on loopback, nor from a loopback name", async () => {
  const plain = await released(await tenantPod(`${plainRealm.registry.host}/x:1`));
  assert.match(plain.failure, /^Unauthorized: /);
  assert.match(
    plain.note,
    new RegExp(
      `${plainRealm.registry.host}: the registry's token realm http://${plainRealm.tokens.host} is plain http`,
    ),
  );
  assert.equal(plainRealm.tokens.connections, 0, 'no request reached the plain-http token server');

  const named = await released(await tenantPod(`${loopbackRealm.registry.host}/x:1`));
  assert.match(named.failure, /^AddressNotAllowed: localhost resolves to a loopback address/);
  assert.equal(loopbackRealm.tokens.connections, 0, 'no request reached the token server on localhost');

  for (const { registry } of [plainRealm, loopbackRealm]) {
    assert.ok(registry.requests.length > 0, 'the registry itself was asked');
    assert.deepEqual(
      registry.requests.filter((r) => r.authorization !== ''),
      [],
      'nothing was sent to the registry as a credential',
    );
  }
  for (const { note } of [plain, named]) assert.ok(!note.includes(MARK), `no body is quoted: ${note}`);
});

test("a registry its ArchPlacement's registries leave out is never asked, though the admin allows it", async () => {
  const { failure, note } = await released(await tenantPod(`${unlisted.host}/x:1`, { [LISTED]: 'true' }));
  assert.match(failure, /^RegistryNotAllowed: /);
  assert.match(
    note,
    new RegExp(`${unlisted.host} is not among the registries ArchPlacement ${policies[1]} lists`),
  );
  assert.equal(unlisted.connections, 0, 'no connection reached the unlisted registry');
});
