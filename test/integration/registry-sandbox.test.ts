// The sandbox's OCI registry: it starts and stops with the sandbox and leaves nothing behind, its
// token service serves anonymous pulls of public repositories and credentialed pulls of private
// ones, the push helpers store what they claim, and the fault proxy does what a test asks of it.
// test-driver: registry
import assert from 'node:assert/strict';
import { chmodSync, copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { SandboxRegistry } from '../../src/sandbox/registry.ts';
import { parseChallenges } from '../../src/registry/auth.ts';
import { isListening } from '../../src/sandbox/net.ts';
import { Sandbox } from '../../src/sandbox/sandbox.ts';
import { testSandbox, uniqueName } from '../helpers/cluster.ts';
import {
  ACCEPT_ALL,
  addTokenPolicy,
  MediaType,
  platform,
  RegistryPusher,
  request,
  sha256,
  startFaultProxy,
  type Descriptor,
  type FaultProxy,
  type PlatformSpec,
} from '../helpers/registry.ts';

let reg: SandboxRegistry;
let pusher: RegistryPusher;
before(() => {
  const r = testSandbox().registry;
  assert.ok(r, 'the test sandbox runs a registry (this file says test-driver: registry)');
  reg = r;
  pusher = new RegistryPusher(reg);
});

const json = (b: Buffer) => JSON.parse(b.toString()) as Record<string, unknown>;
const repoName = (prefix: string) => `${prefix}/${uniqueName('img')}`;

/** The platform a single image's config blob states, read back from the registry. */
async function configPlatform(client: RegistryPusher, repo: string, digest: string): Promise<PlatformSpec> {
  const m = await client.getManifest(repo, digest);
  assert.equal(m.status, 200);
  const config = (json(m.body)['config'] as Descriptor).digest;
  const blob = await client.send('GET', `/v2/${repo}/blobs/${config}`);
  assert.equal(blob.status, 200);
  assert.equal(sha256(blob.body), config, 'the config blob is what its digest names');
  const c = json(blob.body) as unknown as PlatformSpec;
  return { os: c.os, architecture: c.architecture, ...(c.variant ? { variant: c.variant } : {}) };
}

describe('the sandbox registry process (a private sandbox)', () => {
  const sb = new Sandbox(uniqueName('regsbx'));
  after(() => new Sandbox(sb.name).destroy());

  /** The registry's processes that still run, and its ports that still listen. */
  async function registryLeftovers(): Promise<string[]> {
    const left: string[] = [];
    for (const p of new Sandbox(sb.name).status().filter((p) => p.name.startsWith('registry'))) {
      if (p.running) left.push(`${p.name} pid ${p.pid} running`);
      if (await isListening(p.port)) left.push(`${p.name} port ${p.port} listening`);
    }
    return left;
  }

  test('not started unless asked for', async () => {
    await sb.up();
    assert.equal(sb.registry, undefined);
    assert.deepEqual(
      sb.status().map((p) => p.name),
      ['etcd', 'kube-apiserver', 'kube-controller-manager', 'kube-scheduler', 'kwok'],
    );
  });

  test('a registry that fails to start is stopped with its token service; the control plane stays up', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'berth-broken-registry-'));
    // A shell under the registry's name: it exits at once, unable to open a script named `serve`.
    const broken = join(dir, 'registry');
    copyFileSync('/bin/sh', broken);
    chmodSync(broken, 0o755);
    await assert.rejects(
      sb.up({ registry: true, buildRegistry: async () => broken }),
      /registry exited.*serve/s,
    );
    rmSync(dir, { recursive: true, force: true });
    assert.deepEqual(await registryLeftovers(), []);
    const fresh = new Sandbox(sb.name);
    assert.ok(
      fresh
        .status()
        .filter((p) => !p.name.startsWith('registry'))
        .every((p) => p.running),
    );
    assert.equal(await fresh.apiserverReady(), true);
  });

  test('joins a running sandbox, keeps its content across a restart, and stops leaving no process or port', async () => {
    await sb.up({ registry: true });
    const r = sb.registry!;
    assert.deepEqual(
      sb
        .status()
        .filter((p) => p.name.startsWith('registry'))
        .map((p) => [p.name, p.running]),
      [
        ['registry-token', true],
        ['registry', true],
      ],
    );
    // Asked again, a running registry is reused: same processes, same address.
    const pids = sb.status().map((p) => p.pid);
    await sb.up({ registry: true });
    assert.deepEqual(
      sb.status().map((p) => p.pid),
      pids,
    );
    assert.equal(sb.registry!.url, r.url);
    const client = new RegistryPusher(r);
    const base = await request(`${r.url}/v2/`, { ca: client.ca });
    assert.equal(base.status, 401);
    assert.match(
      String(base.headers['www-authenticate']),
      /^Bearer realm="https:\/\/127\.0\.0\.1:\d+\/token"/,
    );
    const pushed = await client.pushImage('kept/app', 'v1', platform('linux/arm64'));

    await sb.down();
    for (const p of new Sandbox(sb.name).status()) {
      assert.equal(p.running, false, `${p.name} still running`);
      assert.equal(await isListening(p.port), false, `${p.name} port ${p.port} still listening`);
    }
    // Up again, not asked for the registry: the one it ran runs again, on the address it had (free
    // still), and the stored image survived (its storage is the sandbox's data).
    await sb.up();
    assert.equal(sb.registry!.url, r.url);
    const again = await new RegistryPusher(sb.registry!).getManifest('kept/app', 'v1');
    assert.equal(again.status, 200);
    assert.equal(again.headers['docker-content-digest'], pushed.digest);
    await sb.down();
    assert.deepEqual(await registryLeftovers(), []);
  });
});

