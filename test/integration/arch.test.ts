// test-driver: alone — its Taints mode taints every node of the cluster (the seed's behaviour), which
// would strand the pods of the files beside it; and its `berth run` registers the webhook configuration
// named berth.
// test-driver: registry
//
// Architecture-aware placement against the real control plane and the sandbox registry, with Berth
// as its own process: the seed's example, a private repository, a mirror, a tag that moves,
// imagePullPolicy Always, a failing registry (down, 401, 404, 429, malformed), every exemption,
// Berth killed while pods are gated, a policy deleted, Taints mode and `berth arch clean`, an empty
// intersection, status counts and conditions, `berth explain pod` and `berth arch inspect`.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { stringify as toYaml } from 'yaml';
import {
  ARCH_FINALIZER,
  ARCH_LABEL,
  ARCH_TAINT,
  FAILURE_ANNOTATION,
  POLICY_ANNOTATION,
  RESULT_ANNOTATION,
  SKIP_ANNOTATION,
  STATE_LABEL,
} from '../../src/arch/types.ts';
import { ArchPlacement } from '../../src/arch/crd.ts';
import { gated as hasGate } from '../../src/arch/decide/patches.ts';
import { type ArchPod } from '../../src/arch/decide/pods.ts';
import { installCrds } from '../../src/cli/install.ts';
import { mutate } from '../../src/runtime/api/jsonpatch.ts';
import { rootLogger } from '../../src/runtime/observability/log.ts';
import {
  generatedCertificates,
  WebhookRunnable,
  type WebhookRegistration,
} from '../../src/runtime/webhook/registration.ts';
import { findCondition, type Condition } from '../../src/runtime/api/conditions.ts';
import { Resources, type KubeObject } from '../../src/runtime/api/meta.ts';
import type { Event } from '../../src/runtime/events/event.ts';
import type { SandboxRegistry } from '../../src/sandbox/registry.ts';
import { berthKubeconfig, runBerthCli, startBerth, type BerthProcess } from '../helpers/berth.ts';
import {
  addNodes,
  createAdmitted,
  createNamespace,
  deleteNamespace,
  deleteNodes,
  testSandbox,
  uniqueName,
} from '../helpers/cluster.ts';
import {
  addTokenPolicy,
  dockerConfigSecret,
  platform,
  RegistryPusher,
  startFaultProxy,
  type FaultProxy,
} from '../helpers/registry.ts';
import { holdsFor, waitFor } from '../helpers/wait.ts';

const sandbox = testSandbox();
const client = sandbox.client();
const id = uniqueName('arch');
/** Every pod of this file selects the nodes of this file by this label (never by architecture). */
const POOL = 'archit.berth.dev/pool';
const work = mkdtempSync(join(tmpdir(), 'berth-arch-it-'));
let reg: SandboxRegistry;
let pusher: RegistryPusher;
let proxy: FaultProxy;
let berth: BerthProcess | undefined;
const nodes: Record<'amd64' | 'arm64' | 'ppc64le', string> = { amd64: '', arm64: '', ppc64le: '' };
const namespaces: string[] = [];
const policies: string[] = [];
/** Berth's own namespace for this run (POD_NAMESPACE), so the test does not share berth-system. */
const berthNs = `${id}-berth`;
const kubeNs = `kube-${id}`;
/** A registry that does not exist, served by the sandbox registry as its mirror. */
const MIRRORED = `mirrored-${id}.invalid`;

const image = (repo: string, tag = 'v1', host = reg.host) => `${host}/${id}/${repo}:${tag}`;

async function namespace(prefix: string): Promise<string> {
  const ns = await createNamespace(client, `${id}-${prefix}`);
  namespaces.push(ns);
  return ns;
}

async function applyPolicy(name: string, spec: Record<string, unknown>): Promise<void> {
  if (!policies.includes(name)) policies.push(name);
  await client.apply(
    ArchPlacement.ref,
    { apiVersion: ArchPlacement.apiVersion, kind: ArchPlacement.kind, metadata: { name }, spec },
    { fieldManager: 'test-author', force: true },
  );
}
const selectNamespaces = (...names: string[]) => ({
  matchExpressions: [{ key: 'kubernetes.io/metadata.name', operator: 'In', values: names }],
});

interface ContainerInput {
  image: string;
  imagePullPolicy?: string;
}
/** A webhook of the test's own, reached by URL, and the label its pods carry. */
const INJECTOR: WebhookRegistration = { mode: 'url', url: 'https://127.0.0.1:{port}' };
const INJECT_LABEL = 'berth.test/inject';

function podObject(
  namespace: string,
  name: string,
  containers: ContainerInput[],
  extra: { spec?: Record<string, unknown>; annotations?: Record<string, string> } = {},
): KubeObject {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace, ...(extra.annotations ? { annotations: extra.annotations } : {}) },
    spec: {
      nodeSelector: { [POOL]: id },
      containers: containers.map((c, i) => ({ name: `c${i}`, ...c })),
      ...extra.spec,
    },
  };
}
const createPod = async (...args: Parameters<typeof podObject>) =>
  (await client.create(Resources.pods, podObject(...args))) as ArchPod;
const getPod = (ns: string, name: string) => client.get<ArchPod>(Resources.pods, name, ns);

/** Creates the pod and returns it as admitted: gated (createAdmitted). */
const createGated = (...args: Parameters<typeof podObject>) =>
  createAdmitted(client, { namespace: args[0], name: args[1] }, () => createPod(...args), hasGate);

/** Waits until Berth has taken its gate off the pod and labelled it `state`. */
const podSettled = (ns: string, name: string, state: string, timeoutMs = 30_000) =>
  waitFor(
    `pod ${ns}/${name} ${state}, ungated`,
    async () => {
      const p = await getPod(ns, name);
      return p.metadata?.labels?.[STATE_LABEL] === state && !hasGate(p) && p;
    },
    { timeoutMs, observe: () => getPod(ns, name) },
  );
