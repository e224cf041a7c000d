// Berth's capabilities at work on the local control plane: `npm run demo`.
// Starts (or reuses) a sandbox with the sample nodes and its registry, installs the CRDs, runs
// `berth run` as a user installs it, and then shows each capability as a step: derived labels, a
// startup gate holding new nodes, an agent label following a workload, an arm64-only image placed
// on arm64 nodes, a WorkloadDeployment running as instances, and a Workload placed in two cities (two
// more sandboxes as its cells, this one their management plane) and rolled out to a new image. Each step applies its file under
// examples/ and prints what was done, what Berth did, and how long it took. `--once` exits when
// every step has been seen (CI); otherwise the derived labels stay live until Ctrl-C.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { parseAllDocuments } from 'yaml';
import { AgentPlacement } from '../src/agents/crd.ts';
import type { ArchPod } from '../src/arch/decide/pods.ts';
import { RESULT_ANNOTATION, SCHEDULING_GATE, STATE_LABEL } from '../src/arch/types.ts';
import { ArchPlacement } from '../src/arch/crd.ts';
import { installCrds } from '../src/cli/install.ts';
import { berthFederationHooks } from '../src/cli/sandbox.ts';
import { type WorkloadObject } from '../src/federation/types.ts';
import { Workload } from '../src/federation/crd.ts';
import { rolledOut } from '../src/federation/decide/rollup.ts';
import { NodeStartupGate } from '../src/gates/crd.ts';
import { FIELD_MANAGER } from '../src/labels/types.ts';
import { NodeLabelRule } from '../src/labels/crd.ts';
import { slimNode, type SlimNode } from '../src/policy/slim.ts';
import { hasCondition } from '../src/runtime/api/conditions.ts';
import { Resources, type KubeObject, type ResourceRef } from '../src/runtime/api/meta.ts';
import { Informer } from '../src/runtime/cache/informer.ts';
import { ownedKeys } from '../src/runtime/api/fields.ts';
import { readNodeFile, nodeManifests } from '../src/sandbox/nodes.ts';
import { Federation } from '../src/sandbox/federation.ts';
import { packageRoot } from '../src/sandbox/paths.ts';
import { ImagePusher, platform } from '../src/sandbox/push.ts';
import { Sandbox } from '../src/sandbox/sandbox.ts';
import { abortOnSignals } from '../src/sandbox/wait.ts';
import { DEPLOYMENT_LABEL } from '../src/workloads/types.ts';
import { Instance, InstanceType, Quota, WorkloadDeployment } from '../src/workloads/crd.ts';
import { berthKubeconfig, startBerth, type BerthProcess } from '../test/helpers/berth.ts';
import { waitFor } from '../test/helpers/wait.ts';

const { values } = parseArgs({
  options: {
    sandbox: { type: 'string', default: 'default' },
    // Exit once every step has been seen (for tests and CI); otherwise run until Ctrl-C.
    once: { type: 'boolean', default: false },
    // How long each thing a step waits for may take before the demo says the step did not happen.
    'step-timeout': { type: 'string', default: '90' },
  },
});
const stepTimeoutMs = Number(values['step-timeout']) * 1000;
if (!(stepTimeoutMs > 0))
  throw new Error(`--step-timeout ${values['step-timeout']}: not a number of seconds`);
const root = packageRoot();
const examples = join(root, 'examples');
const NS = 'berth-demo';
/** The kinds the example files hold. */
const KINDS: ResourceRef[] = [
  Resources.namespaces,
  Resources.daemonSets,
  Resources.deployments,
  NodeLabelRule.ref,
  NodeStartupGate.ref,
  AgentPlacement.ref,
  ArchPlacement.ref,
  InstanceType.ref,
  Quota.ref,
  WorkloadDeployment.ref,
  Workload.ref,
];
const say = (s: string) => process.stdout.write(`${s}\n`);
const clock = (ms = Date.now()) => new Date(ms).toISOString().slice(11, 23);

say(`== starting sandbox "${values.sandbox}" with the sample nodes (examples/nodes.yaml) and its registry`);
const sb = new Sandbox(values.sandbox);
// Ctrl-C while the control plane builds or starts stops whatever the start-up launched.
const interrupt = abortOnSignals();
try {
  await sb.up({
    nodes: readNodeFile(join(examples, 'nodes.yaml')),
    registry: true,
    log: (s) => say(`   ${s}`),
    signal: interrupt.signal,
  });
} catch (e) {
  say(`could not start sandbox "${values.sandbox}": ${e instanceof Error ? e.message : String(e)}`);
  process.exit(1);
} finally {
  interrupt.release();
}
const client = sb.client();
const registry = sb.registry!;

