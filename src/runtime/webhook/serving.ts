// The serving half of the admission webhook server, run in the webhook thread (thread.ts): TLS,
// HTTP with the server limits, AdmissionReview decoding and answers. The main thread's
// WebhookServer (admission.ts) keeps the certificates and sends them here; a route's handler runs
// here, from the state its capability sends (threaded.ts), or on the main thread, which this
// thread asks and waits for within the handler timeout.
import { isRecord } from '../api/jsonpatch.ts';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { X509Certificate } from 'node:crypto';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import type { SecureContextOptions, TLSSocket } from 'node:tls';
import {
  limitServer,
  listen,
  readBody,
  serverOptions,
  type ServerGuard,
  type ServerLimits,
} from '../server/http.ts';
import { ThrottledLog, type Logger } from '../observability/log.ts';
import { httpServerMetrics, webhookMetrics } from '../observability/metrics.ts';
import type { AdmissionHandler, AdmissionRequest, AdmissionResult, AdmissionStatus } from './admission.ts';

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
  // Half (`berth run`'s default whatever the connections): a client that holds many connections
  // (a stranger's, or a noisy peer's) leaves the apiserver 300, more than it sends at once (its
  // default --max-mutating-requests-inflight is 200) with its idle ones.
  maxConnectionsPerAddress: 300,
  maxInFlight: 500,
};

const healthPath = '/healthz';

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

interface AdmissionResponse {
  uid: string;
  allowed: boolean;
  patchType?: 'JSONPatch';
  patch?: string;
  status?: AdmissionStatus;
  warnings?: string[];
}

export interface ServingOptions {
  host: string;
  port: number;
  certificate: { cert: string; key: string };
  /** PEM of the CA that signs the apiserver's client certificate: without one it signs, no TLS handshake completes. */
  clientCa?: string;
  handlerTimeoutMs: number;
  maxRequestBytes: number;
  maxInFlightBytes: number;
  limits: ServerLimits;
  logger: Logger;
}

/** An HTTPS server answering AdmissionReviews at the registered paths, and /healthz. */
export class AdmissionServing {
  private readonly opts: ServingOptions;
  private readonly log: Logger;
  private readonly badRequests: ThrottledLog;
  private readonly routes = new Map<string, Route>();
  private readonly server: https.Server;
  private readonly guard: ServerGuard;
  private heldBytes = 0;
  private draining = false;

  constructor(opts: ServingOptions) {
    this.opts = opts;
    this.log = opts.logger;
    this.badRequests = new ThrottledLog(this.log);
    this.server = https.createServer({
      ...this.secureContextOf(opts.certificate),
      ...(opts.clientCa ? { requestCert: true, rejectUnauthorized: true } : {}),
      ...serverOptions(opts.limits),
    });
    this.guard = limitServer(this.server, 'webhook', opts.limits, opts.handlerTimeoutMs, this.log);
    recordExpiry(opts.certificate.cert);
    this.server.on('request', (req: IncomingMessage, res: ServerResponse) => {
      this.serve(req, res).catch((err: unknown) => {
        this.log.error({ err }, 'webhook request failed');
        this.sendError(res, new HttpError(500, 'internal error'));
      });
    });
    this.server.on('tlsClientError', (err: NodeJS.ErrnoException, socket: TLSSocket) => {
      // Node gives a certificate that does not verify only as the socket's authorizationError.
      if (err.code === 'ERR_SSL_PEER_DID_NOT_RETURN_A_CERTIFICATE' || socket.authorizationError) {
        this.guard.count('client_certificate', {
          address: socket.remoteAddress,
          error: socket.authorizationError ?? err.code,
        });
        return;
      }
      // Mostly clients that do not trust our CA, e.g. an apiserver with a stale caBundle.
      this.log.debug({ err }, 'TLS handshake failed');
    });
  }

  /** The TLS context of a serving pair: with the client CA, when clients must present a certificate. */
  private secureContextOf(pair: { cert: string; key: string }): SecureContextOptions {
    return { ...pair, ...(this.opts.clientCa ? { ca: this.opts.clientCa } : {}) };
  }

  /** Serves `handler` at `path`; `name` labels its metrics and logs. */
  register(path: string, handler: AdmissionHandler, name: string): void {
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

  /** Listens; the bound port. */
  async listen(): Promise<number> {
    await listen(this.server, this.opts.port, this.opts.host, this.opts.limits);
    // After listen, an unhandled 'error' (e.g. EMFILE on accept) would crash the process.
    this.server.on('error', (err) => this.log.error({ err }, 'webhook server error'));
    return (this.server.address() as AddressInfo).port;
  }

  setCertificate(pair: { cert: string; key: string }): void {
    // A context replaces the whole of the old one: the client CA goes along.
    this.server.setSecureContext(this.secureContextOf(pair));
    recordExpiry(pair.cert);
  }

  /**
   * The replica is leaving its Service: every answer from now on closes its connection. Through a
   * Service a kept-alive connection stays on this replica after its endpoint is gone, so the
   * apiserver dials again, reaching a replica that stays, rather than reusing one that close()
   * would cut under a request (client-go does not retry a POST already written).
   */
  drain(): void {
    this.draining = true;
  }

  /** Stops listening, lets requests in flight finish (bounded by the handler timeout), closes connections. */
  async close(): Promise<void> {
    this.drain();
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    this.server.closeIdleConnections();
    const force = setTimeout(() => this.server.closeAllConnections(), this.opts.handlerTimeoutMs + 1000);
    await closed;
    clearTimeout(force);
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
    if (!this.guard.admit(res)) {
      return this.sendError(
        res,
        new HttpError(429, `over ${this.opts.limits.maxInFlight} admission requests in flight`),
      );
    }
    const hold = (bytes: number): HttpError | undefined => {
      if (this.heldBytes + bytes > this.opts.maxInFlightBytes) {
        this.guard.count('in_flight_bytes');
        return new HttpError(429, `over ${this.opts.maxInFlightBytes} bytes of admission requests in flight`);
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
    // A synchronous answer (Berth's handlers give one but while a new namespace is awaited) needs
    // no timer or promise.
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
    if (declared > this.opts.maxRequestBytes) throw this.tooLarge();
    const body = await readBody(req, (size, chunk) =>
      size > this.opts.maxRequestBytes ? this.tooLarge() : hold(chunk),
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
    return new HttpError(413, `request body over ${this.opts.maxRequestBytes} bytes`);
  }

  private admit(route: Route, request: AdmissionRequest): AdmissionResponse | Promise<AdmissionResponse> {
    let result: ReturnType<AdmissionHandler>;
    try {
      result = route.handler(request);
    } catch (err) {
      return this.failed(route, request, err);
    }
    if (!(result instanceof Promise)) return responseOf(request.uid, result);
    return withTimeout(result, this.opts.handlerTimeoutMs).then(
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
    if (!res.req.complete && !(declared !== undefined && Number(declared) <= this.opts.maxRequestBytes)) {
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
    if (this.draining) res.setHeader('connection', 'close');
    res.writeHead(code).end(text);
  }
}

/** The serving certificate's end, for the alert that it is near (a renewal that keeps failing). */
function recordExpiry(certPem: string): void {
  const notAfter = new X509Certificate(certPem).validToDate.getTime();
  httpServerMetrics.certificateExpiry.set({ server: 'webhook' }, notAfter / 1000);
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
