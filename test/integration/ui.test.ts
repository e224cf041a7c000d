// test-driver: alone — its Berth runs the labels, gates, cells and workloads controllers, which
// would act on the NodeLabelRules, NodeStartupGates, Cells and WorkloadDeployments of other files.
//
// The page in a real browser (Debian's Chromium, headless, through puppeteer-core) against the
// sandbox: it lists the nodes, shows a label added through the API without a reload within 2 s,
// shows what a node held by a startup gate waits for, renders a value with markup as text, shows
// what `berth explain` prints, lists a pod a Berth scheduling gate holds and a Warning event, maps
// a Cell under its city with the reason its probe gave, and a WorkloadDeployment's instances and
// rollout; its header says the version, the leader, the controllers and counts that link to their
// lists; conditions are coloured by meaning; the state is in the address (reload, back, forward).
// Screenshots (header, a bad policy beside a healthy one, the cells, the page) go to
// $XDG_STATE_HOME/berth/artifacts/ui-<id>/, each named in the test's log.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before, test } from 'node:test';
import type { Browser, Page } from 'puppeteer-core';
import { Cell, Location } from '../../src/cells/crd.ts';
import { installCrds } from '../../src/cli/install.ts';
import { NodeStartupGate } from '../../src/gates/crd.ts';
import { NodeLabelRule } from '../../src/labels/crd.ts';
import { NAMESPACE } from '../../src/policy/namespace.ts';
import { Resources } from '../../src/runtime/api/meta.ts';
import { packageRoot, stateDir } from '../../src/sandbox/paths.ts';
import { version } from '../../src/cli/version.ts';
import { QUOTA_GATE } from '../../src/workloads/types.ts';
import { WorkloadDeployment } from '../../src/workloads/crd.ts';
import { startBerth, type BerthProcess } from '../helpers/berth.ts';
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
import { sleep, waitFor } from '../helpers/wait.ts';

const sandbox = testSandbox();
const client = sandbox.client();
const id = uniqueName('ui');
const D = `${id}.example.com`;
const XSS = '<script>alert(1)</script>';
let ns: string;
let nodes: string[] = [];
let berth: BerthProcess | undefined;
let browser: Browser | undefined;
let page: Page;
let url: string;
const dialogs: string[] = [];

/**
 * Waits until the element `selector` of the page contains `text`. (The check runs in the page, so
 * it is written as the page's script, not as this file's TypeScript, which knows no DOM.)
 */
const waitForText = (selector: string, text: string, timeout = 15_000) =>
  page.waitForFunction(
    `document.querySelector(${JSON.stringify(selector)})?.textContent?.includes(${JSON.stringify(text)}) ?? false`,
    { timeout, polling: 50 },
  );
/** The controllers this file's Berth runs; `berth explain` is given them too. */
const CONTROLLERS = '--controllers=labels,gates,cells,workloads';
const rowOf = (node: string) => `tr[data-node="${node}"]`;
/** Clicks in the page, in one step (a live update may replace the element between a query and a click from outside). */
const click = (selector: string) => page.$eval(selector, (a) => (a as unknown as { click(): void }).click());
const hashIs = (hash: string) =>
  page.waitForFunction(`location.hash === ${JSON.stringify(hash)}`, { timeout: 5000, polling: 50 });
