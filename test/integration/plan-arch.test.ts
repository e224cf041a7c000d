// test-driver: registry
//
// `berth plan -f` of an ArchPlacement against the real control plane and the sandbox registry,
// then `kubectl apply` of the same file with Berth running: the new pods of each planned
// Deployment got exactly the architectures the plan said (their node affinity, Berth's record),
// the workload it left out was left alone, and `plan --delete` said which workloads lose it: their
// new pods after `kubectl delete` are neither gated nor placed.
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { stringify } from 'yaml';
import type { ArchPod } from '../../src/arch/decide/pods.ts';
import { ARCH_LABEL, SCHEDULING_GATE, SKIP_ANNOTATION, STATE_LABEL } from '../../src/arch/types.ts';
import { ArchPlacement } from '../../src/arch/crd.ts';
import { installCrds } from '../../src/cli/install.ts';
import type { Plan } from '../../src/plan.ts';
import { ensureBinaries } from '../../src/sandbox/build.ts';
import type { SandboxRegistry } from '../../src/sandbox/registry.ts';
import { Resources, type KubeObject } from '../../src/runtime/api/meta.ts';
import { isNotFound } from '../../src/runtime/client/client.ts';
import { startBerth, type BerthProcess } from '../helpers/berth.ts';
import {
  addNodes,
  createNamespace,
  deleteNamespace,
  deleteNodes,
  kubectl,
  testSandbox,
  uniqueName,
} from '../helpers/cluster.ts';
import { platform, RegistryPusher } from '../helpers/registry.ts';
import { runPlan } from '../helpers/plan.ts';
import { waitFor } from '../helpers/wait.ts';

const sandbox = testSandbox();
const client = sandbox.client();
const id = uniqueName('plan-arch');
const dir = mkdtempSync(join(tmpdir(), 'berth-plan-arch-'));
const nodes: string[] = [];
let reg: SandboxRegistry;
let ns: string;
let berth: BerthProcess | undefined;
let kubectlPath: string;

/** The Deployments, by name: their images, and whether their template opts out. */
const workloads: Record<string, { images: string[]; skip?: true }> = {
  web: { images: ['multi'] },
  worker: { images: ['multi', 'arm'] },
  ibm: { images: ['s390x'] },
  opted: { images: ['multi'], skip: true },
};
const image = (repo: string) => `${reg.host}/${id}/${repo}:v1`;

before(async () => {
  assert.ok(sandbox.registry, 'the test sandbox runs a registry (this file says test-driver: registry)');
  reg = sandbox.registry;
  kubectlPath = (await ensureBinaries()).kubectl;
  await installCrds(client);
  const pusher = new RegistryPusher(reg);
  await pusher.pushIndex(`${id}/multi`, 'v1', ['linux/amd64', 'linux/arm64'].map(platform));
  await pusher.pushImage(`${id}/arm`, 'v1', platform('linux/arm64'));
  await pusher.pushImage(`${id}/s390x`, 'v1', platform('linux/s390x'));
  nodes.push(
    ...(await addNodes(client, { prefix: `${id}-amd`, arch: 'amd64' })),
    ...(await addNodes(client, { prefix: `${id}-arm`, arch: 'arm64' })),
  );
  ns = await createNamespace(client, 'plan-arch');
  // No replicas yet: the plan is of the pods they make next.
  for (const [name, w] of Object.entries(workloads))
    await client.create(Resources.deployments, {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: { name, namespace: ns },
      spec: {
        replicas: 0,
        selector: { matchLabels: { app: name } },
        template: {
          metadata: {
            labels: { app: name },
            ...(w.skip ? { annotations: { [SKIP_ANNOTATION]: 'true' } } : {}),
          },
          spec: { containers: w.images.map((i, n) => ({ name: `c${n}`, image: image(i) })) },
        },
      },
    });
  berth = await startBerth(sandbox, [
    '--controllers=arch',
    `--arch-registries=${reg.registriesPath}`,
    '--arch-admission-wait=1.5',
  ]);
});

after(async () => {
  await berth?.stop();
  await client
    .patch(ArchPlacement.ref, id, { metadata: { finalizers: null } }, { type: 'merge' })
    .catch(() => {});
  await client.delete(ArchPlacement.ref, id).catch(() => {});
  if (ns) await deleteNamespace(client, ns);
  await deleteNodes(client, nodes);
  client.close();
});

const plan = (...args: string[]) =>
  runPlan(sandbox.kubeconfigPath, '--controllers=arch', `--arch-registries=${reg.registriesPath}`, ...args);

