// test-driver: alone — its agents controller would act on the placements of agents.test.ts (and
// that file's on its) if both ran at once.
//
// Hostile and careless AgentPlacements: seeded generated placements, valid and invalid (unknown and forbidden owner kinds, selectors that
// reach every pod, template-like and huge values, keys held by someone else, rapid churn). Berth
// must stay ready and responsive, say the truth in every status, keep a canary placement working,
// and change nothing it does not own on any node or pod. Every placement selects only this file's
// pods (or is only dry-run), because the sandbox is shared with other test files.
// BERTH_FUZZ_SEED=<n> replays a run; the seed is printed with the results.
import { PolicyKit } from '../../src/policy/kit.ts';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { prng } from '../helpers/prng.ts';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { after, before, test } from 'node:test';
import { setupAgents } from '../../src/agents/setup.ts';
import { WAIT_FOR_AGENT_ANNOTATION, SKIP_WAIT_FOR_AGENT_ANNOTATION } from '../../src/agents/admit.ts';
import { AgentPlacement } from '../../src/agents/crd.ts';
import { installCrds } from '../../src/cli/install.ts';
import { findCondition, type Condition } from '../../src/runtime/api/conditions.ts';
import type { Event } from '../../src/runtime/events/event.ts';
import { ApiError } from '../../src/runtime/client/client.ts';
import { Manager } from '../../src/runtime/manager/manager.ts';
import { Resources, type KubeObject } from '../../src/runtime/api/meta.ts';
import { generatedCertificates, WebhookRunnable } from '../../src/runtime/webhook/registration.ts';
import {
  addNodes,
  createNamespace,
  deleteNamespace,
  deleteNodes,
  podManifest,
  testSandbox,
  uniqueName,
} from '../helpers/cluster.ts';
import { berthClient, removeBerthIdentity } from '../helpers/berth.ts';
import { waitFor } from '../helpers/wait.ts';

const seed = Number(process.env['BERTH_FUZZ_SEED'] ?? 18);
const sandbox = testSandbox();
const client = sandbox.client();
const id = uniqueName('abuse');
const D = `${id}.example.com`;
const BERTH = 'berth-system';
const MINE = `${D}/mine`;
const HUGE = `${D}/huge`;
const CANARY = `${D}/canary`;
const POOL = `${D}/pool`;
const WEBHOOK_NS = `${D}/webhook`;
// A DNS subdomain prefix at its 253-character limit.
const LONG_DNS = `${'a'.repeat(63)}.${'b'.repeat(63)}.${'c'.repeat(63)}.${'d'.repeat(60 - D.length)}.${D}`;
const FOREIGN = 'test-admin';
// Berth's identity for this file: its webhook configuration, and Deployments as finalizer owners.
const identity = { name: id, webhookConfiguration: id, finalizerOwners: ['deployments.apps'] };

let ns = '';
let ns2 = '';
let kubeNs = '';
let nodes: string[] = [];
let manager: Manager | undefined;
let hooks: WebhookRunnable | undefined;
const delay = monitorEventLoopDelay({ resolution: 10 });
const notReady: number[] = [];
let readinessProbe: NodeJS.Timeout | undefined;

const r = prng(seed);

type Outcome = 'Placed' | 'Invalid' | 'OwnerKindUnknown' | 'Conflicting' | 'ClaimsRejected';
interface Case {
  name: string;
  spec: Record<string, unknown>;
  /** Refused by the apiserver (schema or CEL), or accepted with this Ready reason. */
  expect: 'Rejected' | Outcome;
  /** Applied with a server-side dry run only: it would reach pods beyond this file's. */
  dryRun?: boolean;
  /** What a Warning event must say, for the cases that announce a problem. */
  warning?: { reason: string; text: string };
}

const named = (...names: string[]) => ({
  matchExpressions: [{ key: 'kubernetes.io/metadata.name', operator: 'In', values: names }],
});
const mine = (extra: Record<string, string> = {}) => ({ matchLabels: { [MINE]: 'yes', ...extra } });

