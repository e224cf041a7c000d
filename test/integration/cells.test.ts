// test-driver: alone
// Cells against real control planes side by side: the run's sandbox is the management plane, two
// smaller ones (no nodes) are cells in Dallas and London, joined with `berth cells join` and probed
// by `berth run --controllers cells`. A cell's apiserver is stopped and started again, and a cell's
// Secret is spoiled, while the other cell stays Ready.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { secretName } from '../../src/cells/cli.ts';
import { type CellObject, type LocationObject } from '../../src/cells/types.ts';
import { Cell, Location } from '../../src/cells/crd.ts';
import { installCrds } from '../../src/cli/install.ts';
import { NAMESPACE } from '../../src/policy/namespace.ts';
import { findCondition } from '../../src/runtime/api/conditions.ts';
import { Resources, type KubeObject } from '../../src/runtime/api/meta.ts';
import type { KubeClient } from '../../src/runtime/client/client.ts';
import { packageRoot } from '../../src/sandbox/paths.ts';
import { freePorts } from '../../src/sandbox/net.ts';
import { Sandbox } from '../../src/sandbox/sandbox.ts';
import { startBerth, type BerthProcess } from '../helpers/berth.ts';
import { testSandbox, uniqueName } from '../helpers/cluster.ts';
import { holdsFor, waitFor } from '../helpers/wait.ts';

const sandbox = testSandbox();
const client = sandbox.client();
const dfwSandbox = new Sandbox(process.env['BERTH_TEST_CELL_DFW'] ?? 'cell-dfw');
const lhrSandbox = new Sandbox(process.env['BERTH_TEST_CELL_LHR'] ?? 'cell-lhr');
const dfw = uniqueName('dfw');
const lhr = uniqueName('lhr');
const dir = mkdtempSync(join(tmpdir(), 'berth-cells-'));
// A probe a second, Unreachable after 3 s without an answer: lost within 3 + 1 + 3 (probe timeout) = 7 s.
const unreachableAfterS = 3;
const lostBoundMs = (unreachableAfterS + 1 + 3) * 1000;
let berth: BerthProcess | undefined;

before(async () => {
  await installCrds(client);
  for (const sb of [dfwSandbox, lhrSandbox]) {
    await sb.up({ fresh: true });
    // Part 1's CRDs in the cell: what makes it Ready.
    const c = sb.client();
    await installCrds(c);
    c.close();
  }
  berth = await startBerth(
    sandbox,
    [
      '--controllers=cells',
      '--cell-probe-period=1',
      `--cell-unreachable-after=${unreachableAfterS}`,
      '--log-level=info',
    ],
    { capture: true },
  );
});

after(async () => {
  await berth?.stop();
  for (const name of [dfw, lhr]) {
    await client.delete(Cell.ref, name).catch(() => {});
    await client.delete(Resources.secrets, secretName(name), NAMESPACE).catch(() => {});
  }
  client.close();
  await dfwSandbox.destroy();
  await lhrSandbox.destroy();
  rmSync(dir, { recursive: true, force: true });
});

/** `berth <args>`: its exit code and what it printed. */
function berthCli(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [`${packageRoot()}/src/cli/main.ts`, ...args]);
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d));
    child.stderr.on('data', (d: Buffer) => (stderr += d));
    child.on('exit', (code) => resolve({ code: code ?? -1, stdout, stderr }));
  });
}

const join_ = (name: string, kubeconfig: string, location: string) =>
  berthCli([
    'cells',
    'join',
    name,
    `--kubeconfig=${kubeconfig}`,
    `--location=${location}`,
    `--management-kubeconfig=${sandbox.kubeconfigPath}`,
  ]);

const cell = (name: string) => client.get<CellObject>(Cell.ref, name);
const condition = async (name: string, type: string) =>
  findCondition((await cell(name)).status?.conditions, type);
const is = (name: string, type: string, status: string, reason?: string) => async () => {
  const c = await condition(name, type);
  return c?.status === status && (reason === undefined || c.reason === reason);
};

