// The admission webhook server: AdmissionReview v1 over HTTPS for the handlers capabilities
// register, with a self-generated or file-mounted (hot-reloaded) serving certificate, and pure
// builders for the webhook configurations that point the apiserver at it.
import { isRecord, type JsonPatchOp } from '../api/jsonpatch.ts';
import { X509Certificate, createPrivateKey } from 'node:crypto';
import fs from 'node:fs';
import { readFile } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import https from 'node:https';
import path from 'node:path';
import { limitServer, listen, serverOptions, type ServerGuard, type ServerLimits } from '../server/http.ts';
import { rootLogger, ThrottledLog, type Logger } from '../observability/log.ts';
import { webhookMetrics } from '../observability/metrics.ts';
import { createCertificateAuthority } from './certificates.ts';
import { ServingSecret, type ServingSecretOptions } from './secret.ts';
import type { KubeObject } from '../api/meta.ts';

export type Operation = 'CREATE' | 'UPDATE' | 'DELETE' | 'CONNECT';

export interface GroupVersionKind {
  group: string;
  version: string;
  kind: string;
}

export interface GroupVersionResource {
  group: string;
  version: string;
  resource: string;
}

export interface UserInfo {
  username?: string;
  uid?: string;
  groups?: string[];
  extra?: Record<string, string[]>;
}

/** admission.k8s.io/v1 AdmissionRequest. */
export interface AdmissionRequest {
  uid: string;
  kind: GroupVersionKind;
  resource: GroupVersionResource;
  subResource?: string;
  requestKind?: GroupVersionKind;
  requestResource?: GroupVersionResource;
  requestSubResource?: string;
  name?: string;
  namespace?: string;
  operation: Operation;
  userInfo: UserInfo;
  object?: KubeObject;
  oldObject?: KubeObject;
  dryRun?: boolean;
  options?: KubeObject;
}

export interface AdmissionStatus {
  code?: number;
  message: string;
  reason?: string;
}

export type AdmissionResult =
  | { allowed: true; patch?: JsonPatchOp[]; warnings?: string[] }
  | { allowed: false; status: AdmissionStatus; warnings?: string[] };

export type AdmissionHandler = (req: AdmissionRequest) => Promise<AdmissionResult> | AdmissionResult;

interface AdmissionResponse {
  uid: string;
  allowed: boolean;
  patchType?: 'JSONPatch';
  patch?: string;
  status?: AdmissionStatus;
  warnings?: string[];
}

export type WebhookCertificates =
  /** A CA and serving certificate created at start; register with the server's caBundle. */
  | { kind: 'generated'; dnsNames: string[]; ipAddresses?: string[] }
  /** PEM files (user-supplied or a cert-manager secret volume), reloaded when they change. */
  | { kind: 'files'; certFile: string; keyFile: string; caFile?: string }
  /**
   * A Secret that every replica shares, created and renewed by Berth (secret.ts); checked every
   * `checkMs` (default a minute), so a renewal by another replica is served within that.
   */
  | ({ kind: 'secret'; checkMs?: number } & ServingSecretOptions);

export interface WebhookServerOptions {
  certificates: WebhookCertificates;
  /** Default 127.0.0.1; in a cluster, 0.0.0.0 so the Service can reach it. */
  host?: string;
  /** Default 9443 (controller-runtime's); 0 picks a free port, read it from `port` after start(). */
  port?: number;
  /** Default 5000. A handler still running then is answered allowed=false, code 500. */
  handlerTimeoutMs?: number;
  /** Default defaultMaxRequestBytes. */
  maxRequestBytes?: number;
  /**
   * Default 64 MiB: bytes of request bodies held (received, not yet answered) at once, which bounds
   * memory; a request that would go over it is answered 429. A slow sender holds only what it sent.
   */
  maxInFlightBytes?: number;
  /** Default webhookServerLimits. */
  limits?: Partial<ServerLimits>;
  logger?: Logger;
}

