// test-driver: alone — its Berth runs the labels and cells controllers, which would act on the
// NodeLabelRules and Cells of other files.
//
// The page's plan view and explain panel in a real browser (Debian's Chromium, through
// puppeteer-core) against the sandbox: a NodeLabelRule uploaded to the plan view shows the nodes
// that would gain its label, with the rule responsible and the exit code `berth plan` would give,
// and writes nothing; --delete (a checkbox) shows what deleting a live rule would undo; a file that
// does not parse is answered clearly; a NoExecute rule shows the pods it would evict per namespace
// with a warning; a post from another site is refused. The explain panel of a
// NodeLabelRule and of a Cell shows what `berth explain -o json` says: conditions with since-when,
// counts, the nodes it acts on and leaves alone.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import type { Browser, Page } from 'puppeteer-core';
import { stringify } from 'yaml';
import { Cell } from '../../src/cells/crd.ts';
import { installCrds } from '../../src/cli/install.ts';
import type { Explanation } from '../../src/explain.ts';
import { NodeLabelRule } from '../../src/labels/crd.ts';
import { NAMESPACE } from '../../src/policy/namespace.ts';
import type { Plan } from '../../src/plan.ts';
import { Resources } from '../../src/runtime/api/meta.ts';
import { freePorts } from '../../src/sandbox/net.ts';
import { stateDir } from '../../src/sandbox/paths.ts';
import { runBerthCli, startBerth, type BerthProcess } from '../helpers/berth.ts';
import { launchBrowser } from '../helpers/browser.ts';
import {
  addNodes,
  applyAsAuthor,
  createNamespace,
  deleteNamespace,
  deleteNodes,
  podManifest,
  testSandbox,
  uniqueName,
} from '../helpers/cluster.ts';
import { waitFor } from '../helpers/wait.ts';

const sandbox = testSandbox();
const client = sandbox.client();
const id = uniqueName('uiplan');
const D = `${id}.example.com`;
const CONTROLLERS = '--controllers=labels,cells';
const dir = mkdtempSync(path.join(tmpdir(), 'berth-ui-plan-'));
let nodes: string[] = [];
const namespaces: string[] = [];
let berth: BerthProcess | undefined;
let browser: Browser | undefined;
let page: Page;
let url: string;

/** A NodeLabelRule of this file: `name` sets `${D}/<label>=true` on the nodes of `${D}/pool` in `pools`. */
const rule = (name: string, label: string, pools: string[]) => ({
  apiVersion: NodeLabelRule.apiVersion,
  kind: 'NodeLabelRule',
  metadata: { name },
  spec: {
    match: { anyOf: [{ label: `${D}/pool`, operator: 'In', values: pools }] },
    labels: { [`${D}/${label}`]: 'true' },
  },
});

const waitForText = (selector: string, text: string, timeout = 20_000) =>
  page.waitForFunction(
    `document.querySelector(${JSON.stringify(selector)})?.textContent?.includes(${JSON.stringify(text)}) ?? false`,
    { timeout, polling: 50 },
  );
/** Where this run's screenshots go, each named in the log. */
const shots = path.join(stateDir(), 'artifacts', `ui-plan-${id}`);
async function screenshot(name: string, what: string): Promise<void> {
  mkdirSync(shots, { recursive: true });
  const file = path.join(shots, `${name}.png`);
  await page.screenshot({ path: file, fullPage: true });
  process.stdout.write(`# screenshot of ${what}: ${file}\n`);
}
const textOf = (selector: string) => page.$eval(selector, (e) => e.textContent ?? '');
const click = (selector: string) => page.$eval(selector, (a) => (a as unknown as { click(): void }).click());

/** `berth ARGS -o json` as a user runs it (exit code 2 is `berth plan`'s "would change"). */
function cli<T>(args: string[]): { status: number | null; out: T } {
  const r = runBerthCli([...args, `--kubeconfig=${sandbox.kubeconfigPath}`, '-o', 'json']);
  assert.ok(
    r.status === 0 || (args[0] === 'plan' && r.status === 2),
    `berth ${args.join(' ')} exited ${r.status}: ${r.stderr}`,
  );
  return { status: r.status, out: JSON.parse(r.stdout) as T };
}

