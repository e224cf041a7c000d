import assert from 'node:assert/strict';
import { createPrivateKey, verify, X509Certificate } from 'node:crypto';
import { test } from 'node:test';
import { globMatch } from '../../../src/registry/glob.ts';
import { createCertificateAuthority } from '../../../src/runtime/webhook/certificates.ts';
import {
  authenticate,
  grant,
  mergePolicies,
  parseScopes,
  signToken,
  type Scope,
  type TokenPolicy,
} from '../../../src/sandbox/token.ts';
import { withSeed } from '../../helpers/prng.ts';

const basic = (user: string, password: string) =>
  `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}`;

const policy: TokenPolicy = {
  private: ['private/*', 'team/secret'],
  users: {
    pusher: { password: 'p', push: ['*'] },
    reader: { password: 'r:with:colons', pull: ['private/a*'] },
    teampush: { password: 't', push: ['team/*'] },
  },
};
const repo = (name: string, ...actions: string[]): Scope => ({ type: 'repository', name, actions });

test('scopes: type, name and actions, several per parameter, a class on the type', () => {
  assert.deepEqual(parseScopes(['repository:a/b:pull,push']), [repo('a/b', 'pull', 'push')]);
  assert.deepEqual(parseScopes(['repository:a:pull repository:b/c/d:push', 'registry:catalog:*']), [
    repo('a', 'pull'),
    repo('b/c/d', 'push'),
    { type: 'registry', name: 'catalog', actions: ['*'] },
  ]);
  assert.deepEqual(parseScopes(['repository(plugin):x/y:pull']), [
    { type: 'repository(plugin)', name: 'x/y', actions: ['pull'] },
  ]);
  // No name, or no type: not a scope.
  assert.deepEqual(parseScopes(['repository:pull', ':a:pull', '', ' ']), []);
});

test("globs: Go's path.Match, with * matching any run of characters, slashes included", () => {
  assert.equal(globMatch('private/*', 'private/a/b'), true);
  assert.equal(globMatch('private/*', 'privateer/a'), false);
  assert.equal(globMatch('private/*', 'x/private/a'), false);
  assert.equal(globMatch('a.b', 'a.b'), true);
  assert.equal(globMatch('a.b', 'axb'), false);
  assert.equal(globMatch('*', ''), true);
  assert.equal(globMatch('a*c', 'abbbc'), true);
  assert.equal(globMatch('a*c', 'abbbd'), false);
});

test('authentication: none is anonymous, wrong or unknown credentials are refused', () => {
  assert.equal(authenticate(policy, undefined), undefined);
  assert.equal(authenticate(policy, basic('pusher', 'p')), 'pusher');
  assert.equal(authenticate(policy, basic('reader', 'r:with:colons')), 'reader');
  assert.throws(() => authenticate(policy, basic('pusher', 'P')), /wrong user name or password/);
  assert.throws(() => authenticate(policy, basic('nobody', 'p')), /wrong user name or password/);
  assert.throws(() => authenticate(policy, basic('pusher', '')), /wrong/);
  assert.throws(() => authenticate(policy, 'Bearer abc'), /only Basic/);
});

test('grants: public pull for all, private pull for its readers and pushers, push for pushers only', () => {
  assert.deepEqual(grant(policy, undefined, repo('library/nginx', 'pull')), ['pull']);
  assert.deepEqual(grant(policy, undefined, repo('library/nginx', 'pull', 'push')), ['pull']);
  assert.deepEqual(grant(policy, undefined, repo('private/app', 'pull')), []);
  assert.deepEqual(grant(policy, 'reader', repo('private/app', 'pull', 'push')), ['pull']);
  assert.deepEqual(grant(policy, 'reader', repo('private/b', 'pull')), []);
  assert.deepEqual(grant(policy, 'pusher', repo('private/b', 'pull', 'push', 'delete')), [
    'pull',
    'push',
    'delete',
  ]);
  assert.deepEqual(grant(policy, 'teampush', repo('team/secret', 'pull', 'push')), ['pull', 'push']);
  assert.deepEqual(grant(policy, 'teampush', repo('private/a', 'pull', 'push')), []);
  assert.deepEqual(grant(policy, 'pusher', { type: 'registry', name: 'catalog', actions: ['*'] }), []);
});

