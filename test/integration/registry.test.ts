// Berth's registry client against the sandbox's real registry (CNCF distribution, TLS from the
// sandbox CA, a token service with public and private repositories) and the fault proxy in front of
// it: what it reads, what it costs in requests, and how it fails.
// test-driver: registry
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { RegistryClient, type RegistryClientOptions } from '../../src/registry/client.ts';
import { parseRegistriesConfig } from '../../src/registry/hosts.ts';
import { cachedFrom } from '../../src/registry/known.ts';
import { SecretType } from '../../src/registry/keyring.ts';
import { InspectionError, type FailureReason, type PullSecret } from '../../src/registry/types.ts';
import type { SandboxRegistry } from '../../src/sandbox/registry.ts';
import { testSandbox, uniqueName } from '../helpers/cluster.ts';
import {
  addTokenPolicy,
  MediaType,
  platform,
  RegistryPusher as Pusher,
  startFaultProxy,
  type FaultProxy,
} from '../helpers/registry.ts';

let reg: SandboxRegistry;
let pusher: Pusher;
let ca: string;
const clients: RegistryClient[] = [];

before(() => {
  const r = testSandbox().registry;
  assert.ok(r, 'the test sandbox runs a registry (this file says test-driver: registry)');
  reg = r;
  pusher = new Pusher(reg);
  ca = readFileSync(reg.caPath, 'utf8');
});
after(() => {
  for (const c of clients) c.close();
});

/** The registries on 127.0.0.1 this file reads: allowed, as an admin allows a registry on a private address. */
const allowedHosts = new Set<string>();

/** A registries configuration of `entries`, every registry of allowedHosts (the sandbox's, the proxies') allowed. */
const allowing = (entries: Record<string, object> = {}) =>
  parseRegistriesConfig({
    registries: Object.fromEntries(
      [...new Set([reg.host, ...allowedHosts, ...Object.keys(entries)])].map((h) => [
        h,
        { ...entries[h], allowPrivate: true },
      ]),
    ),
  });

/** A client trusting the sandbox CA, allowed the registries of allowedHosts; closed after the file. */
function client(opts: RegistryClientOptions = {}): RegistryClient {
  const c = new RegistryClient({ defaultCa: ca, hosts: allowing(), ...opts });
  clients.push(c);
  return c;
}

const repo = (prefix = 'reg') => `${prefix}/${uniqueName('img')}`;
const plats = (...specs: string[]) => specs.map(platform);

/** The requests a call costs, registry and token apart. */
async function cost<T>(
  c: RegistryClient,
  fn: () => Promise<T>,
): Promise<{ value: T; registry: number; token: number }> {
  const before = c.requestsTotal();
  const value = await fn();
  const now = c.requestsTotal();
  return { value, registry: now.registry - before.registry, token: now.token - before.token };
}

async function failsWith(p: Promise<unknown>, reason: FailureReason, transient: boolean, message?: RegExp) {
  await assert.rejects(p, (e: unknown) => {
    assert.ok(e instanceof InspectionError, `an InspectionError, not ${String(e)}`);
    assert.equal(e.reason, reason, e.message);
    assert.equal(e.transient, transient, `${e.reason} transient: ${e.message}`);
    if (message) assert.match(e.message, message);
    return true;
  });
}

function pullSecret(name: string, key: string, username: string, password: string): PullSecret {
  const auths = { [key]: { auth: Buffer.from(`${username}:${password}`).toString('base64') } };
  return {
    name,
    type: SecretType.dockerConfigJson,
    data: { '.dockerconfigjson': Buffer.from(JSON.stringify({ auths })).toString('base64') },
  };
}

