// Berth's OCI registry client (decision 0007): reads which platforms an image supports from its
// manifests, never pulling layers. Layers, from the bottom: one HTTP exchange (redirects, body cap,
// timeout), politeness per host (semaphore, Retry-After pause, retries with jitter), auth (the
// challenge remembered per host, tokens cached), the manifest walk, and the caches and single-flight
// in front of it all. It needs no Kubernetes: `berth arch inspect` uses it as it is.
import { createHash } from 'node:crypto';
import type { Agent, IncomingHttpHeaders, IncomingMessage } from 'node:http';
import { http } from '../runtime/platform/http.ts';
import https from 'node:https';
import { createSecureContext, rootCertificates } from 'node:tls';
import { setTimeout as sleep } from 'node:timers/promises';
import { Lru } from '../runtime/lru.ts';
import { errorText } from '../runtime/observability/log.ts';
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
import { addressRefusal, allowsPrivate, literalAddress, parseCidrs, type ClusterRanges } from './egress.ts';
import { endpointsFor, type Endpoint, type RegistriesConfig } from './hosts.ts';
import { buildKeyring, lookup, type SecretCredential } from './keyring.ts';
import { EgressRefused, egressLookup } from './lookup.ts';
import {
  ManifestError,
  digestOf,
  manifestAccept,
  mergePlatforms,
  parseConfig,
  parseManifest,
} from './manifest.ts';
import {
  ANONYMOUS,
  cachedInspection,
  fromKnown,
  withReader,
  type KnownDigest,
  type KnownImages,
  type KnownLookups,
  type KnownTag,
  type Readers,
  type Resolved,
} from './known.ts';
import { configuredHosts, hostLabel, registryMetrics } from './metrics.ts';
import { HostPauses, Semaphore, backoffMs, parseRetryAfter } from './politeness.ts';
import { isDigest, parseReference, type Reference } from './reference.ts';
import {
  InspectionError,
  MAX_RETRY_AFTER_MS,
  type CachedOptions,
  type FailureReason,
  type ImageInspector,
  type Inspection,
  type InspectOptions,
  type Platform,
} from './types.ts';

export interface RegistryClientOptions {
  /** Mirrors, CAs, insecure registries and those allowed on private addresses (hosts.ts). */
  hosts?: RegistriesConfig;
  /**
   * The cluster's own addresses and CIDRs (its apiserver's, its service and pod ranges): refused
   * like private ones unless a registry is allowed them (egress.ts).
   */
  clusterCidrs?: string[];
  /** Requests in flight to one registry host at most. */
  concurrencyPerRegistry?: number;
  /** How long a tag's digest is trusted before a HEAD revalidates it. */
  tagTtlMs?: number;
  /** Digests (and tags) remembered at most. */
  digestCacheSize?: number;
  /** One request, redirects and body included. */
  timeoutMs?: number;
  /** Retries of one request after a network error, a 5xx or a 429/503. */
  retries?: number;
  /** A PEM bundle trusted by every endpoint that names no CA of its own (the sandbox CA in tests). */
  defaultCa?: string;
  /** How long a 404 or 401 is remembered, so many pods naming one missing image ask once. */
  negativeTtlMs?: number;
  /** The longest pause a Retry-After may impose on a host. */
  maxRetryAfterMs?: number;
  /** The largest manifest or config blob read. */
  maxBodyBytes?: number;
  /** Requests in flight across every registry host at most (the per-host cap is concurrencyPerRegistry). */
  maxRequestsInFlight?: number;
  /** Bytes of bodies being read across every registry host at most. */
  maxBodyBytesInFlight?: number;
  userAgent?: string;
}

/** Requests sent since the client was made: to registries (manifests, blobs, redirects followed) and to token servers, apart. */
export interface RequestCounts {
  registry: number;
  token: number;
}