/** A valid placement that selects only this file's pods; its keys are its own. */
function validSpec(i: number): Record<string, unknown> {
  const extra = r.pick([
    [],
    [{ key: 'tier', operator: 'NotIn', values: ['b'] }],
    [{ key: 'tier', operator: 'In', values: ['a'] }],
    [{ key: 'tier', operator: 'Exists' }],
    [{ key: 'tier', operator: 'DoesNotExist' }],
    [{ key: 'app', operator: 'In', values: ['w', 'x'] }],
  ]);
  return {
    ...r.pick([{ namespaceSelector: named(ns) }, { namespaceSelector: named(ns, ns2) }, {}]),
    podSelector: {
      ...mine(r.chance(0.5) ? { app: r.pick(['w', 'x']) } : {}),
      ...(extra.length ? { matchExpressions: extra } : {}),
    },
    owner: r.chance(0.8) ? { uidLabel: POOL } : { controllerRef: true },
    nodeLabel: {
      key: r.pick([`${D}/agent-${i}`, `${LONG_DNS}/agent-${i}-${'n'.repeat(50)}`]),
      value: r.pick(['true', `v${i}-${'x'.repeat(55)}`.slice(0, 63)]),
    },
    // The CRD bounds a prefix at 253 characters: the long one drops the first DNS label.
    claimAnnotationPrefix: r.pick([`${D}/c${i}.`, `c${i}.${D}/`, `${LONG_DNS.slice(64)}/c${i}-`]),
  };
}

/** A valid base with one thing changed. */
const broken = (i: number, change: Record<string, unknown>) => ({ ...validSpec(i), ...change });