/** Where this run's screenshots go, each named in the log. */
const shots = path.join(stateDir(), 'artifacts', `ui-${id}`);
async function screenshot(name: string, what: string, selector?: string): Promise<void> {
  mkdirSync(shots, { recursive: true });
  const file = path.join(shots, `${name}.png`);
  const png = selector
    ? await (await page.$(selector))!.screenshot({ path: file })
    : await page.screenshot({ path: file, fullPage: true });
  assert.ok(png.length > 2_000, `screenshot of ${png.length} bytes`);
  process.stdout.write(`# screenshot of ${what}: ${file}\n`);
}
/** The colour and weight a condition of a policy's row is shown in. */
const conditionStyle = (policy: string, condition: string) =>
  page.evaluate(`(() => {
    const row = [...document.querySelectorAll('#policy-rows tr')].find((r) => r.cells[1]?.textContent.startsWith(${JSON.stringify(policy)} + ' ') || r.cells[1]?.textContent === ${JSON.stringify(policy)});
    const div = [...(row?.cells[3]?.querySelectorAll('div div') ?? [])].find((d) => d.textContent.startsWith(${JSON.stringify(condition)}));
    if (!div) return undefined;
    const s = getComputedStyle(div);
    return { cls: div.className, color: s.color, weight: s.fontWeight };
  })()`) as Promise<{ cls: string; color: string; weight: string } | undefined>;
const RED = 'rgb(176, 0, 32)';

/** The text of the page's row of a node ('' while it has none). */
const rowText = (node: string) => page.$eval(rowOf(node), (e) => e.textContent ?? '').catch(() => '');

before(async () => {
  // Found (or a clear error) before anything is created.
  browser = await launchBrowser();
  await installCrds(client);
  ns = await createNamespace(client, 'ui');
  nodes = await addNodes(client, {
    prefix: `${id}-n`,
    count: 2,
    labels: { 'karpenter.sh/nodepool': id },
  });
  await client.patch(Resources.nodes, nodes[0]!, { metadata: { labels: { [`${D}/pool`]: 'held' } } });
  await applyAsAuthor(
    client,
    NodeStartupGate,
    { name: id },
    {
      taint: { key: `${D}/startup`, effect: 'NoSchedule' },
      nodeSelector: { matchLabels: { [`${D}/pool`]: 'held' } },
      requirements: { pods: [{ namespace: ns, selector: { matchLabels: { app: 'never' } } }] },
      backfill: true,
    },
  );
  // A derived annotation whose value is markup: user input the page must show as text.
  await applyAsAuthor(
    client,
    NodeLabelRule,
    { name: id },
    {
      match: { anyOf: [{ label: 'karpenter.sh/nodepool', operator: 'In', values: [id] }] },
      annotations: { [`${D}/note`]: XSS },
    },
  );
  // With leader election, so that the header names the holder of the Lease.
  berth = await startBerth(sandbox, [CONTROLLERS, '--leader-elect'], { page: true });
  url = `http://127.0.0.1:${berth.uiPort}/`;
  page = await browser.newPage();
  page.on('dialog', (d) => {
    dialogs.push(d.message());
    void d.dismiss();
  });
  await page.setViewport({ width: 1400, height: 900 });
  await page.goto(url);
  // Only this file's nodes: the sandbox has others.
  await page.type('#f-text', id);
});

after(async () => {
  await browser?.close();
  // The gate goes while Berth runs: its finalizer gives the node back.
  await client.delete(NodeStartupGate.ref, id).catch(() => {});
  await waitFor(`gate ${id} gone`, () =>
    client.get(NodeStartupGate.ref, id).then(
      () => false,
      () => true,
    ),
  ).catch(() => {});
  await berth?.stop();
  await client.delete(NodeLabelRule.ref, id).catch(() => {});
  await client.delete(NodeLabelRule.ref, `${id}-invalid`).catch(() => {});
  await client.delete(Cell.ref, id).catch(() => {});
  await client.delete(Location.ref, id).catch(() => {});
  await deleteNodes(client, nodes);
  if (ns) await deleteNamespace(client, ns);
  client.close();
});

test('the page lists the nodes, with their pool and architecture', async () => {
  for (const n of nodes) await waitForText(rowOf(n), n);
  for (const n of nodes) {
    const text = await rowText(n);
    assert.match(text, new RegExp(id), `${n}'s row names its pool`);
    assert.match(text, /amd64/, `${n}'s row names its architecture`);
  }
  // The filter (this file's id) leaves this file's two nodes of all the sandbox's.
  const all = (await client.list(Resources.nodes)).items.length;
  await waitForText('#node-count', `2 of ${all}`, 5000);
  assert.equal(await page.$$eval('#node-rows tr', (rows) => rows.length), 2);
});

