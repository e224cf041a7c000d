// Derived labels at scale: `npm run bench:labels -- --nodes 5000`.
// 1. A rule matching half the nodes: time from creating it until every match carries the label.
// 2. Deleting it: time until every label is gone.
// 3. The floor: a minimal client sending the same server-side apply patches at the same concurrency.
// 4. Writes by the controller over one idle minute.
// 5. The controller's resident memory.
// Berth runs as its own process (`berth run --controllers labels`), as it would in a cluster.
import { parseArgs } from 'node:util';
import { installCrds } from '../src/cli/install.ts';
import { applyTarget } from '../src/runtime/client/apply.ts';
import { Informer } from '../src/runtime/cache/informer.ts';
import { slimNode, type SlimNode } from '../src/policy/slim.ts';
import { Resources, type KubeObject } from '../src/runtime/api/meta.ts';
import { NodeLabelRule } from '../src/labels/crd.ts';
import { benchSandbox, forEachLimit, round, report } from './lib.ts';
import { startBerth } from '../test/helpers/berth.ts';

const { values } = parseArgs({
  options: {
    nodes: { type: 'string', default: '5000' },
    workers: { type: 'string', default: '16' },
    'idle-seconds': { type: 'string', default: '60' },
  },
});
const nodeCount = Number(values.nodes);
const workers = Number(values.workers);
const idleSeconds = Number(values['idle-seconds']);
const GROUP = 'bench.berth.dev/group';
const DERIVED = 'bench.berth.dev/derived';
const FLOOR = 'bench.berth.dev/floor';

const sb = await benchSandbox('bench-labels', [
  { prefix: 'a', count: nodeCount / 2, labels: { [GROUP]: 'a' } },
  { prefix: 'b', count: nodeCount / 2, labels: { [GROUP]: 'b' } },
]);
const client = sb.client({ maxInFlight: workers });
await installCrds(client);

// The bench's own view of the nodes, to see when labels land (the same way for Berth and the floor).
const nodes = new Informer<SlimNode>({ client, ref: Resources.nodes, transform: slimNode });
let onChange = () => {};
nodes.addEventHandler({ onAdd: () => onChange(), onUpdate: () => onChange() });
nodes.start();
await nodes.waitForSync();
const count = (key: string) => nodes.list().filter((n) => n.metadata?.labels?.[key] !== undefined).length;
const until = (pred: () => boolean) =>
  new Promise<number>((resolve) => {
    const check = () => pred() && resolve(performance.now());
    onChange = check;
    check();
  });
const half = nodeCount / 2;

// Berth, as a separate process.
const berth = await startBerth(sb, ['--controllers=labels', `--label-workers=${workers}`]);
const writes = () => berth.metric('rest_client_requests_total', (l) => !l.includes('method="GET"'));
let result: object | undefined;
try {
  const rule = {
    apiVersion: NodeLabelRule.apiVersion,
    kind: 'NodeLabelRule',
    metadata: { name: 'bench' },
    spec: {
      match: { allOf: [{ label: GROUP, operator: 'In', values: ['a'] }] },
      labels: { [DERIVED]: 'true' },
    },
  };
  // A CRD installed a moment ago is served before its watch delivers events: wait until Berth has
  // seen (and reported on) a rule before timing one, so that setup is not measured.
  await client.create(NodeLabelRule.ref, {
    ...rule,
    metadata: { name: 'warmup' },
    spec: {
      ...rule.spec,
      labels: { 'bench.berth.dev/warmup': 'true' },
      match: { allOf: [{ label: GROUP, operator: 'In', values: ['none'] }] },
    },
  });
  while (
    !(await client.get<{ status?: { matchedNodes?: number } } & KubeObject>(NodeLabelRule.ref, 'warmup'))
      .status
  ) {
    await new Promise((r) => setTimeout(r, 100));
  }
  await client.delete(NodeLabelRule.ref, 'warmup');
  const writesBefore = await writes();
  let t0 = performance.now();
  await client.create(NodeLabelRule.ref, rule);
  const applySeconds = ((await until(() => count(DERIVED) === half)) - t0) / 1000;
  const applyWrites = (await writes()) - writesBefore;
  console.log(
    `apply: ${half} nodes labelled in ${applySeconds.toFixed(2)} s (${applyWrites} writes by Berth)`,
  );

  t0 = performance.now();
  await client.delete(NodeLabelRule.ref, 'bench');
  const clearSeconds = ((await until(() => count(DERIVED) === 0)) - t0) / 1000;
  console.log(`delete: labels cleared in ${clearSeconds.toFixed(2)} s`);

  // Idle: nothing changes, so nothing should be written (kwok's heartbeats keep the nodes busy).
  await new Promise((r) => setTimeout(r, 3000));
  const idleBefore = await writes();
  await new Promise((r) => setTimeout(r, idleSeconds * 1000));
  const idleWrites = (await writes()) - idleBefore;
  const idleWritesPerMin = round((idleWrites * 60) / idleSeconds, 2);
  console.log(`idle: ${idleWrites} writes in ${idleSeconds} s`);

  const rssMB = berth.rssMB();

  // The floor: the same apply patches (uid-guarded, labels and annotations), same concurrency, no controller.
  const targets = nodes.list().filter((n) => n.metadata?.labels?.[GROUP] === 'a');
  t0 = performance.now();
  await forEachLimit(targets, workers, async (n) => {
    const body = applyTarget(Resources.nodes, n);
    body.metadata.labels = { [FLOOR]: 'true' };
    body.metadata.annotations = {};
    await client.apply(Resources.nodes, body, { fieldManager: 'bench-floor' });
  });
  const floorSeconds = ((await until(() => count(FLOOR) === half)) - t0) / 1000;
  console.log(`floor: ${half} patches at concurrency ${workers} in ${floorSeconds.toFixed(2)} s`);

  result = {
    nodes: nodeCount,
    applySeconds: round(applySeconds, 2),
    clearSeconds: round(clearSeconds, 2),
    floorSeconds: round(floorSeconds, 2),
    ratio: round(applySeconds / floorSeconds, 2),
    idleWritesPerMin,
    rssMB,
  };
} finally {
  await berth.stop();
  await nodes.stop();
  client.close();
  await sb.destroy();
}
report(result);
