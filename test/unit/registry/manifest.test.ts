import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { describe, test } from 'node:test';
import {
  ManifestError,
  MediaType,
  digestOf,
  manifestAccept,
  mergePlatforms,
  normalisePlatform,
  parseConfig,
  parseManifest,
} from '../../../src/registry/manifest.ts';
import { withSeed } from '../../helpers/prng.ts';

const buf = (v: unknown) => Buffer.from(JSON.stringify(v));
const dg = (n: number) => 'sha256:' + n.toString(16).padStart(64, '0');
const entry = (
  n: number,
  platform?: object,
  mediaType: string = MediaType.ociManifest,
  annotations?: object,
) => ({
  mediaType,
  digest: dg(n),
  size: 500,
  ...(platform ? { platform } : {}),
  ...(annotations ? { annotations } : {}),
});

/** An index or list of the given entries, parsed. */
const index = (mediaType: string, manifests: object[]) =>
  parseManifest(buf({ schemaVersion: 2, mediaType, manifests }));

describe('parseManifest', () => {
  test('an OCI index names its platforms, variants kept, attestations dropped', () => {
    const p = index(MediaType.ociIndex, [
      entry(1, { os: 'linux', architecture: 'amd64' }),
      entry(2, { os: 'linux', architecture: 'arm', variant: 'v6' }),
      entry(3, { os: 'linux', architecture: 'arm', variant: 'v7' }),
      entry(4, { os: 'linux', architecture: 'arm64', variant: 'v8' }),
      entry(5, { os: 'unknown', architecture: 'unknown' }),
      entry(6, { os: 'linux', architecture: 'amd64' }, MediaType.ociManifest, {
        'vnd.docker.reference.type': 'attestation-manifest',
        'vnd.docker.reference.digest': dg(1),
      }),
    ]);
    assert.deepEqual(p, {
      kind: 'index',
      platforms: [
        { os: 'linux', architecture: 'amd64' },
        { os: 'linux', architecture: 'arm', variant: 'v6' },
        { os: 'linux', architecture: 'arm', variant: 'v7' },
        { os: 'linux', architecture: 'arm64', variant: 'v8' },
      ],
      follow: [],
    });
  });

  test('a Docker manifest list reads like an index', () => {
    const p = index(MediaType.dockerList, [
      entry(1, { os: 'linux', architecture: 'ppc64le' }, MediaType.dockerManifest),
      entry(2, { os: 'linux', architecture: 's390x' }, MediaType.dockerManifest),
    ]);
    assert.deepEqual(p, {
      kind: 'index',
      platforms: [
        { os: 'linux', architecture: 'ppc64le' },
        { os: 'linux', architecture: 's390x' },
      ],
      follow: [],
    });
  });

  test('nested indexes and entries without a platform are to be followed; artifacts beside images are skipped', () => {
    const p = parseManifest(
      buf({
        schemaVersion: 2,
        manifests: [
          entry(1, { os: 'linux', architecture: 'amd64' }),
          entry(2, undefined, MediaType.ociIndex),
          entry(3),
          entry(4, undefined, 'application/vnd.dev.sigstore.bundle.v0.3+json'),
        ],
      }),
      'application/vnd.oci.image.index.v1+json; charset=utf-8',
    );
    assert.equal(p.kind, 'index');
    assert.deepEqual(p.kind === 'index' && p.follow.map((d) => d.digest), [dg(2), dg(3)]);
    assert.deepEqual(p.kind === 'index' && p.platforms, [{ os: 'linux', architecture: 'amd64' }]);
  });

  test('OCI 1.1 artifacts in the image manifest type are skipped by their artifactType, platform or none', () => {
    const artifact = (n: number, platform?: object) => ({
      ...entry(n, platform),
      artifactType: 'application/vnd.example.sbom.v1+json',
    });
    const p = index(MediaType.ociIndex, [
      entry(1, { os: 'linux', architecture: 'arm64' }),
      artifact(2),
      artifact(3, { os: 'linux', architecture: 's390x' }),
      artifact(4, { os: '' }),
      // go-containerregistry's index entries name the image config type: images.
      { ...entry(5, { os: 'linux', architecture: 'amd64' }), artifactType: MediaType.ociConfig },
    ]);
    assert.deepEqual(p, {
      kind: 'index',
      platforms: [
        { os: 'linux', architecture: 'amd64' },
        { os: 'linux', architecture: 'arm64' },
      ],
      follow: [],
    });
  });

  test('single manifests (OCI and Docker) need their config blob', () => {
    for (const [mt, ct] of [
      [MediaType.ociManifest, MediaType.ociConfig],
      [MediaType.dockerManifest, MediaType.dockerConfig],
    ] as const) {
      const p = parseManifest(
        buf({
          schemaVersion: 2,
          mediaType: mt,
          config: { mediaType: ct, digest: dg(9), size: 7 },
          layers: [],
        }),
      );
      assert.deepEqual(p, { kind: 'manifest', config: { mediaType: ct, digest: dg(9), size: 7 } });
    }
    // No mediaType in the body: the Content-Type says, or the shape does.
    const bare = buf({
      schemaVersion: 2,
      config: { mediaType: MediaType.ociConfig, digest: dg(9), size: 7 },
      layers: [],
    });
    assert.equal(parseManifest(bare, MediaType.dockerManifest).kind, 'manifest');
    assert.equal(parseManifest(bare, 'application/json').kind, 'manifest');
  });

  const failures: Array<[string, Buffer, 'malformed' | 'notAnImage', RegExp]> = [
    ['not JSON', Buffer.from('<html>'), 'malformed', /not JSON/],
    ['not an object', buf([1, 2]), 'malformed', /not a JSON object/],
    ['an index without manifests', buf({ mediaType: MediaType.ociIndex }), 'malformed', /has no manifests/],
    [
      'an entry without a digest',
      buf({ mediaType: MediaType.ociIndex, manifests: [{ mediaType: MediaType.ociManifest }] }),
      'malformed',
      /lacks a digest/,
    ],
    [
      'an entry whose platform has no architecture',
      buf({ mediaType: MediaType.ociIndex, manifests: [entry(1, { os: 'linux' })] }),
      'malformed',
      /no os and architecture/,
    ],
    [
      'an artifact manifest',
      buf({
        mediaType: MediaType.ociManifest,
        config: { mediaType: 'application/vnd.cncf.helm.config.v1+json', digest: dg(1) },
      }),
      'notAnImage',
      // The body's own words (its media type) are not repeated.
      /^an artifact, not an image: its config is not an image config$/,
    ],
    ['schema 1', buf({ schemaVersion: 1, name: 'a', architecture: 'amd64' }), 'malformed', /schema 1/],
    [
      'an unknown type',
      buf({ mediaType: 'application/vnd.example+json' }),
      'notAnImage',
      /^not a manifest type Berth reads/,
    ],
    [
      'an entry whose digest is a path',
      buf({
        mediaType: MediaType.ociIndex,
        manifests: [{ mediaType: MediaType.ociManifest, digest: 'sha256:../../x' }],
      }),
      'malformed',
      /names no sha256 or sha512 digest/,
    ],
    [
      'a body that is not JSON',
      Buffer.from('<html>secret</html>'),
      'malformed',
      /^the manifest is not JSON$/,
    ],
    [
      'a platform that is free text',
      buf({
        mediaType: MediaType.ociIndex,
        manifests: [
          {
            mediaType: MediaType.ociManifest,
            digest: dg(1),
            platform: { os: 'linux', architecture: 'visit evil.example' },
          },
        ],
      }),
      'malformed',
      /not a Go name$/,
    ],
  ];
  for (const [what, body, kind, message] of failures) {
    test(`${what} is ${kind}`, () => {
      assert.throws(
        () => parseManifest(body),
        (e: unknown) => e instanceof ManifestError && e.kind === kind && message.test(e.message),
      );
    });
  }
});

