// The newcomer's path through `berth sandbox up`: a slow (cold) build never eats the start-up budget,
// and a start-up that fails or is interrupted leaves no process or port behind. Each test runs a
// private sandbox of its own.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { chmodSync, copyFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { ensureBinaries, type Binaries } from '../../src/sandbox/build.ts';
import { packageRoot } from '../../src/sandbox/paths.ts';
import { isListening } from '../../src/sandbox/net.ts';
import { Sandbox, type ProcessStatus } from '../../src/sandbox/sandbox.ts';
import { uniqueName } from '../helpers/cluster.ts';
import { sleep } from '../helpers/wait.ts';

const made: Sandbox[] = [];
const sandbox = (prefix: string) => {
  const sb = new Sandbox(uniqueName(prefix));
  made.push(sb);
  return sb;
};

after(async () => {
  for (const sb of made) await new Sandbox(sb.name).destroy();
});

/** Processes of a sandbox that are still alive, and its ports that still listen. */
async function leftovers(sb: Sandbox): Promise<string[]> {
  const fresh = new Sandbox(sb.name); // what the state file on disk says, as the next `up` reads it
  const left: string[] = [];
  for (const p of fresh.status() as ProcessStatus[]) {
    if (p.running) left.push(`${p.name} pid ${p.pid} running`);
    if (await isListening(p.port)) left.push(`${p.name} port ${p.port} listening`);
  }
  return left;
}

describe('sandbox start-up', () => {
  test('a build slower than the start-up timeout does not fail the start-up', async () => {
    const sb = sandbox('slowbuild');
    const timeoutMs = 20_000;
    // The build takes longer than the whole start-up budget, as a cold build takes longer than 180 s.
    const slowBuild = async (log: (s: string) => void, signal?: AbortSignal): Promise<Binaries> => {
      await sleep(timeoutMs + 2_000);
      return ensureBinaries(log, signal);
    };
    const lines: string[] = [];
    await sb.up({ fresh: true, timeoutMs, build: slowBuild, log: (s) => lines.push(s) });
    assert.ok(await sb.apiserverReady(), `apiserver not ready; log:\n${lines.join('\n')}`);
    await sb.destroy();
    assert.deepEqual(await leftovers(sb), []);
  });

  test('a process that fails to start is named with its log, and nothing is left running', async () => {
    const sb = sandbox('broken');
    // A kube-scheduler that exits at once with a message, as a bad flag or config makes it: a copy
    // of the shell, which rejects the scheduler's flags (a copy, so that the process is "ours").
    const dir = mkdtempSync(join(tmpdir(), 'berth-broken-'));
    const broken = join(dir, 'kube-scheduler');
    copyFileSync('/bin/sh', broken);
    chmodSync(broken, 0o755);
    const build = async (log: (s: string) => void): Promise<Binaries> => ({
      ...(await ensureBinaries(log)),
      kubeScheduler: broken,
    });
    await assert.rejects(sb.up({ fresh: true, build }), (e: Error) =>
      /kube-scheduler exited; the last lines of .*kube-scheduler\.log:\n.*Illegal option/.test(e.message),
    );
    assert.deepEqual(await leftovers(sb), []);
  });

  test('an interrupted start-up stops what it started', async () => {
    const sb = sandbox('abort');
    const ac = new AbortController();
    const up = sb.up({
      fresh: true,
      signal: ac.signal,
      log: (s) => {
        if (s.startsWith('kube-apiserver is up')) ac.abort(new Error('interrupted by test'));
      },
    });
    await assert.rejects(up, /interrupted by test/);
    assert.deepEqual(await leftovers(sb), []);
  });

  test('`berth sandbox up` stopped by SIGINT mid-start leaks nothing, and the next up works', async () => {
    const sb = sandbox('sigint');
    const cli = spawn(
      process.execPath,
      [join(packageRoot(), 'src/cli/main.ts'), 'sandbox', 'up', '--name', sb.name],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let err = '';
    let sent = 0;
    cli.stderr.on('data', (d: Buffer) => {
      err += d;
      // Ctrl-C twice, as an impatient user does: the second must not cut the clean-up short.
      if (err.includes('etcd is up') && sent < 2) {
        cli.kill('SIGINT');
        sent++;
      }
    });
    const code = await new Promise<number | null>((r) => cli.once('exit', r));
    assert.notEqual(code, 0, `the interrupted up should fail; stderr:\n${err}`);
    assert.match(err, /interrupted by SIGINT/);
    assert.deepEqual(await leftovers(sb), []);

    await sb.up({});
    assert.ok(await sb.apiserverReady());
  });
});
