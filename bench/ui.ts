// The page at scale: `npm run bench:ui -- --nodes 5000`.
// 1. `berth ui` (informers and the page, as its own process) over N kwok nodes in 10 pools and two
//    architectures.
// 2. First paint in headless Chromium, 3 runs, each in a fresh browser context: the time from
//    navigation until the first node rows are in the document (a MutationObserver records it),
//    and the browser's first-contentful-paint.
// 3. The floor, 3 runs: the same first page of rows (the same JSON) served by a minimal node:http
//    server and rendered by the simplest page (one fetch, one table, textContent).
// 4. Live updates: a label patched through the API until the page shows it without a reload, 5 times;
//    the floor of each is the same change seen by a bare watch of that one node from this process.
// Everything listens on 127.0.0.1.
import { spawn } from 'node:child_process';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { parseArgs } from 'node:util';
import type { Browser } from 'puppeteer-core';
import { Informer } from '../src/runtime/cache/informer.ts';
import { Resources, type KubeObject } from '../src/runtime/api/meta.ts';
import { createNodes } from '../src/sandbox/nodes.ts';
import { packageRoot } from '../src/sandbox/paths.ts';
import { freePorts } from '../src/sandbox/net.ts';
import { launchBrowser } from '../test/helpers/browser.ts';
import { benchSandbox, percentile, report, round, waitForValue } from './lib.ts';

const { values } = parseArgs({ options: { nodes: { type: 'string', default: '5000' } } });
const nodeCount = Number(values.nodes);
const RUNS = 3;
const POOLS = 10;

const sb = await benchSandbox('bench-ui');
const client = sb.client();
// Created, not waited for until Ready: the page shows a node whether or not kwok has made it Ready
// yet, and 5,000 nodes turning Ready on a loaded machine would take longer than the whole benchmark.
await createNodes(
  client,
  Array.from({ length: POOLS }, (_, i) => ({
    prefix: `p${i}`,
    count: Math.ceil(nodeCount / POOLS),
    arch: i % 2 ? 'arm64' : 'amd64',
    labels: { 'karpenter.sh/nodepool': `pool-${i}`, 'bench.berth.dev/team': `team-${i % 3}` },
  })),
);
const total = (await client.list(Resources.nodes)).items.length;
console.log(`${total} nodes created`);

const [port] = (await freePorts(1)) as [number];
const url = `http://127.0.0.1:${port}/`;
const ui = spawn(
  process.execPath,
  [
    `${packageRoot()}/src/cli/main.ts`,
    'ui',
    `--kubeconfig=${sb.kubeconfigPath}`,
    `--ui-bind-address=127.0.0.1:${port}`,
  ],
  { stdio: ['ignore', 'ignore', 'inherit'] },
);
const stopUi = () => ui.kill('SIGTERM');
process.once('exit', stopUi);

/** Records when the first node rows enter the document, before the page's own script runs. */
const MARK_ROWS = `
  new MutationObserver((_, o) => {
    if (document.querySelector('tbody tr[data-node]')) { window.rowsAt = performance.now(); o.disconnect(); }
  }).observe(document, { childList: true, subtree: true });`;

async function firstPaint(browser: Browser, at: string): Promise<{ rowsMs: number; fcpMs: number }> {
  const context = await browser.createBrowserContext();
  try {
    const page = await context.newPage();
    await page.evaluateOnNewDocument(MARK_ROWS);
    await page.goto(at);
    await page.waitForFunction('window.rowsAt !== undefined', { timeout: 30_000 });
    // The rows may be in the document a frame before they are painted.
    await page.waitForFunction("performance.getEntriesByName('first-contentful-paint').length > 0", {
      timeout: 10_000,
    });
    const [rowsMs, fcpMs] = (await page.evaluate(
      `[window.rowsAt, performance.getEntriesByName('first-contentful-paint')[0].startTime]`,
    )) as [number, number];
    return { rowsMs, fcpMs };
  } finally {
    await context.close();
  }
}