describe('what the client reads', () => {
  test('an OCI index: every platform, variants kept, attestations dropped, in one manifest GET', async () => {
    const name = repo();
    const { index } = await pusher.pushIndex(
      name,
      'v1',
      plats('linux/amd64', 'linux/arm/v7', 'linux/arm64/v8'),
      {
        attestations: true,
      },
    );
    const c = client();
    const { value, registry, token } = await cost(c, () => c.inspect(`${reg.host}/${name}:v1`));
    assert.deepEqual(value, {
      image: `${reg.host}/${name}:v1`,
      reference: `${reg.host}/${name}:v1`,
      digest: index.digest,
      platforms: [
        { os: 'linux', architecture: 'amd64' },
        { os: 'linux', architecture: 'arm', variant: 'v7' },
        { os: 'linux', architecture: 'arm64', variant: 'v8' },
      ],
      registry: reg.host,
      cached: false,
    });
    // The anonymous 401, then the GET with a token: two registry requests and one token request the
    // first time; the challenge is remembered, so the next repository goes straight to the realm.
    assert.deepEqual([registry, token], [2, 1]);
    const other = repo();
    await pusher.pushIndex(other, 'v1', plats('linux/s390x'), { format: 'docker' });
    const second = await cost(c, () => c.inspect(`${reg.host}/${other}:v1`));
    assert.deepEqual(second.value.platforms, [{ os: 'linux', architecture: 's390x' }]);
    assert.deepEqual([second.registry, second.token], [1, 1]);
  });

  test('single-architecture images (OCI and Docker): the manifest, then its config blob', async () => {
    const c = client();
    for (const format of ['oci', 'docker'] as const) {
      const name = repo();
      const image = await pusher.pushImage(name, 'v1', platform('linux/ppc64le'), format);
      await c.inspect(`${reg.host}/${repo()}:missing`).catch(() => undefined); // learn the challenge
      const { value, registry } = await cost(c, () => c.inspect(`${reg.host}/${name}:v1`));
      assert.equal(value.digest, image.digest);
      assert.deepEqual(value.platforms, [{ os: 'linux', architecture: 'ppc64le' }]);
      assert.equal(registry, 2, format);
    }
  });

  test('tag plus digest fetches the digest; a digest is verified and shared by every reference to it', async () => {
    const name = repo();
    const { index } = await pusher.pushIndex(name, 'v1', plats('linux/amd64', 'linux/arm64'));
    await pusher.pushIndex(name, 'moved', plats('linux/riscv64'));
    const c = client();
    const byDigest = await c.inspect(`${reg.host}/${name}:moved@${index.digest}`);
    assert.equal(byDigest.reference, `${reg.host}/${name}@${index.digest}`);
    assert.deepEqual(
      byDigest.platforms.map((p) => p.architecture),
      ['amd64', 'arm64'],
    );
    const again = await cost(c, () => c.inspect(`${reg.host}/${name}@${index.digest}`));
    assert.deepEqual([again.value.cached, again.registry, again.token], [true, 0, 0]);
  });

  test('a nested index is followed', async () => {
    const name = repo();
    const inner = await pusher.pushIndex(name, 'inner', plats('linux/arm/v6', 'linux/mips64le'));
    const outerImage = await pusher.pushImage(name, undefined, platform('linux/amd64'));
    await pusher.pushManifest(
      name,
      'outer',
      { schemaVersion: 2, mediaType: MediaType.ociIndex, manifests: [outerImage, inner.index] },
      MediaType.ociIndex,
    );
    const got = await client().inspect(`${reg.host}/${name}:outer`);
    assert.deepEqual(got.platforms, [
      { os: 'linux', architecture: 'amd64' },
      { os: 'linux', architecture: 'arm', variant: 'v6' },
      { os: 'linux', architecture: 'mips64le' },
    ]);
  });

  test('an artifact (a Helm chart) is NotAnImage', async () => {
    const name = repo();
    const config = await pusher.pushBlob(name, Buffer.from('{}'), 'application/vnd.cncf.helm.config.v1+json');
    await pusher.pushManifest(
      name,
      'chart',
      { schemaVersion: 2, mediaType: MediaType.ociManifest, config, layers: [] },
      MediaType.ociManifest,
    );
    const c = client();
    // The config's media type is the registry's word: said as a kind, never quoted (decision 0025).
    await failsWith(
      c.inspect(`${reg.host}/${name}:chart`),
      'NotAnImage',
      false,
      /an artifact, not an image: its config is not an image config$/,
    );
  });
});

