import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  SecretType,
  MAX_KEY_LENGTH,
  MAX_KEYRING_ENTRIES,
  buildKeyring,
  keyOf,
  lookup,
  pullSecretFromFile,
} from '../../../src/registry/keyring.ts';
import { globMatch } from '../../../src/registry/glob.ts';
import { parseReference } from '../../../src/registry/reference.ts';
import type { PullSecret } from '../../../src/registry/types.ts';
import { withSeed } from '../../helpers/prng.ts';

const b64 = (s: string) => Buffer.from(s).toString('base64');
const auth = (user: string) => ({ auth: b64(`${user}:pw-${user}`) });

/** A dockerconfigjson secret whose entries are keyed as given, each with a user named after its key. */
function jsonSecret(name: string, auths: Record<string, object>): PullSecret {
  return {
    name,
    type: SecretType.dockerConfigJson,
    data: { '.dockerconfigjson': b64(JSON.stringify({ auths })) },
  };
}

/** The users lookup returns for an image, in order. */
function users(secrets: PullSecret[], image: string): string[] {
  const ref = parseReference(image);
  return lookup(buildKeyring(secrets), ref.domain, ref.path).map((c) => c.username);
}

describe('keyring matching (the kubelet semantics)', () => {
  // [key, image, matches]
  const table: Array<[string, string, boolean]> = [
    ['quay.io', 'quay.io/coreos/etcd', true],
    ['https://quay.io', 'quay.io/coreos/etcd', true],
    ['https://quay.io/v2/', 'quay.io/coreos/etcd', true],
    ['http://quay.io/v1/coreos', 'quay.io/coreos/etcd', true],
    ['quay.io/coreos', 'quay.io/coreos/etcd', true],
    ['quay.io/coreos', 'quay.io/other/etcd', false],
    ['quay.io/core', 'quay.io/coreos/etcd', true], // a string prefix, as the kubelet's HasPrefix
    ['*.kubernetes.io', 'prefix.kubernetes.io/a', true],
    ['*.kubernetes.io', 'kubernetes.io/a', false],
    ['*.kubernetes.io', 'a.b.kubernetes.io/a', false], // `*` is one label
    ['prefix.*.io', 'prefix.kubernetes.io/a', true],
    ['prefix.kubernetes.*', 'prefix.kubernetes.io/a', true],
    ['*-good.kubernetes.io', 'prefix-good.kubernetes.io/a', true],
    ['*-good.kubernetes.io', 'prefix-bad.kubernetes.io/a', false],
    ['r?g.io', 'reg.io/a', false], // Go's url.Parse reads `?g.io` as a query: the key is `r`
    ['r?g.io', 'r/a', false], // and `r` alone is a Docker Hub path, not a host
    ['r[a-f]g.io', 'reg.io/a', true],
    ['r[^a-f]g.io', 'reg.io/a', false],
    ['r[.io', 'ra.io/a', false], // a bad pattern matches nothing
    ['registry.io:8080', 'registry.io:8080/a', true],
    ['registry.io:8080', 'registry.io/a', false],
    ['registry.io', 'registry.io:8080/a', false],
    ['*.io:5000', 'reg.io:5000/a', true],
    ['[r]eg.io', 'reg.io/a', true],
    ['[r]eg.io:5000', 'reg.io:5000/a', false], // see the generated test
    ['[::1]:5000', '[::1]:5000/a', true],
    ['docker.io', 'nginx', true],
    ['docker.io/library', 'nginx', true],
    ['docker.io/bitnami', 'nginx', false],
    ['https://index.docker.io/v1/', 'nginx', true], // the Docker Hub fallback
    ['https://index.docker.io/v1/', 'localhost/nginx', false], // the kubelet's quirk, not copied
    ['https://index.docker.io/v1/', 'quay.io/nginx', false],
    ['localhost', 'localhost/app', true],
  ];
  for (const [key, image, want] of table) {
    test(`${key} ${want ? 'matches' : 'does not match'} ${image}`, () => {
      assert.deepEqual(users([jsonSecret('ns/s', { [key]: auth('u') })], image), want ? ['u'] : []);
    });
  }

  test('every match is returned, more specific keys first (reverse lexical order)', () => {
    const s = jsonSecret('ns/s', {
      'quay.io': auth('host'),
      'quay.io/coreos': auth('coreos'),
      'quay.io/coreos/etcd': auth('etcd'),
      '*.io': auth('glob'),
    });
    assert.deepEqual(users([s], 'quay.io/coreos/etcd:v3'), ['etcd', 'coreos', 'host', 'glob']);
  });

  test('the Docker Hub fallback only when no key matched', () => {
    const s = jsonSecret('ns/s', {
      'https://index.docker.io/v1/': auth('hub'),
      'docker.io/library': auth('lib'),
    });
    assert.deepEqual(users([s], 'nginx'), ['lib']);
    assert.deepEqual(users([s], 'bitnami/redis'), ['hub']);
  });

  test('secrets are read in order; one key in two secrets gives both; identical credentials once', () => {
    const a = jsonSecret('ns/a', { 'reg.io': auth('a') });
    const b = jsonSecret('ns/b', { 'reg.io': auth('b'), 'https://reg.io/': auth('a') });
    assert.deepEqual(users([a, b], 'reg.io/x'), ['a', 'b']);
    assert.deepEqual(users([b, a], 'reg.io/x'), ['b', 'a']);
  });

  test('dockercfg and dockerconfigjson; auth wins over username and password; sources named', () => {
    const cfg: PullSecret = {
      name: 'ns/old',
      type: SecretType.dockercfg,
      data: { '.dockercfg': b64(JSON.stringify({ 'reg.io': { username: 'plain', password: 'pw' } })) },
    };
    const json = jsonSecret('ns/new', {
      'reg.io': { auth: b64('fromauth:x:y'), username: 'ignored', password: 'no' },
    });
    const ring = buildKeyring([cfg, json]);
    assert.deepEqual(ring.problems, []);
    assert.deepEqual(lookup(ring, 'reg.io', 'a'), [
      { username: 'plain', password: 'pw', source: 'ns/old (reg.io)', secret: 'ns/old' },
      { username: 'fromauth', password: 'x:y', source: 'ns/new (reg.io)', secret: 'ns/new' },
    ]);
  });

  test('an unreadable secret or entry is a problem; the others still work', () => {
    const good = jsonSecret('ns/good', { 'reg.io': auth('good') });
    const bad: PullSecret[] = [
      { name: 'ns/opaque', type: 'Opaque', data: {} },
      { name: 'ns/empty', type: SecretType.dockerConfigJson, data: {} },
      { name: 'ns/garbage', type: SecretType.dockerConfigJson, data: { '.dockerconfigjson': b64('{nope') } },
      {
        name: 'ns/noauths',
        type: SecretType.dockerConfigJson,
        data: { '.dockerconfigjson': b64('{"x":1}') },
      },
      jsonSecret('ns/badauth', { 'reg.io': { auth: b64('no-colon') } }),
    ];
    const ring = buildKeyring([...bad, good]);
    assert.equal(ring.problems.length, 5);
    for (const s of bad)
      assert.ok(
        ring.problems.some((p) => p.includes(s.name)),
        s.name,
      );
    assert.deepEqual(
      lookup(ring, 'reg.io', 'a').map((c) => c.username),
      ['good'],
    );
  });

  test('generated keys match exactly when the kubelet rules say so, in reverse lexical order', () =>
    withSeed('keyring', (r) => {
      const word = () => Array.from({ length: 1 + r.int(5) }, () => r.pick([...'abcdefgh'])).join('');
      for (let i = 0; i < 300; i++) {
        const labels = Array.from({ length: 2 + r.int(3) }, word);
        const port = r.chance(0.3) ? String(1000 + r.int(9000)) : '';
        const domain = labels.join('.') + (port ? `:${port}` : '');
        const path = Array.from({ length: 1 + r.int(3) }, word).join('/');
        const host = (ls: string[], p = port) => ls.join('.') + (p ? `:${p}` : '');
        const keys = new Map<string, boolean>();
        const replace = (ls: string[], at: number, v: string) => ls.map((l, j) => (j === at ? v : l));
        const at = r.int(labels.length);
        keys.set(host(labels), true);
        keys.set(
          `${host(labels)}/${path
            .split('/')
            .slice(0, 1 + r.int(path.split('/').length))
            .join('/')}`,
          true,
        );
        keys.set(host(replace(labels, at, '*')), true);
        // Go's SplitHostPort refuses a `[` outside an IPv6 literal, so the kubelet keeps the port in the
        // last label and the key no longer matches: a class glob works only without a port.
        keys.set(host(replace(labels, at, `[${labels[at]![0]}]${labels[at]!.slice(1)}`)), !port);
        keys.set(`https://${host(labels)}/v2/`, true);
        keys.set(host(['x', ...labels]), false);
        keys.set(host(labels.slice(1)), false);
        keys.set(host(labels, port ? '' : '443'), false);
        keys.set(`${host(labels)}/${path}/more`, false);
        keys.set(host(replace(labels, at, labels[at] + 'z')), false);
        const auths = Object.fromEntries([...keys.keys()].map((k, j) => [k, auth(`u${j}`)]));
        const want = [...keys.entries()]
          .map(([k, m], j) => ({ key: keyOf(k)!, m, user: `u${j}` }))
          .filter((e) => e.m)
          .sort((a, b) => (a.key === b.key ? 0 : a.key < b.key ? 1 : -1))
          .map((e) => e.user);
        const got = lookup(buildKeyring([jsonSecret('ns/s', auths)]), domain, path).map((c) => c.username);
        // Keys equal after normalisation keep their secret order: compare as sets per key, order across keys.
        assert.deepEqual(new Set(got), new Set(want), `${domain}/${path}: ${JSON.stringify([...keys])}`);
        assert.equal(got.length, want.length, `${domain}/${path}`);
        const keyOfUser = new Map<string, string>([...keys.keys()].map((k, j) => [`u${j}`, keyOf(k)!]));
        const order = got.map((u) => keyOfUser.get(u)!);
        assert.deepEqual(order, [...order].sort().reverse(), `${domain}/${path}: reverse lexical order`);
      }
    }));
});