interface Answer {
  status: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

/** One image at one endpoint with one credential. */
interface Session {
  ep: Endpoint;
  repo: string;
  cred: Credential | undefined;
  /** Who what it reads may answer later: the credential's pull secret, or ANONYMOUS. */
  reader: string;
  canonical: string;
  /** Aborts once every inspection waiting on this read has given up (Flights). */
  signal: AbortSignal;
}

const defaults = {
  concurrencyPerRegistry: 8,
  tagTtlMs: 5 * 60_000,
  digestCacheSize: 4096,
  timeoutMs: 10_000,
  retries: 3,
  negativeTtlMs: 15_000,
  maxRetryAfterMs: MAX_RETRY_AFTER_MS,
  maxBodyBytes: 4 << 20,
  maxRequestsInFlight: 64,
  maxBodyBytesInFlight: 64 << 20,
};
/** An index inside an index inside the top one at most, and this many child fetches per image. */
/** What an origin that served a request without asking for credentials is remembered by. */
const NO_CHALLENGE: Challenge = { scheme: 'none', params: {} };
const maxDepth = 2;
const maxFollows = 16;
const maxRedirects = 5;
const agentsKept = 256;
/** TLS failures that a retry cannot mend: the answer is a CA in the registries configuration. */
const tlsCodes = /CERT|SELF_SIGNED|UNABLE_TO_VERIFY|UNABLE_TO_GET_ISSUER|ERR_TLS/;

const fail = (
  reason: FailureReason,
  canonical: string,
  message: string,
  transient = false,
  retryAt?: number,
) => new InspectionError(reason, canonical, message, transient, retryAt);

const header = (h: IncomingHttpHeaders, name: string): string | undefined => {
  const v = h[name];
  return Array.isArray(v) ? v[0] : v;
};

export class RegistryClient implements ImageInspector {
  readonly #hosts: RegistriesConfig | undefined;
  readonly #cluster: ClusterRanges;
  readonly #o: typeof defaults;
  readonly #defaultCa: string | undefined;
  readonly #userAgent: string;
  readonly #digests: Lru<KnownDigest & Readers>;
  readonly #tags: TtlCache<KnownTag & Readers>;
  readonly #learnListeners: (() => void)[] = [];
  readonly #lookups: KnownLookups = {
    tag: (canonical) => this.#tags.get(canonical),
    platforms: (digest) => this.#digests.get(digest),
  };
  readonly #negative: TtlCache<InspectionError>;
  readonly #tokens = new TtlCache<string>(1024);
  /** The challenge each registry origin answered, so later repositories go straight to the realm. */
  readonly #challenges = new Lru<Challenge>(1024);
  /**
   * An origin's first request, while its challenge is unknown: the others wait for it rather than
   * each take their own 401 (a burst of pods naming new repositories of one registry).
   */
  readonly #discovering = new Map<string, Promise<void>>();
  readonly #imageFlights = new Flights<Resolved>();
  readonly #digestFlights = new Flights<KnownDigest>();
  readonly #tokenFlights = new Flights<string>();
  readonly #semaphores = new Map<string, Semaphore>();
  /** Across every host: requests in flight, and bytes of bodies being read (issue 47). */
  readonly #inFlight: Semaphore;
  readonly #bytesInFlight: Semaphore;
  readonly #pauses = new HostPauses();
  readonly #agents = new Lru<Agent>(agentsKept, (a) => {
    a.destroy();
    this.#liveAgents.delete(a);
  });
  readonly #liveAgents = new Set<Agent>();
  readonly #counts: RequestCounts = { registry: 0, token: 0 };
  /** Hosts named in metrics; the others are `other`. */
  readonly #metricHosts: ReadonlySet<string>;

  constructor(options: RegistryClientOptions = {}) {
    const { hosts, clusterCidrs, defaultCa, userAgent, ...rest } = options;
    this.#hosts = hosts;
    this.#cluster = { cidrs: parseCidrs(clusterCidrs ?? []) };
    this.#metricHosts = configuredHosts(hosts);
    this.#defaultCa = defaultCa;
    this.#userAgent = userAgent ?? 'berth';
    this.#o = { ...defaults };
    for (const [k, v] of Object.entries(rest)) if (v !== undefined) this.#o[k as keyof typeof defaults] = v;
    this.#digests = new Lru(this.#o.digestCacheSize);
    this.#tags = new TtlCache(this.#o.digestCacheSize);
    this.#negative = new TtlCache(1024);
    this.#inFlight = new Semaphore(this.#o.maxRequestsInFlight);
    this.#bytesInFlight = new Semaphore(this.#o.maxBodyBytesInFlight);
  }

  /** Requests sent so far; a benchmark divides `registry` by the images it inspected. */
  requestsTotal(): RequestCounts {
    return { ...this.#counts };
  }

  /** Closes kept-alive connections. */
  close(): void {
    for (const a of this.#liveAgents) a.destroy();
  }

  async inspect(image: string, options: InspectOptions = {}): Promise<Inspection> {
    const started = performance.now();
    let result = 'ok';
    // Whether reads waited for the limits across hosts when the caller gave up: told at that
    // moment, since giving up frees the places this inspection's own reads waited for.
    let bounded: InspectionError | undefined;
    const onAbort = () => (bounded = this.#bounded(image));
    options.signal?.addEventListener('abort', onAbort, { once: true });
    try {
      const ref = parseReference(image);
      const keyring = buildKeyring(options.pullSecrets ?? []);
      const creds = lookup(keyring, ref.domain, ref.path);
      const hit = fromKnown(ref, this.#lookups, {
        revalidate: options.revalidate === true,
        secrets: creds.map((c) => c.secret),
      });
      if (hit) return { image, ...hit, cached: true };
      const key = `${ref.canonical}|${creds.map(credentialKey).join(',')}`;
      const negative = this.#negative.get(key);
      registryMetrics.cache.inc({ cache: 'negative', result: negative ? 'hit' : 'miss' });
      if (negative) throw negative;
      const work = async (signal: AbortSignal) => {
        try {
          return await this.#resolve(ref, creds, keyring.problems, signal);
        } catch (e) {
          if (e instanceof InspectionError && (e.reason === 'NotFound' || e.reason === 'Unauthorized')) {
            this.#negative.set(key, e, this.#o.negativeTtlMs);
          }
          throw e;
        }
      };
      const asked = Date.now();
      let resolved = await this.#imageFlights.run(key, options.signal, work);
      // A revalidation that joined a read whose tag its registry had answered already (the read was
      // still fetching a new digest's manifests) did not revalidate: once more, in a read of its own
      // or one started since, which comes after it.
      const answered = this.#tags.stale(ref.canonical)?.readAt ?? -Infinity;
      if (options.revalidate && !ref.digest && answered < asked)
        resolved = await this.#imageFlights.run(key, options.signal, work);
      return { image, ...resolved, cached: false };
    } catch (e) {
      const err =
        e instanceof InspectionError
          ? new InspectionError(e.reason, image, e.message, e.transient, e.retryAt)
          : options.signal?.aborted
            ? (bounded ?? e)
            : new InspectionError('Unreachable', image, `inspecting ${image}: ${errorText(e)}`, true);
      result = err instanceof InspectionError ? err.reason : 'Aborted';
      throw err;
    } finally {
      options.signal?.removeEventListener('abort', onAbort);
      registryMetrics.inspection.observe({ result }, (performance.now() - started) / 1000);
    }
  }

  /**
   * An inspection given up while reads wait for the limits across hosts: the caller was held by
   * Berth's own bound, not by the registry, and says so (a Warning on the pod).
   */
  #bounded(image: string): InspectionError | undefined {
    if (this.#inFlight.waiting + this.#bytesInFlight.waiting === 0) return undefined;
    const { maxRequestsInFlight: n, maxBodyBytesInFlight: bytes } = this.#o;
    return fail(
      'Bounded',
      image,
      `given up while registry reads waited for Berth's bound across all registries (${n} requests, ` +
        `${Math.round(bytes / 2 ** 20)} MiB of bodies in flight; ${this.#inFlight.waiting + this.#bytesInFlight.waiting} waiting)`,
      true,
    );
  }

  cached(image: string, options: CachedOptions = {}): Inspection | undefined {
    return cachedInspection(image, this.#lookups, options);
  }

  known(): KnownImages {
    const tags = [...this.#tags.fresh()].map(
      ([canonical, tag, expiresAt]) => [canonical, { ...tag, expiresAt }] as const,
    );
    return { tags: new Map(tags), digests: new Map(this.#digests.entries()) };
  }

  onLearn(listener: () => void): void {
    this.#learnListeners.push(listener);
  }

  /** Each endpoint in order (mirrors first); the last one's failure is the answer. */
  async #resolve(
    ref: Reference,
    creds: SecretCredential[],
    problems: string[],
    signal: AbortSignal,
  ): Promise<Resolved> {
    const endpoints = endpointsFor(this.#hosts, ref, this.#defaultCa);
    for (const [i, ep] of endpoints.entries()) {
      try {
        return await this.#resolveAt(ep, ref, creds, problems, signal);
      } catch (e) {
        if (i === endpoints.length - 1 || !(e instanceof InspectionError)) throw e;
      }
    }
    throw new Error('unreachable: endpointsFor returns at least the registry itself');
  }

  /**
   * Each matching credential in turn (the kubelet's order), anonymous when none matched. An entry
   * with no user and no password (a docker config.json whose logins are in a credential store) is
   * an anonymous attempt in its place, as containerd makes of it: a token server may refuse `Basic :`.
   */
  async #resolveAt(
    ep: Endpoint,
    ref: Reference,
    creds: SecretCredential[],
    problems: string[],
    signal: AbortSignal,
  ): Promise<Resolved> {
    const attempts = creds.length
      ? creds.map((c) => (c.username || c.password ? c : undefined))
      : [undefined];
    let last: unknown;
    for (const cred of attempts) {
      const reader = cred?.secret ?? ANONYMOUS;
      try {
        return await this.#resolveWith(
          { ep, repo: ref.path, cred, reader, canonical: ref.canonical, signal },
          ref,
        );
      } catch (e) {
        last = e;
        if (!(e instanceof InspectionError) || (e.reason !== 'Unauthorized' && e.reason !== 'NotFound'))
          throw e;
      }
    }
    if (last instanceof InspectionError && last.reason === 'Unauthorized') {
      const tried = creds.length
        ? `with ${creds.map((c) => `the credentials of ${c.source}`).join(', then ')}`
        : 'anonymously: no pull secret matched';
      const notes = problems.length ? `; ${problems.join('; ')}` : '';
      throw fail('Unauthorized', ref.canonical, `${last.message} (tried ${tried}${notes})`);
    }
    throw last;
  }

  async #resolveWith(s: Session, ref: Reference): Promise<Resolved> {
    const registry = s.ep.url.host;
    const done = (digest: string, found: KnownDigest): Resolved => ({
      reference: ref.canonical,
      digest,
      platforms: found.platforms,
      registry: found.registry,
    });
    // The caches have just missed this digest (fromKnown).
    if (ref.digest) return done(ref.digest, await this.#fetchDigest(s, ref.digest, 0, { left: maxFollows }));
    const tagPath = `/v2/${s.repo}/manifests/${ref.tag}`;
    // A tag seen before (expired, or revalidated for imagePullPolicy: Always): one HEAD says whether
    // it still names the same digest, and HEAD does not count as a pull on Docker Hub.
    if (this.#tags.stale(ref.canonical)) {
      const head = await this.#registryRequest(s, 'HEAD', tagPath, manifestAccept);
      const d = header(head.headers, 'docker-content-digest');
      if (d && isDigest(d)) {
        this.#learnTag(s, ref.canonical, { digest: d, registry });
        return done(d, await this.#byDigest(s, d, 0, { left: maxFollows }));
      }
    }
    const got = await this.#registryRequest(s, 'GET', tagPath, manifestAccept);
    const stated = header(got.headers, 'docker-content-digest');
    const digest = digestOf(got.body, stated && isDigest(stated) ? stated : 'sha256:');
    if (stated && isDigest(stated) && stated !== digest) {
      throw fail(
        'DigestMismatch',
        s.canonical,
        `${registry} answered ${tagPath} with content of ${digest}, not the ${stated} it stated`,
      );
    }
    this.#learnTag(s, ref.canonical, { digest, registry });
    const known = this.#knownDigest(s, digest);
    if (known) return done(digest, known);
    return done(
      digest,
      await this.#digestFlight(s, digest, (fs) => this.#platforms(fs, digest, got, 0, { left: maxFollows })),
    );
  }

  /**
   * A digest read once however many ask, per endpoint, repository and credential: a refusal or a
   * 404 holds for one repository only, and must not fail another's read of the same digest (a
   * success is shared anyway, through the digest cache).
   */
  #digestFlight(
    s: Session,
    digest: string,
    work: (s: Session) => Promise<KnownDigest>,
  ): Promise<KnownDigest> {
    const key = `${s.ep.url.origin}|${s.repo}|${digest}|${credentialKey(s.cred)}`;
    return this.#digestFlights.run(key, s.signal, (signal) => work({ ...s, signal }));
  }

  /** The platforms of a manifest or index by digest: cached, or fetched once however many ask. */
  #byDigest(s: Session, digest: string, depth: number, budget: { left: number }) {
    const known = this.#knownDigest(s, digest);
    if (known) return Promise.resolve(known);
    return this.#fetchDigest(s, digest, depth, budget);
  }

  /**
   * A digest's cached platforms for a session that has just been served a manifest naming it (a
   * tag's, or an index's): the session's reader may be answered from it from now on.
   */
  #knownDigest(s: Session, digest: string): KnownDigest | undefined {
    const known = this.#digests.get(digest);
    registryMetrics.cache.inc({ cache: 'digest', result: known ? 'hit' : 'miss' });
    if (known) this.#digests.set(digest, { ...known, readers: withReader(known.readers, s.reader) });
    return known;
  }

  #fetchDigest(s: Session, digest: string, depth: number, budget: { left: number }) {
    // `s` inside: the read's own session, whose signal is the shared read's (Flights).
    return this.#digestFlight(s, digest, async (s) => {
      const got = await this.#registryRequest(s, 'GET', `/v2/${s.repo}/manifests/${digest}`, manifestAccept);
      this.#verify(s, got.body, digest, 'manifest');
      return this.#platforms(s, digest, got, depth, budget);
    });
  }

  /** Reads a manifest body: an index's entries (following what they do not say), or a manifest's config. */
  async #platforms(s: Session, digest: string, got: Answer, depth: number, budget: { left: number }) {
    const registry = s.ep.url.host;
    let parsed;
    try {
      parsed = parseManifest(got.body, header(got.headers, 'content-type'));
    } catch (e) {
      throw this.#manifestFailure(s, e, digest);
    }
    let platforms: Platform[];
    if (parsed.kind === 'index') {
      if (parsed.follow.length && depth >= maxDepth) {
        throw fail('Malformed', s.canonical, `${digest} nests indexes deeper than ${maxDepth} levels`);
      }
      if (parsed.follow.length > budget.left) {
        throw fail('Malformed', s.canonical, `${digest} needs more than ${maxFollows} child manifests read`);
      }
      budget.left -= parsed.follow.length;
      const children = await Promise.all(
        parsed.follow.map((d) =>
          this.#byDigest(s, d.digest, depth + 1, budget).catch((e: unknown) => {
            // An artifact beside the images that its entry did not mark: no platform, no failure.
            if (e instanceof InspectionError && e.reason === 'NotAnImage') return { platforms: [] };
            throw e;
          }),
        ),
      );
      platforms = mergePlatforms([...parsed.platforms, ...children.flatMap((c) => c.platforms)]);
    } else {
      const config = await this.#registryRequest(s, 'GET', `/v2/${s.repo}/blobs/${parsed.config.digest}`);
      this.#verify(s, config.body, parsed.config.digest, 'config blob');
      try {
        platforms = [parseConfig(config.body)];
      } catch (e) {
        throw this.#manifestFailure(s, e, parsed.config.digest);
      }
    }
    if (depth === 0 && platforms.length === 0) {
      throw fail(
        'NotAnImage',
        s.canonical,
        `${digest} names no runnable platform (only attestations or artifacts)`,
      );
    }
    const found = { platforms, registry };
    const readers = withReader(this.#digests.peek(digest)?.readers ?? [], s.reader);
    this.#digests.set(digest, { ...found, readers });
    this.#learned();
    return found;
  }

  /** A tag's digest as a session's registry answered it; the readers stay while the digest does. */
  #learnTag(s: Session, canonical: string, tag: Omit<KnownTag, 'readAt'>): void {
    const before = this.#tags.stale(canonical);
    const readers = withReader(before?.digest === tag.digest ? before.readers : [], s.reader);
    this.#tags.set(canonical, { ...tag, readAt: Date.now(), readers }, this.#o.tagTtlMs);
    this.#learned();
  }

  #learned(): void {
    for (const listener of this.#learnListeners) listener();
  }

  #verify(s: Session, body: Buffer, digest: string, what: string): void {
    const actual = digestOf(body, digest);
    if (actual !== digest) {
      throw fail(
        'DigestMismatch',
        s.canonical,
        `${s.ep.url.host} answered ${what} ${digest} with content of ${actual}`,
      );
    }
  }

  #manifestFailure(s: Session, e: unknown, digest: string): InspectionError {
    if (e instanceof ManifestError) {
      return fail(
        e.kind === 'notAnImage' ? 'NotAnImage' : 'Malformed',
        s.canonical,
        `${digest}: ${e.message}`,
      );
    }
    return fail('Malformed', s.canonical, `${digest}: unreadable`);
  }

  /** A registry request with auth: the remembered challenge answered up front, a 401 answered once. */
  async #registryRequest(s: Session, method: 'GET' | 'HEAD', path: string, accept?: string): Promise<Answer> {
    const origin = s.ep.url.origin;
    const url = new URL(path, s.ep.url);
    let renewed = false;
    while (true) {
      let challenge = this.#challenges.peek(origin);
      const pending = challenge ? undefined : this.#discovering.get(origin);
      if (pending) {
        await pending;
        challenge = this.#challenges.peek(origin);
      }
      let discovered: (() => void) | undefined;
      if (!challenge && !this.#discovering.has(origin))
        this.#discovering.set(origin, new Promise<void>((resolve) => (discovered = resolve)));
      const headers: Record<string, string> = accept ? { Accept: accept } : {};
      const authorization = challenge && (await this.#authorization(s, challenge));
      if (authorization) headers['Authorization'] = authorization;
      let got: Answer;
      try {
        got = await this.#polite(s.ep, 'registry', method, url, headers, s.canonical, s.signal);
        // Served without a challenge: the origin needs none, and nobody waits for a 401 again.
        if (!challenge && got.status !== 401) this.#challenges.set(origin, NO_CHALLENGE);
      } finally {
        if (discovered) {
          this.#discovering.delete(origin);
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
    const token = await this.#tokenFlights.run(key, s.signal, async (signal) => {
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
      const got = await this.#polite(realmEp, 'token', 'GET', req.url, headers, s.canonical, signal);
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

  /**
   * One request, politely: at most `concurrencyPerRegistry` in flight to a host and
   * `maxRequestsInFlight` to all, none while the host is paused by a Retry-After, and bounded
   * retries with jitter for network errors, 5xx and 429/503. Any other answer is returned as it is.
   * The signal ends the waits and the request (the inspections that wanted it gave up).
   */
  async #polite(
    ep: Endpoint,
    kind: keyof RequestCounts,
    method: string,
    url: URL,
    headers: Record<string, string>,
    canonical: string,
    signal: AbortSignal,
  ): Promise<Answer> {
    const host = url.host;
    for (let attempt = 0; ; attempt++) {
      const paused = this.#pauses.remaining(host);
      if (paused > this.#o.timeoutMs) {
        throw fail(
          'RateLimited',
          canonical,
          `${host} asked to wait; ${Math.ceil(paused / 1000)} s left`,
          true,
          this.#retryAt(host),
        );
      }
      await this.#pauses.wait(host, signal);
      const releaseHost = await this.#semaphore(host).acquire(signal);
      let got: Answer;
      try {
        const release = await this.#inFlight.acquire(signal);
        try {
          got = await this.#send(ep, kind, method, url, headers, canonical, signal);
        } finally {
          release();
        }
      } catch (e) {
        if (e instanceof InspectionError || signal.aborted) throw e;
        if (e instanceof EgressRefused) throw this.#egressFailure(canonical, e.message);
        const code = (e as { code?: string }).code ?? '';
        if (tlsCodes.test(code)) {
          throw fail(
            'Unreachable',
            canonical,
            `${host}: TLS: ${errorText(e)} (name its CA in the registries configuration)`,
          );
        }
        if (attempt >= this.#o.retries) {
          throw fail(
            'Unreachable',
            canonical,
            `${host}: ${errorText(e)} (after ${attempt + 1} attempts)`,
            true,
          );
        }
        await sleep(backoffMs(attempt, 200, 5000), undefined, { signal });
        continue;
      } finally {
        releaseHost();
      }
      const limited = got.status === 429 || got.status === 503;
      if (!limited && got.status < 500) return got;
      const asked = limited
        ? parseRetryAfter(header(got.headers, 'retry-after'), this.#o.maxRetryAfterMs)
        : undefined;
      const wait = asked ?? backoffMs(attempt, 200, 5000);
      if (asked !== undefined) this.#pauses.pause(host, asked);
      if (attempt >= this.#o.retries || wait > this.#o.timeoutMs) {
        const after = `after ${attempt + 1} attempts${asked === undefined ? '' : `, asked to wait ${Math.ceil(asked / 1000)} s`}`;
        if (got.status === 429)
          throw fail(
            'RateLimited',
            canonical,
            `${host} answered 429 Too Many Requests (${after})`,
            true,
            this.#retryAt(host),
          );
        throw fail(
          'Unreachable',
          canonical,
          `${host} answered ${got.status} (${after})`,
          true,
          this.#retryAt(host),
        );
      }
      if (asked === undefined) await sleep(wait, undefined, { signal });
    }
  }

  /**
   * When a host paused for longer than a request may wait can be asked again: the caller comes back
   * then rather than spend its retries on failures that come at once meanwhile.
   */
  #retryAt(host: string): number | undefined {
    const paused = this.#pauses.remaining(host);
    return paused > this.#o.timeoutMs ? Date.now() + paused : undefined;
  }

  #semaphore(host: string): { acquire: (signal: AbortSignal) => Promise<() => void> } {
    let sem = this.#semaphores.get(host);
    if (!sem) {
      sem = new Semaphore(this.#o.concurrencyPerRegistry);
      this.#semaphores.set(host, sem);
    }
    const s = sem;
    return {
      acquire: async (signal) => {
        const release = await s.acquire(signal).catch((e: unknown) => {
          if (s.held === 0 && s.waiting === 0) this.#semaphores.delete(host);
          throw e;
        });
        return () => {
          release();
          // Forget idle hosts: images name hosts at will, and a Map of every host ever seen would only grow.
          if (s.held === 0 && s.waiting === 0) this.#semaphores.delete(host);
        };
      },
    };
  }

  /**
   * A keep-alive agent per origin and trust: the CA goes on the agent, since a request cannot carry it.
   * As one secure context made once: given as `ca`, the public roots plus the CA (some 200 kB of PEM)
   * would be parsed for every connection and concatenated into the agent's socket key on every
   * request and every socket freed, milliseconds of CPU each (bench:arch measured it).
   */
  #agent(url: URL, ca: string | undefined, insecure: boolean, allowPrivate: boolean): Agent {
    const key = `${url.origin}|${insecure}|${allowPrivate}|${ca ? createHash('sha256').update(ca).digest('hex') : ''}`;
    let agent = this.#agents.get(key);
    if (!agent) {
      const common = {
        keepAlive: true,
        maxSockets: this.#o.concurrencyPerRegistry,
        // Every connection's address checked as it connects (lookup.ts).
        ...(allowPrivate ? {} : { lookup: egressLookup(this.#cluster) }),
      };
      agent =
        url.protocol === 'http:'
          ? new http.Agent(common)
          : new https.Agent({
              ...common,
              ...(ca ? { secureContext: createSecureContext({ ca: [...rootCertificates, ca] }) } : {}),
              rejectUnauthorized: !insecure,
            });
      this.#agents.set(key, agent);
      this.#liveAgents.add(agent);
    }
    return agent;
  }

  /**
   * One exchange: redirects followed (Authorization dropped when the host changes, never from https
   * down to http), the body read up to the cap, all within the timeout.
   */
  async #send(
    ep: Endpoint,
    kind: keyof RequestCounts,
    method: string,
    first: URL,
    firstHeaders: Record<string, string>,
    canonical: string,
    abandoned: AbortSignal,
  ): Promise<Answer> {
    const signal = AbortSignal.any([abandoned, AbortSignal.timeout(this.#o.timeoutMs)]);
    let url = first;
    let headers: Record<string, string> = { ...firstHeaders, 'User-Agent': this.#userAgent };
    for (let hop = 0; ; hop++) {
      const same = url.host === ep.url.host && url.protocol === ep.url.protocol;
      const allowPrivate = allowsPrivate(ep, url);
      // An address in the URL is connected to without a lookup: checked here, before any connection.
      const literal = literalAddress(url.hostname);
      const refused = !allowPrivate && literal !== undefined && addressRefusal(literal, this.#cluster);
      if (refused) throw this.#egressFailure(canonical, `${url.host} is ${refused}`);
      const agent = same
        ? this.#agent(url, ep.ca, ep.insecure, allowPrivate)
        : this.#agent(url, this.#defaultCa, false, allowPrivate);
      this.#counts[kind]++;
      let res: IncomingMessage;
      try {
        res = await new Promise<IncomingMessage>((resolve, reject) => {
          const req = (url.protocol === 'http:' ? http : https).request(url, {
            method,
            headers,
            agent,
            signal,
          });
          req.on('response', resolve);
          req.on('error', reject);
          req.end();
        });
      } catch (e) {
        this.#count(kind, url, method, 'error');
        throw e;
      }
      const status = res.statusCode ?? 0;
      this.#count(kind, url, method, String(status));
      const location = res.headers.location;
      if (status >= 300 && status < 400 && status !== 304 && location) {
        res.resume();
        if (hop >= maxRedirects)
          throw fail('Unreachable', canonical, `${first.host}: more than ${maxRedirects} redirects`);
        const next = new URL(location, url);
        if (next.protocol !== 'https:' && !(next.protocol === 'http:' && url.protocol === 'http:')) {
          throw fail(
            'Unreachable',
            canonical,
            `${url.host} redirected to ${next.protocol}//${next.host}, which Berth does not follow`,
          );
        }
        // Blob redirects go to object storage: the registry's credentials stay with the registry.
        if (next.host !== url.host) {
          const { Authorization: _dropped, ...rest } = headers;
          headers = rest;
        }
        url = next;
        continue;
      }
      if (method === 'HEAD') {
        // No body, but read to its end all the same: until then the agent does not get the socket
        // back, and a few HEADs held every socket of the registry until the timeout freed them.
        res.resume();
        return { status, headers: res.headers, body: Buffer.alloc(0) };
      }
      return { status, headers: res.headers, body: await this.#read(res, url, canonical, signal) };
    }
  }

  /**
   * A body, up to the cap, once the bytes it may take are free across every host: its stated
   * length, or the cap when it states none (a body past its stated length is cut by the parser).
   */
  async #read(res: IncomingMessage, url: URL, canonical: string, signal: AbortSignal): Promise<Buffer> {
    const cap = this.#o.maxBodyBytes;
    const tooBig = () => fail('Malformed', canonical, `${url.host}${url.pathname}: a body over ${cap} bytes`);
    const length = res.headers['content-length'];
    const stated = length === undefined ? cap : Number(length);
    if (stated > cap) {
      res.destroy();
      throw tooBig();
    }
    let release;
    try {
      release = await this.#bytesInFlight.acquire(signal, stated);
    } catch (e) {
      res.destroy();
      throw e;
    }
    try {
      const chunks: Buffer[] = [];
      let size = 0;
      for await (const c of res) {
        size += (c as Buffer).length;
        if (size > cap) {
          res.destroy();
          throw tooBig();
        }
        chunks.push(c as Buffer);
      }
      return Buffer.concat(chunks);
    } finally {
      release();
    }
  }

  #egressFailure(canonical: string, why: string): InspectionError {
    return fail(
      'AddressNotAllowed',
      canonical,
      `${why}, which Berth does not connect to unless the registries configuration allows the registry (allowPrivate)`,
    );
  }

  #count(kind: keyof RequestCounts, url: URL, method: string, code: string): void {
    const host = hostLabel(url.host, this.#metricHosts);
    if (kind === 'token') registryMetrics.tokenRequests.inc({ realm: host, code });
    else registryMetrics.requests.inc({ registry: host, method, code });
  }
}