describe('caches, single-flight and revalidation', () => {
  test('fifty pods asking for one new image cost one manifest GET and one token', async () => {
    const name = repo();
    await pusher.pushIndex(name, 'v1', plats('linux/amd64', 'linux/arm64'));
    const c = client();
    await c.inspect(`${reg.host}/${repo()}:none`).catch(() => undefined); // learn the challenge
    const { value, registry, token } = await cost(c, () =>
      Promise.all(Array.from({ length: 50 }, () => c.inspect(`${reg.host}/${name}:v1`))),
    );
    assert.equal(new Set(value.map((v) => v.digest)).size, 1);
    assert.deepEqual([registry, token], [1, 1]);
  });

  test('twenty new repositories of a registry never seen: one 401 finds its challenge, the others wait for it', async () => {
    const names = Array.from({ length: 20 }, () => repo());
    for (const name of names) await pusher.pushIndex(name, 'v1', plats('linux/amd64'));
    const c = client();
    const { registry, token } = await cost(c, () =>
      Promise.all(names.map((name) => c.inspect(`${reg.host}/${name}:v1`))),
    );
    // Each repository's GET, and the one request that met the challenge; a token per repository.
    assert.deepEqual([registry, token], [names.length + 1, names.length]);
  });

  test('a fresh tag costs nothing; Always revalidates with one HEAD; a moved tag is read anew', async () => {
    const name = repo();
    await pusher.pushIndex(name, 'v1', plats('linux/amd64'));
    const c = client();
    const image = `${reg.host}/${name}:v1`;
    const first = await c.inspect(image);
    const cached = await cost(c, () => c.inspect(image));
    assert.deepEqual([cached.value.cached, cached.registry], [true, 0]);
    // A millisecond apart from the first read, which counts for a time in its own millisecond.
    await new Promise((r) => setTimeout(r, 2));
    const before = Date.now();
    assert.equal(c.cached(image, { revalidate: true, revalidatedSince: before }), undefined);
    const same = await cost(c, () => c.inspect(image, { revalidate: true }));
    assert.deepEqual([same.value.cached, same.value.digest, same.registry], [false, first.digest, 1]);
    // Answered since `before` (a pod's admission waiting for it): revalidated for that pod, not for a later one.
    assert.equal(c.cached(image, { revalidate: true, revalidatedSince: before })?.digest, first.digest);
    assert.equal(c.cached(image, { revalidate: true, revalidatedSince: Date.now() + 1 }), undefined);
    const moved = await pusher.pushIndex(name, 'v1', plats('linux/arm64'));
    const stale = await c.inspect(image);
    assert.equal(stale.digest, first.digest, 'within the TTL the tag is trusted');
    const fresh = await cost(c, () => c.inspect(image, { revalidate: true }));
    assert.equal(fresh.value.digest, moved.index.digest);
    assert.deepEqual(fresh.value.platforms, [{ os: 'linux', architecture: 'arm64' }]);
    assert.equal(fresh.registry, 2, 'the HEAD, then the new digest');
  });

  test('the snapshot of what the client knows answers as cached() does, and each thing learnt is told', async () => {
    const name = repo();
    const pushed = await pusher.pushIndex(name, 'v1', plats('linux/amd64', 'linux/arm64'));
    const c = client({ tagTtlMs: 200 });
    let learnt = 0;
    c.onLearn(() => learnt++);
    const tag = `${reg.host}/${name}:v1`;
    const byDigest = `${reg.host}/${name}@${pushed.index.digest}`;
    await c.inspect(tag);
    assert.ok(learnt >= 2, `told ${learnt} times: the tag and its digest`);
    for (const [image, revalidate] of [
      [tag, false],
      [tag, true],
      [byDigest, false],
    ] as const) {
      assert.deepEqual(cachedFrom(c.known())(image, { revalidate }), c.cached(image, { revalidate }));
    }
    assert.equal(cachedFrom(c.known())(tag)?.digest, pushed.index.digest);
    await new Promise((r) => setTimeout(r, 250));
    assert.equal(c.cached(tag), undefined);
    assert.equal(cachedFrom(c.known())(tag), undefined, 'an expired tag is not in the snapshot');
    assert.equal(cachedFrom(c.known())(byDigest)?.digest, pushed.index.digest);
  });

  test('an expired tag is revalidated with a HEAD, not read again', async () => {
    const name = repo();
    await pusher.pushIndex(name, 'v1', plats('linux/amd64'));
    const proxy = await startFaultProxy(reg);
    allowedHosts.add(proxy.host);
    try {
      const viaProxy = client({ tagTtlMs: 1 });
      const img = `${proxy.host}/${name}:v1`;
      await viaProxy.inspect(img);
      await new Promise((r) => setTimeout(r, 5));
      proxy.resetCounts();
      const again = await viaProxy.inspect(img);
      assert.equal(again.cached, false);
      assert.deepEqual([proxy.count('HEAD', '/manifests/'), proxy.count('GET', '/manifests/')], [1, 0]);
    } finally {
      await proxy.close();
    }
  });
});

