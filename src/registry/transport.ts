// The registry client's transport: one HTTP exchange (redirects, body cap, timeout, TLS trust on
// a keep-alive agent per origin, every connection's address checked by the egress lookup), and
// politeness around it (per-host and global bounds, Retry-After pauses, retries with jitter).
// Everything above it (auth, the manifest walk, caches) sends through `polite`.
import { createHash } from 'node:crypto';
import type { Agent, IncomingHttpHeaders, IncomingMessage } from 'node:http';
import { http } from '../runtime/platform/http.ts';
import https from 'node:https';
import { createSecureContext, rootCertificates } from 'node:tls';
import { setTimeout as sleep } from 'node:timers/promises';
import { Lru } from '../runtime/lru.ts';
import { errorText } from '../runtime/observability/log.ts';
import { addressRefusal, allowsPrivate, literalAddress, type ClusterRanges } from './egress.ts';
import type { Endpoint } from './hosts.ts';
import { EgressRefused, egressLookup } from './lookup.ts';
import { hostLabel, registryMetrics } from './metrics.ts';
import { FairSemaphore, type WaitCause } from './fairness.ts';
import { HostPauses, Semaphore, backoffMs, parseRetryAfter } from './politeness.ts';
import { InspectionError, type FailureReason } from './types.ts';

/** Requests sent since the client was made: to registries (manifests, blobs, redirects followed) and to token servers, apart. */
export interface RequestCounts {
  registry: number;
  token: number;
}

