// A small REST client over node:https. The generated client in @kubernetes/client-node turns every
// object into class instances, which costs memory and CPU in informer caches; controllers here work
// on plain JSON. Kubeconfigs are read by kubeconfig.ts.
import https from 'node:https';
import { createSecureContext } from 'node:tls';
import { setImmediate as nextTurn, setTimeout as sleep } from 'node:timers/promises';
import { restMetrics } from '../observability/metrics.ts';
import { apiWarnings } from './warnings.ts';
import { defaultAccess, kubeconfigFileAccess, type ClusterAccess, type TlsMaterial } from './kubeconfig.ts';
import type { KubeObject, ResourceRef } from '../api/meta.ts';

export class ApiError extends Error {
  readonly status: number;
  readonly reason: string;
  readonly body: unknown;
  constructor(status: number, reason: string, message: string, body: unknown) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
    this.reason = reason;
    this.body = body;
  }
}

export const isNotFound = (e: unknown): boolean => e instanceof ApiError && e.status === 404;
export const isForbidden = (e: unknown): boolean => e instanceof ApiError && e.status === 403;
export const isConflict = (e: unknown): boolean => e instanceof ApiError && e.status === 409;
export const isGone = (e: unknown): boolean => e instanceof ApiError && e.status === 410;
/**
 * A write the apiserver refused for its content or its writer (validation, an admission policy or
 * webhook, RBAC, a ResourceQuota): no retry changes the answer until someone changes something.
 */
export const isRefused = (e: unknown): e is ApiError =>
  e instanceof ApiError &&
  (e.status === 400 || e.status === 403 || e.status === 422) &&
  !isNamespaceTerminating(e);

/** A create in a namespace being deleted (403 NamespaceTerminating): the teardown's, not a refusal to show. */
const isNamespaceTerminating = (e: unknown): boolean =>
  e instanceof ApiError &&
  e.status === 403 &&
  ((e.body as { details?: { causes?: { reason?: string }[] } } | undefined)?.details?.causes ?? []).some(
    (c) => c.reason === 'NamespaceTerminating',
  );

/** Whether the apiserver has the object (any uid): only its 404 says it has not; other errors throw. */
export const exists = (
  client: KubeClient,
  ref: ResourceRef,
  name: string,
  namespace?: string,
): Promise<boolean> =>
  client.get(ref, name, namespace).then(
    () => true,
    (e: unknown) => {
      if (isNotFound(e)) return false;
      throw e;
    },
  );

export interface RequestOptions {
  query?: Record<string, string | number | boolean | undefined>;
  body?: unknown;
  contentType?: string;
  signal?: AbortSignal;
  /** Milliseconds without any response data after which the request is abandoned. */
  idleTimeoutMs?: number;
}

export interface ClientOptions {
  /** Largest number of requests in flight at once (watches excepted). */
  maxInFlight?: number;
  userAgent?: string;
  /**
   * Consulted before every write: when it returns false the write is refused without being sent.
   * The manager sets it to the leader elector's fencing check, so a replica that lost the lease
   * stops writing at once.
   */
  writeGuard?: () => boolean;
  /** Bounds on what the server sends (ANSWER_BOUNDS by default). */
  bounds?: AnswerBounds;
  /** Told of each answer refused for its size, before the request fails with it. */
  onRefused?: (e: ResponseTooLarge) => void;
}

/** The most an apiserver's answer may hold before it is refused (ResponseTooLarge), in bytes. */
export interface AnswerBounds {
  /** One line of a watch: one event, one object. */
  lineBytes: number;
  /** An answer read whole: an object, or a list page (informers ask for 500 objects a page). */
  answerBytes: number;
}

/**
 * One bound for every apiserver Berth reads, its own and each cell's: no object an apiserver
 * stores comes near 16 MiB (it takes requests of 3 MiB at most, etcd 1.5 MiB by default), so a
 * watch line (one object) never does, nor a list page of one object; an informer whose page is
 * larger asks for fewer objects a page. What a hostile apiserver sends beyond them is refused, not
 * buffered: the list or watch fails, is logged, and starts again.
 */