/** 7 MiB, controller-runtime's: an UPDATE carries two objects of up to 3 MiB each. */
export const defaultMaxRequestBytes = 7 * 1024 * 1024;
/** Nine of the largest requests, thousands of usual ones (a few KiB each). */
export const defaultMaxInFlightBytes = 64 * 1024 * 1024;

/**
 * Sized for bursts of admission requests (the ReplicaSet controller creates up to 500 pods at
 * once) on a small replica. A request refused for load is answered 429 without Retry-After, and a
 * connection over the limit is closed at once: either way the apiserver applies the webhook's
 * failurePolicy immediately (client-go retries a webhook call only when told Retry-After), where
 * a queue would make it wait out the webhook's timeout first and hold the request meanwhile.
 */
export const webhookServerLimits: ServerLimits = {
  // The apiserver sends a review at once: only a slow or hostile client needs more than a moment.
  headersTimeoutMs: 5_000,
  requestTimeoutMs: 10_000,
  // Longer than Go's default client idle timeout (90 s), so the apiserver closes idle connections
  // first and never sends a POST on a connection the server is closing at that moment. One it
  // dialled and never used goes at the headers timeout, as from a Go server (server/http.ts).
  keepAliveTimeoutMs: 120_000,
  // Behind a Service a connection stays on one replica; reconnecting now and then (the last
  // answer says Connection: close, so no request is lost) spreads the apiserver over replicas.
  maxRequestsPerConnection: 1000,
  // The requests in flight and room for the apiservers' idle connections (client-go keeps 25 per
  // host). Go's client dials for every call that finds no idle connection, so under load it opens
  // many that it then drops: closed as they are accepted they cost nothing, accepted they cost a
  // TLS handshake each, the work of about four reviews.
  maxConnections: 600,
  maxInFlight: 500,
};

const healthPath = '/healthz';
const reloadDebounceMs = 200;

class HttpError extends Error {
  readonly code: number;
  constructor(code: number, message: string) {
    super(message);
    this.code = code;
  }
}

interface Route {
  name: string;
  handler: AdmissionHandler;
  // Label lookups made once per route rather than hashed again on every request.
  metrics: {
    latency: { startTimer(): () => void };
    inFlight: { inc(): void; dec(): void };
    byCode: Map<number, { inc(): void }>;
  };
}

interface ServingPair {
  cert: string;
  key: string;
}

export class WebhookServer {
  private readonly certificates: WebhookCertificates;
  private readonly host: string;
  private readonly requestedPort: number;
  private readonly handlerTimeoutMs: number;
  private readonly maxRequestBytes: number;
  private readonly maxInFlightBytes: number;
  private readonly limits: ServerLimits;
  private readonly log: Logger;
  private readonly badRequests: ThrottledLog;
  private readonly routes = new Map<string, Route>();
  private server: https.Server | undefined;
  private guard: ServerGuard | undefined;
  private heldBytes = 0;
  private serving: ServingPair | undefined;
  private ca: string | undefined;
  private watchers: fs.FSWatcher[] = [];
  private secretTimer: NodeJS.Timeout | undefined;
  private reloadTimer: NodeJS.Timeout | undefined;
  // Reloads run one after another, so a slow read cannot install an older pair over a newer one.
  private reloads: Promise<void> = Promise.resolve();
  private stopping = false;

  constructor(opts: WebhookServerOptions) {
    this.certificates = opts.certificates;
    this.host = opts.host ?? '127.0.0.1';
    this.requestedPort = opts.port ?? 9443;
    this.handlerTimeoutMs = opts.handlerTimeoutMs ?? 5000;
    this.maxRequestBytes = opts.maxRequestBytes ?? defaultMaxRequestBytes;
    this.maxInFlightBytes = opts.maxInFlightBytes ?? defaultMaxInFlightBytes;
    this.limits = { ...webhookServerLimits, ...opts.limits };
    this.log = opts.logger ?? rootLogger.child({ component: 'webhook' });
    this.badRequests = new ThrottledLog(this.log);
    // Bad limits fail here, before anything starts.
    serverOptions(this.limits);
  }

