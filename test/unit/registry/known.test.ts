import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ANONYMOUS, cachedFrom, withReader, type KnownImages } from '../../../src/registry/known.ts';

const digest = `sha256:${'a'.repeat(64)}`;
const other = `sha256:${'b'.repeat(64)}`;
const platforms = [{ os: 'linux', architecture: 'arm64' }];
const known = (expiresAt: number, readAt = 500, readers = [ANONYMOUS]): KnownImages => ({
  tags: new Map([
    ['registry.example/app:v1', { digest, registry: 'registry.example', expiresAt, readAt, readers }],
  ]),
  digests: new Map([[digest, { platforms, registry: 'registry.example', readers }]]),
});

test('a snapshot answers as the client would without a request', () => {
  const now = () => 1000;
  const fresh = cachedFrom(known(2000), now);
  assert.deepEqual(fresh('registry.example/app:v1'), {
    image: 'registry.example/app:v1',
    reference: 'registry.example/app:v1',
    digest,
    platforms,
    registry: 'registry.example',
    cached: true,
  });
  // imagePullPolicy: Always revalidates the tag: only a request can answer, one answered since the
  // time given (a pod's admission) if one is.
  assert.equal(fresh('registry.example/app:v1', { revalidate: true }), undefined);
  assert.equal(fresh('registry.example/app:v1', { revalidate: true, revalidatedSince: 501 }), undefined);
  assert.equal(fresh('registry.example/app:v1', { revalidate: true, revalidatedSince: 500 })?.digest, digest);
  // Not revalidating, the time given changes nothing.
  assert.equal(fresh('registry.example/app:v1', { revalidatedSince: 900 })?.digest, digest);
  // A digest is known whatever its tag: revalidating changes nothing.
  assert.equal(fresh(`registry.example/app@${digest}`, { revalidate: true })?.digest, digest);
  assert.equal(fresh(`registry.example/app@${other}`), undefined);
  assert.equal(fresh('registry.example/app:v2'), undefined);
  assert.equal(fresh('Not A Reference'), undefined);
});

test('a tag past its expiry is not known, its digest still is', () => {
  const expired = cachedFrom(known(1000), () => 1000);
  assert.equal(expired('registry.example/app:v1'), undefined);
  assert.equal(expired(`registry.example/app:v1@${digest}`)?.digest, digest);
});

test('an entry read with a pull secret answers only callers holding that secret (issue 47)', () => {
  const read = cachedFrom(known(2000, 500, ['team-a/pull']), () => 1000);
  for (const image of ['registry.example/app:v1', `registry.example/app@${digest}`]) {
    assert.equal(read(image), undefined, `${image}: anonymous`);
    assert.equal(read(image, { secrets: ['team-b/pull'] }), undefined, `${image}: another secret`);
    assert.equal(read(image, { secrets: ['team-b/pull', 'team-a/pull'] })?.digest, digest, image);
  }
  // Read anonymously: anyone.
  assert.equal(
    cachedFrom(known(2000), () => 1000)('registry.example/app:v1', { secrets: ['x/y'] })?.digest,
    digest,
  );
});

test('withReader: anonymous makes an entry public; at most eight secrets, the oldest dropped', () => {
  assert.deepEqual(withReader(['a/s'], ANONYMOUS), [ANONYMOUS]);
  assert.deepEqual(withReader([ANONYMOUS], 'a/s'), [ANONYMOUS]);
  assert.deepEqual(withReader(['a/s', 'b/s'], 'a/s'), ['b/s', 'a/s']);
  let readers: string[] = [];
  for (let i = 0; i < 20; i++) readers = withReader(readers, `ns${i}/s`);
  assert.deepEqual(
    readers,
    Array.from({ length: 8 }, (_, i) => `ns${12 + i}/s`),
  );
});