say('== installing the CRDs and the example NodeLabelRules (examples/rules/)');
await installCrds(client);
await client.apply(
  Resources.namespaces,
  { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS } },
  { fieldManager: 'berth-demo' },
);
for (const f of readdirSync(join(examples, 'rules')).filter((f) => f.endsWith('.yaml')))
  await applyExample(join('rules', f));

say('== running berth with the example rule files (examples/labels/)');
// As a user installs it: under its ServiceAccount, bound only to the roles `berth manifests` prints
// (workloads' Pods in the demo's namespace only), with default flags but for its addresses and the
// sandbox registry's configuration (which Berth reads images from for architecture-aware placement):
// its CA, and `allowPrivate: true`, since Berth reads no registry on a loopback or private address
// unless its admin allows that one.
const identity = await berthKubeconfig(sb, { workloadNamespaces: [NS] });
const berth = await startBerth(
  sb,
  [`--label-dir=${join(examples, 'labels')}`, `--arch-registries=${registry.registriesPath}`],
  { kubeconfig: identity, page: true },
);
say(`   the page: http://127.0.0.1:${berth.uiPort}/ (nodes, policies, held pods, workloads; live)`);
/** The management plane's Berth, once step 6 starts it (the cells' Berths are their sandboxes' own). */
const moreBerths: BerthProcess[] = [];
/** Step 6's federation: this sandbox and its cells. */
const federated = new Federation(values.sandbox);

const nodes = new Informer<SlimNode>({ client, ref: Resources.nodes, transform: slimNode });
nodes.start();
const taintKeys = (n: KubeObject | undefined) =>
  ((n?.['spec'] as { taints?: { key: string }[] } | undefined)?.taints ?? []).map((t) => t.key);
const list = async (ref: ResourceRef, labelSelector?: string) =>
  (await client.list(ref, { namespace: NS, ...(labelSelector ? { query: { labelSelector } } : {}) })).items;
const running = (p: KubeObject) =>
  !p.metadata?.deletionTimestamp && (p['status'] as { phase?: string } | undefined)?.phase === 'Running';
const nodeOf = (p: KubeObject) => (p['spec'] as { nodeName?: string }).nodeName;

// --- the steps -------------------------------------------------------------------------------

/** What a step reports: what the demo did, and what Berth did. */
interface Summary {
  did: string[];
  berth: string[];
}

async function derivedLabels(): Promise<Summary> {
  // Every label the examples derive: from the rule files (EdgeTPU) and from the NodeLabelRules
  // (GPU, the arm64 class), which Berth reads through different informers and may apply apart.
  const want: [node: string, label: string][] = [
    ...['edgetpu-plugin-0', 'edgetpu-usb-0', 'edgetpu-pci-0', 'coral-devboard-0'].map(
      (n): [string, string] => [n, 'accelerators/edgetpu=true'],
    ),
    ['gpu-0', 'accelerators/gpu-product=Tesla-T4'],
    ...['arm-0', 'arm-1', 'coral-devboard-0'].map((n): [string, string] => [
      n,
      'node-class.berth.dev/edge=true',
    ]),
  ];
  // A watch-list sends its initial objects one by one: count nodes only once all have arrived.
  await nodes.waitForSync();
  await until('the derived labels of the EdgeTPU, GPU and arm64 nodes', () => {
    const rows = labelRows();
    return want.every(([node, label]) => rows.find(([n]) => n === node)?.[1].includes(label));
  });
  const rows = labelRows();
  say(labelTable(rows));
  const labelled = rows.filter(([, l]) => l).length;
  return {
    did: ['applied examples/rules/*.yaml; Berth reads examples/labels/ (k8s-auto-labeller rule files)'],
    berth: [`derived labels on ${labelled} of ${rows.length} nodes (the table above)`],
  };
}