  /** Serves `handler` at `path`; `name` labels its metrics and logs (default: the path). */
  register(path: string, handler: AdmissionHandler, opts: { name?: string } = {}): void {
    if (!path.startsWith('/')) throw new Error(`webhook path must start with '/': ${path}`);
    if (path === healthPath || this.routes.has(path)) throw new Error(`webhook path already in use: ${path}`);
    const name = opts.name ?? path;
    this.routes.set(path, {
      name,
      handler,
      metrics: {
        latency: webhookMetrics.latency.labels({ webhook: name }),
        inFlight: webhookMetrics.inFlight.labels({ webhook: name }),
        byCode: new Map(),
      },
    });
  }

  /** PEM of the CA that signed the serving certificate, when known: the webhook configurations' caBundle. */
  get caBundle(): string | undefined {
    return this.ca;
  }

  /** The bound port, once started. */
  get port(): number {
    const address = this.server?.address();
    if (!address || typeof address === 'string') throw new Error('webhook server is not started');
    return address.port;
  }

  /** https://host:port, for url-mode client configs. */
  get url(): string {
    const host = this.host.includes(':') ? `[${this.host}]` : this.host;
    return `https://${host}:${this.port}`;
  }

  async start(): Promise<void> {
    if (this.server) throw new Error('webhook server is already started');
    this.serving = await this.loadCertificates();
    const server = https.createServer({ ...this.serving, ...serverOptions(this.limits) });
    this.guard = limitServer(server, 'webhook', this.limits, this.handlerTimeoutMs, this.log);
    server.on('request', (req: IncomingMessage, res: ServerResponse) => {
      this.serve(req, res).catch((err: unknown) => {
        this.log.error({ err }, 'webhook request failed');
        this.sendError(res, new HttpError(500, 'internal error'));
      });
    });
    // Mostly clients that do not trust our CA, e.g. an apiserver with a stale caBundle.
    server.on('tlsClientError', (err) => this.log.debug({ err }, 'TLS handshake failed'));
    await listen(server, this.requestedPort, this.host, this.limits);
    // After listen, an unhandled 'error' (e.g. EMFILE on accept) would crash the process.
    server.on('error', (err) => this.log.error({ err }, 'webhook server error'));
    this.server = server;
    if (this.certificates.kind === 'files') this.watch(this.certificates);
    if (this.certificates.kind === 'secret') this.poll(this.certificates);
    this.log.info({ port: this.port, paths: [...this.routes.keys()] }, 'webhook server started');
  }

  /** Stops listening, lets requests in flight finish (bounded by the handler timeout), closes connections. */
  async stop(): Promise<void> {
    for (const watcher of this.watchers) watcher.close();
    this.watchers = [];
    clearTimeout(this.reloadTimer);
    clearInterval(this.secretTimer);
    const server = this.server;
    if (!server) return;
    this.stopping = true;
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    server.closeIdleConnections();
    const force = setTimeout(() => server.closeAllConnections(), this.handlerTimeoutMs + 1000);
    await closed;
    clearTimeout(force);
    await this.reloads;
    this.server = undefined;
    this.stopping = false;
  }

  private async loadCertificates(): Promise<ServingPair> {
    const source = this.certificates;
    if (source.kind === 'files') {
      const files = await readCertificateFiles(source);
      this.ca = files.ca;
      return { cert: files.cert, key: files.key };
    }
    if (source.kind === 'secret') {
      try {
        const shared = await new ServingSecret(source).ensure();
        this.ca = shared.ca;
        return { cert: shared.cert, key: shared.key };
      } catch (err) {
        // No access to the Secret yet (a Role not applied, an apiserver not reachable): serve with a
        // certificate of this replica's own rather than not at all; the poll moves to the Secret
        // as soon as it can be read, and registration follows the caBundle.
        this.log.error(
          { err, secret: `${source.namespace}/${source.name}` },
          'cannot keep the webhook certificate in its Secret; serving one generated for this replica until it can',
        );
      }
    }
    const ca = await createCertificateAuthority('berth-webhook-ca');
    const serving = await ca.issue({
      commonName: source.dnsNames[0] ?? source.ipAddresses?.[0] ?? 'berth-webhook',
      dnsNames: source.dnsNames,
      ipAddresses: source.ipAddresses ?? [],
      usage: 'server',
    });
    this.ca = ca.certPem;
    return { cert: serving.certPem, key: serving.keyPem };
  }