/** Pastes `yaml` into the plan view (or uploads it from `file`), sets --delete, plans, and waits for the answer. */
async function planInPage(yaml: string, deleting = false, file?: string): Promise<void> {
  await page.goto(`${url}#plan`);
  const pasted = () => page.$eval('#plan-yaml', (e) => (e as unknown as { value: string }).value);
  if (file) {
    await (await page.$('#plan-file'))!.uploadFile(file);
    await waitFor('the uploaded file in the text box', async () => (await pasted()) === yaml);
  } else await page.$eval('#plan-yaml', (e, v) => ((e as unknown as { value: string }).value = v), yaml);
  if ((await page.$eval('#plan-delete', (e) => (e as unknown as { checked: boolean }).checked)) !== deleting)
    await page.click('#plan-delete');
  await page.click('#plan-run');
  await waitForText('#plan-status', deleting ? 'planned deleting them' : 'planned applying them');
}

/** The plan view's objects, each as `object: op what (by)` lines. */
const planShown = () =>
  page.$$eval('#plan-result .planned', (boxes) =>
    boxes.map((b) => ({
      object: (b as unknown as { dataset: Record<string, string> }).dataset['object'],
      effects: [...b.querySelectorAll('li')].map((li) => li.textContent ?? ''),
    })),
  );

before(async () => {
  browser = await launchBrowser();
  await installCrds(client);
  nodes = await addNodes(client, { prefix: `${id}-n`, count: 3 });
  for (const [i, pool] of ['gpu', 'gpu', 'cpu'].entries())
    await client.patch(Resources.nodes, nodes[i]!, { metadata: { labels: { [`${D}/pool`]: pool } } });
  // A live rule on the cpu node, for --delete and for the explain panel.
  const live = rule(id, 'live', ['cpu']);
  await applyAsAuthor(client, NodeLabelRule, live.metadata, live.spec);
  // A cell whose kubeconfig Secret does not exist: unreachable, with its probe's reason.
  await applyAsAuthor(
    client,
    Cell,
    { name: id },
    { locations: ['QQP'], kubeconfigSecretRef: { namespace: NAMESPACE, name: `${id}-none` } },
  );
  const [port] = (await freePorts(1)) as [number];
  berth = await startBerth(sandbox, [CONTROLLERS, `--ui-bind-address=127.0.0.1:${port}`]);
  url = `http://127.0.0.1:${port}/`;
  page = await browser.newPage();
  await page.setViewport({ width: 1400, height: 900 });
  // The live rule is applied before the plans below are compared with the cluster.
  await waitFor('the live rule labels the cpu node', async () =>
    Boolean((await client.get(Resources.nodes, nodes[2]!)).metadata?.labels?.[`${D}/live`]),
  );
});

after(async () => {
  await browser?.close();
  await client.delete(NodeLabelRule.ref, id).catch(() => {});
  await client.delete(Cell.ref, id).catch(() => {});
  await berth?.stop();
  for (const ns of namespaces) await deleteNamespace(client, ns);
  await deleteNodes(client, nodes);
  client.close();
  rmSync(dir, { recursive: true, force: true });
});

test('an uploaded NodeLabelRule: the plan view shows the nodes that would gain its label, as berth plan says, and writes nothing', async () => {
  const name = `${id}-gpu`;
  const yaml = stringify(rule(name, 'gpu', ['gpu']));
  const file = path.join(dir, 'gpu.yaml');
  writeFileSync(file, yaml);
  await planInPage(yaml, false, file);
  await waitForText('#plan-result', 'exit code 2: 2 object(s) would change (nothing was written)');
  const shown = await planShown();
  const label = `${D}/gpu=true`;
  assert.deepEqual(
    shown.filter((o) => o.object?.startsWith(`Node ${id}`)),
    [nodes[0], nodes[1]].map((n) => ({
      object: `Node ${n}`,
      effects: [`+label ${label} (NodeLabelRule ${name})`],
    })),
  );
  // The same as the command, given the same file and the flags the page's Berth runs with.
  const { status, out } = cli<Plan>(['plan', '-f', file, CONTROLLERS]);
  assert.equal(status, 2);
  assert.deepEqual(
    shown.map((o) => o.object),
    [...new Set(out.effects.map((e) => `${e.kind} ${e.name}`))],
  );
  // Nothing was written: no such rule, no such label.
  await assert.rejects(client.get(NodeLabelRule.ref, name), /not ?found/i);
  for (const n of nodes)
    assert.equal((await client.get(Resources.nodes, n)).metadata?.labels?.[`${D}/gpu`], undefined);
  // Each node is a link to its explanation.
  await click(`#plan-result [data-object="Node ${nodes[0]}"] a.object`);
  await waitForText('#explain-text', `Node ${nodes[0]}`);
});