test('a label added through the API appears without a reload within 2 s', async () => {
  await page.evaluate('window.marker = 1');
  const started = Date.now();
  await client.patch(Resources.nodes, nodes[1]!, { metadata: { labels: { [`${D}/added`]: 'yes' } } });
  await waitForText(rowOf(nodes[1]!), `${D}/added=yes`, 2000);
  const took = Date.now() - started;
  assert.ok(took < 2000, `the label showed after ${took} ms`);
  assert.equal(await page.evaluate('window.marker'), 1, 'the page was not reloaded');
});

test('a node held by a startup gate shows the gate and what it waits for', async () => {
  await waitForText(rowOf(nodes[0]!), `${id}: Held`);
  const text = await rowText(nodes[0]!);
  assert.match(text, new RegExp(`${id}: Held since \\d{4}-`));
  assert.match(text, new RegExp(`waiting for pods app=never in ${ns}`));
  assert.doesNotMatch(await rowText(nodes[1]!), /Held/, 'the gate does not select the other node');
  // The pods section lists it among the held nodes, with the same reason.
  const held = await page.$eval('#held-nodes', (e) => e.textContent ?? '');
  assert.match(held, new RegExp(`${nodes[0]}: .*app=never`));
});

test('a value with markup renders as text, and nothing of it runs', async () => {
  await waitForText(rowOf(nodes[1]!), XSS);
  assert.match(
    await rowText(nodes[1]!),
    new RegExp(`annotation ${D}/note=<script>alert\\(1\\)</script> \\(berth-labels, NodeLabelRule ${id}\\)`),
  );
  assert.equal(await page.$$eval('main script', (s) => s.length), 0, 'no script element came from the data');
  assert.deepEqual(dialogs, [], 'no dialog fired');
});

test('selecting a node shows what `berth explain node` prints', async () => {
  // Clicked in the page, in one step: a live update may re-render the row between a query and a
  // click from outside (puppeteer's page.click), and the link it found would be detached.
  await page.$eval(`${rowOf(nodes[0]!)} a.object`, (a) => (a as unknown as { click(): void }).click());
  await waitForText('#explain-text', `Node ${nodes[0]}`);
  const shown = await page.$eval('#explain-text', (e) => e.textContent ?? '');
  const { stdout } = await promisify(execFile)(process.execPath, [
    path.join(packageRoot(), 'src/cli/main.ts'),
    'explain',
    'node',
    nodes[0]!,
    `--kubeconfig=${sandbox.kubeconfigPath}`,
    CONTROLLERS,
  ]);
  // The page explains with the flags its Berth runs with: the command, given them, says the same.
  assert.equal(shown, stdout.trimEnd());
  assert.match(shown, /\nNot run by this Berth \(--controllers\): agents$/);
  assert.match(shown, /HELD since/);
});

test('an earlier explain answered after a later one does not replace it', async () => {
  // The first node's answer is held back in the page's fetch until after the second's is shown.
  await page.evaluate(`{
    const fetch = window.fetch.bind(window);
    window.fetch = (url, init) =>
      String(url).includes(${JSON.stringify(`name=${nodes[0]}`)})
        ? new Promise((resolve) => setTimeout(() => resolve(fetch(url, init)), 1500))
        : fetch(url, init);
  }`);
  try {
    for (const n of [nodes[0]!, nodes[1]!])
      await page.$eval(`${rowOf(n)} a.object`, (a) => (a as unknown as { click(): void }).click());
    await waitForText('#explain-text', `Node ${nodes[1]}`);
    await sleep(2500);
    const shown = await page.$eval('#explain-text', (e) => e.textContent ?? '');
    assert.match(shown, new RegExp(`Node ${nodes[1]}`));
    assert.doesNotMatch(shown, new RegExp(`Node ${nodes[0]}\\b`));
  } finally {
    await page.reload();
  }
});