/** Waits until the scheduler bound the pod; returns its node. */
const scheduledOn = (ns: string, name: string) =>
  waitFor(`pod ${ns}/${name} scheduled`, async () => (await getPod(ns, name)).spec.nodeName, {
    observe: () => getPod(ns, name),
  });
/** The events of a pod with this reason, once there is one. */
const podEvent = (ns: string, name: string, type: string, reason: string) =>
  waitFor(
    `a ${type} ${reason} event on pod ${ns}/${name}`,
    async () =>
      (await client.list<Event>(Resources.events, { namespace: ns })).items.find(
        (e) => e.regarding?.name === name && e.type === type && e.reason === reason,
      ),
    { observe: async () => (await client.list<Event>(Resources.events, { namespace: ns })).items },
  );
const requiredTerms = (p: ArchPod) =>
  p.spec.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms;
const result = (p: ArchPod) =>
  JSON.parse(p.metadata!.annotations![RESULT_ANNOTATION]!) as {
    architectures: string[];
    images: { image: string; digest: string; platforms: string[] }[];
  };

/** GETs of Secrets the apiserver has served (its own metric: the only reader here is Berth). */
const secretGets = async () =>
  (await client.request<string>('GET', '/metrics'))
    .split('\n')
    .filter(
      (l) =>
        l.startsWith('apiserver_request_total{') &&
        l.includes('resource="secrets"') &&
        l.includes('verb="GET"'),
    )
    .reduce((n, l) => n + Number(l.split(' ').pop()), 0);

type PolicyStatus = { gated?: number; placed?: number; failed?: number; conditions?: Condition[] };
const policyObject = (name: string) =>
  client.get<KubeObject & { status?: PolicyStatus }>(ArchPlacement.ref, name);

/** A berth command as a user runs it (POD_NAMESPACE: Berth's namespace of this run). */
const berthCli = (...args: string[]) => runBerthCli(args, { POD_NAMESPACE: berthNs });

const kubeconfig = `--kubeconfig=${sandbox.kubeconfigPath}`;
/**
 * Waits until a new pod in `ns` is gated: the webhook registered, and its informer caches holding
 * the namespace's policy. Each probe pod is deleted at once. Its image is one no registry has, so
 * it is never known at admission (a known one would be placed there, never gated).
 */
const gatingIn = (ns: string, observe?: () => unknown) =>
  waitFor(
    `the arch webhook gating new pods in ${ns}`,
    async () => {
      const name = uniqueName('probe');
      const p = await createPod(ns, name, [{ image: `${reg.host}/${id}/probe-${name}:v1` }]);
      await client.delete(Resources.pods, name, ns, { gracePeriodSeconds: 0 });
      return hasGate(p);
    },
    { intervalMs: 500, ...(observe ? { observe } : {}) },
  );

const registriesFile = join(work, 'registries.yaml');
let main: string;
/** A namespace the policy covers whose Secrets Berth's install did not opt in. */
let unopted: string;
/**
 * Berth's identity with pods' pull secrets opted in for `main` and its namespace of this run
 * (`berth manifests --pull-secret-namespace`): no Secret elsewhere may it read.
 */
const identity = () => ({ pullSecretNamespaces: [main, berthNs] });
/** Berth's cluster-wide pull secret (`--arch-pull-secret`), in its namespace; made by the test of it. */
const CLUSTER_PULL_SECRET = 'cluster-pull';
async function runBerth(): Promise<BerthProcess> {
  const b = await startBerth(
    sandbox,
    [
      '--controllers=arch',
      `--arch-registry-ca=${reg.caPath}`,
      `--arch-registries=${registriesFile}`,
      `--arch-pull-secret=${berthNs}/${CLUSTER_PULL_SECRET}`,
      // The longest wait for a new image at admission: a registry read on a loaded machine.
      '--arch-admission-wait=1.5',
      '--log-level=info',
    ],
    { capture: true, kubeconfig: await berthKubeconfig(sandbox, identity()) },
  );
  // The apiserver's webhook configuration cache lags the registration: probe until a pod is gated.
  await gatingIn(namespaces[0]!, () => b.output().slice(-3000)).catch(async (e: unknown) => {
    await b.stop();
    throw e;
  });
  return b;
}

before(async () => {
  const r = sandbox.registry;
  assert.ok(r, 'the test sandbox runs a registry (this file says test-driver: registry)');
  reg = r;
  pusher = new RegistryPusher(reg);
  proxy = await startFaultProxy(reg);
  await installCrds(client);
  const [amd] = await addNodes(client, { prefix: `${id}-amd`, arch: 'amd64', labels: { [POOL]: id } });
  const [arm] = await addNodes(client, { prefix: `${id}-arm`, arch: 'arm64', labels: { [POOL]: id } });
  const [ppc] = await addNodes(client, { prefix: `${id}-ppc`, arch: 'ppc64le', labels: { [POOL]: id } });
  Object.assign(nodes, { amd64: amd, arm64: arm, ppc64le: ppc });

  // The images: single-architecture ones (the platform only in their config blob) and indexes.
  await pusher.pushImage(`${id}/amd`, 'v1', platform('linux/amd64'));
  await pusher.pushImage(`${id}/arm`, 'v1', platform('linux/arm64'), 'docker');
  await pusher.pushImage(`${id}/s390x`, 'v1', platform('linux/s390x'));
  await pusher.pushIndex(
    `${id}/multi`,
    'v1',
    ['linux/amd64', 'linux/arm/v7', 'linux/ppc64le'].map(platform),
    { attestations: true },
  );

  // The sandbox registry and its fault proxy are on 127.0.0.1: allowed, as an admin allows a
  // registry on a private address (decision 0025).
  writeFileSync(
    registriesFile,
    toYaml({
      registries: {
        [MIRRORED]: { mirrors: [{ url: reg.url }], allowPrivate: true },
        [reg.host]: { allowPrivate: true },
        [proxy.host]: { allowPrivate: true },
      },
    }),
  );
  main = await namespace('main');
  unopted = await namespace('unopted');
  await client.create(Resources.namespaces, {
    apiVersion: 'v1',
    kind: 'Namespace',
    metadata: { name: kubeNs },
  });
  await client.create(Resources.namespaces, {
    apiVersion: 'v1',
    kind: 'Namespace',
    metadata: { name: berthNs },
  });
  namespaces.push(kubeNs, berthNs);
  await applyPolicy(`${id}-main`, {
    namespaceSelector: selectNamespaces(main, unopted, kubeNs, berthNs),
    onFailure: { action: 'Release', retries: 1 },
  });
  process.env['POD_NAMESPACE'] = berthNs;
  berth = await runBerth();
});

