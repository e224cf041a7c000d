// The sandbox registry's token service, its pure part: which scopes a request asks for, what a user
// is granted, and the signed JWT distribution's token access controller accepts (ES256 with the
// signing certificate in `x5c`, listed in the registry's rootcertbundle). The bearer flow of Docker
// Hub and GHCR: anonymous pull tokens for public repositories, Basic-authenticated ones for private
// repositories, push for the users allowed to.
import { createHash, randomBytes, sign, timingSafeEqual, type KeyObject } from 'node:crypto';
import { join } from 'node:path';
import { globMatch } from '../registry/glob.ts';

/** What the sandbox writes to REGISTRY_DIR/token.json. */
export interface TokenServerConfig {
  port: number;
  issuer: string;
  service: string;
  /** Lifetime of a token in seconds. */
  expiresIn: number;
  certFile: string;
  keyFile: string;
  signingCertFile: string;
  signingKeyFile: string;
}

/** The folder of policy files (`*.json`, each a partial TokenPolicy), merged in name order. */
export const policyDir = (registryDir: string): string => join(registryDir, 'policy.d');

export interface TokenUser {
  password: string;
  /** Private repositories this user may pull (globs, `*` matches anything, `/` included). */
  pull?: string[];
  /** Repositories this user may push to and delete from. */
  push?: string[];
}

/** What the token service grants; the sandbox writes the base, test helpers add files beside it. */
export interface TokenPolicy {
  /** Repositories that need credentials to pull (globs); every other repository is public. */
  private: string[];
  users: Record<string, TokenUser>;
}

export interface Scope {
  type: string;
  name: string;
  actions: string[];
}

/**
 * The `scope` parameters of a token request (`repository:a/b:pull,push`, several per parameter
 * when space-separated). A name never holds `:` but the type may carry a class (`repository(plugin)`),
 * so the name lies between the first and the last colon.
 */
export function parseScopes(params: string[]): Scope[] {
  const scopes: Scope[] = [];
  for (const s of params.flatMap((p) => p.split(' ')).filter(Boolean)) {
    const first = s.indexOf(':');
    const last = s.lastIndexOf(':');
    if (first <= 0 || last === first) continue;
    const actions = s
      .slice(last + 1)
      .split(',')
      .filter(Boolean);
    scopes.push({ type: s.slice(0, first), name: s.slice(first + 1, last), actions });
  }
  return scopes;
}

// A `*` of the token policy's globs crosses `/` (`private/*` holds `private/a/b`).
const matchesAny = (globs: string[] | undefined, name: string) =>
  (globs ?? []).some((g) => globMatch(g, name));

/** Merges the base policy with the files test helpers add: private globs append, users add or replace. */
export function mergePolicies(policies: Partial<TokenPolicy>[]): TokenPolicy {
  return {
    private: policies.flatMap((p) => p.private ?? []),
    users: Object.assign({}, ...policies.map((p) => p.users ?? {})) as Record<string, TokenUser>,
  };
}

/** The user a Basic header names, undefined for none; throws when the credentials are wrong. */
export function authenticate(policy: TokenPolicy, authorization: string | undefined): string | undefined {
  if (!authorization) return undefined;
  const m = /^Basic\s+(\S+)$/i.exec(authorization);
  if (!m) throw new Error('only Basic credentials are accepted');
  const text = Buffer.from(m[1]!, 'base64').toString('utf8');
  const colon = text.indexOf(':');
  const user = colon < 0 ? text : text.slice(0, colon);
  const password = colon < 0 ? '' : text.slice(colon + 1);
  const known = policy.users[user];
  // Hash both so the comparison takes the same time whatever the lengths.
  const digest = (s: string) => createHash('sha256').update(s).digest();
  if (!known || !timingSafeEqual(digest(known.password), digest(password)))
    throw new Error(`wrong user name or password for "${user}"`);
  return user;
}

/**
 * The actions granted for one scope: the requested ones this user may take, possibly none (the
 * registry then answers 401 insufficient_scope, as Docker Hub does for a private repository).
 */
export function grant(policy: TokenPolicy, user: string | undefined, scope: Scope): string[] {
  if (scope.type !== 'repository') return [];
  const u = user === undefined ? undefined : policy.users[user];
  const mayPush = matchesAny(u?.push, scope.name);
  const mayPull = !matchesAny(policy.private, scope.name) || mayPush || matchesAny(u?.pull, scope.name);
  return scope.actions.filter((a) => (a === 'pull' ? mayPull : mayPush));
}

export interface TokenClaims {
  issuer: string;
  service: string;
  subject: string;
  access: Scope[];
  expiresIn: number;
  now?: number;
}

const b64url = (b: Buffer | string) => Buffer.from(b).toString('base64url');

/** An ES256 JWT naming its signing certificate in `x5c` (DER, standard base64, as RFC 7515 says). */
export function signToken(claims: TokenClaims, key: KeyObject, certDer: Buffer): string {
  const now = Math.floor((claims.now ?? Date.now()) / 1000);
  const header = { typ: 'JWT', alg: 'ES256', x5c: [certDer.toString('base64')] };
  const payload = {
    iss: claims.issuer,
    sub: claims.subject,
    aud: claims.service,
    iat: now,
    nbf: now,
    exp: now + claims.expiresIn,
    jti: randomBytes(12).toString('hex'),
    access: claims.access,
  };
  const input = `${b64url(JSON.stringify(header))}.${b64url(JSON.stringify(payload))}`;
  // JWS wants r||s (IEEE P1363), not the DER signature node:crypto gives by default.
  const signature = sign('sha256', Buffer.from(input), { key, dsaEncoding: 'ieee-p1363' });
  return `${input}.${b64url(signature)}`;
}
