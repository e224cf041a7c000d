import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { buildCli } from '../../scripts/cli-binary.ts';
import {
  debPackage,
  krewManifest,
  npmPackages,
  releaseRefusals,
  spdx,
  type ReleaseState,
} from '../../scripts/release.ts';

const ready: ReleaseState = {
  version: '1.2.3',
  packageVersion: '1.2.3',
  chart: { version: '1.2.3', appVersion: '1.2.3' },
  status: '',
  tags: ['v1.2.3'],
};

describe('releaseRefusals', () => {
  test('a clean tree tagged vX.Y.Z whose package and chart say X.Y.Z may be released', () => {
    assert.deepEqual(releaseRefusals(ready), []);
  });

  test('each mismatch is refused with what to fix', () => {
    const cases: [Partial<ReleaseState>, RegExp][] = [
      [{ version: '1.2' }, /not X\.Y\.Z/],
      [{ packageVersion: '1.2.2' }, /package\.json says 1\.2\.2/],
      [{ chart: { version: '1.2.2', appVersion: '1.2.3' } }, /Chart\.yaml's version is 1\.2\.2/],
      [{ chart: { version: '1.2.3', appVersion: '1.2.2' } }, /appVersion is 1\.2\.2/],
      [{ status: ' M package.json\n' }, /not committed:\n M package\.json/],
      [{ tags: ['v1.2.2'] }, /not tagged v1\.2\.3/],
    ];
    for (const [change, why] of cases) {
      const r = releaseRefusals({ ...ready, ...change });
      assert.equal(r.length >= 1, true, JSON.stringify(change));
      assert.match(r.join('\n'), why);
    }
  });
});

describe('SBOM', () => {
  test("npmPackages: the lock's production packages, once each, nested ones by their own name", () => {
    const lock = {
      packages: {
        '': { version: '0.1.0' },
        'node_modules/yaml': { version: '2.9.1' },
        'node_modules/eslint': { version: '10.0.0', dev: true },
        'node_modules/@peculiar/x509': { version: '2.2.0' },
        'node_modules/a/node_modules/yaml': { version: '1.10.2' },
        'node_modules/b/node_modules/yaml': { version: '1.10.2' },
      },
    };
    assert.deepEqual(
      npmPackages(lock).map((p) => p.purl),
      ['pkg:npm/%40peculiar/x509@2.2.0', 'pkg:npm/yaml@1.10.2', 'pkg:npm/yaml@2.9.1'],
    );
  });

  test("debPackage: name, version (an epoch's colon decoded) and architecture from the file's name", () => {
    assert.deepEqual(debPackage('/x/libc6_2.36-9+deb12u14_arm64.deb'), {
      name: 'libc6',
      version: '2.36-9+deb12u14',
      purl: 'pkg:deb/debian/libc6@2.36-9%2Bdeb12u14?arch=arm64',
    });
    assert.equal(debPackage('foo_1%3a2.0-1_amd64.deb').version, '1:2.0-1');
  });

  test('spdx: the subject described, containing each package with its purl', () => {
    const subject = { name: 'berth', version: '1.2.3', purl: 'pkg:npm/berth@1.2.3' };
    const doc = spdx(
      subject,
      [{ name: 'yaml', version: '2.9.1', purl: 'pkg:npm/yaml@2.9.1' }],
      new Date(0),
    ) as {
      spdxVersion: string;
      packages: { SPDXID: string; externalRefs: { referenceLocator: string }[] }[];
      relationships: { spdxElementId: string; relationshipType: string; relatedSpdxElement: string }[];
      creationInfo: { created: string };
    };
    assert.equal(doc.spdxVersion, 'SPDX-2.3');
    assert.equal(doc.creationInfo.created, '1970-01-01T00:00:00Z');
    assert.deepEqual(
      doc.packages.map((p) => p.externalRefs[0]!.referenceLocator),
      ['pkg:npm/berth@1.2.3', 'pkg:npm/yaml@2.9.1'],
    );
    assert.deepEqual(
      doc.relationships.map((r) => [r.spdxElementId, r.relationshipType, r.relatedSpdxElement]),
      [
        ['SPDXRef-DOCUMENT', 'DESCRIBES', doc.packages[0]!.SPDXID],
        [doc.packages[0]!.SPDXID, 'CONTAINS', doc.packages[1]!.SPDXID],
      ],
    );
  });
});

test("krewManifest: one platform per archive, with its checksum and krew's selector", () => {
  const m = JSON.parse(krewManifest('1.2.3', 'https://example.org/v1.2.3', { amd64: 'a'.repeat(64) })) as {
    spec: { version: string; platforms: { selector: unknown; uri: string; sha256: string; bin: string }[] };
  };
  assert.equal(m.spec.version, 'v1.2.3');
  assert.deepEqual(m.spec.platforms, [
    {
      selector: { matchLabels: { os: 'linux', arch: 'amd64' } },
      uri: 'https://example.org/v1.2.3/berth-linux-amd64.tar.gz',
      sha256: 'a'.repeat(64),
      bin: 'berth',
    },
  ]);
});

test('a release stops before any work when a platform cannot get its code cache (no qemu-user here)', async () => {
  const other = process.arch === 'arm64' ? 'linux/amd64' : 'linux/arm64';
  const path = process.env['PATH'];
  const empty = mkdtempSync(join(tmpdir(), 'berth-nopath-'));
  const logged: string[] = [];
  process.env['PATH'] = empty;
  try {
    await assert.rejects(
      buildCli(join(empty, 'out'), [other], { log: (s) => logged.push(s), requireCodeCache: true }),
      /no qemu-(aarch64|x86_64)-static here: .*install it \(apt-get install qemu-user-static\) to make a release/,
    );
  } finally {
    process.env['PATH'] = path;
  }
  assert.deepEqual(logged, [], 'nothing bundled or fetched first');
});