after(async () => {
  await berth?.stop();
  // Berth is gone: take its finalizers off by hand (deploy/README's last resort), then everything else.
  for (const name of policies) {
    await client
      .patch(ArchPlacement.ref, name, { metadata: { finalizers: null } }, { type: 'merge' })
      .catch(() => {});
    await client.delete(ArchPlacement.ref, name).catch(() => {});
  }
  await client.delete(Resources.mutatingWebhookConfigurations, 'berth').catch(() => {});
  for (const ns of namespaces) await deleteNamespace(client, ns);
  await deleteNodes(client, Object.values(nodes));
  await proxy?.close();
  rmSync(work, { recursive: true, force: true });
  client.close();
});

describe('NodeAffinity mode', () => {
  test("the seed's example: amd64-only and amd64+arm+ppc64le images place the pod on amd64", async () => {
    // Images Berth has not read: the webhook asks the controller to, and places the pod at
    // admission once they are read (within --arch-admission-wait), never gated.
    const name = uniqueName('seed');
    const created = await createPod(main, name, [{ image: image('amd') }, { image: image('multi') }]);
    assert.equal(hasGate(created), false, 'placed at admission, not gated');
    assert.equal(created.metadata?.labels?.[STATE_LABEL], 'Placed');
    assert.equal(created.metadata?.annotations?.[POLICY_ANNOTATION], `${id}-main`);
    const terms = requiredTerms(created);
    assert.deepEqual(terms, [{ matchExpressions: [{ key: ARCH_LABEL, operator: 'In', values: ['amd64'] }] }]);
    const r = result(created);
    assert.deepEqual(r.architectures, ['amd64']);
    assert.deepEqual(
      r.images.map((i) => [i.image, i.platforms]),
      [
        [image('amd'), ['linux/amd64']],
        // The attestation entries (unknown/unknown) are no platform; arm keeps its variant.
        [image('multi'), ['linux/amd64', 'linux/arm/v7', 'linux/ppc64le']],
      ],
    );
    for (const i of r.images) assert.match(i.digest, /^sha256:[0-9a-f]{64}$/);
    assert.equal(await scheduledOn(main, name), nodes.amd64);
    assert.match((await podEvent(main, name, 'Normal', 'Placed')).note, /amd64 at admission/);

    // A registry slower than the webhook's wait: the pod is gated, and the controller places it
    // once the read it asked for at admission is in.
    const repos = ['amd', 'multi'].map((repo) => `${id}/${repo}`);
    proxy.fail({ path: new RegExp(`/(${repos.join('|')})/`), delayMs: 3000, times: Infinity });
    const slowImages = [
      { image: image('amd', 'v1', proxy.host) },
      { image: image('multi', 'v1', proxy.host) },
    ];
    const slow = uniqueName('seed');
    const gated = await createGated(main, slow, slowImages);
    assert.equal(gated.metadata?.labels?.[STATE_LABEL], 'Gated');
    const placed = await podSettled(main, slow, 'Placed');
    proxy.clear();
    assert.deepEqual(requiredTerms(placed), terms);
    assert.equal(await scheduledOn(main, slow), nodes.amd64);
    const ev = await podEvent(main, slow, 'Normal', 'Placed');
    assert.match(ev.note, /amd64/);
    assert.doesNotMatch(ev.note, /at admission/);

    // Every image now known: the next such pod is placed at admission at once.
    const again = uniqueName('seed');
    const second = await createPod(main, again, slowImages);
    assert.equal(hasGate(second), false, 'placed at admission, not gated');
    assert.deepEqual(requiredTerms(second), terms);
    assert.match((await podEvent(main, again, 'Normal', 'Placed')).note, /amd64 at admission/);
  });

  test('a sidecar a later webhook injects counts: the apiserver asks Berth again, and the pod is placed on every image', async () => {
    // An injector whose configuration sorts after Berth's (the apiserver calls them by name): it
    // appends an amd64-only container to this test's pods.
    const inject = uniqueName('zz-inject');
    const runnable = new WebhookRunnable({
      client,
      server: { port: 0, certificates: generatedCertificates(INJECTOR) },
      registration: INJECTOR,
      specs: [
        {
          name: 'sidecar.test.berth.dev',
          path: '/inject',
          kind: 'mutating',
          handler: (req) => {
            const pod = req.object as ArchPod;
            const copy = structuredClone(pod);
            copy.spec.containers = [...copy.spec.containers, { name: 'proxy', image: image('amd') }];
            return { allowed: true, patch: mutate(pod, copy) };
          },
          rules: [{ operations: ['CREATE'], apiGroups: [''], apiVersions: ['v1'], resources: ['pods'] }],
          failurePolicy: 'Fail',
          objectSelector: { matchLabels: { [INJECT_LABEL]: inject } },
        },
      ],
      berthNamespace: berthNs,
      configName: inject,
      logger: rootLogger.child({}, { level: 'warn' }),
    });
    const stop = new AbortController();
    await runnable.start(stop.signal);
    await runnable.ready();
    try {
      const object = podObject(main, 'sidecar', [{ image: image('multi') }]);
      object.metadata!.labels = { [INJECT_LABEL]: inject };
      // The injector's registration reaches the apiserver's cache a moment later: until then pods pass it by.
      const created = await waitFor(
        'a pod the injector saw',
        async () => {
          const p = (await client.create(Resources.pods, {
            ...object,
            metadata: { ...object.metadata, name: uniqueName('sidecar') },
          })) as ArchPod;
          return p.spec.containers.length === 2 && p;
        },
        { timeoutMs: 30_000 },
      );
      assert.equal(hasGate(created), false, 'placed at admission');
      // multi alone would be amd64, arm and ppc64le; with the injected amd64-only sidecar, amd64.
      assert.deepEqual(requiredTerms(created), [
        { matchExpressions: [{ key: ARCH_LABEL, operator: 'In', values: ['amd64'] }] },
      ]);
      assert.deepEqual(
        result(created).images.map((i) => i.image),
        [image('multi'), image('amd')],
      );
    } finally {
      stop.abort();
      await runnable.stop();
      await client.delete(Resources.mutatingWebhookConfigurations, inject).catch(() => {});
    }
  });

  test('berth explain pod says why the affinity is what it is; berth arch inspect lists the platforms', async () => {
    const name = uniqueName('explain');
    await createPod(main, name, [{ image: image('multi') }]);
    await podSettled(main, name, 'Placed');
    const out = berthCli('explain', 'pod', `${main}/${name}`, kubeconfig);
    assert.equal(out.status, 0, out.stderr);
    assert.match(out.stdout, new RegExp(`ArchPlacement ${id}-main \\(mode NodeAffinity\\): Placed`));
    assert.match(out.stdout, /every image supports: amd64, arm, ppc64le/);
    assert.match(out.stdout, /@ sha256:[0-9a-f]{64}: linux\/amd64, linux\/arm\/v7, linux\/ppc64le/);
    assert.match(
      out.stdout,
      /required node affinity \(any term\): \{kubernetes\.io\/arch In \[amd64, arm, ppc64le\]\}/,
    );

    const exempt = uniqueName('explain-skip');
    await createPod(main, exempt, [{ image: image('amd') }], {
      annotations: { [SKIP_ANNOTATION]: 'true' },
    });
    const skipped = berthCli('explain', 'pod', `${main}/${exempt}`, kubeconfig);
    assert.equal(skipped.status, 0, skipped.stderr);
    assert.match(skipped.stdout, new RegExp(`never gated: annotation ${SKIP_ANNOTATION}=true`));

    const inspect = berthCli('arch', 'inspect', image('multi'), `--registries=${reg.registriesPath}`);
    assert.equal(inspect.status, 0, inspect.stderr);
    assert.deepEqual(
      inspect.stdout.split('\n').filter((l) => l.startsWith('  linux/') || l.includes('unknown')),
      ['  linux/amd64', '  linux/arm/v7', '  linux/ppc64le'],
    );
  });

  test('a private repository: refused without a pull secret, placed with the pod’s imagePullSecret', async () => {
    const user = `${id}-puller`;
    const password = uniqueName('pw');
    const removePolicy = addTokenPolicy(reg, { users: { [user]: { password, pull: [`private/${id}/*`] } } });
    try {
      const repo = `private/${id}/app`;
      await pusher.pushIndex(repo, 'v1', ['linux/arm64', 'linux/ppc64le'].map(platform));
      const ref = `${reg.host}/${repo}:v1`;
      const auth = Buffer.from(`${user}:${password}`).toString('base64');
      await client.create(Resources.secrets, {
        apiVersion: 'v1',
        kind: 'Secret',
        metadata: { name: 'pull', namespace: main },
        type: 'kubernetes.io/dockerconfigjson',
        data: {
          '.dockerconfigjson': Buffer.from(JSON.stringify({ auths: { [reg.host]: { auth } } })).toString(
            'base64',
          ),
        },
      });
      // Anonymous, then with the secret: a result read with credentials answers only pods naming
      // that secret (decision 0024; tenant-registry.test.ts tries the other order, across tenants).
      const without = uniqueName('private-anon');
      await createPod(main, without, [{ image: ref }]);
      const failed = await podSettled(main, without, 'Failed');
      assert.match(failed.metadata!.annotations![FAILURE_ANNOTATION]!, /^Unauthorized: /);
      assert.equal(requiredTerms(failed), undefined, 'released as it is (fail open)');
      const ev = await podEvent(main, without, 'Warning', 'InspectionFailed');
      assert.match(ev.note, /Unauthorized/);
      assert.match(ev.note, /released unplaced/);
      // A namespace whose Secrets the install did not opt in: its pod's secret is not read (the
      // Warning names the opt-in), and the registry refuses the images as it did without one.
      await client.create(Resources.secrets, dockerConfigSecret(unopted, 'pull', reg.host, user, password));
      const notOpted = uniqueName('private-unopted');
      await createPod(unopted, notOpted, [{ image: ref }], {
        spec: { imagePullSecrets: [{ name: 'pull' }] },
      });
      const forbidden = await podEvent(unopted, notOpted, 'Warning', 'PullSecretForbidden');
      assert.match(forbidden.note, new RegExp(`--pull-secret-namespace ${unopted}\\b`));
      assert.match(forbidden.note, /arch\.pullSecretNamespaces/);
      const refused = await podSettled(unopted, notOpted, 'Failed');
      assert.match(refused.metadata!.annotations![FAILURE_ANNOTATION]!, /^Unauthorized: /);
      const withSecret = uniqueName('private');
      await createPod(main, withSecret, [{ image: ref }], { spec: { imagePullSecrets: [{ name: 'pull' }] } });
      const placed = await podSettled(main, withSecret, 'Placed');
      assert.deepEqual(result(placed).architectures, ['arm64', 'ppc64le']);
      assert.ok([nodes.arm64, nodes.ppc64le].includes(await scheduledOn(main, withSecret)));

      // `berth arch inspect --pull-secret`: refused without, read with the Secret's manifest or a
      // docker config.json (each form a user has at hand).
      const inspect = (...flags: string[]) =>
        berthCli('arch', 'inspect', ref, `--registries=${reg.registriesPath}`, ...flags);
      const anonymous = inspect();
      assert.notEqual(anonymous.status, 0, anonymous.stdout);
      assert.match(
        anonymous.stderr,
        /refused anonymous access .*\(tried anonymously: no pull secret matched\)/,
      );
      const secretFile = join(work, 'pull-secret.json');
      writeFileSync(secretFile, JSON.stringify(dockerConfigSecret(main, 'pull', reg.host, user, password)));
      const configFile = join(work, 'config.json');
      writeFileSync(configFile, JSON.stringify({ auths: { [reg.host]: { auth } } }));
      for (const file of [secretFile, configFile]) {
        const read = inspect(`--pull-secret=${file}`);
        assert.equal(read.status, 0, read.stderr);
        assert.deepEqual(
          read.stdout.split('\n').filter((l) => l.startsWith('  linux/')),
          ['  linux/arm64', '  linux/ppc64le'],
        );
      }
    } finally {
      removePolicy();
    }
  });

  test('--arch-pull-secret: a private repository read with the cluster-wide secret, read once for many pods', async () => {
    const user = `${id}-global`;
    const password = uniqueName('pw');
    const removePolicy = addTokenPolicy(reg, {
      users: { [user]: { password, pull: [`private/${id}/global/*`] } },
    });
    try {
      const repo = `private/${id}/global/app`;
      await pusher.pushIndex(repo, 'v1', ['linux/arm64', 'linux/ppc64le'].map(platform));
      // Keyed by path, so it serves this repository only (the kubelet's matching), not the others'.
      await client.create(
        Resources.secrets,
        dockerConfigSecret(berthNs, CLUSTER_PULL_SECRET, `${reg.host}/private/${id}/global`, user, password),
      );
      const before = await secretGets();
      // Always: every pod's tag is read again (at admission, or once gated), each time with the secret.
      const names = Array.from({ length: 6 }, () => uniqueName('global'));
      for (const name of names)
        await createPod(main, name, [{ image: `${reg.host}/${repo}:v1`, imagePullPolicy: 'Always' }]);
      for (const name of names)
        assert.deepEqual(result(await podSettled(main, name, 'Placed')).architectures, ['arm64', 'ppc64le']);
      // Kept for seconds: one GET serves the pods of a burst (each pod read it before).
      const gets = (await secretGets()) - before;
      assert.ok(gets >= 1 && gets <= 2, `${gets} GETs of secrets for ${names.length} pods`);
    } finally {
      removePolicy();
      await client.delete(Resources.secrets, CLUSTER_PULL_SECRET, berthNs).catch(() => undefined);
    }
  });

  test('a ServiceAccount’s imagePullSecrets reach the pod; a password rotated after a refusal is read again', async () => {
    const user = `${id}-sa`;
    const password = uniqueName('pw');
    const removePolicy = addTokenPolicy(reg, {
      users: { [user]: { password, pull: [`private/${id}/sa/*`] } },
    });
    try {
      const repo = `private/${id}/sa/app`;
      await pusher.pushImage(repo, 'v1', platform('linux/ppc64le'));
      const ref = `${reg.host}/${repo}:v1`;
      await client.create(Resources.secrets, dockerConfigSecret(main, 'sa-pull', reg.host, user, 'wrong'));
      await client.create(Resources.serviceAccounts, {
        apiVersion: 'v1',
        kind: 'ServiceAccount',
        metadata: { name: 'puller', namespace: main },
        imagePullSecrets: [{ name: 'sa-pull' }],
      });
      const refused = uniqueName('sa-refused');
      const p = await createPod(main, refused, [{ image: ref }], { spec: { serviceAccountName: 'puller' } });
      // The ServiceAccount admission plugin copied the secret in before Berth's webhook saw the pod.
      assert.deepEqual(p.spec.imagePullSecrets, [{ name: 'sa-pull' }]);
      const failed = await podSettled(main, refused, 'Failed');
      assert.match(failed.metadata!.annotations![FAILURE_ANNOTATION]!, /^Unauthorized: .*sa-pull/s);

      // Rotated: the refusal dropped the secret Berth kept, so the next pod reads the new password.
      await client.apply(Resources.secrets, dockerConfigSecret(main, 'sa-pull', reg.host, user, password), {
        fieldManager: 'test-author',
        force: true,
      });
      const placed = uniqueName('sa-placed');
      await createPod(main, placed, [{ image: ref }], { spec: { serviceAccountName: 'puller' } });
      assert.deepEqual(result(await podSettled(main, placed, 'Placed')).architectures, ['ppc64le']);
      assert.equal(await scheduledOn(main, placed), nodes.ppc64le);
    } finally {
      removePolicy();
    }
  });

  test('a mirror: an image of a registry that does not exist is read from its mirror', async () => {
    const name = uniqueName('mirror');
    await createPod(main, name, [{ image: `${MIRRORED}/${id}/arm:v1` }]);
    const placed = await podSettled(main, name, 'Placed');
    assert.deepEqual(result(placed).architectures, ['arm64']);
    assert.equal(await scheduledOn(main, name), nodes.arm64);
  });

  test('a tag that moves: cached within its TTL, revalidated for imagePullPolicy Always', async () => {
    const repo = `${id}/moving`;
    const first = await pusher.pushImage(repo, 'v1', platform('linux/arm64'));
    const a = uniqueName('moving-a');
    await createPod(main, a, [{ image: image('moving') }]);
    assert.equal(result(await podSettled(main, a, 'Placed')).images[0]!.digest, first.digest);

    const second = await pusher.pushImage(repo, undefined, platform('linux/ppc64le'));
    await pusher.retag(repo, 'v1', second.digest);
    // IfNotPresent: the tag's digest is trusted for its TTL (the registry is not asked per pod).
    const b = uniqueName('moving-b');
    await createPod(main, b, [{ image: image('moving'), imagePullPolicy: 'IfNotPresent' }]);
    const placedB = await podSettled(main, b, 'Placed');
    assert.equal(result(placedB).images[0]!.digest, first.digest);
    // Always: the kubelet would pull the new digest, so Berth reads the tag again, while the pod
    // waits at admission: placed there on the new digest, never on the cached one, and not gated.
    const c = uniqueName('moving-c');
    const createdC = await createPod(main, c, [{ image: image('moving'), imagePullPolicy: 'Always' }]);
    assert.equal(hasGate(createdC), false, 'placed at admission, not gated');
    assert.equal(result(createdC).images[0]!.digest, second.digest);
    assert.deepEqual(result(createdC).architectures, ['ppc64le']);
    assert.equal(await scheduledOn(main, c), nodes.ppc64le);
  });

  test('an empty intersection leaves the pod unschedulable on purpose, with a Warning naming the images', async () => {
    const name = uniqueName('none');
    await createPod(main, name, [{ image: image('amd') }, { image: image('arm') }]);
    const placed = await podSettled(main, name, 'Placed');
    assert.deepEqual(result(placed).architectures, []);
    assert.deepEqual(requiredTerms(placed), [
      { matchExpressions: [{ key: ARCH_LABEL, operator: 'In', values: ['berth-no-common-architecture'] }] },
    ]);
    const ev = await podEvent(main, name, 'Warning', 'NoCommonArchitecture');
    assert.match(ev.note, new RegExp(`${image('amd').replace(/[.]/g, '\\.')} \\(amd64\\)`));
    assert.match(ev.note, /\(arm64\)/);
    await waitFor('the scheduler finding the pod unschedulable', async () => {
      const p = await client.get(Resources.pods, name, main);
      const c = findCondition((p['status'] as { conditions?: Condition[] }).conditions, 'PodScheduled');
      return c?.status === 'False' && c.reason === 'Unschedulable';
    });
  });
});