function generateCases(): Case[] {
  const cases: Case[] = [];
  let i = 0;
  const add = (expect: Case['expect'], spec: Record<string, unknown>, more: Partial<Case> = {}) =>
    cases.push({ ...more, name: `${id}-${more.name ?? `c${i}`}`, spec, expect });

  for (; i < 12; i++) add('Placed', validSpec(i));

  // Refused by the apiserver: its schema and CEL rules.
  const rejected: Record<string, unknown>[] = [
    { podSelector: {}, namespaceSelector: undefined },
    {
      podSelector: { matchExpressions: [{ key: 'skip', operator: 'DoesNotExist' }] },
      namespaceSelector: undefined,
    },
    { podSelector: {}, namespaceSelector: named(ns), waitForAgent: { port: 8085 } },
    { podSelector: {}, namespaceSelector: {} },
    { nodeLabel: { key: `${D}/too-long`, value: 'v'.repeat(64) } },
    { claimAnnotationPrefix: `${'p'.repeat(254)}` },
    { owner: { uidLabel: POOL }, finalizer: { name: `${D}/f` } },
    { owner: { uidLabel: POOL, controllerRef: true } },
    { waitForAgent: { port: 0 } },
  ];
  for (const change of rejected) add('Rejected', { ...validSpec(i), ...change }, { name: `rejected-${i++}` });

  // Accepted, but they would reach every pod of the cluster: a dry run only.
  add(
    'Placed',
    { ...validSpec(i), podSelector: {}, namespaceSelector: undefined, acknowledgeAllPods: true },
    {
      name: `all-pods-${i++}`,
      dryRun: true,
    },
  );
  add(
    'Placed',
    {
      ...validSpec(i),
      podSelector: {},
      namespaceSelector: {},
      waitForAgent: { port: 8085 },
      acknowledgeAllPods: true,
    },
    { name: `all-new-pods-${i++}`, dryRun: true },
  );
  // An opt-out selector within namespaces that require a label, and no waitForAgent: no acknowledgement needed.
  add(
    'Placed',
    {
      ...validSpec(i),
      podSelector: { matchExpressions: [{ key: HUGE, operator: 'DoesNotExist' }] },
      namespaceSelector: { matchLabels: { [WEBHOOK_NS]: 'yes' } },
    },
    { name: `opt-out-${i++}` },
  );

  // Accepted by the apiserver, but nothing Berth could write: Invalid, with a Warning.
  const invalid: [Record<string, unknown>, string][] = [
    [{ nodeLabel: { key: 'bad key/x y' } }, 'nodeLabel.key'],
    [{ nodeLabel: { key: 'a/b/c' } }, 'nodeLabel.key'],
    [{ nodeLabel: { key: `${D}/${'n'.repeat(64)}` } }, 'nodeLabel.key'],
    [{ nodeLabel: { key: `${D}/tpl`, value: '{{ label "x" }}' } }, 'nodeLabel.value'],
    [{ nodeLabel: { key: `${D}/tpl`, value: '${HOSTNAME}' } }, 'nodeLabel.value'],
    [{ nodeLabel: { key: `${D}/nl`, value: 'a\nb' } }, 'nodeLabel.value'],
    [{ nodeLabel: { key: `${D}/dash`, value: '-dash' } }, 'nodeLabel.value'],
    [{ claimAnnotationPrefix: 'Has Space/' }, 'claimAnnotationPrefix'],
    [{ claimAnnotationPrefix: `${D.toUpperCase()}/c.` }, 'claimAnnotationPrefix'],
    [{ podSelector: { ...mine(), matchExpressions: [{ key: 'app', operator: 'In' }] } }, 'operator In needs'],
    [
      { podSelector: { ...mine(), matchExpressions: [{ key: 'app', operator: 'Exists', values: ['w'] }] } },
      'takes no values',
    ],
    [{ podSelector: { matchLabels: { [MINE]: 'yes', 'bad key': 'x' } } }, 'podSelector.matchLabels key'],
    [{ owner: { uidLabel: 'pool uid' } }, 'owner.uidLabel'],
    [{ owner: { uidLabel: 'u'.repeat(100_000) } }, 'owner.uidLabel'],
    [
      {
        owner: { uidLabel: POOL, apiVersion: `${'g'.repeat(200_000)}/v1`, kind: 'Ghost' },
        finalizer: { name: `${D}/f` },
      },
      'owner.apiVersion',
    ],
    [
      { owner: { uidLabel: POOL, apiVersion: 'v1', kind: 'ConfigMap' }, finalizer: { name: 'release' } },
      'finalizer.name',
    ],
    [
      {
        namespaceSelector: named(ns),
        podSelector: mine({ app: 'w' }),
        waitForAgent: { port: 8085, image: 'busybox 1.36' },
      },
      'waitForAgent.image',
    ],
  ];
  for (const [change, text] of invalid)
    add('Invalid', broken(i, change), { name: `invalid-${i++}`, warning: { reason: 'InvalidSpec', text } });

  // Owner kinds for the finalizer: not served, and usable (Deployments, which this file's identity
  // opts into; a kind Berth may not watch is tested in agents.test.ts).
  const finalizer = { finalizer: { name: `${D}/release` } };
  add(
    'OwnerKindUnknown',
    broken(i, { owner: { uidLabel: POOL, apiVersion: `nope.${D}/v1`, kind: 'Ghost' }, ...finalizer }),
    {
      name: `ghost-${i++}`,
      warning: { reason: 'OwnerKindUnknown', text: `Ghost (nope.${D}/v1)` },
    },
  );
  add(
    'OwnerKindUnknown',
    broken(i, { owner: { uidLabel: POOL, apiVersion: 'v1', kind: 'Ghost' }, ...finalizer }),
    {
      name: `core-ghost-${i++}`,
      warning: { reason: 'OwnerKindUnknown', text: 'Ghost (v1)' },
    },
  );
  add(
    'Placed',
    broken(i, { owner: { uidLabel: POOL, apiVersion: 'apps/v1', kind: 'Deployment' }, ...finalizer }),
    {
      name: `deployments-${i++}`,
    },
  );

  // Keys someone else holds on the nodes, and two placements on one label key.
  const pool = { owner: { uidLabel: POOL } };
  add(
    'Conflicting',
    broken(i, {
      ...pool,
      namespaceSelector: named(ns),
      podSelector: mine({ app: 'w' }),
      nodeLabel: { key: `${D}/collide` },
    }),
    { name: `collide-label-${i++}`, warning: { reason: 'OutputConflict', text: `label ${D}/collide` } },
  );
  add(
    'Conflicting',
    broken(i, {
      ...pool,
      namespaceSelector: named(ns),
      podSelector: mine({ app: 'w', tier: 'a' }),
      claimAnnotationPrefix: `${D}/claim-collide.`,
    }),
    {
      name: `collide-claim-${i++}`,
      warning: { reason: 'OutputConflict', text: `annotation ${D}/claim-collide.p1` },
    },
  );
  const pair = (value: string) =>
    broken(i++, {
      ...pool,
      namespaceSelector: named(ns),
      podSelector: mine({ app: 'x' }),
      nodeLabel: { key: `${D}/pair`, value },
    });
  add('Placed', pair('a'), { name: 'pair-a' });
  // Second by name: the first keeps the key.
  add('Conflicting', pair('b'), {
    name: 'pair-b',
    warning: { reason: 'OutputConflict', text: 'another AgentPlacement' },
  });

  // Huge and odd, but valid: keys at their limits, 300 expressions, an owner UID too long for a key.
  add(
    'Placed',
    broken(i, {
      nodeLabel: { key: `${LONG_DNS}/${'k'.repeat(63)}`, value: 'v'.repeat(63) },
      claimAnnotationPrefix: `${LONG_DNS.slice(64)}/l-`,
    }),
    { name: `limits-${i++}` },
  );
  add(
    'Placed',
    broken(i, {
      podSelector: {
        ...mine({ app: 'w' }),
        matchExpressions: Array.from({ length: 300 }, (_, k) => ({
          key: `${D}/e${k}`,
          operator: 'NotIn',
          values: Array.from({ length: 20 }, (_, v) => `v${v}`),
        })),
      },
    }),
    { name: `many-expressions-${i++}` },
  );
  add(
    'ClaimsRejected',
    // The name part "hu." and a 63-character UID: too long for a key.
    broken(i, {
      ...pool,
      namespaceSelector: named(ns),
      podSelector: { matchLabels: { [HUGE]: 'yes' } },
      claimAnnotationPrefix: `${D}/hu.`,
    }),
    {
      name: `huge-uid-${i++}`,
      warning: { reason: 'ClaimsRejected', text: 'name part must be no more than 63' },
    },
  );

  // The protected namespaces: only a selector that names one selects its pods.
  add('Placed', broken(i++, { ...pool, namespaceSelector: undefined, podSelector: mine({ app: 'w' }) }), {
    name: 'unnamed-kube',
  });
  add('Placed', broken(i++, { ...pool, namespaceSelector: named(kubeNs), podSelector: mine({ app: 'w' }) }), {
    name: 'named-kube',
  });

  // waitForAgent: every new pod of one namespace (acknowledged), and a selector without a namespaceSelector.
  // (Bare pods have no controller: the first claims nothing, where a uidLabel would meet "huge".)
  add(
    'Placed',
    broken(i++, {
      owner: { controllerRef: true },
      namespaceSelector: named(ns),
      podSelector: {},
      waitForAgent: { port: 8085 },
      acknowledgeAllPods: true,
    }),
    { name: 'wait-everyone' },
  );
  add(
    'Placed',
    broken(i++, {
      namespaceSelector: undefined,
      podSelector: mine({ app: 'w' }),
      owner: { uidLabel: POOL },
      waitForAgent: { port: 8086 },
    }),
    {
      name: 'wait-w',
    },
  );
  return cases;
}