test('--delete of a live rule: the plan view shows the label its node would lose', async () => {
  await planInPage(stringify(rule(id, 'live', ['cpu'])), true);
  await waitForText('#plan-result', 'exit code 2');
  assert.deepEqual(
    (await planShown()).filter((o) => o.object?.startsWith(`Node ${id}`)),
    [{ object: `Node ${nodes[2]}`, effects: [`-label ${D}/live=true (NodeLabelRule ${id})`] }],
  );
  // Applying it as it is changes nothing: exit code 0.
  await planInPage(stringify(rule(id, 'live', ['cpu'])));
  await waitForText('#plan-result', 'exit code 0: no change');
});

test('a NoExecute rule: the plan view shows the pods it would evict per namespace, and warns', async () => {
  const ns = await createNamespace(client, 'uiplan');
  namespaces.push(ns);
  await client.create(
    Resources.pods,
    podManifest({ name: 'web-0', namespace: ns, nodeName: nodes[0]!, labels: { app: 'web' } }),
  );
  await client.create(Resources.podDisruptionBudgets, {
    apiVersion: 'policy/v1',
    kind: 'PodDisruptionBudget',
    metadata: { name: 'web', namespace: ns },
    spec: { minAvailable: 1, selector: { matchLabels: { app: 'web' } } },
  });
  const drain = rule(`${id}-drain`, 'drain', ['gpu']);
  const yaml = stringify({
    ...drain,
    spec: { ...drain.spec, taints: [{ key: `${D}/drain`, effect: 'NoExecute' }], acknowledgeNoExecute: true },
  });
  await planInPage(yaml);
  await waitForText('#plan-result', `Pod ${ns}/web-0`);
  const pod = (await planShown()).find((o) => o.object === `Pod ${ns}/web-0`)!;
  assert.match(pod.effects.join('\n'), /^!evicted by taint /);
  assert.match(await textOf('#plan-result'), new RegExp(`Evictions by namespace: ${ns} 1`));
  const warnings = await page.$$eval('#plan-result .warning', (w) => w.map((d) => d.textContent ?? ''));
  assert.ok(
    warnings.some((w) => w.startsWith('warning: this change would evict') && w.includes(`${ns} 1`)),
    warnings.join('\n'),
  );
  await screenshot('plan', 'the plan view of a NoExecute rule');
  // The page plans as Berth, whose role may not list PodDisruptionBudgets: it says so, or counts them.
  const budgets = await textOf('#plan-result');
  assert.ok(
    budgets.includes(`${ns}/web 1`) || budgets.includes('unknown: PodDisruptionBudgets: not allowed'),
    budgets,
  );
});

test('a file that does not parse, or is too large, is answered clearly; another site may not plan', async () => {
  await planInPage('kind: NodeLabelRule\nmetadata: {name: [broken\n');
  await waitForText('#plan-result .error', 'could not plan: the pasted file:');
  const post = (headers: Record<string, string>, body = 'kind: List\nitems: []\n', q = '') =>
    fetch(`${url}api/plan${q}`, { method: 'POST', headers, body });
  // What a form on another site can send: refused before anything is read.
  const form = await post({ 'Content-Type': 'application/x-www-form-urlencoded' });
  assert.equal(form.status, 403);
  assert.match(((await form.json()) as { error: string }).error, /content type/);
  const other = await post({ 'Content-Type': 'application/yaml', Origin: 'http://evil.example' });
  assert.equal(other.status, 403);
  assert.equal((await fetch(`${url}api/plan`)).status, 405, 'plans are posted');
  const big = await post({ 'Content-Type': 'application/yaml' }, '#'.repeat((4 << 20) + 1));
  assert.equal(big.status, 413);
  const ok = await post({ 'Content-Type': 'application/yaml' });
  assert.equal(ok.status, 200);
  assert.equal(((await ok.json()) as { exitCode: number }).exitCode, 0);
});