describe('exemptions: nothing gated that must not be', () => {
  test('kube-* namespaces, Berth’s namespace, nodeName, arch constrained, opt-out, DaemonSet pods', async () => {
    const cases: [string, KubeObject][] = [
      ['kube-*', podObject(kubeNs, uniqueName('kube'), [{ image: image('amd') }])],
      ["Berth's namespace", podObject(berthNs, uniqueName('own'), [{ image: image('amd') }])],
      [
        'nodeName',
        podObject(main, uniqueName('named'), [{ image: image('arm') }], { spec: { nodeName: nodes.amd64 } }),
      ],
      [
        'nodeSelector on arch',
        podObject(main, uniqueName('sel'), [{ image: image('arm') }], {
          spec: { nodeSelector: { [POOL]: id, [ARCH_LABEL]: 'amd64' } },
        }),
      ],
      [
        'every required term on arch',
        podObject(main, uniqueName('aff'), [{ image: image('arm') }], {
          spec: {
            affinity: {
              nodeAffinity: {
                requiredDuringSchedulingIgnoredDuringExecution: {
                  nodeSelectorTerms: [
                    { matchExpressions: [{ key: ARCH_LABEL, operator: 'In', values: ['amd64'] }] },
                  ],
                },
              },
            },
          },
        }),
      ],
      [
        'opt-out annotation',
        podObject(main, uniqueName('skip'), [{ image: image('arm') }], {
          annotations: { [SKIP_ANNOTATION]: 'true' },
        }),
      ],
    ];
    for (const [why, pod] of cases) {
      const p = (await client.create(Resources.pods, pod)) as ArchPod;
      assert.equal(hasGate(p), false, `${why}: not gated`);
      assert.equal(p.metadata?.labels?.[STATE_LABEL], undefined, `${why}: not labelled`);
    }
    // The DaemonSet controller makes the pods; each runs on the node it is made for.
    const ds = uniqueName('ds');
    await client.create(Resources.daemonSets, {
      apiVersion: 'apps/v1',
      kind: 'DaemonSet',
      metadata: { name: ds, namespace: main },
      spec: {
        selector: { matchLabels: { app: ds } },
        template: {
          metadata: { labels: { app: ds } },
          spec: { nodeSelector: { [POOL]: id }, containers: [{ name: 'c', image: image('arm') }] },
        },
      },
    });
    const dsPods = await waitFor('the DaemonSet’s three pods', async () => {
      const items = (
        await client.list<ArchPod>(Resources.pods, { namespace: main, query: { labelSelector: `app=${ds}` } })
      ).items;
      return items.length === 3 && items;
    });
    for (const p of dsPods) {
      assert.equal(hasGate(p), false, `DaemonSet pod ${p.metadata!.name} not gated`);
      assert.equal(p.metadata?.labels?.[STATE_LABEL], undefined);
    }
    await waitFor('the DaemonSet’s pods running on every node of the pool, amd64 included', async () => {
      const items = (
        await client.list<ArchPod>(Resources.pods, { namespace: main, query: { labelSelector: `app=${ds}` } })
      ).items;
      return (
        items
          .map((p) => p.spec.nodeName)
          .sort()
          .join() === Object.values(nodes).sort().join()
      );
    });
    await client.delete(Resources.daemonSets, ds, main);
  });
});

