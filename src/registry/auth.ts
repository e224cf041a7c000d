// Registry authentication without I/O: the WWW-Authenticate challenge (RFC 9110 §11.6.1: several
// challenges in one header, quoted values with commas), the token request of the distribution
// token spec (docs/content/spec/auth/token.md) and its answer, and where credentials may go.
import { createHash } from 'node:crypto';

export interface Credential {
  username: string;
  password: string;
  /** Where it came from (`namespace/secret` and the key that matched), for messages; never the password. */
  source: string;
}

export interface Challenge {
  /** Lower-case: `bearer`, `basic`. */
  scheme: string;
  /** Parameter names lower-case, values unquoted. */
  params: Record<string, string>;
}

const tokenChar = /[!#$%&'*+\-.^_`|~0-9A-Za-z]/;

/** Every challenge of one or more WWW-Authenticate header values. Unreadable input yields what was read before it. */
export function parseChallenges(header: string | string[] | undefined): Challenge[] {
  if (header === undefined) return [];
  if (Array.isArray(header)) return header.flatMap((h) => parseChallenges(h));
  const out: Challenge[] = [];
  const s = header;
  let i = 0;
  const skip = (chars: RegExp) => {
    while (i < s.length && chars.test(s[i]!)) i++;
  };
  const token = (): string => {
    const start = i;
    while (i < s.length && tokenChar.test(s[i]!)) i++;
    return s.slice(start, i);
  };
  let current: Challenge | undefined;
  while (i < s.length) {
    skip(/[\s,]/);
    const name = token();
    if (!name) break;
    skip(/[ \t]/);
    if (s[i] === '=' && current) {
      i++;
      skip(/[ \t]/);
      let value = '';
      if (s[i] === '"') {
        i++;
        while (i < s.length && s[i] !== '"') {
          if (s[i] === '\\' && i + 1 < s.length) i++;
          value += s[i++];
        }
        i++; // the closing quote
      } else {
        // Lenient: a registry may leave a URL unquoted, which is not a token.
        const start = i;
        while (i < s.length && !/[\s,]/.test(s[i]!)) i++;
        value = s.slice(start, i);
      }
      current.params[name.toLowerCase()] = value;
      continue;
    }
    if (s[i] === '=') break; // a parameter before any scheme: not a challenge
    // A new scheme; a token68 after it (Basic's legacy form) is skipped: Berth reads parameters only.
    current = { scheme: name.toLowerCase(), params: {} };
    out.push(current);
    const t68 = /^[A-Za-z0-9\-._~+/]+=*(?=[ \t]*(?:,|$))/.exec(s.slice(i));
    if (t68) i += t68[0].length;
  }
  return out;
}

/** The challenge Berth answers: Bearer over Basic, as Docker's client prefers. */
export function pickChallenge(challenges: Challenge[]): Challenge | undefined {
  return (
    challenges.find((c) => c.scheme === 'bearer' && c.params['realm']) ??
    challenges.find((c) => c.scheme === 'basic')
  );
}

export const pullScope = (repository: string): string => `repository:${repository}:pull`;

export const basicHeader = (c: Pick<Credential, 'username' | 'password'>): string =>
  'Basic ' + Buffer.from(`${c.username}:${c.password}`).toString('base64');

/** A short, stable name of a credential for cache keys, so no password is kept as a key. */
export const credentialKey = (c: Credential | undefined): string =>
  c
    ? createHash('sha256').update(`${c.username}\0${c.password}`).digest('base64url').slice(0, 22)
    : 'anonymous';

/**
 * The token request URL, or why none may be made. A realm must be https: a registry's answer names
 * it, and a plain-http realm would be a request Berth makes where its answer (the token it sends to
 * the registry) can be read and forged on the way; only a registry the admin configured insecure
 * may name one, and credentials of an https registry never go to it. Messages name no part of the
 * realm but its origin: the header is the registry's to write.
 */
export function tokenRequest(
  challenge: Challenge,
  scope: string,
  registry: { url: URL; insecure: boolean },
  credential: Credential | undefined,
): { url: URL; sendCredential: boolean } {
  let url: URL;
  try {
    url = new URL(challenge.params['realm'] ?? '');
  } catch {
    throw new Error("the registry's token realm is not a URL");
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:')
    throw new Error("the registry's token realm is not http(s)");
  if (url.protocol === 'http:' && !registry.insecure)
    throw new Error(
      `the registry's token realm ${url.origin} is plain http, which Berth asks only for a registry configured insecure`,
    );
  if (challenge.params['service']) url.searchParams.set('service', challenge.params['service']);
  url.searchParams.set('scope', scope);
  const sendCredential = !!credential && !(url.protocol === 'http:' && registry.url.protocol === 'https:');
  return { url, sendCredential };
}

/** How long to trust a token, leaving a margin so it does not expire on the way. */
export function parseTokenResponse(body: unknown): { token: string; ttlMs: number } {
  const b = (typeof body === 'object' && body !== null ? body : {}) as Record<string, unknown>;
  const token = typeof b['token'] === 'string' && b['token'] ? b['token'] : b['access_token'];
  if (typeof token !== 'string' || !token) throw new Error('the token server answered without a token');
  // The spec's default when expires_in is absent; a minimum of 60 s is what the spec promises.
  const expiresIn = typeof b['expires_in'] === 'number' && b['expires_in'] > 0 ? b['expires_in'] : 60;
  const ttlMs = expiresIn * 1000;
  return { token, ttlMs: Math.max(ttlMs - Math.min(30_000, ttlMs / 10), 1000) };
}