export interface Answer {
  status: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

/** The transport's bounds (RegistryClientOptions' of the same names). */
export interface TransportOptions {
  concurrencyPerRegistry: number;
  timeoutMs: number;
  retries: number;
  maxRetryAfterMs: number;
  maxBodyBytes: number;
  maxRequestsInFlight: number;
  maxBodyBytesInFlight: number;
  /** Of those, what one namespace's reads may hold at once (fairness.ts). */
  maxRequestsInFlightPerNamespace: number;
  maxBodyBytesInFlightPerNamespace: number;
}

/** Whom a request is for: its image (for messages), the namespace whose seats it takes, and its signal. */
export interface ReadFor {
  canonical: string;
  /** The namespace of the pod the read is for ('' for none: the CLI, a plan). */
  namespace: string;
  /** Aborts once every inspection waiting on this read has given up (Flights). */
  signal: AbortSignal;
}

const maxRedirects = 5;
const agentsKept = 256;
/** TLS failures that a retry cannot mend: the answer is a CA in the registries configuration. */
const tlsCodes = /CERT|SELF_SIGNED|UNABLE_TO_VERIFY|UNABLE_TO_GET_ISSUER|ERR_TLS/;

export const fail = (
  reason: FailureReason,
  canonical: string,
  message: string,
  transient = false,
  retryAt?: number,
) => new InspectionError(reason, canonical, message, transient, retryAt);

export const header = (h: IncomingHttpHeaders, name: string): string | undefined => {
  const v = h[name];
  return Array.isArray(v) ? v[0] : v;
};

/**
 * A keep-alive agent for registry requests. Never through a proxy: `proxyEnv` is an environment
 * without proxy variables, so a Node that reads HTTP_PROXY (NODE_USE_ENV_PROXY, Node 24) or a later
 * one that does so by default cannot send a request where the egress lookup does not check the
 * address connected to. Empty rather than null, which a default written `??` would replace.
 */
export function registryAgent(
  protocol: string,
  o: Pick<https.AgentOptions, 'maxSockets' | 'lookup' | 'secureContext' | 'rejectUnauthorized'>,
): Agent {
  const { secureContext, rejectUnauthorized, ...common } = o;
  const options = { ...common, keepAlive: true, proxyEnv: {} };
  return protocol === 'http:'
    ? new http.Agent(options)
    : new https.Agent({ ...options, ...(secureContext ? { secureContext } : {}), rejectUnauthorized });
}

export class Transport {
  readonly #o: TransportOptions;
  readonly #cluster: ClusterRanges;
  readonly #defaultCa: string | undefined;
  readonly #userAgent: string;
  /** Hosts named in metrics; the others are `other`. */
  readonly #metricHosts: ReadonlySet<string>;
  readonly #semaphores = new Map<string, Semaphore>();
  /** Across every host: requests in flight, and bytes of bodies being read (issue 47), shared fairly between namespaces (issue 59). */
  readonly #inFlight: FairSemaphore;
  readonly #bytesInFlight: FairSemaphore;
  readonly #pauses = new HostPauses();
  readonly #agents = new Lru<Agent>(agentsKept, (a) => {
    a.destroy();
    this.#liveAgents.delete(a);
  });
  readonly #liveAgents = new Set<Agent>();
  readonly #counts: RequestCounts = { registry: 0, token: 0 };

  constructor(
    o: TransportOptions,
    cluster: ClusterRanges,
    metricHosts: ReadonlySet<string>,
    defaultCa: string | undefined,
    userAgent: string,
  ) {
    this.#o = o;
    this.#cluster = cluster;
    this.#metricHosts = metricHosts;
    this.#defaultCa = defaultCa;
    this.#userAgent = userAgent;
    this.#inFlight = new FairSemaphore(o.maxRequestsInFlight, o.maxRequestsInFlightPerNamespace);
    this.#bytesInFlight = new FairSemaphore(o.maxBodyBytesInFlight, o.maxBodyBytesInFlightPerNamespace);
  }

  /** Requests sent so far. */
  counts(): RequestCounts {
    return { ...this.#counts };
  }

  /** Closes kept-alive connections. */
  close(): void {
    for (const a of this.#liveAgents) a.destroy();
  }

  /**
   * An inspection given up while its namespace's reads wait for the limits across hosts: the caller
   * was held by Berth's own bound, not by the registry, and says so (a Warning on the pod).
   */
  bounded(image: string, namespace: string): InspectionError | undefined {
    const waiting = this.#inFlight.waitingIn(namespace) + this.#bytesInFlight.waitingIn(namespace);
    if (waiting === 0) return undefined;
    const o = this.#o;
    const mib = (bytes: number) => Math.round(bytes / 2 ** 20);
    return fail(
      'Bounded',
      image,
      `given up while registry reads waited for Berth's bound across all registries (${o.maxRequestsInFlight} requests, ` +
        `${mib(o.maxBodyBytesInFlight)} MiB of bodies in flight, ${o.maxRequestsInFlightPerNamespace} and ` +
        `${mib(o.maxBodyBytesInFlightPerNamespace)} MiB of them for one namespace; ` +
        `${waiting} of its namespace's waiting)`,
      true,
    );
  }

  /**
   * One request, politely: at most `concurrencyPerRegistry` in flight to a host and
   * `maxRequestsInFlight` to all (of which the namespace's share), none while the host is paused by
   * a Retry-After, and bounded retries with jitter for network errors, 5xx and 429/503. Any other
   * answer is returned as it is. The signal ends the waits and the request (the inspections that
   * wanted it gave up).
   */
  async polite(
    ep: Endpoint,
    kind: keyof RequestCounts,
    method: string,
    url: URL,
    headers: Record<string, string>,
    read: ReadFor,
  ): Promise<Answer> {
    const { canonical, signal } = read;
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
        const release = await this.#seat(this.#inFlight, 'requests', read);
        try {
          got = await this.#send(ep, kind, method, url, headers, read);
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
      if (attempt >= this.#o.retries || wait > this.#o.timeoutMs)
        throw this.#gaveUp(canonical, host, got.status, attempt, asked);
      if (asked === undefined) await sleep(wait, undefined, { signal });
    }
  }

  /** The failure of a request still answered 429 or 5xx after its last attempt. */
  #gaveUp(
    canonical: string,
    host: string,
    status: number,
    attempt: number,
    asked: number | undefined,
  ): Error {
    const after = `after ${attempt + 1} attempts${asked === undefined ? '' : `, asked to wait ${Math.ceil(asked / 1000)} s`}`;
    if (status === 429)
      return fail(
        'RateLimited',
        canonical,
        `${host} answered 429 Too Many Requests (${after})`,
        true,
        this.#retryAt(host),
      );
    return fail('Unreachable', canonical, `${host} answered ${status} (${after})`, true, this.#retryAt(host));
  }

  /** A seat of `sem` for the read's namespace; a wait is counted by what held it. */
  #seat(sem: FairSemaphore, budget: 'requests' | 'bytes', read: ReadFor, weight = 1): Promise<() => void> {
    const cause: WaitCause | undefined = sem.wouldWait(read.namespace, weight);
    if (cause) registryMetrics.waits.inc({ budget, bound: cause === 'share' ? 'namespace' : 'all' });
    return sem.acquire(read.namespace, read.signal, weight);
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
      agent = registryAgent(url.protocol, {
        maxSockets: this.#o.concurrencyPerRegistry,
        // Every connection's address checked as it connects (lookup.ts).
        ...(allowPrivate ? {} : { lookup: egressLookup(this.#cluster) }),
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
    read: ReadFor,
  ): Promise<Answer> {
    const { canonical } = read;
    const signal = AbortSignal.any([read.signal, AbortSignal.timeout(this.#o.timeoutMs)]);
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
      return { status, headers: res.headers, body: await this.#read(res, url, { ...read, signal }) };
    }
  }

  /**
   * A body, up to the cap, once the bytes it may take are free across every host: its stated
   * length, or the cap when it states none (a body past its stated length is cut by the parser).
   */
  async #read(res: IncomingMessage, url: URL, read: ReadFor): Promise<Buffer> {
    const cap = this.#o.maxBodyBytes;
    const tooBig = () =>
      fail('Malformed', read.canonical, `${url.host}${url.pathname}: a body over ${cap} bytes`);
    const length = res.headers['content-length'];
    const stated = length === undefined ? cap : Number(length);
    if (stated > cap) {
      res.destroy();
      throw tooBig();
    }
    let release;
    try {
      release = await this.#seat(this.#bytesInFlight, 'bytes', read, stated);
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