test('the explain panel of a NodeLabelRule shows what berth explain -o json says: conditions since when, counts, nodes in and out', async () => {
  const { out } = cli<Explanation>(['explain', 'nodelabelrule', id, CONTROLLERS]);
  await page.goto(`${url}#policies?kind=NodeLabelRule&name=${id}`);
  await click(`#policy-rows a.object[href*="explain="]`);
  await waitForText('#explain-view', `NodeLabelRule ${id}`);
  await waitFor('the panel shows the rule applied', async () =>
    (await textOf('#explain-view')).includes('since'),
  );
  const view = await page.$eval('#explain-view', (v) => ({
    conditions: [...v.querySelectorAll('table.conditions tr')].map((r) =>
      [...(r as unknown as { cells: { textContent: string }[] }).cells].map((c) => c.textContent),
    ),
    counts: [...v.querySelectorAll('p.counts .tag')].map((t) => t.textContent),
    acts: [...v.querySelectorAll('ul.acts > li')].map((li) => li.firstChild?.nextSibling?.textContent),
  }));
  assert.deepEqual(
    view.conditions.map((c) => c.slice(0, 3)),
    (out.conditions ?? []).map((c) => [c.type, c.status, c.reason]),
  );
  for (const [i, c] of (out.conditions ?? []).entries())
    assert.match(view.conditions[i]![3]!, new RegExp(`^since ${c.lastTransitionTime} \\(`));
  assert.deepEqual(
    view.counts,
    Object.entries(out.counts ?? {}).map(([k, v]) => `${k} ${v}`),
  );
  assert.deepEqual(
    view.acts,
    (out.subjects ?? []).filter((s) => s.in).map((s) => s.name),
  );
  await screenshot('explain-rule', 'the explain panel of a NodeLabelRule');
  assert.ok(view.acts.includes(nodes[2]!), 'it acts on the cpu node');
});

test('the explain panel of a Cell shows what berth explain cell -o json says: unreachable, since when', async () => {
  await waitFor('the cell is probed', async () =>
    Boolean(
      ((await client.get(Cell.ref, id)) as { status?: { conditions?: unknown[] } }).status?.conditions
        ?.length,
    ),
  );
  const { out } = cli<Explanation>(['explain', 'cell', id]);
  await page.goto(`${url}#cells?explain=cell%2F${id}`);
  await waitForText('#explain-view', `Cell ${id}`);
  await waitForText('#explain-view', 'Reachable');
  const rows = await page.$$eval('#explain-view table.conditions tr', (rs) =>
    rs.map((r) => ({
      cls: r.className,
      cells: [...(r as unknown as { cells: { textContent: string }[] }).cells].map((c) => c.textContent),
    })),
  );
  assert.deepEqual(
    rows.map((r) => r.cells.slice(0, 3)),
    (out.conditions ?? []).map((c) => [c.type, c.status, c.reason]),
  );
  const reachable = rows.find((r) => r.cells[0] === 'Reachable')!;
  assert.equal(reachable.cells[1], 'False');
  assert.equal(reachable.cls, 'bad', 'unreachable is shown as bad');
  assert.match(reachable.cells[3]!, /^since \d{4}-/);
  await screenshot('explain-cell', 'the explain panel of a Cell');
  // Its lines (last contact, cities served) are those the command prints, but for how long ago,
  // which each says as of when it asked.
  const ago = (t: string) => t.replace(/\(\d+[smhd] ago\)/g, '(ago)');
  const lines = ago(await textOf('#explain-lines'));
  for (const l of out.lines) assert.ok(lines.includes(ago(l)), `the panel says ${l}`);
});
