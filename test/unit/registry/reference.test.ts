import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { apiHost, normaliseDomain, parseReference, registryListed } from '../../../src/registry/reference.ts';
import { InspectionError } from '../../../src/registry/types.ts';
import { withSeed } from '../../helpers/prng.ts';

const d256 = 'sha256:' + 'a'.repeat(64);
const d512 = 'sha512:' + 'b'.repeat(128);

describe('parseReference', () => {
  // [image, domain, path, tag, digest, canonical]; the anchor's bugs are the short names, host:port
  // read as a tag, tag plus digest, and localhost.
  const table: Array<[string, string, string, string | undefined, string | undefined, string]> = [
    ['nginx', 'docker.io', 'library/nginx', 'latest', undefined, 'docker.io/library/nginx:latest'],
    ['nginx:1.27', 'docker.io', 'library/nginx', '1.27', undefined, 'docker.io/library/nginx:1.27'],
    ['bitnami/redis', 'docker.io', 'bitnami/redis', 'latest', undefined, 'docker.io/bitnami/redis:latest'],
    ['docker.io/nginx', 'docker.io', 'library/nginx', 'latest', undefined, 'docker.io/library/nginx:latest'],
    [
      'index.docker.io/nginx',
      'docker.io',
      'library/nginx',
      'latest',
      undefined,
      'docker.io/library/nginx:latest',
    ],
    ['quay.io/coreos/etcd:v3', 'quay.io', 'coreos/etcd', 'v3', undefined, 'quay.io/coreos/etcd:v3'],
    ['host:5000/a/b', 'host:5000', 'a/b', 'latest', undefined, 'host:5000/a/b:latest'],
    ['host:5000/a/b:v1', 'host:5000', 'a/b', 'v1', undefined, 'host:5000/a/b:v1'],
    ['localhost/app', 'localhost', 'app', 'latest', undefined, 'localhost/app:latest'],
    ['localhost:5000/app:dev', 'localhost:5000', 'app', 'dev', undefined, 'localhost:5000/app:dev'],
    ['[::1]:5000/app:v2', '[::1]:5000', 'app', 'v2', undefined, '[::1]:5000/app:v2'],
    ['127.0.0.1:5000/x/y/z', '127.0.0.1:5000', 'x/y/z', 'latest', undefined, '127.0.0.1:5000/x/y/z:latest'],
    ['Registry/app', 'Registry', 'app', 'latest', undefined, 'Registry/app:latest'],
    ['nginx@' + d256, 'docker.io', 'library/nginx', undefined, d256, `docker.io/library/nginx@${d256}`],
    ['nginx:1.27@' + d256, 'docker.io', 'library/nginx', '1.27', d256, `docker.io/library/nginx@${d256}`],
    ['host:5000/a/b:v1@' + d512, 'host:5000', 'a/b', 'v1', d512, `host:5000/a/b@${d512}`],
    [
      'a/b_c__d-e--f.g',
      'docker.io',
      'a/b_c__d-e--f.g',
      'latest',
      undefined,
      'docker.io/a/b_c__d-e--f.g:latest',
    ],
    ['host/a:V1.0_rc-1', 'docker.io', 'host/a', 'V1.0_rc-1', undefined, 'docker.io/host/a:V1.0_rc-1'],
  ];
  for (const [image, domain, path, tag, digest, canonical] of table) {
    test(image, () => {
      const r = parseReference(image);
      assert.deepEqual(r, {
        domain,
        path,
        ...(tag === undefined ? {} : { tag }),
        ...(digest === undefined ? {} : { digest }),
        canonical,
      });
      // Canonical is a fixed point: parsing it again names the same thing.
      assert.equal(parseReference(r.canonical).canonical, canonical);
    });
  }

  const invalid: Array<[string, RegExp]> = [
    ['', /empty/],
    ['Nginx', /lower-case/],
    ['quay.io/CoreOS/etcd', /lower-case/],
    ['a'.repeat(64).replace(/a/g, 'f'), /image ID/],
    ['nginx:', /not a valid tag/],
    ['nginx:-x', /not a valid tag/],
    ['nginx:' + 'x'.repeat(129), /not a valid tag/],
    ['nginx@sha256:abc', /not a digest/],
    ['nginx@sha256:' + 'A'.repeat(64), /lower-case hex/],
    ['nginx@md5:' + 'a'.repeat(32), /not sha256 or sha512/],
    ['a//b', /not a valid repository/],
    ['a/b/', /not a valid repository/],
    ['-a/b', /not a valid repository/],
    ['host:port/a', /not a valid registry host/],
    ['ho_st.io/a', /not a valid registry host/],
    [' nginx', /not a valid repository/],
    ['x.io/' + 'a'.repeat(260), /longer than 255/],
  ];
  for (const [image, why] of invalid) {
    test(`rejects ${JSON.stringify(image.length > 40 ? image.slice(0, 40) + '…' : image)}`, () => {
      assert.throws(
        () => parseReference(image),
        (e: unknown) =>
          e instanceof InspectionError &&
          e.reason === 'InvalidReference' &&
          !e.transient &&
          e.image === image &&
          why.test(e.message),
      );
    });
  }

  test('generated references parse into their parts', () =>
    withSeed('references', (r) => {
      const word = () =>
        Array.from({ length: 1 + r.int(6) }, () => r.pick([...'abcdefghijklmnopqrstuvwxyz0123456789'])).join(
          '',
        );
      const component = () =>
        r.chance(0.3) ? `${word()}${r.pick(['.', '_', '__', '-', '--'])}${word()}` : word();
      for (let i = 0; i < 500; i++) {
        const host = r.pick([
          undefined,
          `${word()}.${r.pick(['io', 'com', 'example'])}`,
          `${word()}:${1 + r.int(65535)}`,
          'localhost',
          `[::${r.int(9)}]:${1 + r.int(65535)}`,
          `${1 + r.int(254)}.0.0.${1 + r.int(254)}:5000`,
        ]);
        const parts = Array.from({ length: 1 + r.int(3) }, component);
        // Without a host, a first component with a dot would itself be read as a host.
        if (!host) parts[0] = word();
        const tag = r.chance(0.6) ? r.pick(['latest', 'v1.2.3', 'RC_1', '2024-01']) : undefined;
        const digest = r.chance(0.4)
          ? `sha256:${word()
              .padEnd(64, '0')
              .slice(0, 64)
              .replace(/[^a-f0-9]/g, 'e')}`
          : undefined;
        const image = `${host ? host + '/' : ''}${parts.join('/')}${tag ? ':' + tag : ''}${digest ? '@' + digest : ''}`;
        const ref = parseReference(image);
        const hub = !host;
        assert.equal(ref.domain, host ?? 'docker.io', image);
        assert.equal(ref.path, hub && parts.length === 1 ? `library/${parts[0]}` : parts.join('/'), image);
        assert.equal(ref.digest, digest, image);
        assert.equal(ref.tag, tag ?? (digest ? undefined : 'latest'), image);
        const name = `${ref.domain}/${ref.path}`;
        assert.equal(ref.canonical, digest ? `${name}@${digest}` : `${name}:${ref.tag}`, image);
        assert.equal(parseReference(ref.canonical).canonical, ref.canonical, image);
      }
    }));
});