test('keyOf strips the scheme and /v1/ or /v2/', () => {
  assert.equal(keyOf('https://index.docker.io/v1/'), 'index.docker.io');
  assert.equal(keyOf('http://reg.io/v2/team'), 'reg.io/team');
  assert.equal(keyOf('reg.io:5000/'), 'reg.io:5000');
  assert.equal(keyOf('reg.io/a/b'), 'reg.io/a/b');
  assert.equal(keyOf(''), undefined);
  assert.equal(keyOf('has space.io'), undefined);
  assert.equal(keyOf('https://reg.io/a?x=1#f'), 'reg.io/a');
});

test('globMatch follows filepath.Match', () => {
  const yes: Array<[string, string]> = [
    ['*', 'abc'],
    ['a*c', 'abbbc'],
    ['a*b*c', 'abxbyc'],
    ['*c', 'cc'],
    ['a?c', 'abc'],
    ['[abc]x', 'bx'],
    ['[a-c]x', 'cx'],
    ['[^a-c]x', 'dx'],
    ['[\\]]', ']'],
    ['[\\-]', '-'],
    ['\\*', '*'],
    ['a\\.b', 'a.b'],
    ['ä?', 'äö'], // runes, not bytes
    ['', ''],
  ];
  const no: Array<[string, string]> = [
    ['a?c', 'ac'],
    ['[a-c]x', 'dx'],
    ['\\*', 'a'],
    ['a.b', 'axb'],
    ['a*', 'a/b'], // `*` never crosses the separator
    ['a?b', 'a/b'],
    ['*c', 'cd'],
    ['[z-a]', 'm'], // a reversed range holds nothing (Go: no error)
    ['', 'a'],
  ];
  for (const [p, s] of yes) assert.ok(globMatch(p, s, { sep: '/' }), `${p} matches ${s}`);
  for (const [p, s] of no) assert.ok(!globMatch(p, s, { sep: '/' }), `${p} does not match ${s}`);
  // A bad pattern matches nothing, even where its good part would.
  for (const bad of ['[', '[]', '[-a]', '[a-]', 'a\\', 'x[', '*[a'])
    assert.equal(globMatch(bad, bad.replace(/[[\]\\-]/g, '') || 'a', { sep: '/' }), false, bad);
  assert.ok(globMatch('a*', 'a/b'), 'without a separator `*` matches `/`');
});

