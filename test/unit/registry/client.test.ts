// The registry client against small registries served in this process: what it follows in an
// index, what one repository's failure may do to another's, which TLS its token requests use, and
// what a long Retry-After tells the caller.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import http from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { after, describe, test } from 'node:test';
import { RegistryClient, type RegistryClientOptions } from '../../../src/registry/client.ts';
import { parseRegistriesConfig } from '../../../src/registry/hosts.ts';
import { MediaType } from '../../../src/registry/manifest.ts';
import { registryAgent } from '../../../src/registry/transport.ts';
import { InspectionError } from '../../../src/registry/types.ts';
import { createCertificateAuthority } from '../../../src/runtime/webhook/certificates.ts';

interface Answer {
  status?: number;
  headers?: Record<string, string>;
  body?: Buffer;
  /** Answered this much later (a slow registry). */
  delayMs?: number;
}
type Route = (path: string, req: http.IncomingMessage) => Answer;

interface Served {
  /** `127.0.0.1:PORT`. */
  host: string;
  /** Every path asked, in order. */
  asked: string[];
  /** The Authorization of each request, in order ('' when none). */
  authorizations: string[];
  /** Connections accepted. */
  connections: number;
}

const servers: http.Server[] = [];
const clients: RegistryClient[] = [];
after(() => {
  for (const c of clients) c.close();
  for (const s of servers) s.close();
});

/** A registry on 127.0.0.1: plain HTTP, or HTTPS with `tls`. */
async function serve(route: Route, tls?: { cert: string; key: string }): Promise<Served> {
  const served: Served = { host: '', asked: [], authorizations: [], connections: 0 };
  const handler: http.RequestListener = (req, res) => {
    served.asked.push(req.url!);
    served.authorizations.push(req.headers.authorization ?? '');
    const a = route(req.url!, req);
    const send = () => {
      res.writeHead(a.status ?? 200, a.headers ?? {});
      res.end(a.body);
    };
    if (a.delayMs) setTimeout(send, a.delayMs);
    else send();
  };
  const server = tls ? https.createServer(tls, handler) : http.createServer(handler);
  servers.push(server);
  server.on('connection', () => served.connections++);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  served.host = `127.0.0.1:${(server.address() as AddressInfo).port}`;
  return served;
}

/**
 * A client for the registries at `hosts`, each plain HTTP unless said `tls` (verification off), and
 * allowed on 127.0.0.1 as an admin allows a registry on a private address.
 */
function client(hosts: Record<string, 'http' | 'tls'>, opts: RegistryClientOptions = {}): RegistryClient {
  const registries = Object.fromEntries(
    Object.entries(hosts).map(([host, how]) => [
      host,
      how === 'http'
        ? { server: `http://${host}`, insecure: true, allowPrivate: true }
        : { insecure: true, allowPrivate: true },
    ]),
  );
  const c = new RegistryClient({ hosts: parseRegistriesConfig({ registries }), ...opts });
  clients.push(c);
  return c;
}

const json = (v: unknown) => Buffer.from(JSON.stringify(v));
const digestOf = (b: Buffer) => `sha256:${createHash('sha256').update(b).digest('hex')}`;
const manifest = (body: Buffer, mediaType: string): Answer => ({
  headers: { 'content-type': mediaType, 'docker-content-digest': digestOf(body) },
  body,
});
const notFound: Answer = { status: 404, body: json({ errors: [{ code: 'MANIFEST_UNKNOWN' }] }) };

/** An OCI index whose entries name these platforms, plus `more` entries as they are. */
const indexOf = (platforms: string[], more: object[] = []) =>
  json({
    schemaVersion: 2,
    mediaType: MediaType.ociIndex,
    manifests: [
      ...platforms.map((p, i) => {
        const [os, architecture] = p.split('/');
        return {
          mediaType: MediaType.ociManifest,
          digest: `sha256:${String(i).repeat(64)}`,
          size: 1,
          platform: { os, architecture },
        };
      }),
      ...more,
    ],
  });

const platformsOf = (_index: Buffer) => [{ os: 'linux', architecture: 'arm64' }];