describe('a registry that fails: the pod is released with a Warning, nothing crashes', () => {
  const faulty = (repo: string) => image(repo, 'v1', proxy.host);
  const cases: {
    name: string;
    reason: string;
    /** The reasons the pod may carry, when more than `reason`. */
    accept?: string;
    setup: (repo: string) => Promise<() => Promise<void>>;
  }[] = [
    {
      name: 'down',
      reason: 'Unreachable',
      setup: async () => {
        await proxy.down();
        return () => proxy.up();
      },
    },
    {
      name: '401',
      reason: 'Unauthorized',
      setup: async (repo) => {
        proxy.fail({ path: new RegExp(`/${repo}/`), status: 401, times: Infinity });
        return async () => proxy.clear();
      },
    },
    {
      name: '404',
      reason: 'NotFound',
      setup: async (repo) => {
        proxy.fail({ path: new RegExp(`/${repo}/`), status: 404, times: Infinity });
        return async () => proxy.clear();
      },
    },
    {
      name: '429',
      reason: 'RateLimited',
      setup: async (repo) => {
        proxy.fail({ path: new RegExp(`/${repo}/`), status: 429, retryAfter: '1', times: Infinity });
        return async () => proxy.clear();
      },
    },
    {
      name: 'malformed',
      reason: 'Malformed',
      // The read asked at admission took the tag from the garbage; the controller's read after it
      // revalidates the tag with a HEAD, which the fault leaves alone, and the content it then gets
      // by digest does not match: either way the registry's answer is named.
      accept: 'Malformed|DigestMismatch',
      setup: async (repo) => {
        proxy.fail({
          method: 'GET',
          path: new RegExp(`/${repo}/manifests/`),
          body: 'malformed',
          times: Infinity,
        });
        return async () => proxy.clear();
      },
    },
  ];
  for (const c of cases) {
    test(`registry ${c.name}: released unplaced as ${c.reason}, with a Warning`, async () => {
      const repo = `fault-${c.name}`;
      await pusher.pushIndex(`${id}/${repo}`, 'v1', ['linux/arm64'].map(platform));
      const undo = await c.setup(`${id}/${repo}`);
      try {
        const name = uniqueName(`fault-${c.name}`);
        await createPod(main, name, [{ image: faulty(repo) }]);
        const failed = await podSettled(main, name, 'Failed', 90_000);
        const reasons = c.accept ?? c.reason;
        assert.match(failed.metadata!.annotations![FAILURE_ANNOTATION]!, new RegExp(`^(${reasons}): `));
        assert.equal(requiredTerms(failed), undefined, 'released as it is');
        const ev = await podEvent(main, name, 'Warning', 'InspectionFailed');
        assert.match(ev.note, new RegExp(reasons));
        await scheduledOn(main, name);
      } finally {
        await undo();
      }
      const health = await fetch(`http://127.0.0.1:${berth!.healthPort}/healthz`);
      assert.equal(health.status, 200, 'Berth is still up');
    });
  }

  test('Fallback: a pod whose image cannot be read is placed on the fallback architecture', async () => {
    const ns = await namespace('fallback');
    await applyPolicy(`${id}-fallback`, {
      namespaceSelector: selectNamespaces(ns),
      onFailure: { action: 'Fallback', fallbackArchitecture: 'arm64', retries: 0 },
    });
    await gatingIn(ns);
    const name = uniqueName('fallback');
    await createPod(ns, name, [{ image: image('does-not-exist') }]);
    const failed = await podSettled(ns, name, 'Failed');
    assert.match(failed.metadata!.annotations![FAILURE_ANNOTATION]!, /^NotFound: /);
    assert.deepEqual(requiredTerms(failed), [
      { matchExpressions: [{ key: ARCH_LABEL, operator: 'In', values: ['arm64'] }] },
    ]);
    const ev = await podEvent(ns, name, 'Warning', 'InspectionFailed');
    assert.match(ev.note, /placed on the fallback architecture arm64/);
    assert.equal(await scheduledOn(ns, name), nodes.arm64);
  });
});