describe('what a namespace user writes in a pull secret is bounded (issue 47)', () => {
  test('a key that made a RegExp backtrack for minutes is matched in linear time', () => {
    const key = '*a*a*a*a*a*a*a*a*a*ab.x';
    const secret = jsonSecret('tenant/evil', { [key]: auth('u') });
    for (const n of [30, 120, 240]) {
      const t0 = performance.now();
      assert.deepEqual(users([secret], `${'a'.repeat(n)}.x/app`), []);
      assert.deepEqual(users([secret], `${'a'.repeat(n)}b.x/app`), ['u']);
      const ms = performance.now() - t0;
      assert.ok(ms < 50, `${n} a's took ${ms.toFixed(1)} ms`);
    }
  });

  test(`a key longer than ${MAX_KEY_LENGTH} characters, and keys past ${MAX_KEYRING_ENTRIES}, are problems, not matched`, () => {
    const long = `${'x'.repeat(MAX_KEY_LENGTH)}.io`;
    const many = Object.fromEntries(
      Array.from({ length: MAX_KEYRING_ENTRIES + 5 }, (_, i) => [
        `r${String(i).padStart(3, '0')}.io`,
        auth(`u${i}`),
      ]),
    );
    const ring = buildKeyring([
      jsonSecret('tenant/long', { [long]: auth('long') }),
      jsonSecret('tenant/many', many),
    ]);
    assert.equal(ring.entries.length, MAX_KEYRING_ENTRIES);
    assert.equal(ring.problems.length, 6);
    assert.ok(ring.problems[0]!.includes(`longer than ${MAX_KEY_LENGTH}`));
    // Messages quote a user's key shortened.
    for (const p of ring.problems) assert.ok(p.length < 200, p);
    assert.deepEqual(
      lookup(buildKeyring([jsonSecret('tenant/long', { [long]: auth('long') })]), long, 'a'),
      [],
    );
  });
});