test('grants, generated: never more than asked, never push without a push grant, public always pullable', async () => {
  await withSeed('token grants', (r) => {
    const names = ['a', 'a/b', 'private/a', 'private/ab/c', 'team/x', 'team/secret', 'x/private/y'];
    const actions = ['pull', 'push', 'delete', '*'];
    for (let i = 0; i < 2000; i++) {
      const p: TokenPolicy = {
        private: names.filter(() => r.chance(0.3)).map((n) => (r.chance(0.5) ? n : `${n}*`)),
        users: {
          u: {
            password: 'x',
            pull: names.filter(() => r.chance(0.3)),
            push: names.filter(() => r.chance(0.2)),
          },
        },
      };
      const user = r.chance(0.5) ? 'u' : undefined;
      const asked = actions.filter(() => r.chance(0.5));
      const name = r.pick(names);
      const got = grant(p, user, repo(name, ...asked));
      const u = p.users['u']!;
      const isPrivate = p.private.some((g) => globMatch(g, name));
      const mayPush = user !== undefined && (u.push ?? []).some((g) => globMatch(g, name));
      assert.ok(
        got.every((a) => asked.includes(a)),
        `granted ${got} beyond ${asked}`,
      );
      assert.ok(mayPush || got.every((a) => a === 'pull'), `granted ${got} on ${name} without a push grant`);
      if (asked.includes('pull') && !isPrivate)
        assert.ok(got.includes('pull'), `public ${name} not pullable`);
      if (isPrivate && (user === undefined || !(u.pull ?? []).some((g) => globMatch(g, name))) && !mayPush)
        assert.ok(!got.includes('pull'), `private ${name} pullable by ${user ?? 'anonymous'}`);
    }
  });
});

test('policies merge: private globs add up, a later file adds or replaces users', () => {
  const merged = mergePolicies([
    { private: ['a/*'], users: { x: { password: '1' } } },
    { users: { x: { password: '2' }, y: { password: '3' } } },
    { private: ['b'] },
  ]);
  assert.deepEqual(merged, { private: ['a/*', 'b'], users: { x: { password: '2' }, y: { password: '3' } } });
});

test('tokens: ES256 over header and claims, the signing certificate in x5c, claims the registry checks', async () => {
  const ca = await createCertificateAuthority('token-test');
  const pair = await ca.issue({ commonName: 'signer', usage: 'client' });
  const cert = new X509Certificate(pair.certPem);
  const now = Date.parse('2026-11-22T12:00:00Z');
  const access = [repo('a/b', 'pull')];
  const jwt = signToken(
    { issuer: 'iss', service: 'svc', subject: 'u', access, expiresIn: 300, now },
    createPrivateKey(pair.keyPem),
    cert.raw,
  );
  const [h, p, s] = jwt.split('.') as [string, string, string];
  const header = JSON.parse(Buffer.from(h, 'base64url').toString()) as Record<string, unknown>;
  const claims = JSON.parse(Buffer.from(p, 'base64url').toString()) as Record<string, unknown>;
  assert.deepEqual(header, { typ: 'JWT', alg: 'ES256', x5c: [cert.raw.toString('base64')] });
  assert.equal(claims['iss'], 'iss');
  assert.equal(claims['aud'], 'svc');
  assert.equal(claims['sub'], 'u');
  assert.equal(claims['nbf'], now / 1000);
  assert.equal(claims['exp'], now / 1000 + 300);
  assert.deepEqual(claims['access'], access);
  const signature = Buffer.from(s, 'base64url');
  assert.equal(signature.length, 64, 'r||s, 32 bytes each');
  const input = Buffer.from(`${h}.${p}`);
  assert.equal(verify('sha256', input, { key: cert.publicKey, dsaEncoding: 'ieee-p1363' }, signature), true);
  // The same signature over other claims does not verify: the signature covers what it claims to.
  const other = Buffer.from(
    `${h}.${Buffer.from(JSON.stringify({ ...claims, sub: 'admin' })).toString('base64url')}`,
  );
  assert.equal(verify('sha256', other, { key: cert.publicKey, dsaEncoding: 'ieee-p1363' }, signature), false);
});