describe('status', () => {
  test('counts gated, placed and failed pods; conditions name what is wrong', async () => {
    const ns = await namespace('status');
    const name = `${id}-status`;
    await applyPolicy(name, {
      namespaceSelector: selectNamespaces(ns),
      onFailure: { action: 'Release', retries: 0 },
    });
    await waitFor('the status policy Ready', async () => {
      const c = findCondition((await policyObject(name)).status?.conditions, 'Ready');
      return c?.status === 'True';
    });
    // The webhook's thread gets the policy a moment after the controller: gated from then on.
    await gatingIn(ns);
    await createPod(ns, 'ok', [{ image: image('amd') }]);
    await createPod(ns, 'missing', [{ image: image('missing') }]);
    await createPod(ns, 'nowhere', [{ image: image('s390x') }]);
    const status = await waitFor(
      `${name}: placed 2, failed 1`,
      async () => {
        const s = (await policyObject(name)).status;
        return s?.placed === 2 && s.failed === 1 && s.gated === 0 && s;
      },
      { observe: () => policyObject(name) },
    );
    const schedulable = findCondition(status.conditions, 'ArchitecturesSchedulable');
    assert.equal(schedulable?.status, 'False');
    assert.match(schedulable!.message ?? '', /s390x/);
    const failing = findCondition(status.conditions, 'InspectionsFailing');
    assert.equal(failing?.status, 'True');
    assert.match(failing!.message ?? '', /1 pod\(s\): NotFound/);
    assert.equal(findCondition(status.conditions, 'Ready')?.status, 'False');
    const warning = await waitFor('a Warning on the policy', async () =>
      (await client.list<Event>(Resources.events, { namespace: 'default' })).items.find(
        (e) => e.regarding?.kind === 'ArchPlacement' && e.regarding.name === name && e.type === 'Warning',
      ),
    );
    assert.ok(warning);

    // The pods that caused the problems go: the counts and conditions follow.
    await client.delete(Resources.pods, 'missing', ns, { gracePeriodSeconds: 0 });
    await client.delete(Resources.pods, 'nowhere', ns, { gracePeriodSeconds: 0 });
    await waitFor(
      `${name}: placed 1, failed 0, Ready`,
      async () => {
        const s = (await policyObject(name)).status;
        return (
          s?.placed === 1 &&
          s.failed === 0 &&
          findCondition(s.conditions, 'Ready')?.status === 'True' &&
          findCondition(s.conditions, 'InspectionsFailing')?.status === 'False'
        );
      },
      { observe: () => policyObject(name) },
    );
  });
});

