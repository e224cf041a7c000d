// Berth's OCI registry client (decision 0007): reads which platforms an image supports from its
// manifests, never pulling layers. This file is the orchestration: the caches and single-flight in
// front (cache.ts, known.ts), the endpoints and credentials tried in turn, and the manifest walk.
// Below it, auth (authorizer.ts: challenges remembered per origin, tokens cached) over the
// transport (transport.ts: politeness per host and across hosts, one HTTP exchange with redirects,
// body cap, timeout, TLS and the egress lookup). It needs no Kubernetes: `berth arch inspect` uses
// it as it is.
import { errorText } from '../runtime/observability/log.ts';
import { credentialKey } from './auth.ts';
import { Authorizer, type Session } from './authorizer.ts';
import { Flights, ImageMemory, TtlCache } from './cache.ts';
import { parseCidrs } from './egress.ts';
import { endpointsFor, type Endpoint, type RegistriesConfig } from './hosts.ts';
import { buildKeyring, lookup, type SecretCredential } from './keyring.ts';
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
  type KnownDigest,
  type KnownImages,
  type Resolved,
} from './known.ts';
import { configuredHosts, registryMetrics } from './metrics.ts';
import { isDigest, parseReference, type Reference } from './reference.ts';
import { fail, header, Transport, type Answer, type RequestCounts } from './transport.ts';
import {
  InspectionError,
  MAX_RETRY_AFTER_MS,
  type CachedOptions,
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
  /**
   * Of maxRequestsInFlight, what the reads for one namespace's pods may hold at once: the rest stay
   * for the other namespaces however slow the registries that namespace names (fairness.ts).
   */
  maxRequestsInFlightPerNamespace?: number;
  /** Of maxBodyBytesInFlight, what one namespace's reads may hold at once. */
  maxBodyBytesInFlightPerNamespace?: number;
  userAgent?: string;
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
  // A quarter each: three namespaces at their share leave a quarter of the seats to every other.
  maxRequestsInFlightPerNamespace: 16,
  maxBodyBytesInFlightPerNamespace: 16 << 20,
};
/** An index inside an index inside the top one at most, and this many child fetches per image. */
const maxDepth = 2;
const maxFollows = 16;

export class RegistryClient implements ImageInspector {
  readonly #hosts: RegistriesConfig | undefined;
  readonly #o: typeof defaults;
  readonly #defaultCa: string | undefined;
  readonly #transport: Transport;
  readonly #auth: Authorizer;
  readonly #memory: ImageMemory;
  readonly #negative: TtlCache<InspectionError>;
  readonly #imageFlights = new Flights<Resolved>();
  readonly #digestFlights = new Flights<KnownDigest>();

