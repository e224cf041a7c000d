import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  basicHeader,
  credentialKey,
  parseChallenges,
  parseTokenResponse,
  pickChallenge,
  tokenRequest,
  type Challenge,
} from '../../../src/registry/auth.ts';

describe('parseChallenges', () => {
  test("Docker Hub's bearer challenge", () => {
    assert.deepEqual(
      parseChallenges(
        'Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/nginx:pull"',
      ),
      [
        {
          scheme: 'bearer',
          params: {
            realm: 'https://auth.docker.io/token',
            service: 'registry.docker.io',
            scope: 'repository:library/nginx:pull',
          },
        },
      ],
    );
  });

  test('a comma inside a quoted value stays in the value', () => {
    const [c] = parseChallenges(
      'Bearer realm="https://t.local/token",service="reg",scope="repository:a/b:pull,push",error="insufficient_scope"',
    );
    assert.equal(c?.params['scope'], 'repository:a/b:pull,push');
    assert.equal(c?.params['error'], 'insufficient_scope');
  });

  test('several challenges in one header, and in several headers', () => {
    const one = parseChallenges('Basic realm="Registry Realm", Bearer realm="https://t/x", service="s"');
    assert.deepEqual(one, [
      { scheme: 'basic', params: { realm: 'Registry Realm' } },
      { scheme: 'bearer', params: { realm: 'https://t/x', service: 's' } },
    ]);
    assert.deepEqual(parseChallenges(['Basic realm="a"', 'Bearer realm="https://b"']), [
      { scheme: 'basic', params: { realm: 'a' } },
      { scheme: 'bearer', params: { realm: 'https://b' } },
    ]);
  });

  test('escapes, spaces around =, unquoted values, token68 and case', () => {
    assert.deepEqual(parseChallenges('BEARER Realm = "https://t/\\"q\\"" , Service=reg.io'), [
      { scheme: 'bearer', params: { realm: 'https://t/"q"', service: 'reg.io' } },
    ]);
    assert.deepEqual(parseChallenges('Bearer realm=https://t.local/token,service=reg'), [
      { scheme: 'bearer', params: { realm: 'https://t.local/token', service: 'reg' } },
    ]);
    assert.deepEqual(parseChallenges('Negotiate abc123==, Basic realm="r"'), [
      { scheme: 'negotiate', params: {} },
      { scheme: 'basic', params: { realm: 'r' } },
    ]);
  });

  test('nothing readable gives nothing', () => {
    assert.deepEqual(parseChallenges(undefined), []);
    assert.deepEqual(parseChallenges(''), []);
    assert.deepEqual(parseChallenges('realm="x"'), []);
  });

  test('pickChallenge prefers Bearer with a realm over Basic', () => {
    const basic: Challenge = { scheme: 'basic', params: { realm: 'r' } };
    const bearer: Challenge = { scheme: 'bearer', params: { realm: 'https://t' } };
    assert.equal(pickChallenge([basic, bearer]), bearer);
    assert.equal(pickChallenge([basic, { scheme: 'bearer', params: {} }]), basic);
    assert.equal(pickChallenge([{ scheme: 'negotiate', params: {} }]), undefined);
  });
});

describe('tokenRequest', () => {
  const cred = { username: 'u', password: 'p', source: 'ns/s' };
  const challenge = (realm: string): Challenge => ({ scheme: 'bearer', params: { realm, service: 'reg' } });

  const https = { url: new URL('https://reg.local'), insecure: false };

  test('asks the realm for the service and the repository scope', () => {
    const { url, sendCredential } = tokenRequest(
      challenge('https://auth.local/token?x=1'),
      'repository:a/b:pull',
      https,
      cred,
    );
    assert.equal(url.origin + url.pathname, 'https://auth.local/token');
    assert.equal(url.searchParams.get('x'), '1');
    assert.equal(url.searchParams.get('service'), 'reg');
    assert.equal(url.searchParams.get('scope'), 'repository:a/b:pull');
    assert.equal(sendCredential, true);
  });

  test('a plain-http realm is asked only for a registry configured insecure', () => {
    assert.throws(
      () => tokenRequest(challenge('http://auth.local/token'), 's', https, undefined),
      /token realm http:\/\/auth\.local is plain http, which Berth asks only for a registry configured insecure/,
    );
    const insecureHttps = { url: new URL('https://reg.local'), insecure: true };
    const insecureHttp = { url: new URL('http://reg.local'), insecure: true };
    // Even then, credentials of an https registry never cross the network in clear text.
    assert.equal(
      tokenRequest(challenge('http://auth.local/token'), 's', insecureHttps, cred).sendCredential,
      false,
    );
    assert.equal(
      tokenRequest(challenge('http://auth.local/token'), 's', insecureHttp, cred).sendCredential,
      true,
    );
    assert.equal(
      tokenRequest(challenge('https://auth.local/token'), 's', https, undefined).sendCredential,
      false,
    );
  });

  test('a realm that is not an http(s) URL is refused, and its text is not quoted', () => {
    const refusal = (realm: string) => {
      try {
        tokenRequest(challenge(realm), 's', https, cred);
      } catch (e) {
        return (e as Error).message;
      }
      return 'accepted';
    };
    assert.equal(refusal('not a url <script>'), "the registry's token realm is not a URL");
    assert.equal(refusal('file:///etc/passwd'), "the registry's token realm is not http(s)");
  });
});

describe('parseTokenResponse', () => {
  test('token or access_token; expires_in defaults to 60 s; a margin is kept', () => {
    assert.deepEqual(parseTokenResponse({ token: 't', expires_in: 300 }), { token: 't', ttlMs: 270_000 });
    assert.deepEqual(parseTokenResponse({ access_token: 'a' }), { token: 'a', ttlMs: 54_000 });
    assert.deepEqual(parseTokenResponse({ token: '', access_token: 'a', expires_in: 3600 }), {
      token: 'a',
      ttlMs: 3_570_000,
    });
    assert.equal(parseTokenResponse({ token: 't', expires_in: 1 }).ttlMs, 1000);
  });

  test('no token is an error', () => {
    assert.throws(() => parseTokenResponse({}), /without a token/);
    assert.throws(() => parseTokenResponse(null), /without a token/);
    assert.throws(() => parseTokenResponse({ token: 5 }), /without a token/);
  });
});

test('Basic header and credential keys', () => {
  assert.equal(
    basicHeader({ username: 'u', password: 'p:q' }),
    'Basic ' + Buffer.from('u:p:q').toString('base64'),
  );
  const a = credentialKey({ username: 'u', password: 'p', source: 'x' });
  assert.equal(a, credentialKey({ username: 'u', password: 'p', source: 'other' }));
  assert.notEqual(a, credentialKey({ username: 'u', password: 'q', source: 'x' }));
  assert.equal(credentialKey(undefined), 'anonymous');
});
