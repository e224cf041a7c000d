// `berth sandbox up --cells` as a user runs it: a management plane and a cell per city, each cell
// with its nodes, Berth's CRDs and its own Berth (a process of the cell's sandbox), joined to the
// management plane. Twice is the same federation (no second cell); once the management plane's
// Berth runs, the cells are Ready upstream; a cell stopped and started on its own keeps its address
// and its Berth; `down --purge` leaves no process, port or file behind.
// The federation is private to this file (its management plane is not the run's sandbox).
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { after, test } from 'node:test';
import { type CellObject } from '../../src/cells/types.ts';
import { Cell, Location } from '../../src/cells/crd.ts';
import { findCondition } from '../../src/runtime/api/conditions.ts';
import { Federation } from '../../src/sandbox/federation.ts';
import { isListening } from '../../src/sandbox/net.ts';
import { Sandbox, type ProcessStatus } from '../../src/sandbox/sandbox.ts';
import { runBerthCli, startBerth, type BerthProcess } from '../helpers/berth.ts';
import { uniqueName } from '../helpers/cluster.ts';
import { waitFor } from '../helpers/wait.ts';

const name = uniqueName('sf');
const cellSandboxes = [`${name}-dfw`, `${name}-lhr`];
/** Three control planes start in one command: room for a loaded machine. */
const UP_TIMEOUT_MS = 240_000;
let berth: BerthProcess | undefined;

after(async () => {
  await berth?.stop();
  await new Federation(name).down(true);
});

interface StatusJson {
  ready: boolean;
  processes: ProcessStatus[];
  cells?: { city: string; name: string; sandbox: string; ready: boolean; processes: ProcessStatus[] }[];
}
const status = (): StatusJson => {
  const r = runBerthCli(['sandbox', 'status', '--name', name, '-o', 'json']);
  assert.equal(r.status, 0, `sandbox status: ${r.stdout}${r.stderr}`);
  return JSON.parse(r.stdout) as StatusJson;
};
const up = () => {
  const r = runBerthCli(
    ['sandbox', 'up', '--name', name, '--cells', 'DFW,LHR', '--cell-nodes', '1'],
    {},
    UP_TIMEOUT_MS,
  );
  assert.equal(r.status, 0, `sandbox up --cells:\n${r.stdout}${r.stderr}`);
  return r.stderr;
};