/** The plan's word on each Deployment of the namespace: its op and architectures, or nothing. */
function planned(p: Plan): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name of Object.keys(workloads)) {
    const e = p.effects.find((x) => x.kind === 'Deployment' && x.name === `${ns}/${name}`);
    out[name] = !e ? 'untouched' : e.op === '-' ? 'released' : /placed on ([^(]*) \(/.exec(e.what)![1]!;
  }
  return out;
}

/** What the Deployment's one pod got: the architectures of its node affinity, or untouched. */
async function got(name: string): Promise<string | undefined> {
  const pods = (
    await client.list<ArchPod>(Resources.pods, { namespace: ns, query: { labelSelector: `app=${name}` } })
  ).items;
  const p = pods.find((x) => !x.metadata?.deletionTimestamp);
  if (!p || (p.spec.schedulingGates ?? []).some((g) => g.name === SCHEDULING_GATE)) return undefined;
  const state = p.metadata?.labels?.[STATE_LABEL];
  const archs = (
    p.spec.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms ?? []
  )
    .flatMap((t) => t.matchExpressions ?? [])
    .filter((e) => e.key === ARCH_LABEL && e.operator === 'In')
    .flatMap((e) => e.values ?? []);
  if (state === undefined && !archs.length) return 'untouched';
  return state === 'Placed' ? archs.join(', ') : `${state}: ${archs.join(', ')}`;
}

/** Each Deployment's new pod as Berth leaves it (got), once every one has one. */
const newPods = () =>
  waitFor(
    "every Deployment's new pod as Berth leaves it",
    async () => {
      const now = Object.fromEntries(
        await Promise.all(Object.keys(workloads).map(async (n) => [n, await got(n)])),
      );
      return Object.values(now).every((v) => v !== undefined) ? now : undefined;
    },
    { timeoutMs: 90_000 },
  );

const scale = (replicas: number) =>
  Promise.all(
    Object.keys(workloads).map((name) =>
      client.patch(Resources.deployments, name, { spec: { replicas } }, { namespace: ns, type: 'merge' }),
    ),
  );

/** Whether a new bare pod of the namespace is gated now (Berth's webhook and its policies' cache). */
async function probeGated(): Promise<boolean> {
  const name = uniqueName('probe');
  const p = await client.create<ArchPod>(Resources.pods, {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: ns },
    spec: { containers: [{ name: 'c', image: `${reg.host}/${id}/missing-${name}:v1` }] },
  });
  await client.delete(Resources.pods, name, ns, { gracePeriodSeconds: 0 }).catch((e) => {
    if (!isNotFound(e)) throw e;
  });
  return (p.spec.schedulingGates ?? []).some((g) => g.name === SCHEDULING_GATE);
}

test('an ArchPlacement: the new pods of each workload get the architectures the plan said; --delete likewise', async () => {
  const selecting = {
    apiVersion: 'berth.dev/v1alpha1',
    kind: 'ArchPlacement',
    metadata: { name: id },
    spec: { namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': ns } } },
  };
  const path = join(dir, 'arch.yaml');
  writeFileSync(path, stringify(selecting));

  const before = plan('-f', path);
  assert.equal(before.status, 2, 'changes: exit code 2');
  const want = planned(before.plan);
  assert.deepEqual(want, { web: 'amd64, arm64', worker: 'arm64', ibm: 's390x', opted: 'untouched' });
  assert.deepEqual(before.plan.unknown, []);
  assert.ok(
    before.plan.warnings.some((w) => w.startsWith(`Deployment ${ns}/ibm: no node has an architecture`)),
    before.plan.warnings.join('\n'),
  );

  kubectl(sandbox, kubectlPath, ['apply', '-f', path]);
  await waitFor('the arch webhook gating new pods of the namespace', probeGated, {
    intervalMs: 500,
    timeoutMs: 60_000,
  });
  await scale(1);
  const actual = await newPods();
  assert.deepEqual(actual, want, 'the plan predicted each workload exactly');
  assert.equal(plan('-f', path).status, 0, 'applied: nothing more would change');

  // Deleting: the plan says which workloads lose the policy; their next pods carry nothing of Berth's.
  const gone = plan('--delete', '-f', path);
  assert.equal(gone.status, 2);
  const wantGone = planned(gone.plan);
  assert.deepEqual(wantGone, { web: 'released', worker: 'released', ibm: 'released', opted: 'untouched' });
  kubectl(sandbox, kubectlPath, ['delete', '-f', path]);
  await waitFor(
    'the ArchPlacement gone',
    () => client.get(ArchPlacement.ref, id).then(() => false, isNotFound),
    {
      timeoutMs: 60_000,
    },
  );
  await waitFor('new pods of the namespace no longer gated', async () => !(await probeGated()), {
    intervalMs: 500,
    timeoutMs: 60_000,
  });
  await scale(0);
  await waitFor(
    'the old pods going',
    async () =>
      (await client.list<KubeObject>(Resources.pods, { namespace: ns })).items.every(
        (p) => p.metadata?.deletionTimestamp,
      ),
    { timeoutMs: 90_000 },
  );
  await scale(1);
  const after = await newPods();
  assert.deepEqual(
    after,
    Object.fromEntries(Object.keys(workloads).map((n) => [n, 'untouched'])),
    'no new pod is gated or placed once the plan said the policy lets it go',
  );
});