describe('token auth', () => {
  test('a public repository: 401 with a Bearer challenge, then an anonymous token pulls it', async () => {
    const repo = repoName('public');
    const { index } = await pusher.pushIndex(repo, 'v1', [platform('linux/amd64')]);
    const ca = pusher.ca;
    const bare = await request(`${reg.url}/v2/${repo}/manifests/v1`, { ca, headers: { Accept: ACCEPT_ALL } });
    assert.equal(bare.status, 401);
    assert.deepEqual(parseChallenges(bare.headers['www-authenticate']), [
      {
        scheme: 'bearer',
        params: { realm: reg.realm, service: reg.service, scope: `repository:${repo}:pull` },
      },
    ]);
    const anonymous = new RegistryPusher(reg, null);
    const res = await anonymous.getManifest(repo, 'v1');
    assert.equal(res.status, 200);
    assert.equal(res.headers['docker-content-digest'], index.digest);
    assert.equal(anonymous.tokenRequests, 1);
    // An anonymous token does not push.
    await assert.rejects(anonymous.pushImage(repo, 'v2', platform('linux/amd64')), /HTTP 401/);
  });

  test('a private repository: 401 anonymously and for others, 200 for its reader; a wrong password gets no token', async () => {
    const repo = repoName('private');
    await pusher.pushImage(repo, 'v1', platform('linux/amd64'));
    const reader = { username: uniqueName('reader'), password: uniqueName('pw') };
    const other = { username: uniqueName('other'), password: uniqueName('pw') };
    const remove = addTokenPolicy(reg, {
      users: {
        [reader.username]: { password: reader.password, pull: [repo] },
        [other.username]: { password: other.password, pull: ['private/elsewhere'] },
      },
    });
    try {
      const anonymous = await new RegistryPusher(reg, null).getManifest(repo, 'v1');
      assert.equal(anonymous.status, 401);
      assert.match(String(anonymous.headers['www-authenticate']), /error="insufficient_scope"/);
      assert.equal((await new RegistryPusher(reg, other).getManifest(repo, 'v1')).status, 401);
      assert.equal((await new RegistryPusher(reg, reader).getManifest(repo, 'v1')).status, 200);
      await assert.rejects(
        new RegistryPusher(reg, { ...reader, password: 'wrong' }).getManifest(repo, 'v1'),
        /token .*: 401 .*wrong user name or password/,
      );
    } finally {
      remove();
    }
    // The policy file removed, the reader's credentials no longer get a token.
    await assert.rejects(new RegistryPusher(reg, reader).getManifest(repo, 'v1'), /token .*: 401/);
  });

  test('a repository made private by a policy file is public again once the file is gone', async () => {
    const repo = repoName('team');
    await pusher.pushImage(repo, 'v1', platform('linux/amd64'));
    const remove = addTokenPolicy(reg, { private: [repo] });
    try {
      assert.equal((await new RegistryPusher(reg, null).getManifest(repo, 'v1')).status, 401);
    } finally {
      remove();
    }
    assert.equal((await new RegistryPusher(reg, null).getManifest(repo, 'v1')).status, 200);
  });
});