/** Valid and invalid specs at random, applied fast under one name: the last one stays. */
function churn(): { name: string; specs: Record<string, unknown>[]; expect: Outcome } {
  const specs = Array.from({ length: 12 }, (_, k) =>
    r.chance(0.5)
      ? validSpec(100 + k)
      : broken(100 + k, { nodeLabel: { key: `${D}/churn`, value: '{{ bad }}' } }),
  );
  const last = specs.at(-1)!;
  return {
    name: `${id}-churn`,
    specs,
    expect: (last['nodeLabel'] as { value: string }).value === '{{ bad }}' ? 'Invalid' : 'Placed',
  };
}

const applyPlacement = (name: string, spec: Record<string, unknown>, dryRun = false) =>
  client.apply(
    AgentPlacement.ref,
    {
      apiVersion: AgentPlacement.apiVersion,
      kind: 'AgentPlacement',
      metadata: { name, labels: { [MINE]: 'yes' } },
      spec: JSON.parse(JSON.stringify(spec)) as unknown,
    },
    { fieldManager: 'test-author', force: true, dryRun },
  );

type PlacementObj = KubeObject & {
  spec: { nodeLabel: { key: string; value?: string }; claimAnnotationPrefix: string };
  status?: { observedGeneration?: number; claims?: number; labelledNodes?: number; conditions?: Condition[] };
};