async function startupGate(): Promise<Summary> {
  await applyExample('gates/node-init.yaml');
  const gate = 'node-init';
  // New names on every run: a node the gate released once is never held again (BootstrapOnly).
  const pool = { 'demo.berth.dev/pool': 'joining' };
  const start = nodes.list().filter((n) => n.metadata?.labels?.['demo.berth.dev/pool'] === 'joining').length;
  const manifests = nodeManifests({ prefix: 'joining', count: 2, start, labels: pool });
  const taint = 'demo.berth.dev/initialising';
  // The apiserver learns of Berth's webhook a moment after Berth registers it: ask (dry run) until a
  // new node would be tainted at creation.
  await until('the gate tainting new nodes at admission (dry run)', async () =>
    taintKeys(await client.create(Resources.nodes, manifests[0]!, { dryRun: true })).includes(taint),
  );
  const held = new Map<string, number>();
  const didHold: string[] = [];
  for (const m of manifests) {
    const created = await client.create(Resources.nodes, m);
    const name = created.metadata!.name!;
    // Berth's own stamp of when it put the taint on.
    const gatedAt = created.metadata?.annotations?.[`${gate}.gates.berth.dev/gated-at`];
    held.set(name, gatedAt ? Date.parse(gatedAt) : Date.now());
    didHold.push(
      taintKeys(created).includes(taint)
        ? `held ${name} at ${clock(held.get(name))}: tainted ${taint}=${gate}:NoSchedule at creation`
        : `${name} was created without the taint`,
    );
  }
  const released = new Map<string, string>();
  await until('the joining nodes released', async () => {
    for (const name of held.keys()) {
      if (released.has(name)) continue;
      const n = await client.get(Resources.nodes, name);
      if (taintKeys(n).includes(taint)) continue;
      const init = (await list(Resources.pods, 'app=node-init')).find((p) => nodeOf(p) === name);
      const at = n.metadata?.annotations?.[`${gate}.gates.berth.dev/completed-at`];
      const off = at ? Date.parse(at) : Date.now();
      const pod = init
        ? `${init.metadata!.name} ${hasCondition(init, 'Ready') ? 'Ready' : 'not Ready'}`
        : 'gone';
      released.set(
        name,
        `released ${name} at ${clock(off)} (held ${((off - held.get(name)!) / 1000).toFixed(1)} s), its node-init pod ${pod}`,
      );
    }
    return released.size === held.size;
  });
  return {
    did: [`applied examples/gates/node-init.yaml; created nodes ${[...held.keys()].join(', ')}`],
    berth: [...didHold, ...released.values()],
  };
}

async function agentFollows(): Promise<Summary> {
  await applyExample('agents/web.yaml');
  const label = 'demo.berth.dev/web-agent';
  const labelled = () => nodes.list().filter((n) => n.metadata?.labels?.[label] === 'true');
  const names = () =>
    labelled()
      .map((n) => n.metadata!.name!)
      .sort();
  /** What happened to the label, in order, with the time it was first seen. */
  const seen = new Map<string, string>();
  /** Waits until web's pods all run on `node` and the label is there alone, noting claims and releases. */
  const follow = (node: string) => {
    const before = names();
    return until(`web's pods on ${node} and ${label} there alone`, async () => {
      const has = names();
      for (const n of has.filter((n) => !before.includes(n)))
        if (!seen.has(`claimed ${n}`)) seen.set(`claimed ${n}`, clock());
      for (const n of before.filter((n) => !has.includes(n)))
        if (!seen.has(`released ${n}`)) seen.set(`released ${n}`, clock());
      const pods = (await list(Resources.pods, 'app=web')).filter((p) => !p.metadata?.deletionTimestamp);
      return pods.length > 0 && pods.every((p) => running(p) && nodeOf(p) === node) && has.join() === node;
    });
  };
  // Where examples/agents/web.yaml runs it, and where the demo moves it.
  const [from, to] = ['plain-0', 'plain-1'];
  await follow(from);
  const claim = labelled()
    .flatMap((n) => Object.keys(n.metadata?.annotations ?? {}))
    .find((k) => k.startsWith(`${label}.claim-`));
  // Moved as a user would: the Deployment's nodeSelector changed; its new pod lands elsewhere.
  await client.patch(
    Resources.deployments,
    'web',
    { spec: { template: { spec: { nodeSelector: { 'kubernetes.io/hostname': to } } } } },
    { namespace: NS, type: 'strategic', fieldManager: 'berth-demo' },
  );
  await follow(to);
  return {
    did: [
      `applied examples/agents/web.yaml (AgentPlacement web-agent, Deployment web on ${from})`,
      `moved Deployment web to ${to} (its nodeSelector)`,
    ],
    berth: [
      ...[...seen].map(
        ([what, at]) => `${what} at ${at}${what.startsWith('claimed') ? `: ${label}=true` : ''}`,
      ),
      `(the claim: annotation ${claim ?? 'none'})`,
    ],
  };
}