test('a pod a Berth scheduling gate holds is listed with the reason', async () => {
  const pod = uniqueName('gated');
  await client.create(Resources.pods, {
    ...podManifest({ name: pod, namespace: ns }),
    spec: {
      ...(podManifest({ name: pod, namespace: ns })['spec'] as object),
      schedulingGates: [{ name: QUOTA_GATE }],
    },
  });
  await waitForText('#pod-rows', pod, 5000);
  const text = await page.$eval('#pod-rows', (e) => e.textContent ?? '');
  assert.match(text, new RegExp(`${ns}/${pod}${QUOTA_GATE}quota: waiting for the quota controller`));
});

test('a Warning event shows among the events, its note as text', async () => {
  const note = `a warning for ${id} <img src=x onerror=alert(2)>`;
  await client.create(Resources.events, {
    apiVersion: 'events.k8s.io/v1',
    kind: 'Event',
    metadata: { name: `${id}-warning`, namespace: ns },
    // A MicroTime: six digits of fraction.
    eventTime: new Date().toISOString().replace('Z', '000Z'),
    reportingController: 'berth.dev/ui-test',
    reportingInstance: 'ui-test',
    action: 'Test',
    reason: 'UiTest',
    type: 'Warning',
    note,
    // An object of the namespace, so the event goes with it (a cluster-scoped one's is in default).
    regarding: { apiVersion: 'v1', kind: 'Pod', namespace: ns, name: `${id}-pod` },
  });
  await waitForText('#event-rows', note, 5000);
  assert.match(
    await page.$eval('#event-rows', (e) => e.textContent ?? ''),
    new RegExp(`Pod ${ns}/${id}-pod( explain)?UiTest`),
  );
  assert.equal(await page.$$eval('#event-rows img', (i) => i.length), 0, 'the note is text, not markup');
  assert.deepEqual(dialogs, [], 'no dialog fired');
});

test('the header says the version, that this Berth leads, its controllers, and counts that link to their lists', async () => {
  await waitForText('#version', `v${version()}`);
  // The Lease may still be held by an earlier Berth of the sandbox until it expires.
  await waitForText('#leader', 'leader: this Berth', 60_000);
  assert.equal(
    await page.$eval('#controllers', (e) => e.textContent),
    'controllers: labels, gates, workloads, cells',
  );
  await waitForText('#c-missing', '0 missing CRDs');
  await waitFor('the header counts the held node', async () =>
    /^[1-9]\d* held nodes?$/.test(await page.$eval('#c-held', (e) => e.textContent ?? '')),
  );
  assert.equal(await page.$eval('#c-held', (e) => e.className), 'bad');
  await screenshot('header', 'the header', 'header');
  await click('#c-held');
  await hashIs('#nodes?held=1');
  await waitForText(rowOf(nodes[0]!), nodes[0]!);
  assert.equal(await page.$(rowOf(nodes[1]!)), null, 'a node no gate holds is not listed');
  assert.equal(await page.$eval('#f-held', (e) => (e as unknown as { checked: boolean }).checked), true);
});