describe('pull secrets', () => {
  let name: string;
  let removePolicy: () => void;
  const user = uniqueName('puller');
  const password = 'right-' + uniqueName('pw');

  before(async () => {
    name = repo('private');
    removePolicy = addTokenPolicy(reg, { private: [name], users: { [user]: { password, pull: [name] } } });
    await pusher.pushIndex(name, 'v1', plats('linux/amd64', 'linux/arm64'));
  });
  after(() => removePolicy());

  test('anonymous is Unauthorized and says no pull secret matched', async () => {
    await failsWith(
      client().inspect(`${reg.host}/${name}:v1`),
      'Unauthorized',
      false,
      /no pull secret matched/,
    );
  });

  test('a matching secret reads the private repository; a secret for another host does not match', async () => {
    const c = client();
    const got = await c.inspect(`${reg.host}/${name}:v1`, {
      pullSecrets: [
        pullSecret('ns/other', 'elsewhere.example', user, password),
        pullSecret('ns/pull', reg.host, user, password),
      ],
    });
    assert.equal(got.platforms.length, 2);
  });

  test('credentials are tried in the kubelet order: a wrong one first, then the right one', async () => {
    const got = await client().inspect(`${reg.host}/${name}:v1`, {
      pullSecrets: [
        pullSecret('ns/right', reg.host, user, password),
        pullSecret('ns/wrong', `${reg.host}/${name}`, user, 'wrong'),
      ],
    });
    assert.equal(got.platforms.length, 2);
  });

  test('a wrong password is Unauthorized, names the secret, and is remembered briefly', async () => {
    const c = client();
    const secrets = { pullSecrets: [pullSecret('ns/bad', reg.host, user, 'wrong')] };
    await failsWith(c.inspect(`${reg.host}/${name}:v1`, secrets), 'Unauthorized', false, /ns\/bad/);
    const again = await cost(c, () => c.inspect(`${reg.host}/${name}:v1`, secrets).catch((e: unknown) => e));
    assert.ok(again.value instanceof InspectionError && again.value.reason === 'Unauthorized');
    assert.deepEqual([again.registry, again.token], [0, 0]);
  });
});

describe('registries configuration', () => {
  test('without the CA the registry is Unreachable, not transient, and the message says to name a CA', async () => {
    const c = new RegistryClient({ hosts: allowing() });
    clients.push(c);
    await failsWith(c.inspect(`${reg.host}/${repo()}:v1`), 'Unreachable', false, /CA/);
  });

  test("a CA named for the registry's host alone is enough", async () => {
    const name = repo();
    await pusher.pushIndex(name, 'v1', plats('linux/amd64'));
    const hosts = parseRegistriesConfig({ registries: { [reg.host]: { ca, allowPrivate: true } } });
    const c = new RegistryClient({ hosts });
    clients.push(c);
    assert.equal((await c.inspect(`${reg.host}/${name}:v1`)).registry, reg.host);
  });

  test('mirrors are tried in order: a mirror that is down is passed over, a working one answers', async () => {
    const name = repo();
    await pusher.pushIndex(name, 'v1', plats('linux/amd64'));
    const down = await startFaultProxy(reg);
    const mirror = await startFaultProxy(reg);
    await down.down();
    try {
      const hosts = allowing({
        [reg.host]: { mirrors: [{ url: down.url }, { url: mirror.url }] },
      });
      const got = await client({ hosts, retries: 0 }).inspect(`${reg.host}/${name}:v1`);
      assert.equal(got.registry, mirror.host);
      assert.ok(mirror.count('GET', `/v2/${name}/manifests/v1`) >= 1);
    } finally {
      await down.close();
      await mirror.close();
    }
  });

  test('a digest-only mirror serves digests and never tags', async () => {
    const name = repo();
    const { index } = await pusher.pushIndex(name, 'v1', plats('linux/amd64'));
    const mirror = await startFaultProxy(reg);
    try {
      const hosts = allowing({ [reg.host]: { mirrors: [{ url: mirror.url, digestsOnly: true }] } });
      const c = client({ hosts });
      assert.equal((await c.inspect(`${reg.host}/${name}:v1`)).registry, reg.host);
      assert.equal(mirror.count(), 0);
      const other = client({ hosts });
      assert.equal((await other.inspect(`${reg.host}/${name}@${index.digest}`)).registry, mirror.host);
    } finally {
      await mirror.close();
    }
  });
});

