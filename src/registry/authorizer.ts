// The registry client's authentication, over its transport: the challenge each registry origin
// answered (remembered, so later repositories go straight to the realm; discovered once while
// others wait), and bearer tokens from the realm, cached per realm, service, scope and credential,
// fetched once however many ask. The parsing without I/O is auth.ts's.
import { errorText } from '../runtime/observability/log.ts';
import { Lru } from '../runtime/lru.ts';
import {
  basicHeader,
  credentialKey,
  parseChallenges,
  parseTokenResponse,
  pickChallenge,
  pullScope,
  tokenRequest,
  type Challenge,
  type Credential,
} from './auth.ts';
import { Flights, TtlCache } from './cache.ts';
import { allowsPrivate } from './egress.ts';
import type { Endpoint } from './hosts.ts';
import { registryMetrics } from './metrics.ts';
import { fail, type Answer, type ReadFor, type Transport } from './transport.ts';

/** One image at one endpoint with one credential, for one namespace's pods. */
export interface Session extends ReadFor {
  ep: Endpoint;
  repo: string;
  cred: Credential | undefined;
  /** Who what it reads may answer later: the credential's pull secret, or ANONYMOUS. */
  reader: string;
}

/** What an origin that served a request without asking for credentials is remembered by. */
const NO_CHALLENGE: Challenge = { scheme: 'none', params: {} };

export class Authorizer {
  readonly #transport: Transport;
  readonly #tokens = new TtlCache<string>(1024);
  /** The challenge each registry origin answered, so later repositories go straight to the realm. */
  readonly #challenges = new Lru<Challenge>(1024);
  /**
   * An origin's first request, while its challenge is unknown: the others wait for it rather than
   * each take their own 401 (a burst of pods naming new repositories of one registry). One per
   * namespace: another namespace's first request waits in that namespace's share of the seats.
   */
  readonly #discovering = new Map<string, Promise<void>>();
  readonly #tokenFlights = new Flights<string>();

  constructor(transport: Transport) {
    this.#transport = transport;
  }

  /** A registry request with auth: the remembered challenge answered up front, a 401 answered once. */
  async request(s: Session, method: 'GET' | 'HEAD', path: string, accept?: string): Promise<Answer> {
    const origin = s.ep.url.origin;
    const discovery = `${origin}|${s.namespace}`;
    const url = new URL(path, s.ep.url);
    let renewed = false;
    while (true) {
      let challenge = this.#challenges.peek(origin);
      const pending = challenge ? undefined : this.#discovering.get(discovery);
      if (pending) {
        await pending;
        challenge = this.#challenges.peek(origin);
      }
      let discovered: (() => void) | undefined;
      if (!challenge && !this.#discovering.has(discovery))
        this.#discovering.set(discovery, new Promise<void>((resolve) => (discovered = resolve)));
      const headers: Record<string, string> = accept ? { Accept: accept } : {};
      const authorization = challenge && (await this.#authorization(s, challenge));
      if (authorization) headers['Authorization'] = authorization;
      let got: Answer;
      try {
        got = await this.#transport.polite(s.ep, 'registry', method, url, headers, s);
        // Served without a challenge: the origin needs none, and nobody waits for a 401 again.
        if (!challenge && got.status !== 401) this.#challenges.set(origin, NO_CHALLENGE);
      } finally {
        if (discovered) {
          this.#discovering.delete(discovery);
          discovered();
        }
      }
      if (got.status >= 200 && got.status < 300) return got;
      if (got.status === 401) {
        const fresh = pickChallenge(parseChallenges(got.headers['www-authenticate']));
        if (fresh && !renewed) {
          this.#challenges.set(origin, fresh);
          if (authorization) this.#tokens.delete(this.#tokenKey(s, fresh));
          renewed = true;
          if (fresh.scheme === 'bearer' || s.cred) continue;
        }
        const who = s.cred ? `the credentials of ${s.cred.source}` : 'anonymous access';
        throw fail(
          'Unauthorized',
          s.canonical,
          `${s.ep.url.host} answered 401: refused ${who} for ${s.repo}`,
        );
      }
      if (got.status === 403) {
        throw fail('Unauthorized', s.canonical, `${s.ep.url.host} answered 403: denied ${s.repo}`);
      }
      if (got.status === 404) {
        throw fail('NotFound', s.canonical, `${s.ep.url.host} answered 404 for ${path}`);
      }
      throw fail('Malformed', s.canonical, `${s.ep.url.host} answered ${method} ${path} with ${got.status}`);
    }
  }

  #tokenKey(s: Session, c: Challenge): string {
    return [c.params['realm'], c.params['service'], pullScope(s.repo), credentialKey(s.cred)].join('|');
  }

  /** The Authorization for a challenge: Basic straight to the registry, or a bearer token (cached, single-flight). */
  async #authorization(s: Session, challenge: Challenge): Promise<string | undefined> {
    if (challenge.scheme === 'basic') return s.cred && basicHeader(s.cred);
    if (challenge.scheme !== 'bearer') return undefined;
    const key = this.#tokenKey(s, challenge);
    const cached = this.#tokens.get(key);
    registryMetrics.cache.inc({ cache: 'token', result: cached ? 'hit' : 'miss' });
    if (cached) return `Bearer ${cached}`;
    // Fetched once per namespace: a token another namespace's read fetches waits in its share.
    const token = await this.#tokenFlights.run(`${key}|${s.namespace}`, s.signal, async (signal) => {
      let req;
      try {
        req = tokenRequest(challenge, pullScope(s.repo), s.ep, s.cred);
      } catch (e) {
        throw fail('Unauthorized', s.canonical, `${s.ep.url.host}: ${errorText(e)}`);
      }
      const headers: Record<string, string> = { Accept: 'application/json' };
      if (req.sendCredential && s.cred) headers['Authorization'] = basicHeader(s.cred);
      // The realm is the registry's: trust what the registry's endpoint trusts. Verification is
      // skipped only where the registry's own host serves the realm, as containerd does; private
      // addresses only on the host name of a registry allowed them.
      const realmEp: Endpoint = {
        url: new URL(req.url.origin),
        ...(s.ep.ca ? { ca: s.ep.ca } : {}),
        insecure: s.ep.insecure && req.url.host === s.ep.url.host,
        mirror: s.ep.mirror,
        allowPrivate: allowsPrivate(s.ep, req.url),
      };
      const got = await this.#transport.polite(realmEp, 'token', 'GET', req.url, headers, { ...s, signal });
      const withheld =
        s.cred && !req.sendCredential
          ? ` (credentials withheld from the plain-http realm ${req.url.origin})`
          : '';
      if (got.status === 401 || got.status === 403) {
        const who = req.sendCredential && s.cred ? `the credentials of ${s.cred.source}` : 'anonymous access';
        throw fail(
          'Unauthorized',
          s.canonical,
          `the token server ${req.url.host} refused ${who} for ${s.repo}${withheld}`,
        );
      }
      if (got.status < 200 || got.status >= 300) {
        throw fail(
          'Unreachable',
          s.canonical,
          `the token server ${req.url.host} answered ${got.status}`,
          got.status >= 500,
        );
      }
      let parsed;
      try {
        parsed = parseTokenResponse(JSON.parse(got.body.toString('utf8')));
      } catch {
        // Its words are not repeated: they are the answer's, and this message reaches the pod's events.
        throw fail(
          'Malformed',
          s.canonical,
          `the token server ${req.url.host} answered ${got.status} without a token`,
        );
      }
      this.#tokens.set(key, parsed.token, parsed.ttlMs);
      return parsed.token;
    });
    return `Bearer ${token}`;
  }
}