  private watch(source: Extract<WebhookCertificates, { kind: 'files' }>): void {
    const files = [source.certFile, source.keyFile, ...(source.caFile ? [source.caFile] : [])];
    // Watch directories, not files: both an atomic rename and a secret volume's update (a new
    // '..data' symlink swapped in) replace the inode a file watch would hold. Any event in the
    // directory schedules a reload, which compares contents and ignores unrelated changes.
    for (const dir of new Set(files.map((f) => path.dirname(f)))) {
      const watcher = fs.watch(dir, () => {
        clearTimeout(this.reloadTimer);
        this.reloadTimer = setTimeout(() => {
          this.reloads = this.reloads.then(() =>
            this.reload(() => readCertificateFiles(source), source.certFile),
          );
        }, reloadDebounceMs);
      });
      watcher.on('error', (err) => this.log.error({ err, dir }, 'certificate directory watch failed'));
      this.watchers.push(watcher);
    }
  }

  /** Checks the shared Secret now and then: another replica may have renewed it. */
  private poll(source: Extract<WebhookCertificates, { kind: 'secret' }>): void {
    const secret = new ServingSecret(source);
    this.secretTimer = setInterval(() => {
      this.reloads = this.reloads.then(() =>
        this.reload(() => secret.ensure(), `secret ${source.namespace}/${source.name}`),
      );
    }, source.checkMs ?? 60_000);
    this.secretTimer.unref();
  }

  /** Installs what `read` returns if it differs from what is served; a failure keeps the old pair. */
  private async reload(
    read: () => Promise<{ cert: string; key: string; ca?: string | undefined }>,
    from: string,
  ): Promise<void> {
    try {
      const next = await read();
      if (!this.server || this.stopping) return;
      if (next.cert === this.serving?.cert && next.key === this.serving.key && next.ca === this.ca) return;
      this.server.setSecureContext({ cert: next.cert, key: next.key });
      this.serving = { cert: next.cert, key: next.key };
      this.ca = next.ca;
      this.log.info({ from }, 'serving certificate reloaded');
    } catch (err) {
      this.log.error({ err, from }, 'serving certificate reload failed, keeping the old one');
    }
  }

  private async serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const urlPath = (req.url ?? '/').split('?')[0] ?? '/';
    if (urlPath === healthPath) {
      if (req.method === 'GET' || req.method === 'HEAD') return this.send(res, 200, 'ok');
      return this.sendError(res, new HttpError(405, `method ${req.method} not allowed`));
    }
    const route = this.routes.get(urlPath);
    if (!route) return this.sendError(res, new HttpError(404, `no webhook at ${urlPath}`));

    const { metrics } = route;
    const endTimer = metrics.latency.startTimer();
    metrics.inFlight.inc();
    let held = 0;
    res.once('close', () => {
      this.heldBytes -= held;
      metrics.inFlight.dec();
      endTimer();
      let requests = metrics.byCode.get(res.statusCode);
      if (!requests) {
        requests = webhookMetrics.requests.labels({ webhook: route.name, code: String(res.statusCode) });
        metrics.byCode.set(res.statusCode, requests);
      }
      requests.inc();
    });
    if (!this.guard!.admit(res)) {
      return this.sendError(
        res,
        new HttpError(429, `over ${this.limits.maxInFlight} admission requests in flight`),
      );
    }
    const hold = (bytes: number): HttpError | undefined => {
      if (this.heldBytes + bytes > this.maxInFlightBytes) {
        this.guard!.count('in_flight_bytes');
        return new HttpError(429, `over ${this.maxInFlightBytes} bytes of admission requests in flight`);
      }
      this.heldBytes += bytes;
      held += bytes;
      return undefined;
    };