/** What the test (another field manager) set on a node: Berth must never change it. */
const nodeForeign = (n: KubeObject) =>
  JSON.stringify([
    n.metadata?.labels?.[`${D}/foreign`],
    n.metadata?.labels?.[`${D}/collide`],
    n.metadata?.annotations?.[`${D}/foreign`],
    n.metadata?.annotations?.[`${D}/claim-collide.p1`],
    ((n['spec'] as { taints?: { key: string }[] }).taints ?? []).filter((t) => t.key === `${D}/foreign`),
  ]);
/** A pod's labels, annotations and containers: Berth only ever changes a pod as it is created. */
const podForeign = (p: KubeObject) =>
  JSON.stringify([
    p.metadata?.labels,
    p.metadata?.annotations,
    (p['spec'] as { initContainers?: unknown }).initContainers,
  ]);

let podsCreated = 0;
async function pod(
  name: string,
  namespace: string,
  node: string,
  labels: Record<string, string>,
  annotations = {},
) {
  const p = podManifest({ name, namespace, nodeName: node, labels });
  p.metadata!.annotations = { [`${D}/foreign`]: 'keep', ...annotations };
  podsCreated++;
  return client.create(Resources.pods, p);
}

before(async () => {
  await installCrds(client);
  [ns, ns2, kubeNs] = [
    await createNamespace(client, 'abuse'),
    await createNamespace(client, 'abuse2'),
    await createNamespace(client, 'kube'),
  ];
  for (const n of [ns, ns2, kubeNs])
    await client.patch(Resources.namespaces, n, { metadata: { labels: { [WEBHOOK_NS]: 'yes' } } });
  nodes = await addNodes(client, { prefix: id, count: 3 });
  for (const n of nodes) {
    await client.apply(
      Resources.nodes,
      {
        apiVersion: 'v1',
        kind: 'Node',
        metadata: {
          name: n,
          labels: { [`${D}/foreign`]: 'keep', [`${D}/collide`]: 'admin' },
          annotations: { [`${D}/foreign`]: 'keep', [`${D}/claim-collide.p1`]: 'admin' },
        },
        spec: { taints: [{ key: `${D}/foreign`, value: 'keep', effect: 'PreferNoSchedule' }] },
      },
      { fieldManager: FOREIGN },
    );
  }

  manager = new Manager({
    client: await berthClient(sandbox, identity),
    metricsBindAddress: '0',
    healthBindAddress: '0',
  });
  const agents = setupAgents(new PolicyKit(manager), { workers: 4, berthNamespace: BERTH });
  await manager.start();
  await manager.waitForCacheSync();
  readinessProbe = setInterval(() => {
    if (!manager!.hasSynced()) notReady.push(Date.now());
  }, 100);
  // The webhook, registered for this file's namespaces only.
  const registration = { mode: 'url' as const, url: 'https://127.0.0.1:{port}' };
  hooks = new WebhookRunnable({
    client: manager.client(),
    server: { port: 0, certificates: generatedCertificates(registration) },
    registration,
    // Berth's own 2 s timeout: a generated placement that slows admission past it fails the pods below.
    specs: [{ ...agents.webhook, namespaceSelector: { matchLabels: { [WEBHOOK_NS]: 'yes' } } }],
    berthNamespace: BERTH,
    configName: identity.webhookConfiguration,
  });
  await hooks.start(new AbortController().signal);
  await hooks.ready();
});