test('conditions by meaning: Invalid=True red, a healthy policy’s Invalid=False and Conflicting=False not', async () => {
  // RE2 has no backreference: the rule is Invalid.
  await applyAsAuthor(
    client,
    NodeLabelRule,
    { name: `${id}-invalid` },
    {
      match: { anyOf: [{ label: `${D}/probe`, operator: 'InRegexp', values: ['(a)\\1'] }] },
      labels: { [`${D}/never`]: 'true' },
    },
  );
  await waitFor('the header counts the invalid rule', async () =>
    /^[1-9]\d* invalid polic(y|ies)$/.test(await page.$eval('#c-invalid', (e) => e.textContent ?? '')),
  );
  await click('#c-invalid');
  await hashIs('#policies?cond=Invalid');
  await waitForText('#policy-rows', `${id}-invalid`);
  const listed = await page.$$eval('#policy-rows tr', (rows) => rows.map((r) => r.children[1]?.textContent));
  assert.ok(
    !listed.some((n) => n?.startsWith(`${id} `) || n === id),
    `the valid rule is not listed: ${listed}`,
  );
  // Both of this file's rules, by a link anyone can open.
  await page.goto(`${url}#policies?kind=NodeLabelRule&name=${id}`);
  await waitForText('#policy-rows', `${id}-invalid`);
  await waitForText('#policy-rows', 'Ready=True');
  const invalid = await conditionStyle(`${id}-invalid`, 'Invalid=True');
  assert.deepEqual(invalid && [invalid.cls, invalid.color], ['bad', RED]);
  for (const c of ['Invalid=False', 'Conflicting=False', 'Ready=True']) {
    const healthy = await conditionStyle(id, c);
    assert.equal(healthy?.cls, 'good', `${c} of a healthy rule`);
    assert.notEqual(healthy.color, RED, `${c} is not red`);
    assert.equal(healthy.weight, '400', `${c} is not bold`);
  }
  assert.equal(invalid?.weight, '400', 'not bold either');
  await screenshot('policies', 'a policy with a bad condition beside a healthy one', '#policies table');
});

test('the address keeps the state: a link opens a filtered list and an explanation, back and forward walk', async () => {
  const events = `${url}#events?reason=UiTest`;
  await page.goto(events);
  await waitForText('#event-rows', 'UiTest');
  assert.equal(await page.$eval('#events', (e) => e.hidden), false);
  assert.equal(await page.$eval('#e-reason', (e) => (e as unknown as { value: string }).value), 'UiTest');
  const reasons = await page.$$eval('#event-rows tr', (rows) => rows.map((r) => r.children[2]?.textContent));
  assert.deepEqual([...new Set(reasons)], ['UiTest']);
  // A node and its explanation, opened from the address alone (a reload is a new page).
  await page.goto(`${url}#nodes?text=${id}&explain=node%2F${nodes[1]}`);
  await page.reload();
  await waitForText('#explain-text', `Node ${nodes[1]}`);
  assert.equal(await page.$eval('#f-text', (e) => (e as unknown as { value: string }).value), id);
  await waitForText('#node-count', '2 of ');
  // A tab, then back to the node and forward again.
  await click('#tabs a[href="#pods"]');
  await hashIs('#pods');
  assert.equal(await page.$eval('#nodes', (e) => e.hidden), true);
  await page.goBack();
  await hashIs(`#nodes?text=${id}&explain=node%2F${nodes[1]}`);
  assert.equal(await page.$eval('#nodes', (e) => e.hidden), false);
  assert.equal(await page.$eval('#explain', (e) => e.hidden), false);
  await page.goBack();
  await hashIs('#events?reason=UiTest');
  assert.equal(await page.$eval('#explain', (e) => e.hidden), true, 'the explanation closes');
  await page.goForward();
  await page.goForward();
  await hashIs('#pods');
  assert.equal(await page.$eval('#pods', (e) => e.hidden), false);
});