test('pullSecretFromFile reads a Secret, a docker config.json and a bare .dockercfg', () => {
  const config = { auths: { 'reg.io': auth('u') } };
  const fromSecret = pullSecretFromFile(
    `apiVersion: v1\nkind: Secret\nmetadata: {name: pull, namespace: team}\ntype: ${SecretType.dockerConfigJson}\n` +
      `data:\n  .dockerconfigjson: ${b64(JSON.stringify(config))}\n`,
    'file.yaml',
  );
  const fromStringData = pullSecretFromFile(
    JSON.stringify({
      kind: 'Secret',
      type: SecretType.dockerConfigJson,
      stringData: { '.dockerconfigjson': JSON.stringify(config) },
    }),
    'file.json',
  );
  const fromConfig = pullSecretFromFile(JSON.stringify(config), 'config.json');
  const fromCfg = pullSecretFromFile(JSON.stringify({ 'reg.io': auth('u') }), '.dockercfg');
  assert.equal(fromSecret.name, 'team/pull');
  assert.equal(fromStringData.name, 'file.json');
  for (const s of [fromSecret, fromStringData, fromConfig, fromCfg]) {
    assert.deepEqual(users([s], 'reg.io/a'), ['u'], s.name);
  }
  assert.throws(() => pullSecretFromFile('just text', 'x'), /not a Secret/);
});
