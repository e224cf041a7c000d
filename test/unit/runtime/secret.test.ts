// The shared webhook certificate's action: when the Secret is kept, created, renewed, staged or pruned.
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { test } from 'node:test';
import {
  createCertificateAuthority,
  type CertificateAuthority,
} from '../../../src/runtime/webhook/certificates.ts';
import { defaultLifetimes, secretAction, type SecretState } from '../../../src/runtime/webhook/secret.ts';

const day = 24 * 60 * 60 * 1000;
const names = { dnsNames: ['berth-webhook.berth-system.svc'], ipAddresses: ['127.0.0.1'] };
const l = defaultLifetimes;

async function state(
  ca: CertificateAuthority,
  o: { servingDays?: number; dnsNames?: string[] } = {},
): Promise<SecretState> {
  const serving = await ca.issue({
    commonName: 'berth',
    dnsNames: o.dnsNames ?? names.dnsNames,
    ipAddresses: names.ipAddresses,
    usage: 'server',
    validDays: o.servingDays ?? 365,
  });
  return {
    cas: [new X509Certificate(ca.certPem)],
    caKey: ca.keyPem,
    serving: new X509Certificate(serving.certPem),
    servingKey: serving.keyPem,
  };
}

test('nothing usable: create', async () => {
  assert.equal(secretAction(undefined, names, Date.now(), l).action, 'create');
  const s = await state(await createCertificateAuthority('ca'));
  assert.equal(secretAction({ ...s, cas: [] }, names, Date.now(), l).action, 'create');
  assert.equal(
    secretAction({ cas: s.cas }, names, Date.now(), l).action,
    'create',
    'no CA key: cannot renew',
  );
});

test('a fresh CA and certificate naming this server: keep', async () => {
  const s = await state(await createCertificateAuthority('ca'));
  assert.deepEqual(secretAction(s, names, Date.now(), l), { action: 'keep' });
});

test('a certificate that does not name this server, or is missing, is renewed', async () => {
  const s = await state(await createCertificateAuthority('ca'), { dnsNames: ['elsewhere.svc'] });
  assert.equal(secretAction(s, names, Date.now(), l).action, 'renew');
  const { serving: _serving, ...noServing } = s;
  assert.equal(secretAction(noServing, names, Date.now(), l).action, 'renew');
});

test('a certificate is renewed once a third of its lifetime is left, not before', async () => {
  const s = await state(await createCertificateAuthority('ca'), { servingDays: 30 });
  assert.equal(secretAction(s, names, Date.now() + 19 * day, l).action, 'keep');
  assert.equal(secretAction(s, names, Date.now() + 21 * day, l).action, 'renew');
  assert.equal(secretAction(s, names, Date.now() + 31 * day, l).action, 'renew', 'expired');
});

test('a CA due for renewal is staged first; the certificate moves to it only after the overlap', async () => {
  const old = await createCertificateAuthority('old', 30);
  const s = await state(old, { servingDays: 365 });
  const now = Date.now() + 21 * day;
  assert.equal(secretAction(s, names, now, l).action, 'stage');
  const next = await createCertificateAuthority('new');
  const staged: SecretState = {
    ...s,
    cas: [new X509Certificate(next.certPem), ...s.cas],
    caKey: next.keyPem,
    stagedAt: now,
  };
  assert.equal(
    secretAction(staged, names, now + l.overlapMs - 1000, l).action,
    'keep',
    'still in the overlap',
  );
  assert.equal(secretAction(staged, names, now + l.overlapMs, l).action, 'renew');
  // Once renewed from the new CA, the old one stays in the bundle until it expires, then is pruned.
  const moved = { ...(await state(next)), cas: staged.cas };
  assert.equal(secretAction(moved, names, now + l.overlapMs, l).action, 'keep');
  assert.equal(secretAction(moved, names, Date.now() + 31 * day, l).action, 'prune');
});

test('an expired signing CA means starting over', async () => {
  const s = await state(await createCertificateAuthority('ca', 1), { servingDays: 365 });
  assert.equal(secretAction(s, names, Date.now() + 2 * day, l).action, 'create');
});

test('a CA due for renewal but no serving certificate: renew first (staging keeps the one there is)', async () => {
  const old = await createCertificateAuthority('old', 30);
  const { serving: _serving, ...noServing } = await state(old);
  assert.equal(secretAction(noServing, names, Date.now() + 21 * day, l).action, 'renew');
});