describe('failures, through the fault proxy', () => {
  let proxy: FaultProxy;
  before(async () => {
    proxy = await startFaultProxy(reg);
    allowedHosts.add(proxy.host);
  });
  after(() => proxy.close());

  const pushed = async (...specs: string[]) => {
    const name = repo();
    await pusher.pushIndex(name, 'v1', plats(...(specs.length ? specs : ['linux/amd64'])));
    return `${proxy.host}/${name}:v1`;
  };

  test('429 with Retry-After pauses the host, then the request goes through', async () => {
    const image = await pushed();
    const c = client();
    proxy.clear();
    proxy.fail({ status: 429, retryAfter: '1', path: /\/manifests\//, times: 1 });
    const started = Date.now();
    const got = await c.inspect(image);
    assert.equal(got.platforms.length, 1);
    assert.ok(Date.now() - started >= 900, `waited ${Date.now() - started} ms`);
  });

  test('a Retry-After longer than a request may wait fails fast as RateLimited, transient, and pauses the host', async () => {
    // Both pushed first: only the client's answers are timed.
    const [image, second] = [await pushed(), await pushed()];
    const c = client({ timeoutMs: 2000 });
    proxy.clear();
    proxy.fail({ status: 429, retryAfter: '120', path: /\/manifests\//, times: 1 });
    const started = Date.now();
    await failsWith(c.inspect(image), 'RateLimited', true, /429/);
    proxy.resetCounts();
    await failsWith(c.inspect(second), 'RateLimited', true, /asked to wait/);
    assert.equal(proxy.count(), 0, 'nothing is sent to a paused host');
    assert.ok(Date.now() - started < 2000);
  });

  test('5xx is retried a bounded number of times', async () => {
    const image = await pushed();
    proxy.clear();
    proxy.fail({ status: 500, path: /\/manifests\//, times: 2 });
    assert.equal((await client({ retries: 2 }).inspect(image)).platforms.length, 1);
    proxy.fail({ status: 503, path: /\/manifests\//, times: Infinity });
    proxy.resetCounts();
    await failsWith(client({ retries: 2 }).inspect(await pushed()), 'Unreachable', true, /503/);
    assert.equal(proxy.count('GET', '/manifests/'), 3);
    proxy.clear();
  });

  test('404 is NotFound, remembered briefly', async () => {
    const c = client();
    const image = `${proxy.host}/${repo()}:nothing`;
    await failsWith(c.inspect(image), 'NotFound', false);
    proxy.resetCounts();
    await failsWith(c.inspect(image), 'NotFound', false);
    assert.equal(proxy.count(), 0);
  });

  test('a malformed manifest is Malformed; a body that is not its digest is DigestMismatch', async () => {
    const c = client();
    proxy.clear();
    // Learn the challenge first: a fault hits the next matching request, and it must be the authorized GET.
    await c.inspect(await pushed());
    proxy.fail({ body: 'malformed', path: /\/manifests\//, method: 'GET' });
    await failsWith(c.inspect(await pushed()), 'Malformed', false);
    proxy.fail({ body: 'wrong-digest', path: /\/manifests\//, method: 'GET' });
    await failsWith(c.inspect(await pushed()), 'DigestMismatch', false);
  });

  test('a registry that always answers 401 is Unauthorized', async () => {
    const image = await pushed();
    proxy.clear();
    proxy.fail({ status: 401, path: /\/manifests\//, times: Infinity });
    await failsWith(client().inspect(image), 'Unauthorized', false);
    proxy.clear();
  });

  test('a registry that is down is Unreachable and transient; back up, it answers', async () => {
    const image = await pushed();
    await proxy.down();
    try {
      await failsWith(client({ retries: 1 }).inspect(image), 'Unreachable', true, /ECONNREFUSED/);
    } finally {
      await proxy.up();
    }
    assert.equal((await client().inspect(image)).platforms.length, 1);
  });

  test('a slow registry times out, transient', async () => {
    const image = await pushed();
    proxy.clear();
    proxy.fail({ delayMs: 1500, path: /\/manifests\//, times: Infinity });
    await failsWith(client({ timeoutMs: 300, retries: 1 }).inspect(image), 'Unreachable', true);
    proxy.clear();
  });
});