async function archAware(): Promise<Summary> {
  const image = `${registry.host}/demo/arm-only:v1`;
  await new ImagePusher(registry).pushImage('demo/arm-only', 'v1', platform('linux/arm64'));
  await applyExample('arch/arch-aware.yaml');
  const pod: KubeObject = {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { generateName: 'arm-only-', namespace: NS, labels: { 'demo.berth.dev/arch-aware': 'true' } },
    spec: { containers: [{ name: 'app', image }] },
  };
  await until('the arch webhook placing new pods (dry run)', async () =>
    Boolean((await client.create(Resources.pods, pod, { dryRun: true })).metadata?.labels?.[STATE_LABEL]),
  );
  const created = await client.create<ArchPod>(Resources.pods, pod);
  const name = created.metadata!.name!;
  const gated = (created.spec.schedulingGates ?? []).some((g) => g.name === SCHEDULING_GATE);
  const placed = await until(`pod ${name} placed and scheduled`, async () => {
    const p = await client.get<ArchPod>(Resources.pods, name, NS);
    return p.metadata?.labels?.[STATE_LABEL] === 'Placed' && nodeOf(p) !== undefined && p;
  });
  const node = nodeOf(placed)!;
  const arch = nodes.get(node)?.metadata?.labels?.['kubernetes.io/arch'];
  if (arch !== 'arm64') throw new Error(`pod ${name} ran on ${node}, an ${arch} node`);
  const terms =
    placed.spec.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms;
  const affinity = (terms ?? [])
    .flatMap((t) => t.matchExpressions ?? [])
    .map((e) => `${e.key} ${e.operator} [${(e.values ?? []).join(', ')}]`)
    .join('; ');
  const read = JSON.parse(placed.metadata?.annotations?.[RESULT_ANNOTATION] ?? '{}') as {
    images?: { platforms: string[] }[];
  };
  const arm = nodes
    .list()
    .filter((n) => n.metadata?.labels?.['kubernetes.io/arch'] === 'arm64')
    .map((n) => n.metadata!.name!)
    .sort();
  return {
    did: [`pushed ${image} for linux/arm64 only; applied examples/arch/arch-aware.yaml; created pod ${name}`],
    berth: [
      gated
        ? `gated ${name} at admission (scheduling gate ${SCHEDULING_GATE}) while it read the image`
        : `placed ${name} at admission (the image's platforms read by then)`,
      `read its platforms: ${read.images?.[0]?.platforms.join(', ') ?? '?'}`,
      `added node affinity ${affinity}`,
      `${name} ran on ${node} (arm64; the arm64 nodes are ${arm.join(', ')})`,
    ],
  };
}

async function workloads(): Promise<Summary> {
  await applyExample('workloads/hello.yaml');
  type WD = KubeObject & {
    spec: { replicas: number };
    status?: { readyReplicas?: number; replicas?: number };
  };
  await until('WorkloadDeployment hello with every instance Ready', async () => {
    const wd = await client.get<WD>(WorkloadDeployment.ref, 'hello', NS);
    const ready = (await list(Instance.ref, `${DEPLOYMENT_LABEL}=hello`)).filter((i) =>
      hasCondition(i, 'Ready'),
    );
    const n = wd.spec.replicas;
    return wd.status?.readyReplicas === n && wd.status.replicas === n && ready.length === n;
  });
  const pods = new Map(
    (await list(Resources.pods, `${DEPLOYMENT_LABEL}=hello`)).map((p) => [p.metadata!.name!, p]),
  );
  const instances = (await list(Instance.ref, `${DEPLOYMENT_LABEL}=hello`))
    .map((i) => i.metadata!.name!)
    .sort();
  type Amounts = { instances?: number; cpu?: string; memory?: string };
  const quota = await client.get<KubeObject & { spec: Amounts; status?: { used?: Amounts } }>(
    Quota.ref,
    'budget',
    NS,
  );
  const [budget, used] = [quota.spec, quota.status?.used];
  return {
    did: [
      'applied examples/workloads/hello.yaml (InstanceType demo-small, Quota budget, WorkloadDeployment hello)',
    ],
    berth: [
      ...instances.map((i) => `instance ${i} Ready, its pod on ${pods.get(i) ? nodeOf(pods.get(i)!) : '?'}`),
      `granted by Quota budget: ${used?.instances} of ${budget.instances} instances, ` +
        `${used?.cpu} of ${budget.cpu} vCPU, ${used?.memory} of ${budget.memory}`,
    ],
  };
}