export const ANSWER_BOUNDS: AnswerBounds = { lineBytes: 16 * 2 ** 20, answerBytes: 32 * 2 ** 20 };

/** An answer, or a line of a watch, larger than the client's bound: refused unread. */
export class ResponseTooLarge extends Error {
  override name = 'ResponseTooLarge';
}

export class NotLeaderError extends Error {
  override name = 'NotLeaderError';
}

export const PATCH = {
  apply: 'application/apply-patch+yaml',
  merge: 'application/merge-patch+json',
  strategic: 'application/strategic-merge-patch+json',
  json: 'application/json-patch+json',
} as const;

/** After a failed refresh, the next one is tried this much later. */
const AUTH_RETRY_MS = 5_000;
const authRefreshMs = 60_000;
/** How long a watch stream's events are handled back to back before other work gets a turn. */
const STREAM_SLICE_MS = 2;

/** The same TLS material: a refresh that read the same files keeps its secure context. */
const sameMaterial = (a: TlsMaterial, b: TlsMaterial): boolean =>
  (['ca', 'cert', 'key'] as const).every((k) => (a[k] && b[k] ? a[k].equals(b[k]) : a[k] === b[k])) &&
  a.servername === b.servername &&
  a.rejectUnauthorized === b.rejectUnauthorized;
// client-go's limits for answers that carry Retry-After: ten tries, each wait capped.
const maxRetryAfterAttempts = 10;
const maxRetryAfterSeconds = 10;

export class KubeClient {
  readonly access: ClusterAccess;
  readonly server: URL;
  private readonly agent: https.Agent;
  private readonly watchAgent: https.Agent;
  private readonly userAgent: string;
  private readonly bounds: AnswerBounds;
  private readonly onRefused: ClientOptions['onRefused'];
  writeGuard: (() => boolean) | undefined;
  private auth: { headers: Record<string, string>; at: number } | undefined;
  private failed: { error: unknown; at: number } | undefined;
  private tls: TlsMaterial & Pick<https.AgentOptions, 'secureContext'> = {};
  private ready: Promise<void>;

  constructor(access: ClusterAccess, opts: ClientOptions = {}) {
    this.access = access;
    this.server = new URL(access.server);
    this.userAgent = opts.userAgent ?? 'berth';
    this.writeGuard = opts.writeGuard;
    this.bounds = opts.bounds ?? ANSWER_BOUNDS;
    this.onRefused = opts.onRefused;
    this.ready = this.refresh();
    // Agents are created lazily from the TLS material that refreshAuth collects.
    this.agent = new https.Agent({ keepAlive: true, maxSockets: opts.maxInFlight ?? 64 });
    this.watchAgent = new https.Agent({ keepAlive: true });
  }

  /**
   * A client of the kubeconfig file at `path`, or of what kubectl would use when none is given; of
   * its current context, or of `opts.context` (kubectl's --context).
   */
  static fromFile(path?: string, opts?: ClientOptions & { context?: string }): KubeClient {
    const context = opts?.context;
    return new KubeClient(
      path ? kubeconfigFileAccess(path, context) : defaultAccess(process.env, context),
      opts,
    );
  }

  private async refreshAuth(): Promise<void> {
    const { tls, headers } = await this.access.resolve();
    // One secure context per TLS material, not one per connection: Node builds a context from
    // ca/cert/key for every new socket, parsing the PEMs each time (2-9 ms in a CPU profile of
    // bench:arch when a burst opened sockets). The material stays in the options too: the agent
    // pools sockets by it, so rotated credentials still get connections of their own.
    if (!sameMaterial(this.tls, tls)) {
      const { ca, cert, key } = tls;
      this.tls = { ...tls, secureContext: createSecureContext({ ca, cert, key }) };
    }
    this.auth = { headers, at: Date.now() };
  }

  /** A refresh whose failure is handled by whoever awaits it (never an unhandled rejection). */
  private refresh(): Promise<void> {
    const p = this.refreshAuth();
    p.then(
      () => (this.failed = undefined),
      (error: unknown) => (this.failed = { error, at: Date.now() }),
    );
    return p;
  }