    let request: AdmissionRequest;
    try {
      request = await this.readRequest(req, hold);
    } catch (err) {
      // Gone, or dropped for its request timeout (counted in berth_http_rejected_total): no one to answer.
      if (req.socket.destroyed) return;
      const error = err instanceof HttpError ? err : new HttpError(400, String(err));
      this.badRequests.warn(
        `${route.name} ${error.code}`,
        { webhook: route.name, code: error.code, err: error.message },
        'bad admission request',
      );
      return this.sendError(res, error);
    }
    const admitted = this.admit(route, request);
    // A synchronous handler (every one Berth has) is answered without a timer or a promise.
    const response = admitted instanceof Promise ? await admitted : admitted;
    this.send(res, 200, { apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', response });
  }

  private async readRequest(
    req: IncomingMessage,
    hold: (bytes: number) => HttpError | undefined,
  ): Promise<AdmissionRequest> {
    if (req.method !== 'POST') throw new HttpError(405, `method ${req.method} not allowed, use POST`);
    const contentType = (req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
    if (contentType !== 'application/json') {
      throw new HttpError(400, `content type ${contentType || '(none)'} not supported, use application/json`);
    }
    const declared = Number(req.headers['content-length'] ?? 0);
    if (declared > this.maxRequestBytes) throw this.tooLarge();
    const body = await readBody(req, (size, chunk) =>
      size > this.maxRequestBytes ? this.tooLarge() : hold(chunk),
    );
    if (!nestedWithin(body, maxJsonDepth))
      throw new HttpError(400, `body nests deeper than ${maxJsonDepth} levels`);
    let review: unknown;
    try {
      review = JSON.parse(body.toString('utf8'));
    } catch {
      throw new HttpError(400, 'body is not JSON');
    }
    return admissionRequestOf(review);
  }

  private tooLarge(): HttpError {
    return new HttpError(413, `request body over ${this.maxRequestBytes} bytes`);
  }

  private admit(route: Route, request: AdmissionRequest): AdmissionResponse | Promise<AdmissionResponse> {
    let result: ReturnType<AdmissionHandler>;
    try {
      result = route.handler(request);
    } catch (err) {
      return this.failed(route, request, err);
    }
    if (!(result instanceof Promise)) return responseOf(request.uid, result);
    return withTimeout(result, this.handlerTimeoutMs).then(
      (r) => responseOf(request.uid, r),
      (err: unknown) => this.failed(route, request, err),
    );
  }

  private failed(route: Route, request: AdmissionRequest, err: unknown): AdmissionResponse {
    const { uid } = request;
    const message = err instanceof Error ? err.message : String(err);
    this.log.error(
      {
        err,
        webhook: route.name,
        uid,
        operation: request.operation,
        kind: request.kind.kind,
        namespace: request.namespace,
        name: request.name,
      },
      'admission handler failed',
    );
    return { uid, allowed: false, status: { code: 500, message } };
  }

  private sendError(res: ServerResponse, err: HttpError): void {
    // Before reusing the connection Node reads what is left of the body: only a declared size
    // within the limit is worth it (cheaper than the client's next TLS handshake).
    const declared = res.req.headers['content-length'];
    if (!res.req.complete && !(declared !== undefined && Number(declared) <= this.maxRequestBytes)) {
      res.setHeader('connection', 'close');
    }
    if (err.code === 405) res.setHeader('allow', 'POST');
    this.send(res, err.code, {
      apiVersion: 'v1',
      kind: 'Status',
      status: 'Failure',
      code: err.code,
      message: err.message,
    });
  }

  private send(res: ServerResponse, code: number, body: unknown): void {
    if (res.headersSent || res.destroyed) return;
    const text = typeof body === 'string' ? body : JSON.stringify(body);
    res.setHeader(
      'content-type',
      typeof body === 'string' ? 'text/plain; charset=utf-8' : 'application/json',
    );
    res.setHeader('content-length', Buffer.byteLength(text));
    if (this.stopping) res.setHeader('connection', 'close');
    res.writeHead(code).end(text);
  }
}

async function readCertificateFiles(source: {
  certFile: string;
  keyFile: string;
  caFile?: string;
}): Promise<ServingPair & { ca: string | undefined }> {
  const [cert, key, ca] = await Promise.all([
    readFile(source.certFile, 'utf8'),
    readFile(source.keyFile, 'utf8'),
    source.caFile ? readFile(source.caFile, 'utf8') : undefined,
  ]);
  // Catches half-written files and a key from another rotation before they reach the TLS context.
  if (!new X509Certificate(cert).checkPrivateKey(createPrivateKey(key))) {
    throw new Error(`${source.keyFile} does not match ${source.certFile}`);
  }
  if (ca !== undefined) new X509Certificate(ca);
  return { cert, key, ca };
}

/** Reads the body while `accept(size so far, chunk size)` returns no error; after one, discards the rest. */
function readBody(
  req: IncomingMessage,
  accept: (size: number, chunk: number) => Error | undefined,
): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let failed = false;
    req.on('data', (chunk: Buffer) => {
      if (failed) return;
      size += chunk.length;
      const err = accept(size, chunk.length);
      if (err) {
        failed = true;
        chunks.length = 0;
        reject(err);
      } else chunks.push(chunk);
    });
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

// The apiserver decodes nothing nested deeper than 10,000 levels (Go's encoding/json limit); the
// review wraps the object in a few more. JSON.parse takes about a microsecond per level, so 7 MiB
// of brackets would hold the event loop for seconds.
const maxJsonDepth = 10_100;

/** Whether no array or object in the JSON text `body` nests deeper than `max`: one pass over the bytes. */
export function nestedWithin(body: Buffer, max: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < body.length; i++) {
    const c = body[i]!;
    if (inString) {
      if (c === 0x5c)
        i++; // a backslash escapes the next byte
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x5b || c === 0x7b) {
      if (++depth > max) return false;
    } else if (c === 0x5d || c === 0x7d) depth--;
  }
  return true;
}

const operations: readonly string[] = ['CREATE', 'UPDATE', 'DELETE', 'CONNECT'];

/** Checks the fields handlers rely on; the rest of the request is passed through as sent. */
function admissionRequestOf(review: unknown): AdmissionRequest {
  if (
    !isRecord(review) ||
    review['apiVersion'] !== 'admission.k8s.io/v1' ||
    review['kind'] !== 'AdmissionReview'
  ) {
    throw new HttpError(400, 'body is not an admission.k8s.io/v1 AdmissionReview');
  }
  const request = review['request'];
  if (!isRecord(request)) throw new HttpError(400, 'AdmissionReview has no request');
  if (typeof request['uid'] !== 'string' || request['uid'] === '') {
    throw new HttpError(400, 'AdmissionReview request has no uid');
  }
  if (typeof request['operation'] !== 'string' || !operations.includes(request['operation'])) {
    throw new HttpError(400, `AdmissionReview request has an unknown operation`);
  }
  if (!isRecord(request['kind']) || !isRecord(request['resource'])) {
    throw new HttpError(400, 'AdmissionReview request has no kind or resource');
  }
  return request as unknown as AdmissionRequest;
}

function responseOf(uid: string, result: AdmissionResult): AdmissionResponse {
  const response: AdmissionResponse = { uid, allowed: result.allowed };
  if (result.allowed && result.patch && result.patch.length > 0) {
    response.patchType = 'JSONPatch';
    response.patch = Buffer.from(JSON.stringify(result.patch)).toString('base64');
  }
  if (!result.allowed) response.status = result.status;
  if (result.warnings && result.warnings.length > 0) response.warnings = result.warnings;
  return response;
}

async function withTimeout(result: Promise<AdmissionResult>, ms: number): Promise<AdmissionResult> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`admission handler timed out after ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([result, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