test('the cells map shows a city with its Location and its cell, with what the probe found', async () => {
  // A made-up city code, so that no other file's cell is under it.
  const city = 'UIX';
  await applyAsAuthor(
    client,
    Location,
    { name: id },
    { cityCode: city, topology: { region: 'ui-region' }, class: 'edge' },
  );
  // Its kubeconfig Secret was never made: the probe says so, and the page shows why.
  await applyAsAuthor(
    client,
    Cell,
    { name: id },
    { locations: [city], kubeconfigSecretRef: { namespace: NAMESPACE, name: `${id}-none` } },
  );
  await waitForText('#cities', 'SecretMissing', 10_000).catch(async (e: unknown) => {
    const c = await client.get(Cell.ref, id);
    const shown = await page.$eval('#cities', (e) => e.textContent ?? '');
    throw new Error(`${String(e)}; the page shows: ${shown}; the Cell's status: ${JSON.stringify(c.status)}`);
  });
  const tile = await page.$eval(`[data-city="${city}"]`, (e) => e.textContent ?? '');
  assert.match(tile, new RegExp(`^${city}${id} \\(ui-region, edge\\)${id} 0/0 instances Ready`));
  const box = await page.$eval(`[data-cell="${id}"]`, (e) => ({
    cls: e.className,
    text: e.textContent ?? '',
  }));
  assert.equal(box.cls, 'cell bad', 'an unreachable cell is red');
  assert.match(box.text, /unreachable, last contact never/);
  assert.match(box.text, /not Ready: SecretMissing/);
  // The header counts it; its link shows the unreachable cells only.
  await waitFor('the header counts the unreachable cell', async () =>
    /^[1-9]\d* unreachable cells?$/.test(await page.$eval('#c-unreachable', (e) => e.textContent ?? '')),
  );
  await click('#c-unreachable');
  await hashIs('#cells?unreachable=1');
  assert.ok(await page.$(`[data-cell="${id}"]`), 'the unreachable cell is listed');
  assert.equal(await page.$eval('#cells', (e) => e.hidden), false, 'the cells tab is shown');
  await screenshot('cells', 'the cells by city', '#cells');
  // Explained by `berth explain cell`, as every object the page lists.
  await click(`[data-cell="${id}"] a.object`);
  await waitForText('#explain-text', `Cell ${id}`);
  assert.match(String(await page.evaluate('location.hash')), new RegExp(`&explain=cell%2F${id}$`));
  await click('#explain-close');
});

test('a WorkloadDeployment shows its instances Ready and its rollout up to date', async () => {
  const name = `${id}-web`;
  await applyAsAuthor(
    client,
    WorkloadDeployment,
    { name, namespace: ns },
    { replicas: 2, template: { containers: [{ name: 'app', image: 'registry.example/app:1' }] } },
  );
  const cellsOf = () =>
    page.$$eval('#workload-rows tr', (rows) =>
      rows.map((r) => [...r.querySelectorAll('td')].map((td) => td.textContent ?? '')),
    );
  const row = await waitFor(
    `${name} shown with 2 of 2 Ready and up to date`,
    async () => {
      const r = (await cellsOf()).find((c) => c[0] === `${ns}/${name}`);
      return r?.[1] === '2 / 2' && r[2] === '2 / 2' ? r : undefined;
    },
    {
      timeoutMs: 30_000,
      observe: async () => ({
        page: await cellsOf(),
        api: await (await fetch(`${url}api/workloads`)).text(),
        wd: (await client.get(WorkloadDeployment.ref, name, ns)).status,
      }),
    },
  );
  // Its instances by ordinal, each Ready, and the deployment's conditions.
  assert.match(row[4]!, new RegExp(`^${ns}/${name}-0 True .*${ns}/${name}-1 True`));
  assert.match(row[3]!, /Available/);
});

test('a screenshot of the page is kept as a test artefact', async () => {
  await page.goto(`${url}#workloads`);
  await waitForText('#workload-rows', `${id}-web`);
  await screenshot('page', 'the page');
});

test('a page address already taken: berth run exits 1 with the error, not alive and unready for good', async () => {
  const taken = createServer();
  await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
  const { port } = taken.address() as AddressInfo;
  try {
    // Its informers and servers start before the page does; they must not keep it alive.
    await assert.rejects(
      startBerth(sandbox, ['--controllers=labels', `--ui-bind-address=127.0.0.1:${port}`], {
        capture: true,
        readyWithinMs: 60_000,
      }).then((b) => b.stop()),
      (e: Error) => {
        assert.match(e.message, /^berth exited with 1\n/);
        assert.match(e.message, new RegExp(`EADDRINUSE.*127\\.0\\.0\\.1:${port}`));
        return true;
      },
    );
  } finally {
    taken.close();
  }
});