describe('no stranded pods', () => {
  test('Berth killed while pods are gated: a restart resumes them; a policy deleted meanwhile releases its own', async () => {
    const resumeNs = await namespace('resume');
    const doomedNs = await namespace('doomed');
    const resume = `${id}-resume`;
    const doomed = `${id}-doomed`;
    for (const [p, ns] of [
      [resume, resumeNs],
      [doomed, doomedNs],
    ] as const)
      await applyPolicy(p, { namespaceSelector: selectNamespaces(ns) });
    for (const p of [resume, doomed])
      await waitFor(`${p} carrying its finalizer`, async () =>
        (await policyObject(p)).metadata?.finalizers?.includes(ARCH_FINALIZER),
      );
    // A registry that answers in a minute: Berth holds the pods gated until it is killed.
    const repo = `${id}/slow`;
    await pusher.pushIndex(repo, 'v1', ['linux/amd64', 'linux/arm64'].map(platform));
    proxy.fail({ path: new RegExp(`/${repo}/`), delayMs: 60_000, times: Infinity });
    const slow = image('slow', 'v1', proxy.host);
    await gatingIn(doomedNs);
    const held = ['a', 'b', 'c'];
    for (const n of held) {
      await createGated(resumeNs, n, [{ image: slow }]);
      await createGated(doomedNs, n, [{ image: slow }]);
    }
    await holdsFor(
      'the pods staying gated while the registry is slow',
      async () => (await Promise.all(held.map((n) => getPod(resumeNs, n)))).every(hasGate),
      1000,
    );

    process.kill(berth!.pid, 'SIGKILL');
    await berth!.stop();
    berth = undefined;
    // Berth down: the webhook fails open, new pods are created ungated.
    const ungated = await createPod(resumeNs, 'while-down', [{ image: slow }]);
    assert.equal(hasGate(ungated), false, 'admitted ungated while Berth is down (failurePolicy Ignore)');
    await client.delete(ArchPlacement.ref, doomed);
    assert.ok((await policyObject(doomed)).metadata?.deletionTimestamp, 'held by its finalizer');
    proxy.clear();

    berth = await runBerth();
    for (const n of held) {
      const placed = await podSettled(resumeNs, n, 'Placed', 60_000);
      assert.deepEqual(result(placed).architectures, ['amd64', 'arm64']);
      const released = await podSettled(doomedNs, n, 'Released', 60_000);
      assert.match(
        released.metadata!.annotations![FAILURE_ANNOTATION]!,
        new RegExp(`${doomed} is being deleted`),
      );
      assert.equal(requiredTerms(released), undefined);
    }
    await waitFor(`${doomed} gone once its pods are released`, () =>
      policyObject(doomed).then(
        () => false,
        () => true,
      ),
    );
  });
});

