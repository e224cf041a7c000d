// test-driver: registry
//
// Berth's image, built without a container engine (`npm run image`, scripts/image.ts), exists and
// boots: it is pushed to the sandbox registry as an index of linux/amd64 and linux/arm64, Berth's
// registry client (what architecture-aware placement reads) finds both platforms, and the amd64
// image's root filesystem, unpacked from its layers, runs its entrypoint. Without a container
// runtime or chroot, the entrypoint runs under the image's own dynamic loader
// (/lib64/ld-linux-x86-64.so.2 --library-path <the image's lib dirs>): the image's glibc, libstdc++
// and Node.js, its /app, its working directory and environment, not the machine's. The arm64 image is
// checked by its layout only (its loader and node are aarch64 binaries), as this machine is amd64.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { buildImage, IMAGE_CONFIG, type BuiltImage } from '../../scripts/image.ts';
import { RegistryClient } from '../../src/registry/client.ts';
import { parseRegistriesConfig } from '../../src/registry/hosts.ts';
import type { SandboxRegistry } from '../../src/sandbox/registry.ts';
import { version } from '../../src/cli/version.ts';
import { testSandbox, uniqueName } from '../helpers/cluster.ts';
import { RegistryPusher, type Descriptor } from '../helpers/registry.ts';

let reg: SandboxRegistry;
let built: BuiltImage;
const repo = `berth-image/${uniqueName('img')}`;
const roots: string[] = [];

before(async () => {
  const r = testSandbox().registry;
  assert.ok(r, 'the test sandbox runs a registry (this file says test-driver: registry)');
  reg = r;
  built = await buildImage({ tag: `${reg.host}/${repo}:${version()}`, registry: reg });
});
after(() => {
  for (const r of roots) rmSync(r, { recursive: true, force: true });
});

const json = (b: Buffer) => JSON.parse(b.toString()) as Record<string, unknown>;

interface ImageConfig {
  architecture: string;
  os: string;
  config: {
    Entrypoint: string[];
    Cmd: string[];
    User: string;
    WorkingDir: string;
    Env: string[];
    Labels: Record<string, string>;
  };
}

/** One platform's image from the registry: its config, and its layers unpacked in order into a new folder. */
async function unpack(digest: string): Promise<{ config: ImageConfig; root: string }> {
  const pusher = new RegistryPusher(reg);
  const manifest = json((await pusher.getManifest(repo, digest)).body) as {
    config: Descriptor;
    layers: Descriptor[];
  };
  const blob = async (d: Descriptor) => {
    const res = await pusher.send('GET', `/v2/${repo}/blobs/${d.digest}`);
    assert.equal(res.status, 200, `blob ${d.digest}`);
    return res.body;
  };
  const config = json(await blob(manifest.config)) as unknown as ImageConfig;
  const root = mkdtempSync(join(tmpdir(), 'berth-image-'));
  roots.push(root);
  for (const layer of manifest.layers) {
    const r = spawnSync('tar', ['-xz', '-C', root], { input: await blob(layer) });
    assert.equal(r.status, 0, `unpacking ${layer.digest}: ${r.stderr}`);
  }
  return { config, root };
}

describe("Berth's image, built from Debian packages and the npm node binary", () => {
  test('is an index of linux/amd64 and linux/arm64 that Berth’s registry client reads', async () => {
    const client = new RegistryClient({
      defaultCa: readFileSync(reg.caPath, 'utf8'),
      hosts: parseRegistriesConfig({ registries: { [reg.host]: { allowPrivate: true } } }),
    });
    try {
      const inspection = await client.inspect(`${reg.host}/${repo}:${version()}`);
      assert.deepEqual(inspection.platforms.map((p) => `${p.os}/${p.architecture}`).sort(), [
        'linux/amd64',
        'linux/arm64',
      ]);
      assert.equal(`${reg.host}/${repo}@${inspection.digest}`, built.reference);
    } finally {
      client.close();
    }
  });

  test("boots: the amd64 root filesystem runs its entrypoint with the image's own loader, libraries and node", async () => {
    const { config, root } = await unpack(built.images['linux/amd64']!.split('@')[1]!);
    assert.equal(config.architecture, 'amd64');
    assert.deepEqual(config.config.Entrypoint, IMAGE_CONFIG.entrypoint);
    assert.deepEqual(config.config.Cmd, ['run']);
    assert.equal(config.config.User, '65532:65532');
    assert.equal(config.config.Labels['org.opencontainers.image.version'], version());
    const env: Record<string, string> = Object.fromEntries(
      config.config.Env.map((e) => [e.slice(0, e.indexOf('=')), e.slice(e.indexOf('=') + 1)]),
    );
    // The entrypoint's program, found on the image's PATH inside its root.
    const [program, ...args] = config.config.Entrypoint;
    const dir = env['PATH']!.split(':').find((d: string) => existsSync(join(root, d, program!)));
    assert.ok(dir, `${program} on the image's PATH ${env['PATH']}`);
    const libs = ['lib/x86_64-linux-gnu', 'usr/lib/x86_64-linux-gnu'].map((d) => join(root, d)).join(':');
    const workdir = join(root, config.config.WorkingDir);
    // `berth --version` in place of the image's Cmd (`run`, which would want a cluster).
    const r = spawnSync(
      join(root, 'lib64/ld-linux-x86-64.so.2'),
      ['--library-path', libs, join(root, dir, program!), ...args, '--version'],
      { cwd: workdir, env, encoding: 'utf8', timeout: 60_000 },
    );
    assert.equal(r.status, 0, `the entrypoint failed:\n${r.stderr}`);
    assert.equal(r.stdout.trim(), version());
    // It ran the image's Node.js, on the image's glibc.
    const node = spawnSync(
      join(root, 'lib64/ld-linux-x86-64.so.2'),
      ['--library-path', libs, join(root, dir, program!), '-p', 'process.version'],
      { cwd: workdir, env, encoding: 'utf8' },
    );
    assert.equal(
      node.stdout.trim(),
      `v${JSON.parse(readFileSync(join(workdir, 'package-lock.json'), 'utf8')).packages['node_modules/node'].version}`,
    );
  });

  test('the arm64 image has the same layout: aarch64 glibc and node, the same /app', async () => {
    const { config, root } = await unpack(built.images['linux/arm64']!.split('@')[1]!);
    assert.equal(config.architecture, 'arm64');
    assert.deepEqual(config.config.Entrypoint, IMAGE_CONFIG.entrypoint);
    for (const f of [
      'lib/ld-linux-aarch64.so.1',
      'usr/local/bin/node',
      'app/dist/cli/main.js',
      'app/node_modules/commander/package.json',
    ])
      assert.ok(existsSync(join(root, f)), f);
    // An aarch64 ELF: e_machine 183 at offset 18.
    assert.equal(readFileSync(join(root, 'usr/local/bin/node')).readUInt16LE(18), 183);
  });
});