async function federation(): Promise<Summary> {
  // Two more control planes side by side, each a cell with its own Berth running the workloads
  // controllers (so a cell keeps its instances running on its own), started as `berth sandbox up
  // --cells DFW,LHR` starts them; this sandbox is their management plane, where a second Berth runs
  // the cells and federation controllers.
  const cells = await federated.up(berthFederationHooks, {
    cities: ['DFW', 'LHR'],
    cellNodes: 2,
    log: (s) => say(`   ${s}`),
  });
  const mgmt = await startBerth(sb, ['--controllers=cells,federation'], { kubeconfig: identity, page: true });
  moreBerths.push(mgmt);
  say(`   the management plane's page: http://127.0.0.1:${mgmt.uiPort}/ (cells by city, workloads in them)`);
  // Applied again on a second run, the file takes the workload back to its first image: a rollout
  // of its own, which the wait below sees through.
  await applyExample('federation/web.yaml');
  const w = await until('Workload web Ready in both cities', async () => {
    const w = await web();
    return rolledOut(w) && w;
  });
  const places = (w.status?.placements ?? []).flatMap((p) =>
    (p.cities ?? []).map(
      (c) =>
        `placement ${p.name}: ${c.city} in cell ${c.cell ?? '-'}, ${c.readyReplicas ?? 0} of ${c.desiredReplicas ?? 0} instances Ready`,
    ),
  );
  // The rollout: the template changed (a new image), as its owner would change the file; with or
  // without spec.rollout (All at once, or Progressive one cell at a time), each city is printed when
  // the management plane sees all its instances on the new template and Ready.
  const image = 'registry.example/web:2';
  const started = Date.now();
  await applyExample('federation/web.yaml', (o) => {
    if (o.kind !== 'Workload') return;
    const containers = (o['spec'] as WorkloadObject['spec']).template.containers;
    containers[0]!.image = image;
  });
  const updated = new Map<string, string>();
  const done = await until(`every city of Workload web on ${image}`, async () => {
    const w = await web();
    if (w.status?.observedGeneration !== w.metadata.generation) return false;
    for (const c of (w.status?.placements ?? []).flatMap((p) => p.cities ?? [])) {
      const n = c.desiredReplicas ?? 0;
      if (updated.has(c.city) || n === 0 || c.updatedReplicas !== n || c.readyReplicas !== n) continue;
      const line = `${c.city} in cell ${c.cell ?? '-'} runs ${image}: ${n} of ${n} instances updated and Ready at ${clock()}`;
      updated.set(c.city, line);
      say(`   ${line}`);
    }
    return rolledOut(w) && w;
  });
  return {
    did: [
      ...cells.map(
        (c) =>
          `started sandbox ${c.sandbox.name} and joined it as cell ${c.name} (berth cells join --location=${c.city})`,
      ),
      'applied examples/federation/web.yaml (Workload web: placement us in DFW, eu in LHR)',
      `changed Workload web's image to ${image}`,
    ],
    berth: [
      ...places,
      `Workload web: ${w.status?.readyReplicas} of ${w.status?.desiredReplicas} Ready in total, Available`,
      ...updated.values(),
      `Workload web rolled out to ${image} in ${((Date.now() - started) / 1000).toFixed(1)} s: ` +
        `${done.status?.updatedReplicas} of ${done.status?.desiredReplicas} instances updated, Available`,
    ],
  };
}

const web = () => client.get<WorkloadObject>(Workload.ref, 'web', NS);

// --- shared: running Berth, applying examples, the label table, running a step -----------------

/**
 * Applies every object of a file under examples/ (server-side apply, as `kubectl apply
 * --server-side`), each changed by `edit` first if given (as a user edits the file).
 */
