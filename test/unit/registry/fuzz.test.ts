// Generated pull-secret keys and image names, hostile ones included, as a namespace user may write
// them (issue 47). Whatever comes in: parsing and matching never throw anything but an
// InspectionError, stay fast, and globMatch agrees with a plain dynamic-programming matcher.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { globMatch } from '../../../src/registry/glob.ts';
import { SecretType, buildKeyring, lookup } from '../../../src/registry/keyring.ts';
import { parseReference } from '../../../src/registry/reference.ts';
import { InspectionError } from '../../../src/registry/types.ts';
import { withSeed, type Prng } from '../../helpers/prng.ts';

const CASES = 400;
const b64 = (s: string) => Buffer.from(s).toString('base64');

/** Go's path.Match for patterns of literals, `?` and `*` only, by dynamic programming: the oracle. */
function dpMatch(p: string, n: string, sep: string): boolean {
  // at[j]: the pattern read so far matches n[0..j).
  let at = [true, ...Array.from(n, () => false)];
  for (const c of p) {
    const next = at.map(() => false);
    for (let j = 0; j <= n.length; j++) {
      if (c === '*') next[j] = at[j]! || (j > 0 && next[j - 1]! && n[j - 1] !== sep);
      else if (j > 0 && at[j - 1]) next[j] = c === '?' ? n[j - 1] !== sep : n[j - 1] === c;
    }
    at = next;
  }
  return at[n.length]!;
}

const runOf = (r: Prng, alphabet: string[], max: number) =>
  Array.from({ length: r.int(max + 1) }, () => r.pick(alphabet)).join('');

/** A key a user could write: globs, classes, escapes, ports, paths, long runs and stars. */
function hostileKey(r: Prng): string {
  const label = () =>
    r.chance(0.2) ? `${'*a'.repeat(1 + r.int(20))}b` : runOf(r, [...'ab*?[]^-\\x.', 'ä', '*'], 12) || 'a';
  const host = Array.from({ length: 1 + r.int(4) }, label).join('.');
  const port = r.chance(0.2) ? `:${r.int(70000)}` : '';
  const path = r.chance(0.3) ? `/${runOf(r, [...'ab/'], 8)}` : '';
  const scheme = r.pick(['', 'https://', 'http://']);
  return r.chance(0.05) ? 'k'.repeat(200 + r.int(400)) : `${scheme}${host}${port}${path}`;
}

/** An image a user could name: valid ones, long host labels, stray characters, long tags. */
function hostileImage(r: Prng): string {
  const word = () => runOf(r, [...'ab'], 6) || 'a';
  const label = () => (r.chance(0.2) ? 'a'.repeat(1 + r.int(120)) : word() + (r.chance(0.1) ? '-_' : ''));
  const host = Array.from({ length: 1 + r.int(3) }, label).join('.');
  const path = Array.from(
    { length: 1 + r.int(3) },
    () => word() + (r.chance(0.2) ? `${r.pick(['.', '__', '--', '_.'])}${word()}` : ''),
  ).join('/');
  const tail = r.pick(['', ':v1', `:${'t'.repeat(r.int(200))}`, `@sha256:${'a'.repeat(64)}`, '@x']);
  return r.chance(0.05)
    ? `${'a-'.repeat(r.int(600))}!`
    : `${host}${r.chance(0.3) ? ':5000' : ''}/${path}${tail}`;
}

test(`${CASES} generated globs agree with a dynamic-programming matcher`, () =>
  withSeed('glob fuzz', (r) => {
    for (let i = 0; i < CASES; i++) {
      const p = runOf(r, [...'ab*?'], 24);
      const n = runOf(r, [...'ab/'], 40);
      for (const sep of ['/', '']) {
        const want = dpMatch(p, n, sep);
        assert.equal(
          globMatch(p, n, sep ? { sep } : {}),
          want,
          `${JSON.stringify(p)} ${JSON.stringify(n)} sep ${sep}`,
        );
      }
    }
  }));

test(`${CASES} generated pull secrets and images: no throw, linear time`, () =>
  withSeed('keyring fuzz', (r) => {
    let matched = 0;
    let parsed = 0;
    for (let i = 0; i < CASES; i++) {
      const image = hostileImage(r);
      const t0 = performance.now();
      let ref;
      let error;
      try {
        ref = parseReference(image);
      } catch (e) {
        error = e;
      }
      const keys = Array.from({ length: 1 + r.int(8) }, () => hostileKey(r));
      // A star in place of one of the image's own labels, so that some keys match.
      if (ref) keys.push(ref.domain.replace(/^[^.:]*/, r.pick(['*', '*a*', '?*'])));
      const auths = Object.fromEntries(keys.map((k, j) => [k, { auth: b64(`u${j}:p`) }]));
      const secret = {
        name: 'tenant/s',
        type: SecretType.dockerConfigJson,
        data: { '.dockerconfigjson': b64(JSON.stringify({ auths })) },
      };
      const where = `case ${i}: ${JSON.stringify(keys).slice(0, 300)} ${image.slice(0, 300)}`;
      if (error) {
        assert.ok(error instanceof InspectionError, `${where}: ${String(error)}`);
        assert.ok(error.message.length < 1200, `${where}: a ${error.message.length}-character message`);
      }
      const ring = buildKeyring([secret]);
      if (ref) {
        parsed++;
        if (lookup(ring, ref.domain, ref.path).length) matched++;
      }
      // Every key against a name it might match: the glob's own labels with the stars spelt out.
      for (const e of ring.entries)
        lookup(ring, e.labels.map((l) => l.replace(/[*?[\]\\^]/g, 'a')).join('.'), 'a');
      const ms = performance.now() - t0;
      assert.ok(ms < 100, `${where}: took ${ms.toFixed(1)} ms`);
    }
    // The generators must reach both sides, or the bounds above prove little.
    assert.ok(parsed > CASES / 10 && parsed < CASES, `${parsed} of ${CASES} images parsed`);
    assert.ok(matched > 0, 'some key matched');
  }));