  constructor(options: RegistryClientOptions = {}) {
    const { hosts, clusterCidrs, defaultCa, userAgent, ...rest } = options;
    this.#hosts = hosts;
    this.#defaultCa = defaultCa;
    this.#o = { ...defaults };
    for (const [k, v] of Object.entries(rest)) if (v !== undefined) this.#o[k as keyof typeof defaults] = v;
    this.#transport = new Transport(
      this.#o,
      { cidrs: parseCidrs(clusterCidrs ?? []) },
      configuredHosts(hosts),
      defaultCa,
      userAgent ?? 'berth',
    );
    this.#auth = new Authorizer(this.#transport);
    this.#memory = new ImageMemory(this.#o.digestCacheSize, this.#o.tagTtlMs);
    this.#negative = new TtlCache(1024);
  }

  /** Requests sent so far; a benchmark divides `registry` by the images it inspected. */
  requestsTotal(): RequestCounts {
    return this.#transport.counts();
  }

  /** Closes kept-alive connections. */
  close(): void {
    this.#transport.close();
  }

  async inspect(image: string, options: InspectOptions = {}): Promise<Inspection> {
    const started = performance.now();
    let result = 'ok';
    // Whether reads waited for the limits across hosts when the caller gave up: told at that
    // moment, since giving up frees the places this inspection's own reads waited for.
    let bounded: InspectionError | undefined;
    const onAbort = () => (bounded = this.#transport.bounded(image, options.namespace ?? ''));
    options.signal?.addEventListener('abort', onAbort, { once: true });
    try {
      const ref = parseReference(image);
      const keyring = buildKeyring(options.pullSecrets ?? []);
      const creds = lookup(keyring, ref.domain, ref.path);
      const hit = fromKnown(ref, this.#memory.lookups, {
        revalidate: options.revalidate === true,
        secrets: creds.map((c) => c.secret),
      });
      if (hit) return { image, ...hit, cached: true };
      const namespace = options.namespace ?? '';
      const key = `${ref.canonical}|${creds.map(credentialKey).join(',')}`;
      const negative = this.#negative.get(key);
      registryMetrics.cache.inc({ cache: 'negative', result: negative ? 'hit' : 'miss' });
      if (negative) throw negative;
      const work = async (signal: AbortSignal) => {
        try {
          return await this.#resolve(ref, creds, keyring.problems, { namespace, signal });
        } catch (e) {
          if (e instanceof InspectionError && (e.reason === 'NotFound' || e.reason === 'Unauthorized')) {
            this.#negative.set(key, e, this.#o.negativeTtlMs);
          }
          throw e;
        }
      };
      const asked = Date.now();
      // A read shared only within a namespace: joining another's would wait in that one's share.
      const flight = `${key}|${namespace}`;
      let resolved = await this.#imageFlights.run(flight, options.signal, work);
      // A revalidation that joined a read whose tag its registry had answered already (the read was
      // still fetching a new digest's manifests) did not revalidate: once more, in a read of its own
      // or one started since, which comes after it.
      const answered = this.#memory.staleTag(ref.canonical)?.readAt ?? -Infinity;
      if (options.revalidate && !ref.digest && answered < asked)
        resolved = await this.#imageFlights.run(flight, options.signal, work);
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

  cached(image: string, options: CachedOptions = {}): Inspection | undefined {
    return cachedInspection(image, this.#memory.lookups, options);
  }

  known(): KnownImages {
    return this.#memory.known();
  }

  onLearn(listener: () => void): void {
    this.#memory.onLearn(listener);
  }

  /** Each endpoint in order (mirrors first); the last one's failure is the answer. */
  async #resolve(
    ref: Reference,
    creds: SecretCredential[],
    problems: string[],
    read: { namespace: string; signal: AbortSignal },
  ): Promise<Resolved> {
    const endpoints = endpointsFor(this.#hosts, ref, this.#defaultCa);
    for (const [i, ep] of endpoints.entries()) {
      try {
        return await this.#resolveAt(ep, ref, creds, problems, read);
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
    read: { namespace: string; signal: AbortSignal },
  ): Promise<Resolved> {
    const attempts = creds.length
      ? creds.map((c) => (c.username || c.password ? c : undefined))
      : [undefined];
    let last: unknown;
    for (const cred of attempts) {
      const reader = cred?.secret ?? ANONYMOUS;
      try {
        return await this.#resolveWith(
          { ep, repo: ref.path, cred, reader, canonical: ref.canonical, ...read },
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
    if (this.#memory.staleTag(ref.canonical)) {
      const head = await this.#auth.request(s, 'HEAD', tagPath, manifestAccept);
      const d = header(head.headers, 'docker-content-digest');
      if (d && isDigest(d)) {
        this.#memory.learnTag(s.reader, ref.canonical, { digest: d, registry });
        return done(d, await this.#byDigest(s, d, 0, { left: maxFollows }));
      }
    }
    const got = await this.#auth.request(s, 'GET', tagPath, manifestAccept);
    const stated = header(got.headers, 'docker-content-digest');
    const digest = digestOf(got.body, stated && isDigest(stated) ? stated : 'sha256:');
    if (stated && isDigest(stated) && stated !== digest) {
      throw fail(
        'DigestMismatch',
        s.canonical,
        `${registry} answered ${tagPath} with content of ${digest}, not the ${stated} it stated`,
      );
    }
    this.#memory.learnTag(s.reader, ref.canonical, { digest, registry });
    const known = this.#memory.digest(s.reader, digest);
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
    const key = `${s.ep.url.origin}|${s.repo}|${digest}|${credentialKey(s.cred)}|${s.namespace}`;
    return this.#digestFlights.run(key, s.signal, (signal) => work({ ...s, signal }));
  }

  /** The platforms of a manifest or index by digest: cached, or fetched once however many ask. */
  #byDigest(s: Session, digest: string, depth: number, budget: { left: number }) {
    const known = this.#memory.digest(s.reader, digest);
    if (known) return Promise.resolve(known);
    return this.#fetchDigest(s, digest, depth, budget);
  }

  #fetchDigest(s: Session, digest: string, depth: number, budget: { left: number }) {
    // `s` inside: the read's own session, whose signal is the shared read's (Flights).
    return this.#digestFlight(s, digest, async (s) => {
      const got = await this.#auth.request(s, 'GET', `/v2/${s.repo}/manifests/${digest}`, manifestAccept);
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
      const config = await this.#auth.request(s, 'GET', `/v2/${s.repo}/blobs/${parsed.config.digest}`);
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
    this.#memory.learnDigest(s.reader, digest, found);
    return found;
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
}