  private async headers(): Promise<Record<string, string>> {
    await this.ready.catch(() => {});
    const last = this.auth;
    // Re-read credentials now and then: in-cluster tokens and exec plugins rotate them.
    if (last && Date.now() - last.at <= authRefreshMs) return last.headers;
    // Without credentials yet, a refresh that failed moments ago is the answer (an exec plugin that
    // hangs is not waited for twice); one that failed longer ago does not stick: read again below.
    if (!last && this.failed && Date.now() - this.failed.at < AUTH_RETRY_MS) throw this.failed.error;
    this.ready = this.refresh();
    try {
      await this.ready;
    } catch (e) {
      // An exec plugin or a token file that fails once (a swap, a slow plugin) must not stop the
      // client: the last good credentials serve until they are refused, and the next refresh is
      // tried a few seconds on rather than on every request.
      if (!last) throw e;
      last.at = Date.now() - authRefreshMs + AUTH_RETRY_MS;
      return last.headers;
    }
    return this.auth!.headers;
  }

  /**
   * The server refused the credentials (an exec plugin's that expired or were revoked): as client-go
   * does, the request fails, and the next one asks for new credentials (the last ones serve if that fails).
   */
  private unauthorized(): void {
    this.access.refused?.();
    if (this.auth) this.auth.at = 0;
  }

  private url(path: string, query?: RequestOptions['query']): URL {
    const u = new URL(this.server.pathname.replace(/\/$/, '') + path, this.server);
    for (const [k, v] of Object.entries(query ?? {})) if (v !== undefined) u.searchParams.set(k, String(v));
    return u;
  }

  private async open(method: string, path: string, opts: RequestOptions, watch: boolean) {
    const headers: Record<string, string> = { ...(await this.headers()), Accept: 'application/json' };
    const guard = method === 'GET' ? undefined : this.writeGuard;
    const refused = () =>
      new NotLeaderError(`refusing ${method} ${path}: this replica does not hold the leader lease`);
    // Checked after the last await, and again when the request gets its socket, right before it
    // leaves: with every socket busy the agent holds a request in its queue for as long as they
    // stay busy, and a lease can be lost meanwhile.
    if (guard && !guard()) throw refused();
    headers['User-Agent'] = this.userAgent;
    let payload: Buffer | undefined;
    if (opts.body !== undefined) {
      payload = Buffer.from(typeof opts.body === 'string' ? opts.body : JSON.stringify(opts.body));
      headers['Content-Type'] = opts.contentType ?? 'application/json';
      headers['Content-Length'] = String(payload.length);
    }
    const u = this.url(path, opts.query);
    return new Promise<import('node:http').IncomingMessage>((resolve, reject) => {
      const req = https.request(u, {
        method,
        headers,
        agent: watch ? this.watchAgent : this.agent,
        ...this.tls,
        signal: opts.signal,
      });
      if (guard) req.once('socket', () => guard() || req.destroy(refused()));
      if (opts.idleTimeoutMs) {
        req.setTimeout(opts.idleTimeoutMs, () =>
          req.destroy(new Error(`no data for ${opts.idleTimeoutMs} ms`)),
        );
      }
      req.on('response', (res) => {
        const warnings = res.headersDistinct['warning'];
        if (warnings) apiWarnings.note(this.server.host, warnings);
        resolve(res);
      });
      req.on('error', reject);
      req.end(payload);
    });
  }

