// Keeps the README's first command true: the demo brings up its sandbox, installs the example
// rules, runs Berth, and the example labels appear. It runs on a sandbox of its own.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { after, test } from 'node:test';
import { Sandbox } from '../../src/sandbox/sandbox.ts';

const name = `demo-${randomBytes(3).toString('hex')}`;

after(async () => {
  await new Sandbox(name).destroy();
});

test('npm run demo labels the sample EdgeTPU nodes', () => {
  const r = spawnSync(process.execPath, ['scripts/demo.ts', '--once', `--sandbox=${name}`], {
    encoding: 'utf8',
    timeout: 180_000,
    env: { ...process.env, BERTH_LOG_LEVEL: 'warn' },
  });
  assert.equal(r.status, 0, `demo failed:\n${r.stdout}\n${r.stderr}`);
  for (const n of ['edgetpu-plugin-0', 'edgetpu-usb-0', 'edgetpu-pci-0', 'coral-devboard-0']) {
    assert.match(r.stdout, new RegExp(`${n}\\s+.*accelerators/edgetpu=true`));
  }
  assert.match(r.stdout, /gpu-0\s+.*accelerators\/gpu-product=Tesla-T4/);
  assert.match(r.stdout, /coral-devboard-0\s+.*node-class\.berth\.dev\/edge=true/);
  assert.match(r.stdout, /plain-0\s+-/);
});
