// A local HTTPS server standing in for an apiserver (a hostile cell's, say), and a client of it.
import { once } from 'node:events';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import type { TestContext } from 'node:test';
import { KubeClient, type ClientOptions } from '../../src/runtime/client/client.ts';
import { createCertificateAuthority } from '../../src/runtime/webhook/certificates.ts';

/** A server on 127.0.0.1 (a free port) answering with `handle`; both go when the test ends. */
export async function localApiserver(
  t: TestContext,
  opts: ClientOptions,
  handle: (req: IncomingMessage, res: ServerResponse) => void,
): Promise<KubeClient> {
  const ca = await createCertificateAuthority('local-apiserver');
  const serving = await ca.issue({ commonName: '127.0.0.1', ipAddresses: ['127.0.0.1'], usage: 'server' });
  const server = createServer({ cert: serving.certPem, key: serving.keyPem }, handle);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const client = new KubeClient(
    {
      server: `https://127.0.0.1:${(server.address() as AddressInfo).port}`,
      resolve: () => Promise.resolve({ tls: { ca: Buffer.from(ca.certPem) }, headers: {} }),
    },
    opts,
  );
  t.after(() => {
    client.close();
    server.closeAllConnections();
    server.close();
  });
  return client;
}