  /** Sends one request and decodes the JSON answer; a non-2xx answer throws ApiError. */
  async request<T = unknown>(method: string, path: string, opts: RequestOptions = {}): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      const sent = performance.now();
      const res = await this.open(method, path, { idleTimeoutMs: 60_000, ...opts }, false);
      const text = await this.readAll(res, `${method} ${path}`);
      let body: unknown = text;
      if (text && (res.headers['content-type'] ?? '').includes('json')) body = JSON.parse(text);
      const status = res.statusCode ?? 0;
      restMetrics.requests.inc({ code: String(status), method, host: this.server.host });
      if (method !== 'GET')
        restMetrics.writes.inc({ method, resource: resourceOfPath(path), host: this.server.host });
      restMetrics.latency.observe(
        { verb: method, host: this.server.host },
        (performance.now() - sent) / 1000,
      );
      // As client-go does: a 429 with Retry-After (priority and fairness, a resource's storage still
      // initialising after its CRD was created) was not processed, so any verb is sent again.
      const wait = status === 429 ? Number(res.headers['retry-after']) : NaN;
      if (Number.isFinite(wait) && attempt < maxRetryAfterAttempts) {
        await sleep(Math.min(Math.max(wait, 0), maxRetryAfterSeconds) * 1000, undefined, {
          signal: opts.signal,
        });
        continue;
      }
      if (status === 401) this.unauthorized();
      if (status < 200 || status >= 300) throw toApiError(status, body, `${method} ${path}`);
      return body as T;
    }
  }

  /**
   * Opens a watch (or any streaming GET) and yields each newline-delimited JSON document.
   * The iterator ends when the server closes the stream; abort with opts.signal.
   */
  async *stream<T = unknown>(path: string, opts: RequestOptions = {}): AsyncGenerator<T> {
    const res = await this.open('GET', path, opts, true);
    const status = res.statusCode ?? 0;
    if (status < 200 || status >= 300) {
      const text = await this.readAll(res, `watch ${path}`);
      let body: unknown = text;
      try {
        body = JSON.parse(text);
      } catch {
        // not JSON: keep the text
      }
      if (status === 401) this.unauthorized();
      throw toApiError(status, body, `watch ${path}`);
    }
    // The part of a line read so far, in chunks, and its length: a line is decoded only once whole.
    let parts: Buffer[] = [];
    let held = 0;
    const max = this.bounds.lineBytes;
    const tooLong = () => {
      res.destroy();
      return this.refused(
        `watch ${path} from ${this.server.host}: a line of more than ${max} bytes, refused (Berth's bound on one event)`,
      );
    };
    let turnStarted = performance.now();
    for await (const chunk of res as AsyncIterable<Buffer>) {
      let from = 0;
      let nl: number;
      while ((nl = chunk.indexOf(0x0a, from)) >= 0) {
        if (held + nl - from > max) throw tooLong();
        const line = Buffer.concat([...parts, chunk.subarray(from, nl)]).toString('utf8');
        parts = [];
        held = 0;
        from = nl + 1;
        if (line.trim()) yield JSON.parse(line) as T;
        // One socket read can bring dozens of events, each parsed and handled (by the consumer,
        // while this generator waits) before anything else runs. Past a slice, the rest waits a
        // turn of the event loop, so an admission review is not held behind a backlog of events.
        if (performance.now() - turnStarted > STREAM_SLICE_MS) {
          await nextTurn();
          turnStarted = performance.now();
        }
      }
      held += chunk.length - from;
      if (held > max) throw tooLong();
      if (from < chunk.length) parts.push(chunk.subarray(from));
    }
  }

  /** The error of an answer refused for its size, once whoever listens (onRefused) is told. */
  private refused(message: string): ResponseTooLarge {
    const e = new ResponseTooLarge(message);
    this.onRefused?.(e);
    return e;
  }

  /** The whole answer as text, refused past the answer bound without reading on. */
  private async readAll(res: import('node:http').IncomingMessage, what: string): Promise<string> {
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const c of res as AsyncIterable<Buffer>) {
      size += c.length;
      if (size > this.bounds.answerBytes) {
        res.destroy();
        throw this.refused(
          `${what} from ${this.server.host}: an answer of more than ${this.bounds.answerBytes} bytes, refused (Berth's bound)`,
        );
      }
      chunks.push(c);
    }
    return Buffer.concat(chunks).toString('utf8');
  }

  // Typed conveniences over request().

  get<T extends KubeObject = KubeObject>(ref: ResourceRef, name: string, namespace?: string): Promise<T> {
    return this.request<T>('GET', resourcePath(ref, namespace, name));
  }

  list<T extends KubeObject = KubeObject>(
    ref: ResourceRef,
    opts: { namespace?: string; query?: RequestOptions['query'] } = {},
  ) {
    return this.request<KubeList<T>>('GET', resourcePath(ref, opts.namespace), { query: opts.query });
  }

  create<T extends KubeObject = KubeObject>(
    ref: ResourceRef,
    obj: KubeObject,
    opts: { dryRun?: boolean; fieldManager?: string } = {},
  ): Promise<T> {
    return this.request<T>('POST', resourcePath(ref, obj.metadata?.namespace), {
      body: obj,
      query: { dryRun: opts.dryRun ? 'All' : undefined, fieldManager: opts.fieldManager },
    });
  }

  delete(ref: ResourceRef, name: string, namespace?: string, body?: unknown): Promise<unknown> {
    return this.request('DELETE', resourcePath(ref, namespace, name), { body });
  }

  /** Server-side apply of a (partial) object under fieldManager. */
  apply<T extends KubeObject = KubeObject>(
    ref: ResourceRef,
    obj: KubeObject,
    opts: { fieldManager: string; force?: boolean; subresource?: string; dryRun?: boolean },
  ): Promise<T> {
    const name = obj.metadata?.name;
    if (!name) throw new Error('apply needs metadata.name');
    return this.request<T>('PATCH', resourcePath(ref, obj.metadata?.namespace, name, opts.subresource), {
      body: obj,
      contentType: PATCH.apply,
      query: {
        fieldManager: opts.fieldManager,
        force: opts.force ? 'true' : undefined,
        dryRun: opts.dryRun ? 'All' : undefined,
      },
    });
  }

  patch<T extends KubeObject = KubeObject>(
    ref: ResourceRef,
    name: string,
    patch: unknown,
    opts: { namespace?: string; type?: keyof typeof PATCH; fieldManager?: string; subresource?: string } = {},
  ): Promise<T> {
    return this.request<T>('PATCH', resourcePath(ref, opts.namespace, name, opts.subresource), {
      body: patch,
      contentType: PATCH[opts.type ?? 'merge'],
      query: { fieldManager: opts.fieldManager },
    });
  }

  close(): void {
    this.agent.destroy();
    this.watchAgent.destroy();
  }
}