let browser: Browser | undefined;
let floorServer: http.Server | undefined;
let result: object | undefined;
try {
  await waitForValue(
    `the page's ${total} nodes`,
    async () => {
      const r = await fetch(`${url}api/nodes?limit=1`).then(
        (r) => r.json() as Promise<{ synced: boolean; total: number }>,
        () => undefined,
      );
      return r?.synced && r.total === total ? true : undefined;
    },
    120_000,
  );
  browser = await launchBrowser();
  const page: { rowsMs: number; fcpMs: number }[] = [];
  for (let i = 0; i < RUNS; i++) page.push(await firstPaint(browser, url));

  // The floor: the first page of rows the page asks for, as one JSON, and the simplest page.
  const json = await (await fetch(`${url}api/nodes?offset=0&limit=100`)).text();
  const floorHtml = `<!doctype html><meta charset="utf-8"><table><tbody id="rows"></tbody></table>
<script type="module">
const data = await (await fetch('/data.json')).json();
const body = document.getElementById('rows');
for (const r of data.rows) {
  const tr = document.createElement('tr');
  tr.dataset.node = r.name;
  for (const v of [r.name, r.pool, r.arch, Object.entries(r.labels).map(([k, v]) => k + '=' + v).join(' ')]) {
    const td = document.createElement('td');
    td.textContent = v;
    tr.append(td);
  }
  body.append(tr);
}
</script>`;
  floorServer = http.createServer((req, res) => {
    if (req.url === '/data.json') res.writeHead(200, { 'Content-Type': 'application/json' }).end(json);
    else res.writeHead(200, { 'Content-Type': 'text/html' }).end(floorHtml);
  });
  await new Promise<void>((r) => floorServer!.listen(0, '127.0.0.1', r));
  const floorUrl = `http://127.0.0.1:${(floorServer.address() as AddressInfo).port}/`;
  const floor: { rowsMs: number; fcpMs: number }[] = [];
  for (let i = 0; i < RUNS; i++) floor.push(await firstPaint(browser, floorUrl));

  // Live updates: a label on a node of the first page, until the open page shows it.
  const live = await browser.newPage();
  await live.goto(url);
  await live.waitForSelector('tr[data-node]');
  const first = (await live.$eval('tr[data-node]', (e) => e.getAttribute('data-node'))) as string;
  const watch = new Informer<KubeObject>({
    client,
    ref: Resources.nodes,
    fieldSelector: `metadata.name=${first}`,
  });
  let seen: { value: string; resolve: () => void } | undefined;
  const check = (n: KubeObject) => {
    if (seen && n.metadata?.labels?.['bench.berth.dev/live'] === seen.value) seen.resolve();
  };
  watch.addEventHandler({ onAdd: check, onUpdate: (_, n) => check(n) });
  watch.start();
  await waitForValue('the watch of one node synced', () => watch.hasSynced() || undefined, 30_000);
  const updates: number[] = [];
  const floorUpdates: number[] = [];
  for (let i = 0; i < 5; i++) {
    const value = `v${i}-${Date.now()}`;
    const watched = new Promise<void>((resolve) => (seen = { value, resolve }));
    const started = performance.now();
    await client.patch(Resources.nodes, first, { metadata: { labels: { 'bench.berth.dev/live': value } } });
    const floorDone = watched.then(() => floorUpdates.push(performance.now() - started));
    await live.waitForFunction(
      `document.querySelector('tr[data-node="${first}"]')?.textContent?.includes(${JSON.stringify(value)})`,
      { timeout: 10_000, polling: 'mutation' },
    );
    updates.push(performance.now() - started);
    await floorDone;
  }
  await watch.stop();

  const median = (xs: number[]) => percentile(xs, 50);
  const rows = page.map((p) => p.rowsMs);
  const floorRows = floor.map((p) => p.rowsMs);
  for (const [name, runs] of [
    ['page', page],
    ['floor', floor],
  ] as const)
    console.log(
      `${name}: first rows ${runs.map((r) => round(r.rowsMs)).join(', ')} ms; first contentful paint ${runs.map((r) => round(r.fcpMs)).join(', ')} ms`,
    );
  console.log(`live updates: ${updates.map((u) => round(u)).join(', ')} ms`);
  console.log(
    `live updates seen by a bare watch (floor): ${floorUpdates.map((u) => round(u)).join(', ')} ms`,
  );
  result = {
    bench: 'ui',
    nodes: total,
    runs: RUNS,
    firstRowsMs: rows.map((r) => round(r)),
    firstRowsMedianMs: round(median(rows)),
    firstContentfulPaintMedianMs: round(median(page.map((p) => p.fcpMs))),
    floorFirstRowsMs: floorRows.map((r) => round(r)),
    floorFirstRowsMedianMs: round(median(floorRows)),
    ratio: round(median(rows) / median(floorRows), 2),
    liveUpdateMs: updates.map((u) => round(u)),
    liveUpdateMaxMs: round(Math.max(...updates)),
    liveUpdateFloorMs: floorUpdates.map((u) => round(u)),
    liveUpdateMedianRatio: round(median(updates) / median(floorUpdates), 2),
    target: { firstRowsMs: 1000, liveUpdateMs: 1000 },
  };
} finally {
  await browser?.close();
  floorServer?.close();
  stopUi();
  await sb.destroy();
}
report(result);