describe('push helpers', () => {
  test('an OCI index: its entries are OCI manifests whose config blobs state each platform', async () => {
    const repo = repoName('public');
    const platforms = ['linux/amd64', 'linux/arm64/v8', 'linux/arm/v7', 'linux/ppc64le'].map(platform);
    const { index, images } = await pusher.pushIndex(repo, 'multi', platforms);
    const res = await pusher.getManifest(repo, 'multi');
    assert.equal(res.headers['content-type'], MediaType.ociIndex);
    assert.equal(sha256(res.body), index.digest);
    const body = json(res.body) as { mediaType: string; manifests: Descriptor[] };
    assert.equal(body.mediaType, MediaType.ociIndex);
    assert.deepEqual(
      body.manifests.map((m) => [m.mediaType, m.platform]),
      platforms.map((p) => [MediaType.ociManifest, p]),
    );
    for (const [i, image] of images.entries()) {
      const child = await pusher.getManifest(repo, image.digest);
      assert.equal(child.headers['content-type'], MediaType.ociManifest);
      assert.equal(sha256(child.body), image.digest);
      assert.deepEqual(await configPlatform(pusher, repo, image.digest), platforms[i]);
    }
  });

  test('a Docker manifest list of Docker schema 2 images; by tag without the list type, distribution answers its amd64 child', async () => {
    const repo = repoName('public');
    const platforms = ['linux/arm64', 'linux/amd64'].map(platform);
    const { images } = await pusher.pushIndex(repo, 'list', platforms, { format: 'docker' });
    const res = await pusher.getManifest(repo, 'list');
    assert.equal(res.headers['content-type'], MediaType.dockerList);
    const body = json(res.body) as { manifests: Descriptor[] };
    assert.deepEqual(
      body.manifests.map((m) => [m.mediaType, m.platform]),
      platforms.map((p) => [MediaType.dockerManifest, p]),
    );
    const child = await pusher.getManifest(repo, images[0]!.digest);
    assert.equal(json(child.body)['mediaType'], MediaType.dockerManifest);
    assert.equal((json(child.body)['config'] as Descriptor).mediaType, MediaType.dockerConfig);
    assert.deepEqual(await configPlatform(pusher, repo, images[0]!.digest), platforms[0]);
    // What a client that forgets the list type gets (decision 0007): the linux/amd64 child.
    const narrow = await pusher.getManifest(repo, 'list', MediaType.dockerManifest);
    assert.equal(narrow.headers['docker-content-digest'], images[1]!.digest);
  });

  test('single-architecture OCI and Docker images: the platform, variant included, is in the config blob', async () => {
    const repo = repoName('public');
    const oci = await pusher.pushImage(repo, 'oci', platform('linux/arm/v6'));
    const docker = await pusher.pushImage(repo, 'docker', platform('linux/s390x'), 'docker');
    const o = await pusher.getManifest(repo, 'oci');
    const d = await pusher.getManifest(repo, 'docker');
    assert.equal(o.headers['content-type'], MediaType.ociManifest);
    assert.equal(d.headers['content-type'], MediaType.dockerManifest);
    assert.equal(o.headers['docker-content-digest'], oci.digest);
    assert.equal(d.headers['docker-content-digest'], docker.digest);
    assert.deepEqual(await configPlatform(pusher, repo, oci.digest), platform('linux/arm/v6'));
    assert.deepEqual(await configPlatform(pusher, repo, docker.digest), platform('linux/s390x'));
  });

  test('an index with attestation entries: unknown/unknown, annotated with vnd.docker.reference.type', async () => {
    const repo = repoName('public');
    const { images, attestations } = await pusher.pushIndex(
      repo,
      'attested',
      [platform('linux/amd64'), platform('linux/arm64')],
      { attestations: true },
    );
    const body = json((await pusher.getManifest(repo, 'attested')).body) as { manifests: Descriptor[] };
    assert.equal(body.manifests.length, 4);
    const entries = body.manifests.filter((m) => m.annotations?.['vnd.docker.reference.type']);
    assert.deepEqual(
      entries.map((m) => [m.platform, m.annotations?.['vnd.docker.reference.digest']]),
      images.map((i) => [{ os: 'unknown', architecture: 'unknown' }, i.digest]),
    );
    for (const a of attestations) assert.equal((await pusher.getManifest(repo, a.digest)).status, 200);
  });

  test('a dangling index is stored and served; its children are not there', async () => {
    const repo = repoName('public');
    const dangling = await pusher.pushDanglingIndex(repo, 'dangling', [platform('linux/amd64')]);
    const res = await pusher.getManifest(repo, 'dangling');
    assert.equal(res.status, 200);
    assert.equal(res.headers['docker-content-digest'], dangling.digest);
    const child = (json(res.body) as { manifests: Descriptor[] }).manifests[0]!;
    assert.equal((await pusher.getManifest(repo, child.digest)).status, 404);
  });

  test('retag: a tag that moves to another manifest, as HEAD shows', async () => {
    const repo = repoName('public');
    const first = await pusher.pushImage(repo, 'moving', platform('linux/amd64'));
    const second = await pusher.pushIndex(repo, 'other', [platform('linux/amd64'), platform('linux/arm64')]);
    const head = async () =>
      (await pusher.send('HEAD', `/v2/${repo}/manifests/moving`, { Accept: ACCEPT_ALL })).headers;
    assert.equal((await head())['docker-content-digest'], first.digest);
    await pusher.retag(repo, 'moving', second.index.digest);
    const moved = await head();
    assert.equal(moved['docker-content-digest'], second.index.digest);
    assert.equal(moved['content-type'], MediaType.ociIndex);
  });
});