export interface KubeList<T> {
  apiVersion: string;
  kind: string;
  metadata: { resourceVersion?: string; continue?: string };
  items: T[];
}

export function resourcePath(
  ref: ResourceRef,
  namespace?: string,
  name?: string,
  subresource?: string,
): string {
  let p = ref.group ? `/apis/${ref.group}/${ref.version}` : `/api/${ref.version}`;
  if (ref.namespaced && namespace) p += `/namespaces/${encodeURIComponent(namespace)}`;
  p += `/${ref.resource}`;
  if (name) p += `/${encodeURIComponent(name)}`;
  if (subresource) p += `/${subresource}`;
  return p;
}

/**
 * The resource a request's path names, with its subresource (`pods`, `instances/status`; `other`
 * for a path that names none): the reverse of resourcePath, for the write metric's label.
 */
export function resourceOfPath(path: string): string {
  const parts = path.split('?')[0]!.split('/').filter(Boolean);
  let rest = parts[0] === 'api' ? parts.slice(2) : parts[0] === 'apis' ? parts.slice(3) : [];
  // A namespace's own objects (a namespace itself is `namespaces` with at most a name).
  if (rest[0] === 'namespaces' && rest.length >= 3) rest = rest.slice(2);
  if (!rest[0]) return 'other';
  return rest[2] ? `${rest[0]}/${rest[2]}` : rest[0];
}

function toApiError(status: number, body: unknown, what: string): ApiError {
  const s = (typeof body === 'object' && body !== null ? body : {}) as { reason?: string; message?: string };
  const message = s.message ?? (typeof body === 'string' ? body.slice(0, 500) : '');
  return new ApiError(status, s.reason ?? String(status), `${what}: ${status} ${message}`.trim(), body);
}
