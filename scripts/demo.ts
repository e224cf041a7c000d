// Berth's main job on the local control plane: `npm run demo`.
// Starts (or reuses) a sandbox with the sample nodes, installs the CRDs and the example rules,
// runs `berth run` with the example rule files, and prints the nodes' derived labels every time
// they change. Edit examples/labels/accelerators/edgetpu (or add a file next to it) and watch.
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { parseAllDocuments } from 'yaml';
import { installCrds } from '../src/cli/install.ts';
import { rbacManifests } from '../src/manifests.ts';
import { ownedKeys } from '../src/runtime/client/apply.ts';
import { Informer } from '../src/runtime/cache/informer.ts';
import { slimNode, type SlimNode } from '../src/policy/slim.ts';
import { Resources, type KubeObject } from '../src/runtime/api/meta.ts';
import { FIELD_MANAGER, NodeLabelRule } from '../src/labels/types.ts';
import { readNodeFile } from '../src/sandbox/nodes.ts';
import { packageRoot } from '../src/sandbox/paths.ts';
import { abortOnSignals, freePorts, Sandbox } from '../src/sandbox/sandbox.ts';

const { values } = parseArgs({
  options: {
    sandbox: { type: 'string', default: 'default' },
    // Exit once the example labels are in place (for tests and CI); otherwise run until Ctrl-C.
    once: { type: 'boolean', default: false },
  },
});
const root = packageRoot();
const examples = join(root, 'examples');
const say = (s: string) => process.stdout.write(`${s}\n`);

say(`== starting sandbox "${values.sandbox}" with the sample nodes (examples/nodes.yaml)`);
const sb = new Sandbox(values.sandbox);
// Ctrl-C while the control plane builds or starts stops whatever the start-up launched.
const interrupt = abortOnSignals();
try {
  await sb.up({
    nodes: readNodeFile(join(examples, 'nodes.yaml')),
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

say('== installing the CRDs and the example NodeLabelRules (examples/rules/)');
await installCrds(client);
for (const f of readdirSync(join(examples, 'rules')).filter((f) => f.endsWith('.yaml'))) {
  for (const doc of parseAllDocuments(readFileSync(join(examples, 'rules', f), 'utf8'))) {
    await client.apply(NodeLabelRule.ref, doc.toJS() as KubeObject, {
      fieldManager: 'berth-demo',
      force: true,
    });
    say(`   applied ${f}`);
  }
}

say('== running berth with the example rule files (examples/labels/)');
// As a user installs it: under its ServiceAccount, bound only to the roles `berth manifests` prints.
const kubeconfig = await sb.mintServiceAccount(rbacManifests());
const [metricsPort, healthPort, uiPort] = await freePorts(3);
const berth = spawn(
  process.execPath,
  [
    join(root, 'src/cli/main.ts'),
    'run',
    `--kubeconfig=${kubeconfig}`,
    `--label-dir=${join(examples, 'labels')}`,
    `--metrics-bind-address=127.0.0.1:${metricsPort}`,
    `--health-probe-bind-address=127.0.0.1:${healthPort}`,
    `--ui-bind-address=127.0.0.1:${uiPort}`,
    '--log-level=warn',
  ],
  { stdio: ['ignore', 'inherit', 'inherit'] },
);
say(`   the page: http://127.0.0.1:${uiPort}/ (nodes, policies, held pods, workloads; live)`);

// Print the labels Berth owns on each node whenever they change.
const nodes = new Informer<SlimNode>({ client, ref: Resources.nodes, transform: slimNode });
const derived = (n: SlimNode) =>
  ownedKeys(n, FIELD_MANAGER, ['metadata', 'labels'])
    .sort()
    .map((k) => `${k}=${n.metadata?.labels?.[k]}`)
    .join(', ');
let shown = '';
const show = () => {
  const rows = nodes
    .list()
    .map((n) => [n.metadata!.name!, derived(n)] as const)
    .sort((a, b) => (a[0] < b[0] ? -1 : 1));
  const table = rows.map(([name, labels]) => `   ${name.padEnd(20)} ${labels || '-'}`).join('\n');
  if (table === shown) return;
  shown = table;
  say(`\n-- derived labels at ${new Date().toISOString().slice(11, 19)}\n${table}`);
  const want = ['edgetpu-plugin-0', 'edgetpu-usb-0', 'edgetpu-pci-0', 'coral-devboard-0'];
  if (
    values.once &&
    want.every((w) => rows.find(([n]) => n === w)?.[1].includes('accelerators/edgetpu=true'))
  )
    void stop(0);
};
const debounce = { timer: undefined as NodeJS.Timeout | undefined };
const changed = () => {
  clearTimeout(debounce.timer);
  debounce.timer = setTimeout(show, 100);
};
nodes.addEventHandler({ onAdd: changed, onUpdate: changed, onDelete: changed });
nodes.start();

let stopping = false;
async function stop(code: number): Promise<void> {
  if (stopping) return;
  stopping = true;
  berth.kill('SIGTERM');
  if (berth.exitCode === null) await new Promise((r) => berth.once('exit', r));
  await nodes.stop();
  client.close();
  say(`\nberth stopped; the sandbox keeps running: npx berth sandbox down --name ${values.sandbox}`);
  process.exit(code);
}

process.once('SIGINT', () => void stop(0));
berth.once('exit', (code) => {
  say(`berth exited with code ${code}`);
  void stop(1);
});
if (!values.once) {
  say(
    '\nEdit examples/labels/accelerators/edgetpu (remove a line, add a file beside it) and watch the table. Ctrl-C stops.',
  );
  say(`kubectl --kubeconfig ${sb.kubeconfigPath} get nodelabelrules`);
} else {
  setTimeout(() => {
    say('timed out waiting for the example labels');
    void stop(1);
  }, 120_000).unref();
}