type Event = KubeObject & {
  type?: string;
  reason?: string;
  note?: string;
  regarding?: { kind?: string; name?: string };
};
async function events(name: string): Promise<Event[]> {
  return (await client.list<Event>(Resources.events, { namespace: 'default' })).items.filter(
    (e) => e.regarding?.kind === 'Cell' && e.regarding.name === name,
  );
}

async function serverVersion(c: KubeClient): Promise<string> {
  return (await c.request<{ gitVersion: string }>('GET', '/version')).gitVersion;
}

test('berth cells join: the cell is Reachable and Ready with its server version within a few seconds', async () => {
  const started = Date.now();
  const r = await join_(dfw, dfwSandbox.kubeconfigPath, 'DFW');
  assert.equal(r.code, 0, r.stderr);
  const cellClient = dfwSandbox.client();
  const version = await serverVersion(cellClient);
  cellClient.close();
  assert.equal(
    r.stdout.trim(),
    `cell ${dfw} joined: Kubernetes ${version} at ${dfwSandbox.server}, serving DFW`,
  );
  // Bounded by the assertion of the join's time below, not here.
  await waitFor('the DFW cell Ready', is(dfw, 'Ready', 'True', 'Ready'), { timeoutMs: 10_000 });
  const c = await cell(dfw);
  assert.equal(findCondition(c.status?.conditions, 'Reachable')?.status, 'True');
  assert.equal(c.status?.serverVersion, version);
  assert.equal(c.status?.crdsInstalled, true);
  assert.equal(c.status?.observedGeneration, c.metadata.generation);
  assert.ok(c.status?.lastContactTime);
  assert.deepEqual(c.spec.locations, ['DFW']);
  assert.deepEqual(c.spec.kubeconfigSecretRef, {
    namespace: NAMESPACE,
    name: secretName(dfw),
    key: 'kubeconfig',
  });
  assert.ok(Date.now() - started < 10_000, `${Date.now() - started} ms from join to Ready`);
  const locations = (await client.list<LocationObject>(Location.ref)).items;
  assert.equal(locations.filter((l) => l.spec.cityCode === 'DFW').length, 1, 'one Location for DFW');

  assert.equal((await join_(lhr, lhrSandbox.kubeconfigPath, 'LHR')).code, 0);
  await waitFor('the LHR cell Ready', is(lhr, 'Ready', 'True'));
  // Joined again: nothing new, the Location not duplicated.
  assert.equal((await join_(dfw, dfwSandbox.kubeconfigPath, 'DFW')).code, 0);
  assert.equal(
    (await client.list<LocationObject>(Location.ref)).items.filter((l) => l.spec.cityCode === 'DFW').length,
    1,
  );
  const list = await berthCli(['cells', 'list', `--kubeconfig=${sandbox.kubeconfigPath}`]);
  assert.equal(list.code, 0, list.stderr);
  for (const [name, city] of [
    [dfw, 'DFW'],
    [lhr, 'LHR'],
  ] as const)
    assert.match(
      list.stdout,
      new RegExp(`^${name}\\s+${city}\\s+True\\s+True\\s+${version.replace(/\./g, '\\.')}\\s+Ready$`, 'm'),
    );
});

test('berth cells join: an unreachable cell or a bad file is one line and exit code 1, and nothing is created', async () => {
  const garbage = join(dir, 'garbage');
  writeFileSync(garbage, 'this is: [not a kubeconfig');
  const [port] = await freePorts(1);
  const closed = join(dir, 'closed');
  writeFileSync(
    closed,
    readFileSync(dfwSandbox.kubeconfigPath, 'utf8').replace(`${dfwSandbox.ports.apiserver}`, `${port}`),
  );
  const cases: [string, RegExp][] = [
    [garbage, /^berth: cannot use .*garbage for cell .*: it is not a kubeconfig/],
    [
      closed,
      new RegExp(
        `^berth: cell \\S+ at https://127\\.0\\.0\\.1:${port}: Unreachable: the cell's apiserver does not answer: .*ECONNREFUSED`,
      ),
    ],
    [join(dir, 'missing'), /^berth: cannot read .*missing: .*ENOENT/],
  ];
  for (const [file, message] of cases) {
    const name = uniqueName('bad');
    const r = await join_(name, file, 'DFW');
    assert.equal(r.code, 1, r.stdout);
    assert.equal(r.stderr.trimEnd().split('\n').length, 1, r.stderr);
    assert.match(r.stderr, message);
    await assert.rejects(cell(name), /not found/i);
  }
  const r = await join_(uniqueName('bad'), dfwSandbox.kubeconfigPath, 'dallas');
  assert.equal(r.code, 1);
  assert.match(r.stderr, /^berth: location "dallas" is not a city code such as DFW\n$/);
});