test('a config blob names its platform, normalised', () => {
  assert.deepEqual(parseConfig(buf({ architecture: 'aarch64', os: 'linux', variant: '8', rootfs: {} })), {
    os: 'linux',
    architecture: 'arm64',
    variant: 'v8',
  });
  assert.deepEqual(parseConfig(buf({ architecture: 'amd64', os: 'linux', variant: '' })), {
    os: 'linux',
    architecture: 'amd64',
  });
  assert.throws(() => parseConfig(buf({ os: 'linux' })), ManifestError);
});

test('platform names are normalised as containerd spells them', () => {
  const table: Array<[string, string, string | undefined, string, string | undefined]> = [
    ['x86_64', 'Linux', undefined, 'amd64', undefined],
    ['x86-64', 'linux', undefined, 'amd64', undefined],
    ['aarch64', 'linux', undefined, 'arm64', undefined],
    ['armhf', 'linux', undefined, 'arm', 'v7'],
    ['armel', 'linux', undefined, 'arm', 'v6'],
    ['arm', 'linux', '6', 'arm', 'v6'],
    ['arm', 'linux', 'v5', 'arm', 'v5'],
    ['i386', 'linux', undefined, '386', undefined],
    ['AMD64', 'windows', undefined, 'amd64', undefined],
    ['riscv64', 'linux', undefined, 'riscv64', undefined],
  ];
  for (const [arch, os, variant, wantArch, wantVariant] of table) {
    const got = normalisePlatform({ os, architecture: arch, ...(variant ? { variant } : {}) });
    assert.deepEqual(
      got,
      { os: os.toLowerCase(), architecture: wantArch, ...(wantVariant ? { variant: wantVariant } : {}) },
      arch,
    );
  }
  assert.equal(normalisePlatform({ os: 'macos', architecture: 'arm64' }).os, 'darwin');
});

test('mergePlatforms removes duplicates and sorts, whatever the order', () =>
  withSeed('merge', (r) => {
    const pool = [
      { os: 'linux', architecture: 'amd64' },
      { os: 'linux', architecture: 'arm', variant: 'v7' },
      { os: 'linux', architecture: 'arm', variant: 'v6' },
      { os: 'linux', architecture: 'arm64' },
      { os: 'windows', architecture: 'amd64' },
    ];
    for (let i = 0; i < 200; i++) {
      const list = Array.from({ length: r.int(12) }, () => ({ ...r.pick(pool) }));
      const merged = mergePlatforms(list);
      const keys = merged.map((p) => `${p.os}/${p.architecture}/${p.variant ?? ''}`);
      assert.deepEqual(keys, [...new Set(keys)].sort());
      assert.equal(
        merged.length,
        new Set(list.map((p) => `${p.os}/${p.architecture}/${p.variant ?? ''}`)).size,
      );
    }
  }));

test('digestOf hashes with the algorithm asked for', () => {
  const body = Buffer.from('{"a":1}');
  assert.equal(digestOf(body), 'sha256:' + createHash('sha256').update(body).digest('hex'));
  assert.equal(
    digestOf(body, 'sha512:' + 'a'.repeat(128)),
    'sha512:' + createHash('sha512').update(body).digest('hex'),
  );
});

test('the Accept header names all four manifest types', () => {
  const types = manifestAccept.split(',').map((t) => t.trim());
  assert.deepEqual(
    new Set(types),
    new Set([MediaType.ociIndex, MediaType.dockerList, MediaType.ociManifest, MediaType.dockerManifest]),
  );
});
