// The REST client's credentials against a local HTTPS server: what an apiserver is not needed for.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { mock, test } from 'node:test';
import { Resources } from '../../../src/runtime/api/meta.ts';
import {
  ApiError,
  isRefused,
  KubeClient,
  resourceOfPath,
  resourcePath,
} from '../../../src/runtime/client/client.ts';
import { createCertificateAuthority } from '../../../src/runtime/webhook/certificates.ts';

test('a credential refresh that fails once keeps the last good credentials and is tried again', async (t) => {
  const ca = await createCertificateAuthority('client-test');
  const serving = await ca.issue({ commonName: '127.0.0.1', ipAddresses: ['127.0.0.1'], usage: 'server' });
  const seen: string[] = [];
  const server = createServer({ cert: serving.certPem, key: serving.keyPem }, (req, res) => {
    seen.push(req.headers.authorization ?? '');
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'default' } }));
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.after(() => server.close());
  // The second read of the credentials fails (an exec plugin's hiccup); the others give a new token.
  let reads = 0;
  const client = new KubeClient({
    server: `https://127.0.0.1:${(server.address() as AddressInfo).port}`,
    resolve: () => {
      reads++;
      return reads === 2
        ? Promise.reject(new Error('exec plugin failed'))
        : Promise.resolve({
            tls: { ca: Buffer.from(ca.certPem) },
            headers: { authorization: `Bearer t${reads}` },
          });
    },
  });
  t.after(() => client.close());
  mock.timers.enable({ apis: ['Date'], now: Date.now() });
  t.after(() => mock.timers.reset());
  const get = () => client.get(Resources.namespaces, 'default');

  await get();
  mock.timers.tick(61_000);
  await get(); // the refresh fails: the last token serves
  await get(); // not read again at once
  mock.timers.tick(6_000);
  await get(); // read again a few seconds on
  assert.deepEqual(seen, ['Bearer t1', 'Bearer t1', 'Bearer t1', 'Bearer t3']);
  assert.equal(reads, 3);
});

test('a first read of the credentials that fails is the answer: not read twice, read again seconds on', async (t) => {
  let reads = 0;
  const client = new KubeClient({
    server: 'https://127.0.0.1:1',
    resolve: () => Promise.reject(new Error(`exec plugin failed (read ${++reads})`)),
  });
  t.after(() => client.close());
  mock.timers.enable({ apis: ['Date'], now: Date.now() });
  t.after(() => mock.timers.reset());
  const get = () => client.get(Resources.namespaces, 'default');
  await assert.rejects(get(), /read 1\)/);
  await assert.rejects(get(), /read 1\)/);
  mock.timers.tick(6_000);
  await assert.rejects(get(), /read 2\)/);
  assert.equal(reads, 2);
});

test('a write the agent held while every socket was busy is refused when it gets one after the lease is lost', async (t) => {
  const ca = await createCertificateAuthority('client-test');
  const serving = await ca.issue({ commonName: '127.0.0.1', ipAddresses: ['127.0.0.1'], usage: 'server' });
  const seen: string[] = [];
  let release: () => void = () => {};
  const held = new Promise<void>((resolve) => (release = resolve));
  const server = createServer({ cert: serving.certPem, key: serving.keyPem }, (req, res) => {
    seen.push(`${req.method} ${req.url}`);
    const answer = () => {
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'default' } }));
    };
    // The first request holds the only socket until the test lets it go.
    if (seen.length === 1) void held.then(answer);
    else answer();
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.after(() => server.close());
  let leader = true;
  const client = new KubeClient(
    {
      server: `https://127.0.0.1:${(server.address() as AddressInfo).port}`,
      resolve: () => Promise.resolve({ tls: { ca: Buffer.from(ca.certPem) }, headers: {} }),
    },
    { maxInFlight: 1, writeGuard: () => leader },
  );
  t.after(() => client.close());
  const body = { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'default', labels: { a: 'b' } } };
  const first = client.get(Resources.namespaces, 'default');
  await waitUntil(() => seen.length === 1);
  // Passes the guard now, then waits in the agent's queue for the busy socket.
  const write = client.patch(Resources.namespaces, 'default', body, { type: 'merge' });
  await new Promise((r) => setTimeout(r, 100));
  leader = false;
  release();
  await first;
  await assert.rejects(write, { name: 'NotLeaderError' });
  assert.deepEqual(seen, ['GET /api/v1/namespaces/default'], 'the write never reached the server');
});

async function waitUntil(cond: () => boolean): Promise<void> {
  while (!cond()) await new Promise((r) => setTimeout(r, 10));
}

test("a refusal is the apiserver's answer to the write's content or writer, not a namespace's teardown", () => {
  const forbidden = (causes: { reason: string }[]) =>
    new ApiError(403, 'Forbidden', 'forbidden', { details: { causes } });
  assert.equal(isRefused(new ApiError(422, 'Invalid', 'invalid', {})), true);
  assert.equal(isRefused(forbidden([])), true, 'Pod Security, RBAC, a webhook');
  assert.equal(isRefused(forbidden([{ reason: 'NamespaceTerminating' }])), false);
  assert.equal(isRefused(new ApiError(409, 'Conflict', 'conflict', {})), false);
  assert.equal(isRefused(new Error('socket hang up')), false);
});

test('a write is counted by the resource its path names, with its subresource', () => {
  const pods = Resources.pods;
  assert.equal(resourceOfPath(resourcePath(pods, 'ns', 'p')), 'pods');
  assert.equal(resourceOfPath(`${resourcePath(pods, 'ns')}?fieldManager=x`), 'pods');
  assert.equal(
    resourceOfPath('/apis/berth.dev/v1alpha1/namespaces/ns/instances/i/status'),
    'instances/status',
  );
  assert.equal(resourceOfPath('/api/v1/namespaces/ns'), 'namespaces');
  assert.equal(resourceOfPath('/api/v1/nodes/n/status'), 'nodes/status');
  assert.equal(resourceOfPath('/metrics'), 'other');
});