test("a cell's apiserver stopped: Reachable=False Unreachable within the bound, a Warning and a log line; started again: Reachable", async () => {
  await waitFor(
    'both cells Ready',
    async () => (await is(dfw, 'Ready', 'True')()) && (await is(lhr, 'Ready', 'True')()),
  );
  const version = (await cell(dfw)).status?.serverVersion;
  // Killed, as a crash or a partition: it stops answering at once, so the bound counts from here.
  const stopped = Date.now();
  await dfwSandbox.stopProcess('kube-apiserver', 'SIGKILL');
  try {
    await waitFor('the DFW cell Unreachable', is(dfw, 'Reachable', 'False', 'Unreachable'), {
      timeoutMs: lostBoundMs + 3000,
      intervalMs: 50,
    });
    const lostAfter = Date.now() - stopped;
    // Counted from the last answer, which came up to a probe period before the kill.
    assert.ok(
      lostAfter >= (unreachableAfterS - 1) * 1000,
      `Unreachable after ${lostAfter} ms: not a partition yet`,
    );
    assert.ok(lostAfter <= lostBoundMs + 1000, `Unreachable after ${lostAfter} ms, bound ${lostBoundMs} ms`);
    const lost = await cell(dfw);
    assert.equal(findCondition(lost.status?.conditions, 'Ready')?.reason, 'Unreachable');
    // The last known version and contact stay.
    assert.equal(lost.status?.serverVersion, version);
    assert.ok(lost.status?.lastContactTime);
    await waitFor('a Warning event about the DFW cell', async () =>
      (await events(dfw)).some((e) => e.type === 'Warning' && e.reason === 'Unreachable'),
    );
    assert.match(berth!.output(), new RegExp(`"cell":"${dfw}".*"reason":"Unreachable".*cell not reachable`));
    // The gauge the BerthCellUnreachable alert reads says so too, and the other cell's stays 1.
    const reachable = (c: string) => berth!.metric('berth_cell_reachable', (l) => l.includes(`cell="${c}"`));
    assert.deepEqual([await reachable(dfw), await reachable(lhr)], [0, 1]);
    assert.equal(await condition(lhr, 'Ready').then((c) => c?.status), 'True', 'the LHR cell stays Ready');
  } finally {
    dfwSandbox.startProcess('kube-apiserver');
    await dfwSandbox.waitHealthy('kube-apiserver');
  }
  await waitFor('the DFW cell Reachable again', is(dfw, 'Ready', 'True', 'Ready'), { timeoutMs: 10_000 });
  await waitFor('a Normal event about the DFW cell', async () =>
    (await events(dfw)).some((e) => e.type === 'Normal' && e.reason === 'Reachable'),
  );
  assert.equal((await events(dfw)).filter((e) => e.type === 'Warning').length, 1, 'one Warning for one loss');
});