test('Docker Hub is served by registry-1.docker.io, other registries by their own host', () => {
  assert.equal(apiHost('docker.io'), 'registry-1.docker.io');
  assert.equal(apiHost('quay.io'), 'quay.io');
  assert.equal(apiHost('[::1]:5000'), '[::1]:5000');
  assert.equal(normaliseDomain('index.docker.io'), 'docker.io');
  assert.equal(normaliseDomain('registry-1.docker.io'), 'docker.io');
  assert.equal(normaliseDomain('ghcr.io'), 'ghcr.io');
});

describe('registryListed', () => {
  test('a domain as images name it, Docker Hub by any of its names; ports as written', () => {
    assert.equal(registryListed(['docker.io'], 'docker.io'), true);
    assert.equal(registryListed(['index.docker.io'], 'docker.io'), true);
    assert.equal(registryListed(['GHCR.io'], 'ghcr.io'), true);
    assert.equal(registryListed(['reg.internal:5000'], 'reg.internal:5000'), true);
    assert.equal(registryListed(['reg.internal:5000'], 'reg.internal'), false);
    assert.equal(registryListed(['reg.internal'], 'reg.internal:5000'), false);
    assert.equal(registryListed(['[::1]:5000'], '[::1]:5000'), true);
    assert.equal(registryListed([], 'ghcr.io'), false);
  });

  test('*. lists every host below the domain, at any depth, and not the domain itself', () => {
    assert.equal(registryListed(['*.corp.example'], 'r.corp.example'), true);
    assert.equal(registryListed(['*.corp.example'], 'a.b.corp.example'), true);
    assert.equal(registryListed(['*.corp.example'], 'corp.example'), false);
    assert.equal(registryListed(['*.corp.example'], 'evilcorp.example'), false);
    assert.equal(registryListed(['*.corp.example:5000'], 'r.corp.example:5000'), true);
    assert.equal(registryListed(['*.corp.example:5000'], 'r.corp.example'), false);
  });

  test('linear in what it is given: a long hostile list and domain answer at once', () => {
    const patterns = Array.from({ length: 64 }, (_, i) => `*.${'a.'.repeat(120)}x${i}`);
    const started = performance.now();
    for (let i = 0; i < 1000; i++) registryListed(patterns, `${'a.'.repeat(120)}y`);
    assert.ok(performance.now() - started < 1000);
  });
});
