import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { endpointsFor, loadRegistriesConfig, parseRegistriesConfig } from '../../../src/registry/hosts.ts';
import { parseReference } from '../../../src/registry/reference.ts';

const pem = '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n';

test('mirrors in order before the registry; digest-only mirrors only for digests', () => {
  const config = parseRegistriesConfig({
    registries: {
      'index.docker.io': {
        mirrors: [
          { url: 'https://m1.local:5000', ca: pem },
          { url: 'https://digests.local', digestsOnly: true },
          { url: 'http://plain.local:5000', insecure: true },
        ],
      },
    },
  });
  const urls = (image: string) =>
    endpointsFor(config, parseReference(image), 'DEFAULT').map((e) => [
      e.url.href,
      e.ca,
      e.insecure,
      e.mirror,
    ]);
  assert.deepEqual(urls('nginx:1'), [
    ['https://m1.local:5000/', pem, false, true],
    ['http://plain.local:5000/', 'DEFAULT', true, true],
    ['https://registry-1.docker.io/', 'DEFAULT', false, false],
  ]);
  assert.deepEqual(
    urls('nginx:1@sha256:' + 'a'.repeat(64)).map((u) => u[0]),
    [
      'https://m1.local:5000/',
      'https://digests.local/',
      'http://plain.local:5000/',
      'https://registry-1.docker.io/',
    ],
  );
});

test('a registry without configuration is asked over https at its own host', () => {
  assert.deepEqual(
    endpointsFor(undefined, parseReference('[::1]:5000/a')).map((e) => [e.url.href, e.ca, e.insecure]),
    [['https://[::1]:5000/', undefined, false]],
  );
  const config = parseRegistriesConfig({
    registries: { 'lab:5000': { server: 'http://lab:5000', insecure: true } },
  });
  assert.deepEqual(
    endpointsFor(config, parseReference('lab:5000/a')).map((e) => [e.url.href, e.insecure]),
    [['http://lab:5000/', true]],
  );
});

test('insecure only by explicit opt-in; URLs are origins only; unknown fields refused', () => {
  const bad: Array<[unknown, RegExp]> = [
    [{ registries: { r: { server: 'http://r' } } }, /plain http: it needs insecure: true/],
    [{ registries: { r: { mirrors: [{ url: 'http://m' }] } } }, /plain http: it needs insecure: true/],
    [{ registries: { r: { mirrors: [{ url: 'ftp://m' }] } } }, /not http\(s\)/],
    [{ registries: { r: { mirrors: [{ url: 'nope' }] } } }, /not a URL/],
    [{ registries: { r: { mirrors: [{ url: 'https://m/v2/x' }] } } }, /a scheme, a host and a port only/],
    [{ registries: { r: { mirrors: [{ url: 'https://m', insecure: 'yes' }] } } }, /insecure/],
    [{ registries: { r: { mirror: [] } } }, /mirror/],
    [{ registries: { 'docker.io': {}, 'index.docker.io': {} } }, /both name docker.io/],
    [{ registries: { r: { ca: 'missing-ca.pem' } } }, /r\.ca: ENOENT/],
  ];
  for (const [doc, why] of bad)
    assert.throws(() => parseRegistriesConfig(doc, tmpdir()), why, JSON.stringify(doc));
  assert.deepEqual(parseRegistriesConfig(undefined), { registries: {} });
});

test('a file: YAML, CA paths relative to it', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'berth-hosts-'));
  writeFileSync(path.join(dir, 'ca.pem'), pem);
  writeFileSync(
    path.join(dir, 'registries.yaml'),
    'registries:\n  reg.local:5000:\n    ca: ca.pem\n    mirrors:\n      - url: https://m.local\n        ca: ./ca.pem\n',
  );
  const config = loadRegistriesConfig(path.join(dir, 'registries.yaml'));
  assert.equal(config.registries['reg.local:5000']?.ca, pem);
  assert.equal(config.registries['reg.local:5000']?.mirrors[0]?.ca, pem);
});