test('a cell gone silent (its apiserver frozen, probes time out): Unreachable within the bound, since its last contact', async () => {
  await waitFor('the DFW cell Ready', is(dfw, 'Ready', 'True', 'Ready'), { timeoutMs: 30_000 });
  const pid = dfwSandbox.status().find((p) => p.name === 'kube-apiserver')?.pid;
  assert.ok(pid, 'the DFW cell runs its apiserver');
  // Frozen, as a partition that drops packets: connections open and nothing answers.
  const silent = Date.now();
  process.kill(pid, 'SIGSTOP');
  try {
    await waitFor('the DFW cell Unreachable', is(dfw, 'Reachable', 'False', 'Unreachable'), {
      timeoutMs: lostBoundMs + 5000,
      intervalMs: 50,
    });
    const lostAfter = Date.now() - silent;
    assert.ok(lostAfter <= lostBoundMs + 1000, `Unreachable after ${lostAfter} ms, bound ${lostBoundMs} ms`);
    // Since its last answer (a probe period at most before it froze, in whole seconds), not since Berth noticed.
    const since = Date.parse(
      findCondition((await cell(dfw)).status?.conditions, 'Reachable')!.lastTransitionTime,
    );
    assert.ok(since <= silent, `unreachable since ${new Date(since).toISOString()}, after the cell froze`);
    assert.ok(
      since >= silent - 3000,
      `unreachable since ${new Date(since).toISOString()}, long before it froze`,
    );
  } finally {
    process.kill(pid, 'SIGCONT');
  }
  await waitFor('the DFW cell Reachable again', is(dfw, 'Ready', 'True', 'Ready'), { timeoutMs: 15_000 });
});

test("a cell's Secret spoiled: BadKubeconfig at once, then SecretMissing, and the other cell stays Ready; restored: Ready", async () => {
  await waitFor('the DFW cell Ready', is(dfw, 'Ready', 'True'));
  const secret = secretName(dfw);
  const original = await client.get<KubeObject & { data: Record<string, string> }>(
    Resources.secrets,
    secret,
    NAMESPACE,
  );
  const setKubeconfig = (text: string) =>
    client.patch(
      Resources.secrets,
      secret,
      { data: { kubeconfig: Buffer.from(text).toString('base64') } },
      { namespace: NAMESPACE },
    );
  await setKubeconfig('garbage: [');
  await waitFor('the DFW cell BadKubeconfig', is(dfw, 'Reachable', 'False', 'BadKubeconfig'), {
    timeoutMs: 5000,
  });
  await waitFor('a Warning event BadKubeconfig', async () =>
    (await events(dfw)).some((e) => e.type === 'Warning' && e.reason === 'BadKubeconfig'),
  );
  assert.match(berth!.output(), new RegExp(`"cluster":"cell-${dfw}".*cluster disengaged`));
  // A kubeconfig whose user runs a command: Berth runs nothing from a Secret.
  const kc = readFileSync(dfwSandbox.kubeconfigPath, 'utf8').replace(
    /client-certificate-data: .*\n\s*client-key-data: .*/,
    'exec: { apiVersion: client.authentication.k8s.io/v1, command: touch, args: [/tmp/berth-cells-ran] }',
  );
  assert.notEqual(kc, readFileSync(dfwSandbox.kubeconfigPath, 'utf8'));
  await setKubeconfig(kc);
  await waitFor('the DFW cell BadKubeconfig (exec)', async () =>
    /credential plugin/.test((await condition(dfw, 'Reachable'))?.message ?? ''),
  );
  await client.delete(Resources.secrets, secret, NAMESPACE);
  await waitFor('the DFW cell SecretMissing', is(dfw, 'Reachable', 'False', 'SecretMissing'));
  await holdsFor('the LHR cell Ready meanwhile', is(lhr, 'Ready', 'True'), 2000);
  assert.ok(await is(lhr, 'Reachable', 'True')());

  await client.create(Resources.secrets, {
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: { name: secret, namespace: NAMESPACE },
    data: original.data,
  });
  await waitFor('the DFW cell Ready again', is(dfw, 'Ready', 'True', 'Ready'));
});

test('a cell deleted is disengaged', async () => {
  await client.delete(Cell.ref, lhr);
  await waitFor('the LHR cell disengaged', () =>
    new RegExp(`"cluster":"cell-${lhr}".*cluster disengaged`).test(berth!.output()),
  );
  assert.ok(await is(dfw, 'Ready', 'True')(), 'the DFW cell stays Ready');
});
