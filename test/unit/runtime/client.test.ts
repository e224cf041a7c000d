// The REST client's credentials against a local HTTPS server: what an apiserver is not needed for.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { mock, test } from 'node:test';
import { Resources } from '../../../src/runtime/api/meta.ts';
import { KubeClient } from '../../../src/runtime/client/client.ts';
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