describe('fault proxy', () => {
  let proxy: FaultProxy;
  let repo: string;
  let via: RegistryPusher;
  let digest: string;
  before(async () => {
    proxy = await startFaultProxy(reg);
    repo = repoName('public');
    digest = (await pusher.pushIndex(repo, 'v1', [platform('linux/amd64'), platform('linux/arm64')])).index
      .digest;
    via = new RegistryPusher(reg, null, proxy.url);
    assert.equal(
      (await via.getManifest(repo, 'v1')).status,
      200,
      'the proxy forwards (and the token is cached)',
    );
  });
  after(() => proxy.close());

  test('429 with Retry-After for the next N requests, then the registry answers', async () => {
    proxy.fail({ status: 429, retryAfter: '2', times: 2, path: /\/manifests\// });
    for (let i = 0; i < 2; i++) {
      const res = await via.getManifest(repo, 'v1');
      assert.equal(res.status, 429);
      assert.equal(res.headers['retry-after'], '2');
      assert.equal((json(res.body)['errors'] as { code: string }[])[0]!.code, 'TOOMANYREQUESTS');
    }
    assert.equal((await via.getManifest(repo, 'v1')).status, 200);
  });

  test('500 and 503, each once; only matching requests are hit', async () => {
    proxy.fail({ status: 500, method: 'HEAD' });
    proxy.fail({ status: 503 });
    assert.equal((await via.getManifest(repo, 'v1')).status, 503);
    assert.equal((await via.send('HEAD', `/v2/${repo}/manifests/v1`, { Accept: ACCEPT_ALL })).status, 500);
    assert.equal((await via.getManifest(repo, 'v1')).status, 200);
  });

  test('401 carries a Bearer challenge for the repository; for good, it stays 401 after a fresh token', async () => {
    proxy.fail({ status: 401, times: Infinity });
    const fresh = new RegistryPusher(reg, null, proxy.url);
    const res = await fresh.getManifest(repo, 'v1');
    assert.equal(res.status, 401);
    assert.equal(fresh.tokenRequests, 1);
    assert.equal(
      parseChallenges(res.headers['www-authenticate'])[0]?.params['scope'],
      `repository:${repo}:pull`,
    );
    proxy.clear();
    assert.equal((await via.getManifest(repo, 'v1')).status, 200);
  });

  test('a malformed body (its digest header matches it) and a wrong digest (the header names the real manifest)', async () => {
    proxy.fail({ body: 'malformed' });
    const bad = await via.getManifest(repo, 'v1');
    assert.equal(bad.status, 200);
    assert.throws(() => JSON.parse(bad.body.toString()));
    assert.equal(bad.headers['docker-content-digest'], sha256(bad.body));
    proxy.fail({ body: 'wrong-digest' });
    const wrong = await via.getManifest(repo, 'v1');
    assert.equal(wrong.headers['docker-content-digest'], digest);
    assert.notEqual(sha256(wrong.body), digest);
    assert.doesNotThrow(() => JSON.parse(wrong.body.toString()));
  });

  test('slow answers take at least the delay', async () => {
    proxy.fail({ delayMs: 700 });
    const started = Date.now();
    assert.equal((await via.getManifest(repo, 'v1')).status, 200);
    assert.ok(Date.now() - started >= 700, `answered in ${Date.now() - started} ms`);
  });

  test('down refuses connections, up serves again on the same address', async () => {
    await proxy.down();
    await assert.rejects(via.getManifest(repo, 'v1'), { code: 'ECONNREFUSED' });
    await proxy.up();
    assert.equal((await via.getManifest(repo, 'v1')).status, 200);
  });

  test('counts requests by method and path', async () => {
    proxy.resetCounts();
    const { images } = await pusher.pushIndex(repo, 'counted', [platform('linux/amd64')]);
    await via.getManifest(repo, 'counted');
    await via.getManifest(repo, images[0]!.digest);
    await via.send('HEAD', `/v2/${repo}/manifests/counted`, { Accept: ACCEPT_ALL });
    assert.equal(proxy.count('GET', '/manifests/'), 2);
    assert.equal(proxy.count('GET', `/v2/${repo}/manifests/counted`), 1);
    assert.equal(proxy.count('HEAD'), 1);
    assert.equal(proxy.count(undefined, /\/blobs\//), 0, 'the pushes went to the registry, not the proxy');
    assert.deepEqual(proxy.requests.at(-1), { method: 'HEAD', path: `/v2/${repo}/manifests/counted` });
  });
});