async function waitUntil(done: () => boolean, timeoutMs = 5_000): Promise<void> {
  const until = performance.now() + timeoutMs;
  while (!done()) {
    if (performance.now() > until) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function rejectsWith(p: Promise<unknown>, check: (e: InspectionError) => void): Promise<void> {
  await assert.rejects(p, (e: unknown) => {
    assert.ok(e instanceof InspectionError, `an InspectionError, not ${String(e)}`);
    check(e);
    return true;
  });
}

describe('an index with artifacts beside its images', () => {
  test('a child that is not an image is skipped; read alone, it is still not an image', async () => {
    // An artifact whose entry names neither a platform nor its artifactType (older tools).
    const artifact = json({
      schemaVersion: 2,
      mediaType: MediaType.ociManifest,
      config: {
        mediaType: 'application/vnd.example.sbom.config.v1+json',
        digest: `sha256:${'c'.repeat(64)}`,
        size: 2,
      },
      layers: [],
    });
    const entry = { mediaType: MediaType.ociManifest, digest: digestOf(artifact), size: artifact.length };
    const index = indexOf(['linux/amd64', 'linux/arm64'], [entry]);
    const onlyArtifact = indexOf([], [entry]);
    const reg = await serve((path) => {
      if (path === '/v2/app/manifests/v1') return manifest(index, MediaType.ociIndex);
      if (path === '/v2/app/manifests/none') return manifest(onlyArtifact, MediaType.ociIndex);
      if (path === `/v2/app/manifests/${entry.digest}`) return manifest(artifact, MediaType.ociManifest);
      return notFound;
    });
    const c = client({ [reg.host]: 'http' });
    const got = await c.inspect(`${reg.host}/app:v1`);
    assert.deepEqual(got.platforms, [
      { os: 'linux', architecture: 'amd64' },
      { os: 'linux', architecture: 'arm64' },
    ]);
    assert.ok(reg.asked.includes(`/v2/app/manifests/${entry.digest}`), 'the unmarked child was read');
    await rejectsWith(c.inspect(`${reg.host}/app:none`), (e) => assert.equal(e.reason, 'NotAnImage'));
    await rejectsWith(c.inspect(`${reg.host}/app@${entry.digest}`), (e) =>
      assert.equal(e.reason, 'NotAnImage'),
    );
  });
});

describe('single-flight of a digest', () => {
  test("one repository's 404 for a digest does not fail another repository's read of it", async () => {
    const index = indexOf(['linux/arm64']);
    const digest = digestOf(index);
    const reg = await serve((path) =>
      path === `/v2/open/b/manifests/${digest}` ? manifest(index, MediaType.ociIndex) : notFound,
    );
    const c = client({ [reg.host]: 'http' });
    // Together: the second starts while the first's request is in flight.
    const [hidden, open] = await Promise.allSettled([
      c.inspect(`${reg.host}/hidden/a@${digest}`),
      c.inspect(`${reg.host}/open/b@${digest}`),
    ]);
    assert.equal(hidden.status, 'rejected');
    assert.equal(hidden.status === 'rejected' && (hidden.reason as InspectionError).reason, 'NotFound');
    assert.equal(open.status, 'fulfilled', open.status === 'rejected' ? String(open.reason) : '');
    assert.deepEqual(open.status === 'fulfilled' && open.value.platforms, [
      { os: 'linux', architecture: 'arm64' },
    ]);
    // A success is shared across repositories by the digest cache: no request for a third.
    const before = reg.asked.length;
    assert.equal((await c.inspect(`${reg.host}/third/c@${digest}`)).cached, true);
    assert.equal(reg.asked.length, before);
  });
});

describe('the token realm', () => {
  const index = indexOf(['linux/s390x']);
  /** A registry on HTTPS from a CA the client does not know, with its realm at `realm(host)`. */
  async function bearerRegistry(realm: (self: string) => string, tls: { cert: string; key: string }) {
    let self = '';
    const reg = await serve((path, req) => {
      if (path.startsWith('/token?')) return { body: json({ token: 't0k' }) };
      if (req.headers.authorization !== 'Bearer t0k')
        return {
          status: 401,
          headers: { 'www-authenticate': `Bearer realm="${realm(self)}",service="reg"` },
        };
      return path === '/v2/app/manifests/v1' ? manifest(index, MediaType.ociIndex) : notFound;
    }, tls);
    self = reg.host;
    return reg;
  }

  test("served by an insecure registry's own host: asked with the registry's TLS settings", async () => {
    const ca = await createCertificateAuthority('untrusted');
    const pair = await ca.issue({ commonName: 'reg', ipAddresses: ['127.0.0.1'], usage: 'server' });
    const tls = { cert: pair.certPem, key: pair.keyPem };
    const reg = await bearerRegistry((self) => `https://${self}/token`, tls);
    const c = client({ [reg.host]: 'tls' });
    assert.deepEqual((await c.inspect(`${reg.host}/app:v1`)).platforms, [
      { os: 'linux', architecture: 's390x' },
    ]);
    assert.equal(c.requestsTotal().token, 1);

    // On another host (here another port), the realm is verified: insecure is the registry's only.
    const tokens = await serve(() => ({ body: json({ token: 't0k' }) }), tls);
    const other = await bearerRegistry(() => `https://${tokens.host}/token`, tls);
    const d = client({ [other.host]: 'tls' });
    await rejectsWith(d.inspect(`${other.host}/app:v1`), (e) => {
      assert.equal(e.reason, 'Unreachable');
      assert.match(e.message, new RegExp(`${tokens.host}: TLS`));
    });
    assert.deepEqual(tokens.asked, [], 'no token request got through');
  });
});

describe('a pull secret entry with no user and no password', () => {
  test('is read anonymously, as containerd does, not sent as Basic ":"', async () => {
    const index = indexOf(['linux/arm64']);
    let self = '';
    const reg = await serve((path, req) => {
      // Docker Hub's token server refuses an empty Basic credential.
      if (path.startsWith('/token?'))
        return req.headers.authorization ? { status: 401 } : { body: json({ token: 'anon' }) };
      if (req.headers.authorization !== 'Bearer anon')
        return {
          status: 401,
          headers: { 'www-authenticate': `Bearer realm="http://${self}/token",service="reg"` },
        };
      return path === '/v2/app/manifests/v1' ? manifest(index, MediaType.ociIndex) : notFound;
    });
    self = reg.host;
    const c = client({ [reg.host]: 'http' });
    // What `kubectl create secret generic --from-file=.dockerconfigjson=~/.docker/config.json` makes
    // of a config whose logins are in a credential store.
    const config = { auths: { [reg.host]: {} }, credsStore: 'desktop' };
    const pullSecrets = [
      {
        name: 'apps/docker',
        type: 'kubernetes.io/dockerconfigjson',
        data: { '.dockerconfigjson': Buffer.from(JSON.stringify(config)).toString('base64') },
      },
    ];
    assert.deepEqual((await c.inspect(`${reg.host}/app:v1`, { pullSecrets })).platforms, [
      { os: 'linux', architecture: 'arm64' },
    ]);
  });
});

describe('the caches answer by who read (issue 47)', () => {
  test('a private image read with one pull secret answers neither an anonymous caller nor another secret', async () => {
    const index = indexOf(['linux/arm64']);
    const good = `Basic ${Buffer.from('u:p').toString('base64')}`;
    const reg = await serve((path, req) => {
      if (req.headers.authorization !== good)
        return { status: 401, headers: { 'www-authenticate': 'Basic realm="private"' } };
      return path === '/v2/app/manifests/v1' || path === `/v2/app/manifests/${digestOf(index)}`
        ? manifest(index, MediaType.ociIndex)
        : notFound;
    });
    const c = client({ [reg.host]: 'http' });
    const secret = (name: string, password: string) => ({
      name,
      type: 'kubernetes.io/dockerconfigjson',
      data: {
        '.dockerconfigjson': Buffer.from(
          JSON.stringify({ auths: { [reg.host]: { username: 'u', password } } }),
        ).toString('base64'),
      },
    });
    const image = `${reg.host}/app:v1`;
    const byDigest = `${reg.host}/app@${digestOf(index)}`;
    assert.equal((await c.inspect(image, { pullSecrets: [secret('a/pull', 'p')] })).cached, false);
    for (const i of [image, byDigest]) {
      assert.equal(c.cached(i), undefined, `${i}: anonymous`);
      assert.equal(c.cached(i, { secrets: ['b/pull'] }), undefined, `${i}: another secret`);
      assert.equal(c.cached(i, { secrets: ['a/pull'] })?.digest, digestOf(index), `${i}: its secret`);
      assert.equal((await c.inspect(i, { pullSecrets: [secret('a/pull', 'p')] })).cached, true, i);
      // Asked of the registry, which refuses them.
      const asked = reg.asked.length;
      await rejectsWith(c.inspect(i), (e) => assert.equal(e.reason, 'Unauthorized'));
      await rejectsWith(c.inspect(i, { pullSecrets: [secret('b/pull', 'wrong')] }), (e) =>
        assert.equal(e.reason, 'Unauthorized'),
      );
      assert.ok(reg.asked.length > asked, `${i}: the registry was asked`);
    }
    // Known snapshots (the webhook thread's) carry who read each entry.
    assert.deepEqual(
      [...c.known().digests.values()].map((d) => d.readers),
      [['a/pull']],
    );
  });
});

describe('a manifest naming another reader’s digest (issue 59)', () => {
  /** A private registry (Basic u:p) whose `app:v1` is an index of riscv64 only, and a client that read it with `b/pull`. */
  async function readPrivately() {
    const secretIndex = indexOf(['linux/riscv64']);
    const secret = digestOf(secretIndex);
    const good = `Basic ${Buffer.from('u:p').toString('base64')}`;
    const priv = await serve((path, req) => {
      if (req.headers.authorization !== good)
        return { status: 401, headers: { 'www-authenticate': 'Basic realm="private"' } };
      return path === '/v2/app/manifests/v1' || path === `/v2/app/manifests/${secret}`
        ? manifest(secretIndex, MediaType.ociIndex)
        : notFound;
    });
    const pullSecrets = [
      {
        name: 'b/pull',
        type: 'kubernetes.io/dockerconfigjson',
        data: {
          '.dockerconfigjson': Buffer.from(
            JSON.stringify({ auths: { [priv.host]: { username: 'u', password: 'p' } } }),
          ).toString('base64'),
        },
      },
    ];
    return { priv, secret, pullSecrets };
  }

  test('an index of a registry the tenant runs, naming it without a platform: read there, not from the cache', async () => {
    const { priv, secret, pullSecrets } = await readPrivately();
    const evilIndex = json({
      schemaVersion: 2,
      mediaType: MediaType.ociIndex,
      manifests: [{ mediaType: MediaType.ociIndex, digest: secret, size: 1 }],
    });
    const evil = await serve((path) =>
      path === '/v2/evil/manifests/v1' ? manifest(evilIndex, MediaType.ociIndex) : notFound,
    );
    const c = client({ [priv.host]: 'http', [evil.host]: 'http' });
    await c.inspect(`${priv.host}/app:v1`, { pullSecrets, namespace: 'b' });
    // The tenant's registry has no such manifest: the index's child is not found, whatever the cache holds.
    await rejectsWith(c.inspect(`${evil.host}/evil:v1`, { namespace: 'a' }), (e) =>
      assert.equal(e.reason, 'NotFound'),
    );
    assert.ok(evil.asked.includes(`/v2/evil/manifests/${secret}`), 'asked of the tenant’s registry');
    // Nor did the attempt make the entry anyone's: by digest, without the secret, it is read afresh.
    assert.equal(c.cached(`${priv.host}/app@${secret}`), undefined);
    assert.deepEqual(c.known().digests.get(secret)?.readers, ['b/pull']);
    await rejectsWith(c.inspect(`${priv.host}/app@${secret}`, { namespace: 'a' }), (e) =>
      assert.equal(e.reason, 'Unauthorized'),
    );
  });

  test('a tag re-checked with a HEAD whose Docker-Content-Digest names it: read there, not from the cache', async () => {
    const { priv, secret, pullSecrets } = await readPrivately();
    const own = indexOf(['linux/s390x']);
    let moved = false;
    const evil = await serve((path, req) => {
      if (path === '/v2/evil/manifests/v1' && req.method === 'HEAD' && moved)
        return { headers: { 'content-type': MediaType.ociIndex, 'docker-content-digest': secret } };
      return path === '/v2/evil/manifests/v1' ? manifest(own, MediaType.ociIndex) : notFound;
    });
    const c = client({ [priv.host]: 'http', [evil.host]: 'http' });
    await c.inspect(`${priv.host}/app:v1`, { pullSecrets, namespace: 'b' });
    assert.deepEqual((await c.inspect(`${evil.host}/evil:v1`)).platforms, [
      { os: 'linux', architecture: 's390x' },
    ]);
    moved = true;
    await rejectsWith(c.inspect(`${evil.host}/evil:v1`, { revalidate: true }), (e) =>
      assert.equal(e.reason, 'NotFound'),
    );
    assert.ok(evil.asked.includes(`/v2/evil/manifests/${secret}`), 'asked of the tenant’s registry');
    assert.deepEqual(c.known().digests.get(secret)?.readers, ['b/pull']);
  });

  test('a digest read anonymously answers every reader from the cache, as before', async () => {
    const index = indexOf(['linux/arm64']);
    const digest = digestOf(index);
    const reg = await serve((path) =>
      path === '/v2/app/manifests/v1' || path === `/v2/app/manifests/${digest}`
        ? manifest(index, MediaType.ociIndex)
        : notFound,
    );
    const wrapper = json({
      schemaVersion: 2,
      mediaType: MediaType.ociIndex,
      manifests: [{ mediaType: MediaType.ociIndex, digest, size: 1 }],
    });
    const other = await serve((path) =>
      path === '/v2/w/manifests/v1' ? manifest(wrapper, MediaType.ociIndex) : notFound,
    );
    const c = client({ [reg.host]: 'http', [other.host]: 'http' });
    await c.inspect(`${reg.host}/app:v1`);
    assert.deepEqual((await c.inspect(`${other.host}/w:v1`)).platforms, [
      { os: 'linux', architecture: 'arm64' },
    ]);
    assert.ok(!other.asked.includes(`/v2/w/manifests/${digest}`), 'the public child came from the cache');
  });
});

describe('bounds across every registry (issue 47)', () => {
  const slowRegistry = async (delayMs: number) => {
    const index = indexOf(['linux/arm64']);
    const arrivals: number[] = [];
    const closed: number[] = [];
    const reg = await serve((path, req) => {
      arrivals.push(performance.now());
      req.socket.once('close', () => closed.push(performance.now()));
      return path.startsWith('/v2/app') ? { ...manifest(index, MediaType.ociIndex), delayMs } : notFound;
    });
    return { ...reg, arrivals, closed };
  };

  test('at most maxRequestsInFlight requests to all hosts at once, however many hosts', async () => {
    const regs = await Promise.all([1, 2, 3].map(() => slowRegistry(150)));
    const c = client(Object.fromEntries(regs.map((r) => [r.host, 'http' as const])), {
      maxRequestsInFlight: 2,
    });
    await Promise.all(regs.flatMap((r) => [c.inspect(`${r.host}/app:v1`), c.inspect(`${r.host}/app:v2`)]));
    const arrivals = regs.flatMap((r) => r.arrivals).sort((a, b) => a - b);
    assert.equal(arrivals.length, 6);
    for (const t of arrivals) {
      const together = arrivals.filter((u) => u >= t && u < t + 100).length;
      assert.ok(together <= 2, `${together} requests within 100 ms of each other`);
    }
  });

  test('an inspection given up ends its requests; held by the bound, it says Bounded', async () => {
    const slow = await slowRegistry(5_000);
    const other = await slowRegistry(0);
    const c = client({ [slow.host]: 'http', [other.host]: 'http' }, { maxRequestsInFlight: 1 });
    const started = performance.now();
    const given = c.inspect(`${slow.host}/app:v1`, { signal: AbortSignal.timeout(300) });
    // Behind it, for the one place in flight: another registry's image, given up as well.
    const held = c.inspect(`${other.host}/app:v1`, { signal: AbortSignal.timeout(100) });
    await rejectsWith(held, (e) => {
      assert.equal(e.reason, 'Bounded');
      assert.equal(e.transient, true);
      assert.match(e.message, /1 requests, 64 MiB/);
    });
    await assert.rejects(given);
    assert.equal(other.arrivals.length, 0, 'the held read never went out');
    // The abandoned request's connection is closed at once, not left for the registry's 5 s.
    await waitUntil(() => slow.closed.length > 0);
    assert.ok(slow.closed[0]! - started < 2_000, `closed after ${(slow.closed[0]! - started).toFixed(0)} ms`);
    // And the place it held is free: the other registry answers now.
    assert.equal((await c.inspect(`${other.host}/app:v1`)).platforms[0]!.architecture, 'arm64');
  });

  test('bodies being read take their stated bytes from one budget across hosts', async () => {
    const regs = await Promise.all([1, 2].map(() => slowRegistry(100)));
    const index = indexOf(['linux/arm64']);
    const c = client(Object.fromEntries(regs.map((r) => [r.host, 'http' as const])), {
      maxBodyBytesInFlight: index.length,
    });
    // Each body fills the budget: both are read, one after the other, and neither fails.
    const got = await Promise.all(regs.map((r) => c.inspect(`${r.host}/app:v1`)));
    assert.deepEqual(
      got.map((g) => g.platforms),
      [platformsOf(index), platformsOf(index)],
    );
  });

  test('one namespace holds at most its share: another namespace’s read goes out while it waits (issue 59)', async () => {
    const slow = await slowRegistry(2_000);
    const fast = await slowRegistry(0);
    const c = client(
      { [slow.host]: 'http', [fast.host]: 'http' },
      { maxRequestsInFlight: 4, maxRequestsInFlightPerNamespace: 2 },
    );
    // Its challenge known first (none: a 404 at once), so that the reads do not wait for one discovery.
    await assert.rejects(c.inspect(`${slow.host}/known:v1`, { namespace: 'a' }));
    const tenant = [1, 2, 3, 4].map((n) => c.inspect(`${slow.host}/app:v${n}`, { namespace: 'a' }));
    await waitUntil(() => slow.arrivals.length === 3);
    const started = performance.now();
    const other = await c.inspect(`${fast.host}/app:v1`, { namespace: 'b' });
    const took = performance.now() - started;
    assert.deepEqual(other.platforms, [{ os: 'linux', architecture: 'arm64' }]);
    assert.ok(took < 1_000, `answered after ${took.toFixed(0)} ms, behind the other namespace's reads`);
    assert.equal(slow.arrivals.length, 3, 'the first namespace still holds only its share');
    await Promise.all(tenant);
    // Without a namespace (the CLI, a plan): one flow of its own, bounded the same.
    assert.equal((await c.inspect(`${fast.host}/app:v2`)).cached, false);
  });

  test('the registry agents are built never to use a proxy, whatever the environment says', () => {
    for (const protocol of ['http:', 'https:']) {
      const agent = registryAgent(protocol, { maxSockets: 1, rejectUnauthorized: true });
      const options = (agent as unknown as { options: { proxyEnv?: unknown; keepAlive?: boolean } }).options;
      assert.deepEqual(options.proxyEnv, {}, protocol);
      assert.equal(options.keepAlive, true);
      agent.destroy();
    }
  });
});

describe('a Retry-After longer than a request may wait', () => {
  test('fails at once, saying when the registry may be asked again, for every image of the host', async () => {
    const reg = await serve(() => ({ status: 429, headers: { 'retry-after': '30' } }));
    const c = client({ [reg.host]: 'http' }, { timeoutMs: 2000 });
    const before = Date.now();
    let first = 0;
    await rejectsWith(c.inspect(`${reg.host}/a:1`), (e) => {
      assert.equal(e.reason, 'RateLimited');
      assert.equal(e.transient, true);
      assert.ok(e.retryAt !== undefined && e.retryAt >= before + 29_000 && e.retryAt <= Date.now() + 30_000);
      first = e.retryAt;
    });
    // Another image of that host: no request, the same time.
    await rejectsWith(c.inspect(`${reg.host}/b:1`), (e) => {
      assert.equal(e.reason, 'RateLimited');
      assert.ok(e.retryAt !== undefined && Math.abs(e.retryAt - first) < 1000, `${e.retryAt} vs ${first}`);
    });
    assert.equal(reg.asked.length, 1);
  });

  test('a pause the client waits out itself gives the caller no time: its retries count as usual', async () => {
    const stuck = await serve(() => ({ status: 503, headers: { 'retry-after': '1' } }));
    const d = client({ [stuck.host]: 'http' }, { retries: 1 });
    await rejectsWith(d.inspect(`${stuck.host}/a:1`), (e) => {
      assert.equal(e.reason, 'Unreachable');
      assert.equal(e.retryAt, undefined);
    });
  });
});

describe('revalidations', () => {
  test('a HEAD gives its socket back: revalidations one after another never wait for the pool', async () => {
    const index = indexOf(['linux/arm64']);
    const reg = await serve((path) =>
      path === '/v2/app/manifests/v1' ? manifest(index, MediaType.ociIndex) : notFound,
    );
    // One socket: a HEAD that kept it would hold the next request until the timeout.
    const c = client({ [reg.host]: 'http' }, { concurrencyPerRegistry: 1, timeoutMs: 3000, retries: 0 });
    await c.inspect(`${reg.host}/app:v1`);
    const started = performance.now();
    for (let i = 0; i < 5; i++) {
      const again = await c.inspect(`${reg.host}/app:v1`, { revalidate: true });
      assert.equal(again.cached, false);
    }
    const ms = performance.now() - started;
    assert.ok(ms < 1000, `five revalidations took ${ms.toFixed(0)} ms`);
    // The GET, then the five HEADs (the digest was known).
    assert.equal(reg.asked.filter((p) => p === '/v2/app/manifests/v1').length, 6);
  });

  test('a revalidation that joins a read whose tag was answered before it asked reads the tag again', async () => {
    const first = indexOf(['linux/amd64']);
    const second = indexOf(['linux/arm64']);
    let tagged = first;
    const reg = await serve((path) => {
      if (path === '/v2/app/manifests/v1') return manifest(tagged, MediaType.ociIndex);
      // The tag's new digest is slow to read: the first revalidation's read is still on it.
      if (path === `/v2/app/manifests/${digestOf(second)}`)
        return { ...manifest(second, MediaType.ociIndex), delayMs: 300 };
      return notFound;
    });
    const c = client({ [reg.host]: 'http' });
    const image = `${reg.host}/app:v1`;
    await c.inspect(image);
    tagged = second;
    const a = c.inspect(image, { revalidate: true });
    await new Promise((r) => setTimeout(r, 100));
    const laterAsked = Date.now();
    const b = await c.inspect(image, { revalidate: true });
    assert.deepEqual([(await a).digest, b.digest], [digestOf(second), digestOf(second)]);
    // The later caller's tag was answered after it asked, not only the first's.
    assert.equal(
      c.cached(image, { revalidate: true, revalidatedSince: laterAsked })?.digest,
      digestOf(second),
    );
    // The first GET, then one HEAD for each revalidation.
    assert.equal(reg.asked.filter((p) => p === '/v2/app/manifests/v1').length, 3);
  });
});

describe('registry egress', () => {
  const index = indexOf(['linux/arm64']);
  /** A body a registry wrote, which no message may repeat. */
  const MARK = 'internal-secret-4711';
  let tls: { cert: string; key: string; ca: string };
  const certificates = async () => {
    if (tls) return tls;
    const ca = await createCertificateAuthority('tenant');
    const pair = await ca.issue({
      commonName: 'reg',
      dnsNames: ['localhost'],
      ipAddresses: ['127.0.0.1'],
      usage: 'server',
    });
    return (tls = { cert: pair.certPem, key: pair.keyPem, ca: ca.certPem });
  };
  /** A client trusting the tenant CA (as a public certificate is trusted), allowing `allowed` only. */
  const trusting = async (allowed: string[] = []) => {
    const registries = Object.fromEntries(allowed.map((h) => [h, { allowPrivate: true }]));
    const c = new RegistryClient({
      hosts: parseRegistriesConfig({ registries }),
      defaultCa: (await certificates()).ca,
    });
    clients.push(c);
    return c;
  };
  /** An HTTPS registry that answers every request 401 with a Bearer realm. */
  const challenging = async (realm: string) =>
    serve(
      () => ({
        status: 401,
        headers: { 'www-authenticate': `Bearer realm="${realm}",service="reg"` },
        body: json({ errors: [{ code: 'UNAUTHORIZED', message: MARK }] }),
      }),
      await certificates(),
    );

  test('a registry on a loopback address, or on a name resolving to one, is refused without a connection', async () => {
    const reg = await serve(() => manifest(index, MediaType.ociIndex), await certificates());
    const c = await trusting();
    const port = reg.host.split(':')[1]!;
    for (const host of [reg.host, `localhost:${port}`, `[::1]:${port}`])
      await rejectsWith(c.inspect(`${host}/app:v1`), (e) => {
        assert.equal(e.reason, 'AddressNotAllowed', e.message);
        assert.equal(e.transient, false);
        assert.match(e.message, /loopback address, which Berth does not connect to unless .*allowPrivate/);
      });
    assert.equal(reg.connections, 0);
    // The admin allows the registry: read as before.
    const allowed = await trusting([reg.host]);
    assert.deepEqual((await allowed.inspect(`${reg.host}/app:v1`)).platforms, [
      { os: 'linux', architecture: 'arm64' },
    ]);
  });

  test('a Bearer realm on plain http is never asked, and no token reaches the registry', async () => {
    const tokens = await serve(() => ({ body: json({ token: 'internal' }) }));
    const reg = await challenging(`http://${tokens.host}/token`);
    // Allowed, as a public registry would be: only the realm's scheme refuses it.
    const c = await trusting([reg.host]);
    await rejectsWith(c.inspect(`${reg.host}/app:v1`), (e) => {
      assert.equal(e.reason, 'Unauthorized');
      assert.match(e.message, /token realm http:\/\/127\.0\.0\.1:\d+ is plain http/);
      assert.ok(!e.message.includes(MARK), e.message);
    });
    assert.equal(tokens.connections, 0);
    assert.deepEqual(new Set(reg.authorizations), new Set(['']));
  });

  test('a realm on another host name passes the address check on its own', async () => {
    const tokens = await serve(() => ({ body: json({ token: 'internal' }) }), await certificates());
    const reg = await challenging(`https://localhost:${tokens.host.split(':')[1]}/token`);
    const c = await trusting([reg.host]);
    await rejectsWith(c.inspect(`${reg.host}/app:v1`), (e) => {
      assert.equal(e.reason, 'AddressNotAllowed');
      assert.match(e.message, /^localhost resolves to a loopback address/);
    });
    assert.equal(tokens.connections, 0);
    assert.deepEqual(new Set(reg.authorizations), new Set(['']));
  });

  test('a message names the registry and the status, never words of a body', async () => {
    let self = '';
    const reg = await serve(
      (path) => {
        if (path.startsWith('/token?')) return { body: Buffer.from(`<html>${MARK}</html>`) };
        if (path === '/v2/bearer/manifests/v1')
          return { status: 401, headers: { 'www-authenticate': `Bearer realm="https://${self}/token"` } };
        if (path === '/v2/junk/manifests/v1') return { body: Buffer.from(MARK) };
        return { status: 404, body: json({ errors: [{ code: 'MANIFEST_UNKNOWN', message: MARK }] }) };
      },
      await certificates(),
    );
    self = reg.host;
    const c = await trusting([reg.host]);
    const message = async (repo: string) => {
      const e = await c.inspect(`${reg.host}/${repo}:v1`).catch((e: unknown) => e as InspectionError);
      assert.ok(e instanceof InspectionError);
      assert.ok(!e.message.includes(MARK), e.message);
      return e.message;
    };
    assert.match(await message('gone'), new RegExp(`${reg.host} answered 404 for /v2/gone/manifests/v1`));
    assert.match(await message('junk'), /the manifest is not JSON$/);
    // Last: from its 401 on, the registry's challenge is answered up front.
    assert.match(
      await message('bearer'),
      new RegExp(`the token server ${reg.host} answered 200 without a token`),
    );
  });
});