async function applyExample(file: string, edit?: (o: KubeObject) => void): Promise<void> {
  for (const doc of parseAllDocuments(readFileSync(join(examples, file), 'utf8'))) {
    const o = doc.toJS() as KubeObject;
    const ref = KINDS.find((r) => r.kind === o.kind);
    if (!ref) throw new Error(`examples/${file}: the demo applies no ${o.kind}`);
    edit?.(o);
    await client.apply(ref, o, { fieldManager: 'berth-demo', force: true });
  }
  say(`   applied examples/${file}${edit ? ', changed' : ''}`);
}

/** Each node's name and the labels Berth derived on it. */
function labelRows(): (readonly [string, string])[] {
  return nodes
    .list()
    .map(
      (n) =>
        [
          n.metadata!.name!,
          ownedKeys(n, FIELD_MANAGER, ['metadata', 'labels'])
            .sort()
            .map((k) => `${k}=${n.metadata?.labels?.[k]}`)
            .join(', '),
        ] as const,
    )
    .sort((a, b) => (a[0] < b[0] ? -1 : 1));
}
const labelTable = (rows: (readonly [string, string])[]) =>
  rows.map(([name, labels]) => `   ${name.padEnd(20)} ${labels || '-'}`).join('\n');

/** Runs one step and prints its summary; a step that does not happen in time is said so (and ends --once). */
async function step(n: number, title: string, run: () => Promise<Summary>): Promise<void> {
  say(`\n== step ${n}: ${title}`);
  const started = Date.now();
  try {
    const { did, berth } = await run();
    say(`-- step ${n} summary (${((Date.now() - started) / 1000).toFixed(1)} s)`);
    for (const l of did) say(`   did:   ${l}`);
    for (const l of berth) say(`   berth: ${l}`);
  } catch (e) {
    say(`step ${n} (${title}) did not happen: ${e instanceof Error ? e.message : String(e)}`);
    if (values.once) await stop(1);
  }
}

/** Waits for what a step needs to see; past --step-timeout the step did not happen. */
const until = <T>(what: string, probe: () => Promise<T | undefined | false> | T | undefined | false) =>
  waitFor(what, probe, { timeoutMs: stepTimeoutMs });

let stopping = false;
async function stop(code: number): Promise<void> {
  if (stopping) return;
  stopping = true;
  for (const b of [berth, ...moreBerths]) await b.stop();
  await nodes.stop();
  client.close();
  const cells = federated.cells.map((c) => c.sandbox.name);
  say(
    `\nberth stopped; the sandbox keeps running${cells.length ? `, and its cells ${cells.join(', ')} with their Berths` : ''}: ` +
      `berth sandbox down --name ${values.sandbox}`,
  );
  process.exit(code);
}

process.once('SIGINT', () => void stop(0));
void berth.exited.then((code) => {
  if (stopping) return;
  say(`berth exited with code ${code}`);
  void stop(1);
});

await step(1, 'derived labels', derivedLabels);
await step(2, 'a startup gate holds new nodes until their init pods are Ready', startupGate);
await step(3, 'an agent label follows a workload', agentFollows);
await step(4, 'architecture-aware placement of an arm64-only image', archAware);
await step(5, 'a WorkloadDeployment runs as instances under a quota', workloads);
await step(6, 'a Workload placed in two cities, each a cell of its own', federation);

if (values.once) {
  say('\nevery step seen');
  await stop(0);
} else {
  // From here on, the derived labels are live: print the table whenever it changes.
  let shown = labelTable(labelRows());
  const debounce = { timer: undefined as NodeJS.Timeout | undefined };
  const changed = () => {
    clearTimeout(debounce.timer);
    debounce.timer = setTimeout(() => {
      const table = labelTable(labelRows());
      if (table === shown) return;
      shown = table;
      say(`\n-- derived labels at ${clock()}\n${table}`);
    }, 100);
  };
  nodes.addEventHandler({ onAdd: changed, onUpdate: changed, onDelete: changed });
  say(
    '\nEdit examples/labels/accelerators/edgetpu (remove a line, add a file beside it) and watch the table. Ctrl-C stops.',
  );
  say(
    `kubectl --kubeconfig ${sb.kubeconfigPath} get nodelabelrules,nodestartupgates,agentplacements,archplacements`,
  );
}