test('sandbox up --cells starts a federation, twice is the same one, its cells are Ready upstream, down --purge removes all', async () => {
  const said = up();
  const mgmt = new Sandbox(name);
  assert.ok(
    said.includes(`berth run --kubeconfig ${mgmt.kubeconfigPath} --controllers=cells,federation`),
    `it says what to run next:\n${said}`,
  );
  const first = status();
  assert.equal(first.ready, true);
  assert.deepEqual(
    first.cells?.map((c) => [c.city, c.name, c.sandbox, c.ready]),
    [
      ['DFW', 'dfw', cellSandboxes[0], true],
      ['LHR', 'lhr', cellSandboxes[1], true],
    ],
  );
  const berthOf = (c: { processes: ProcessStatus[] }) => c.processes.find((p) => p.name === 'berth');
  for (const c of first.cells!) assert.equal(berthOf(c)?.running, true, `${c.sandbox} runs its Berth`);

  // Again: the same sandboxes, the same Berths (their pids), the same two Cells and Locations.
  up();
  const again = status();
  assert.deepEqual(
    again.cells?.map((c) => [c.sandbox, berthOf(c)?.pid]),
    first.cells!.map((c) => [c.sandbox, berthOf(c)?.pid]),
  );
  const client = mgmt.client();
  try {
    const cells = async () => (await client.list<CellObject>(Cell.ref)).items;
    assert.deepEqual((await cells()).map((c) => [c.metadata.name, c.spec.locations]).sort(), [
      ['dfw', ['DFW']],
      ['lhr', ['LHR']],
    ]);
    assert.deepEqual((await client.list(Location.ref)).items.map((l) => l.metadata!.name).sort(), [
      'dfw',
      'lhr',
    ]);

    // The management plane's Berth, as the command said to run it: both cells become Ready.
    berth = await startBerth(mgmt, [
      '--controllers=cells,federation',
      '--cell-probe-period=1',
      '--cell-unreachable-after=3',
    ]);
    await waitFor(
      'both cells Ready upstream',
      async () => {
        const list = await cells();
        return (
          list.length === 2 &&
          list.every((c) => findCondition(c.status?.conditions, 'Ready')?.status === 'True')
        );
      },
      { timeoutMs: 60_000 },
    );

    // A cell stopped and started again on its own: its address stays (the kubeconfig its Cell
    // holds stays good), its Berth runs again, and it is Ready upstream once more.
    const dfw = cellSandboxes[0]!;
    const address = new Sandbox(dfw).server;
    const reachable = async () =>
      findCondition((await cells()).find((x) => x.metadata.name === 'dfw')?.status?.conditions, 'Reachable')
        ?.status;
    const cli = (verb: string) => {
      const r = runBerthCli(['sandbox', verb, '--name', dfw], {}, UP_TIMEOUT_MS);
      assert.equal(r.status, 0, `sandbox ${verb} --name ${dfw}: ${r.stdout}${r.stderr}`);
      return r.stderr;
    };
    cli('down');
    await waitFor('dfw unreachable upstream', async () => (await reachable()) === 'False', {
      timeoutMs: 30_000,
    });
    assert.match(cli('up'), /berth is running again \(--controllers=workloads --quota-source=local\)/);
    assert.equal(new Sandbox(dfw).server, address);
    const restarted = status().cells!.find((c) => c.sandbox === dfw)!;
    assert.equal(berthOf(restarted)?.running, true, `${dfw} runs its Berth again`);
    assert.notEqual(berthOf(restarted)?.pid, berthOf(first.cells![0]!)?.pid);
    await waitFor(
      'dfw reachable upstream again, through the kubeconfig it had',
      async () => (await reachable()) === 'True',
      { timeoutMs: 60_000 },
    );

    // Started again where its old address is taken: the apiserver moves, and the cell's Berth,
    // told the new address, runs again (it would not, looking for its apiserver at the old one).
    const lhr = cellSandboxes[1]!;
    const lhrCli = (verb: string) => runBerthCli(['sandbox', verb, '--name', lhr], {}, UP_TIMEOUT_MS);
    const old = new Sandbox(lhr).server;
    assert.equal(lhrCli('down').status, 0);
    const holder = createServer();
    await new Promise<void>((r) => holder.listen(Number(new URL(old).port), '127.0.0.1', r));
    try {
      const up = lhrCli('up');
      assert.equal(up.status, 0, up.stderr);
      assert.match(up.stderr, /berth is running again/);
      assert.notEqual(new Sandbox(lhr).server, old);
      assert.equal(berthOf(status().cells!.find((c) => c.sandbox === lhr)!)?.running, true);
    } finally {
      await new Promise((r) => holder.close(r));
    }
  } finally {
    client.close();
  }
  await berth.stop();

  // Down with --purge: every process of the three sandboxes stopped, its port free, its files gone.
  const ran = [first, ...first.cells!].flatMap((s) => s.processes);
  const r = runBerthCli(['sandbox', 'down', '--name', name, '--purge']);
  assert.equal(r.status, 0, `sandbox down --purge: ${r.stdout}${r.stderr}`);
  assert.match(r.stderr, new RegExp(`sandbox ${name} is down, and its cells ${cellSandboxes.join(', ')}`));
  for (const n of [name, ...cellSandboxes])
    assert.equal(existsSync(new Sandbox(n).dir), false, `${n} purged`);
  for (const p of ran) {
    assert.equal(alive(p.pid!), false, `${p.name} pid ${p.pid} stopped`);
    assert.equal(await isListening(p.port), false, `${p.name} port ${p.port} free`);
  }
});

/** Whether a process runs: exists and is not a zombie (an exited child nobody has reaped yet). */
function alive(pid: number): boolean {
  try {
    return !/^\S+ Z /.test(readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^.*\) /, 'x '));
  } catch {
    return false;
  }
}