describe('Taints mode (the seed) and berth arch clean', () => {
  test('nodes tainted by architecture, pods tolerating their intersection; clean after uninstall', async () => {
    const ns = await namespace('taints');
    const name = `${id}-taints`;
    await applyPolicy(name, { namespaceSelector: selectNamespaces(ns), mode: 'Taints' });
    const taintOf = async (node: string) =>
      (
        ((await client.get(Resources.nodes, node))['spec'] as { taints?: { key: string; value?: string }[] })
          .taints ?? []
      ).filter((t) => t.key === ARCH_TAINT);
    for (const [arch, node] of Object.entries(nodes))
      await waitFor(`${node} tainted ${ARCH_TAINT}=${arch}`, async () => {
        const t = await taintOf(node);
        return t.length === 1 && t[0]!.value === arch;
      });
    await gatingIn(ns);
    const pod = 'seed';
    await createPod(ns, pod, [{ image: image('amd') }, { image: image('multi') }]);
    const placed = await podSettled(ns, pod, 'Placed');
    assert.deepEqual(
      placed.spec.tolerations?.filter((t) => t.key === ARCH_TAINT),
      [{ key: ARCH_TAINT, operator: 'Equal', value: 'amd64', effect: 'NoSchedule' }],
    );
    assert.equal(requiredTerms(placed), undefined, 'Taints mode adds no affinity');
    assert.equal(await scheduledOn(ns, pod), nodes.amd64);

    // A pod Berth holds when it goes: its registry answers in a minute.
    const repo = `${id}/stuck`;
    await pusher.pushImage(repo, 'v1', platform('linux/amd64'));
    proxy.fail({ path: new RegExp(`/${repo}/`), delayMs: 60_000, times: Infinity });
    const stuck = 'stuck';
    await createGated(ns, stuck, [{ image: image('stuck', 'v1', proxy.host) }]);

    // Uninstall: Berth goes first; clean refuses while an ArchPlacement would taint again.
    await berth!.stop();
    berth = undefined;
    const refused = berthCli('arch', 'clean', kubeconfig);
    assert.notEqual(refused.status, 0);
    assert.match(refused.stderr, /ArchPlacements still exist/);
    for (const p of policies) await client.delete(ArchPlacement.ref, p).catch(() => {});
    const cleaned = berthCli('arch', 'clean', kubeconfig);
    assert.equal(cleaned.status, 0, cleaned.stderr);
    for (const node of Object.values(nodes)) {
      assert.match(cleaned.stdout, new RegExp(`node ${node}: removed taints ${ARCH_TAINT}:NoSchedule`));
      assert.deepEqual(await taintOf(node), []);
    }
    assert.match(cleaned.stdout, new RegExp(`pod ${ns}/${pod}: keeps its ${ARCH_TAINT} tolerations`));
    assert.match(cleaned.stdout, new RegExp(`pod ${ns}/${stuck}: gate removed, released unplaced`));
    const released = await getPod(ns, stuck);
    assert.equal(hasGate(released), false);
    assert.equal(released.metadata?.labels?.[STATE_LABEL], 'Released');
    await scheduledOn(ns, stuck);
    proxy.clear();
    // A second clean finds nothing to do.
    const again = berthCli('arch', 'clean', kubeconfig);
    assert.equal(again.status, 0, again.stderr);
    assert.doesNotMatch(again.stdout, /removed taints|gate removed/);
  });
});