after(async () => {
  clearInterval(readinessProbe);
  await hooks?.stop();
  await client.delete(Resources.mutatingWebhookConfigurations, id).catch(() => {});
  const placements = (await client.list(AgentPlacement.ref, { query: { labelSelector: `${MINE}=yes` } }))
    .items;
  await Promise.all(
    placements.map((p) => client.delete(AgentPlacement.ref, p.metadata!.name!).catch(() => {})),
  );
  // Berth takes its claims off while it still runs.
  await waitFor(
    'the placements gone',
    async () =>
      (await client.list(AgentPlacement.ref, { query: { labelSelector: `${MINE}=yes` } })).items.length === 0,
  ).catch(() => {});
  await manager?.stop();
  for (const n of [ns, ns2, kubeNs]) if (n) await deleteNamespace(client, n);
  await deleteNodes(client, nodes);
  await removeBerthIdentity(client, identity);
  client.close();
});

test(`generated AgentPlacements (seed ${seed}): Berth stays ready, says the truth, and changes nothing it does not own`, async (t) => {
  const [n0, n1, n2] = nodes as [string, string, string];
  // The canary: a usable placement that must keep working through all of this.
  await pod('canary', ns, n0, { [CANARY]: 'yes', [POOL]: 'canary' });
  await applyPlacement(`${id}-canary`, {
    namespaceSelector: named(ns),
    podSelector: { matchLabels: { [CANARY]: 'yes' } },
    owner: { uidLabel: POOL },
    nodeLabel: { key: CANARY },
    claimAnnotationPrefix: `${D}/canary.`,
  });
  const canaryOn = async () =>
    (await Promise.all(nodes.map((n) => client.get(Resources.nodes, n))))
      .filter((n) => n.metadata?.labels?.[CANARY] === 'true')
      .map((n) => n.metadata!.name);
  await waitFor(
    'the canary label on n0',
    async () => JSON.stringify(await canaryOn()) === JSON.stringify([n0]),
    {
      observe: canaryOn,
    },
  );

  // This file's pods, before the placements: p1..p4 are pools; huge-uid's UID is too long for a claim key.
  const pods = [
    await pod('w-a', ns, n0, { [MINE]: 'yes', app: 'w', tier: 'a', [POOL]: 'p1' }),
    await pod('w-b', ns, n1, { [MINE]: 'yes', app: 'w', tier: 'b', [POOL]: 'p2' }),
    await pod('x-a', ns, n2, { [MINE]: 'yes', app: 'x', tier: 'a', [POOL]: 'p3' }),
    await pod('x', ns, n1, { [MINE]: 'yes', app: 'x', [POOL]: 'p1' }),
    await pod('w-other', ns2, n2, { [MINE]: 'yes', app: 'w', [POOL]: 'p4' }),
    await pod('w-kube', kubeNs, n0, { [MINE]: 'yes', app: 'w', [POOL]: 'kube-uid' }),
    await pod('huge', ns, n0, { [HUGE]: 'yes', [POOL]: 'h'.repeat(63) }),
    await pod('small', ns, n1, { [HUGE]: 'yes', [POOL]: 'hsmall' }),
  ];
  const podsNow = () =>
    Promise.all(pods.map((p) => client.get(Resources.pods, p.metadata!.name!, p.metadata!.namespace)));
  const nodesNow = () => Promise.all(nodes.map((n) => client.get(Resources.nodes, n)));
  const before = { pods: (await podsNow()).map(podForeign), nodes: (await nodesNow()).map(nodeForeign) };

  // From here on, only the placements' work runs in this process besides the test.
  delay.enable();
  const cases = generateCases();
  const churned = churn();
  let applied = 0;
  for (const c of cases) {
    const verdict = await applyPlacement(c.name, c.spec, c.dryRun).then(
      () => 'accepted',
      (e: unknown) => {
        if (e instanceof ApiError && e.status === 422) return `rejected: ${e.message.slice(0, 300)}`;
        throw e;
      },
    );
    assert.equal(
      verdict.split(':')[0],
      c.expect === 'Rejected' ? 'rejected' : 'accepted',
      `${c.name}: ${verdict}; ${JSON.stringify(c.spec).slice(0, 300)}`,
    );
    applied++;
  }
  for (const spec of churned.specs) await applyPlacement(churned.name, spec);
  const live = [
    ...cases.filter((c) => c.expect !== 'Rejected' && !c.dryRun),
    { name: churned.name, expect: churned.expect },
  ];

  // Every status says what its placement's outcome is, for the generation it describes.
  const statusOf = (name: string) => client.get<PlacementObj>(AgentPlacement.ref, name);
  await Promise.all(
    live.map((c) =>
      waitFor(
        `${c.name}: Ready reason ${c.expect}`,
        async () => {
          const o = await statusOf(c.name);
          const ready = findCondition(o.status?.conditions, 'Ready');
          return (
            o.status?.observedGeneration === o.metadata?.generation &&
            ready?.reason === c.expect &&
            ready.status === (c.expect === 'Placed' ? 'True' : 'False')
          );
        },
        { timeoutMs: 45_000, observe: async () => (await statusOf(c.name)).status },
      ),
    ),
  );

  // The counts are what the nodes carry (a foreign value is not Berth's), and nothing else carries them.
  const allNodes = (await client.list(Resources.nodes)).items;
  for (const n of allNodes.filter((n) => !nodes.includes(n.metadata!.name!))) {
    const keys = [...Object.keys(n.metadata?.labels ?? {}), ...Object.keys(n.metadata?.annotations ?? {})];
    assert.deepEqual(
      keys.filter((k) => k.includes(id)),
      [],
      `node ${n.metadata!.name} carries this file's keys`,
    );
  }
  await Promise.all(
    live.map(async (c) => {
      const o = await statusOf(c.name);
      const { claimAnnotationPrefix: prefix, nodeLabel } = o.spec;
      const truth = async () => {
        const current = await nodesNow();
        return {
          claims: current.flatMap((n) =>
            Object.entries(n.metadata?.annotations ?? {}).filter(
              ([k, v]) => k.startsWith(prefix) && v !== 'admin',
            ),
          ).length,
          labelledNodes: current.filter(
            (n) => n.metadata?.labels?.[nodeLabel.key] === (nodeLabel.value ?? 'true'),
          ).length,
        };
      };
      await waitFor(
        `${c.name}: status counts equal what the nodes carry`,
        async () => {
          const [s, tr] = [(await statusOf(c.name)).status, await truth()];
          return s?.claims === tr.claims && s.labelledNodes === tr.labelledNodes;
        },
        { observe: async () => ({ status: (await statusOf(c.name)).status, nodes: await truth() }) },
      );
      if (c.expect === 'Invalid') assert.deepEqual(await truth(), { claims: 0, labelledNodes: 0 }, c.name);
    }),
  );

  // Specific truths: protected namespaces, the rejected UID, the held keys.
  const keys = (await nodesNow()).flatMap((n) => Object.keys(n.metadata?.annotations ?? {}));
  const prefixOf = (name: string) =>
    cases.find((c) => c.name === `${id}-${name}`)!.spec['claimAnnotationPrefix'] as string;
  assert.ok(
    !keys.includes(`${prefixOf('unnamed-kube')}kube-uid`),
    'a kube-* namespace selected without being named',
  );
  assert.ok(
    keys.includes(`${prefixOf('named-kube')}kube-uid`),
    'a kube-* namespace named explicitly is selected',
  );
  const hugeUid = cases.find((c) => c.name.includes('-huge-uid-'))!;
  assert.ok(
    keys.includes(`${hugeUid.spec['claimAnnotationPrefix']}hsmall`),
    'the other owner keeps its claim',
  );

  // Warnings that say what is wrong, on each placement that has a problem.
  const warned = cases.filter((c) => c.warning && !c.dryRun && c.expect !== 'Rejected');
  const events = () => client.list<Event>(Resources.events, { namespace: 'default' });
  await waitFor(
    `${warned.length} Warning events`,
    async () => {
      const list = (await events()).items;
      return warned.every((c) =>
        list.some(
          (e) =>
            e.regarding?.name === c.name &&
            e.type === 'Warning' &&
            e.reason === c.warning!.reason &&
            e.note?.includes(c.warning!.text),
        ),
      );
    },
    {
      observe: async () => {
        const list = (await events()).items;
        return warned
          .filter((c) => !list.some((e) => e.regarding?.name === c.name && e.reason === c.warning!.reason))
          .map((c) => c.name);
      },
    },
  );

  // The webhook: the acknowledged placement changes every new pod of its namespace that it would
  // claim (one with an owner: a controller, and a pool label for the uidLabel placement), nothing
  // else does; a pod no placement could claim never waits for an agent.
  const created = async (
    name: string,
    namespace: string,
    labels: Record<string, string>,
    annotations = {},
    owned = true,
  ) => {
    const p = podManifest({
      name,
      namespace,
      nodeName: n2,
      labels: owned ? { ...labels, [POOL]: 'webhook-pool' } : labels,
    });
    p.metadata!.annotations = annotations;
    if (owned)
      p.metadata!.ownerReferences = [
        { apiVersion: 'apps/v1', kind: 'ReplicaSet', name: 'rs', uid: randomUUID(), controller: true },
      ];
    podsCreated++;
    return ((await client.create(Resources.pods, p)).metadata?.annotations?.[WAIT_FOR_AGENT_ANNOTATION] ?? '')
      .split(',')
      .filter(Boolean);
  };
  assert.deepEqual(await created('new-bare', ns, { [MINE]: 'yes', app: 'w' }, {}, false), []);
  assert.deepEqual(await created('new-w', ns, { [MINE]: 'yes', app: 'w' }), [
    `${id}-wait-everyone`,
    `${id}-wait-w`,
  ]);
  assert.deepEqual(await created('new-x', ns, { [MINE]: 'yes', app: 'x' }), [`${id}-wait-everyone`]);
  assert.deepEqual(await created('new-plain', ns, {}), [`${id}-wait-everyone`]);
  assert.deepEqual(
    await created('new-skip', ns, { [MINE]: 'yes', app: 'w' }, { [SKIP_WAIT_FOR_AGENT_ANNOTATION]: 'true' }),
    [],
  );
  assert.deepEqual(await created('new-other', ns2, { [MINE]: 'yes', app: 'w' }), [`${id}-wait-w`]);
  assert.deepEqual(await created('new-other-x', ns2, { [MINE]: 'yes', app: 'x' }), []);
  assert.deepEqual(await created('new-kube', kubeNs, { [MINE]: 'yes', app: 'w' }), []);

  // The canary still follows its pod.
  await client.delete(Resources.pods, 'canary', ns, { gracePeriodSeconds: 0 });
  await pod('canary-2', ns, n1, { [CANARY]: 'yes', [POOL]: 'canary' });
  await waitFor(
    'the canary label moved to n1',
    async () => JSON.stringify(await canaryOn()) === JSON.stringify([n1]),
    {
      observe: canaryOn,
    },
  );

  // Nothing foreign changed, on the nodes or on the pods that existed before the placements.
  assert.deepEqual((await nodesNow()).map(nodeForeign), before.nodes);
  assert.deepEqual((await podsNow()).map(podForeign), before.pods);

  // Ready all along, and never blocked: no placement's input may stall the event loop.
  assert.deepEqual(notReady, [], 'the caches stopped being synced');
  const maxMs = delay.max / 1e6;
  assert.ok(maxMs < 2000, `the event loop stalled for ${maxMs.toFixed(0)} ms`);
  t.diagnostic(
    `seed ${seed}: ${applied} generated placements (${cases.filter((c) => c.expect === 'Rejected').length} refused by the apiserver, ` +
      `${cases.filter((c) => c.dryRun).length} dry-run only, ${live.length - 1} live), ${churned.specs.length} churned versions, ` +
      `${podsCreated} pods; event loop max ${maxMs.toFixed(0)} ms`,
  );
});
