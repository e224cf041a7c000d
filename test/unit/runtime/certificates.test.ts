import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { registerHooks } from 'node:module';
import { test } from 'node:test';
import { runCertificateJobApart } from '../../../src/runtime/webhook/certificates.ts';

// Every module this process loads from now on: the job apart must leave @peculiar/x509 out of it.
const loaded: string[] = [];
registerHooks({
  resolve(specifier, context, next) {
    const resolved = next(specifier, context);
    loaded.push(resolved.url);
    return resolved;
  },
});

const serving = { commonName: 'berth', dnsNames: ['berth.ns.svc'], ipAddresses: ['127.0.0.1'] };

test('a CA and a serving certificate it signed, made in a child process, none of its libraries here', async () => {
  const { ca, issued } = await runCertificateJobApart({
    newCa: { commonName: 'test-ca', validDays: 10 },
    issue: { ...serving, usage: 'server', validDays: 2 },
  });
  const caCert = new X509Certificate(ca.certPem);
  const cert = new X509Certificate(issued!.certPem);
  assert.ok(caCert.ca);
  assert.ok(cert.checkIssued(caCert) && cert.verify(caCert.publicKey));
  assert.equal(cert.checkHost('berth.ns.svc'), 'berth.ns.svc');
  assert.equal(cert.checkIP('127.0.0.1'), '127.0.0.1');
  assert.ok(Date.parse(cert.validTo) - Date.now() < 3 * 24 * 3600_000);
  assert.ok(Date.parse(caCert.validTo) - Date.now() > 9 * 24 * 3600_000);

  // The same CA again (a renewal): it signs the next one.
  const again = await runCertificateJobApart({ ca, issue: { ...serving, usage: 'server' } });
  assert.equal(again.ca.certPem, ca.certPem);
  assert.ok(new X509Certificate(again.issued!.certPem).verify(caCert.publicKey));
  assert.deepEqual(
    loaded.filter((url) => url.includes('@peculiar') || url.includes('reflect-metadata')),
    [],
  );
});

test('a job that fails says why', async () => {
  await assert.rejects(
    runCertificateJobApart({ ca: { certPem: 'not a certificate', keyPem: 'nor a key' } }),
    /the certificate issuer exited with 1: .+/,
  );
});
