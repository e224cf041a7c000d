// test-driver: alone — each benchmark loads both cores; timing-sensitive files beside it would
// measure the benchmark instead of themselves.
//
// The README promises that every benchmark prints, last, one JSON object (scripts read it). Each runs
// here at a tiny size, the way a user runs it (`npm run bench:NAME -- ...`), on its private sandbox.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { packageRoot } from '../../src/sandbox/paths.ts';

const tiny: Record<string, string[]> = {
  'bench:queue': ['--keys', '100000'],
  'bench:sandbox': ['--nodes', '3'],
  'bench:cache': ['--pods', '50', '--nodes', '3'],
  'bench:latency': ['--changes', '20'],
  'bench:labels': ['--nodes', '10', '--idle-seconds', '2'],
  'bench:evict': ['--nodes', '4', '--pods', '20', '--affected', '2', '--after-seconds', '1'],
  'bench:agents': ['--nodes', '4', '--pods', '40', '--pools', '4', '--churn-seconds', '2'],
  'bench:gates': ['--nodes', '5', '--pods', '20', '--webhook-rate', '50', '--webhook-seconds', '1'],
  'bench:arch': [
    '--pods',
    '20',
    '--images',
    '4',
    '--nodes',
    '4',
    '--concurrency',
    '4',
    '--webhook-rate',
    '50',
    '--webhook-seconds',
    '1',
  ],
  'bench:webhook': ['--clients', '20', '--seconds', '2', '--slow-headers', '5', '--slow-bodies', '5'],
  'bench:webhook-protocols': ['--rounds', '1', '--rate', '20', '--seconds', '1'],
  'bench:admission': ['--nodes', '3', '--pods', '10', '--clients', '4', '--runs', '1'],
  'bench:instances': [
    '--deployments',
    '3',
    '--replicas',
    '2',
    '--rollout-replicas',
    '2',
    '--concurrency',
    '4',
    // The apiserver's CPU profiles of each phase, as `go tool pprof` reads them.
    '--profile-apiserver',
    join(mkdtempSync(join(tmpdir(), 'berth-bench-')), 'profiles'),
  ],
  'bench:ui': ['--nodes', '20'],
  'bench:memory': ['--points', '5:0,5:10'],
  'bench:memory-churn': ['--rewrites', '5', '--kb', '10', '--settle', '1'],
  'bench:federation': ['--cells', '2', '--workloads', '2', '--replicas', '1', '--samples', '2'],
  'bench:writes': ['--writes', '32', '--lanes', '4'],
  'bench:cli': ['--rounds', '1', '--runs', '2'],
  'bench:scale': ['--nodes', '6', '--pods', '40', '--probes', '2', '--changes', '2', '--idle-seconds', '2'],
};

describe('benchmarks end with one JSON object', () => {
  test('every bench:* script is covered here', () => {
    const scripts = Object.keys(
      (
        JSON.parse(readFileSync(`${packageRoot()}/package.json`, 'utf8')) as {
          scripts: Record<string, string>;
        }
      ).scripts,
    ).filter((s) => s.startsWith('bench:'));
    assert.deepEqual(scripts.sort(), Object.keys(tiny).sort());
  });

  for (const [script, args] of Object.entries(tiny)) {
    test(`npm run ${script} -- ${args.join(' ')}`, () => {
      const r = spawnSync('npm', ['run', '--silent', script, '--', ...args], {
        cwd: packageRoot(),
        encoding: 'utf8',
        timeout: 480_000,
        env: { ...process.env, BERTH_LOG_LEVEL: 'info' },
      });
      assert.equal(r.status, 0, `${script} failed:\n${r.stdout.slice(-3000)}\n${r.stderr.slice(-3000)}`);
      const last = r.stdout.trimEnd().split('\n').pop() ?? '';
      let parsed: unknown;
      assert.doesNotThrow(
        () => (parsed = JSON.parse(last)),
        `the last line of ${script} is not JSON: ${last}`,
      );
      assert.equal(typeof parsed, 'object');
      assert.ok(
        parsed !== null && !Array.isArray(parsed),
        `the last line of ${script} is not an object: ${last}`,
      );
    });
  }
});
