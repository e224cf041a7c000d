// Berth's HTTP(S) servers: the manager's /metrics on one address and /healthz and /readyz on
// another, as controller-runtime serves them, and the limits every server (the admission webhook
// server included) applies so that a slow or flooding client cannot hold the process.
import type { IncomingMessage, Server, ServerOptions, ServerResponse } from 'node:http';
import { http } from '../platform/http.ts';
import type { AddressInfo, Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { rootLogger, ThrottledLog, type Logger } from '../observability/log.ts';
import { httpServerMetrics } from '../observability/metrics.ts';

export type Route = () => Promise<{ status: number; body: string; contentType?: string }>;

/** Parses "host:port", ":port" (all interfaces) or "0" (disabled). */
export function parseBindAddress(addr: string): { host: string; port: number } | undefined {
  if (addr === '0' || addr === '') return undefined;
  const i = addr.lastIndexOf(':');
  const host = i > 0 ? addr.slice(0, i).replace(/^\[|\]$/g, '') : '0.0.0.0';
  const port = Number(addr.slice(i + 1));
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error(`bad bind address "${addr}"`);
  return { host, port };
}

export interface ServerLimits {
  /** The TLS handshake, and every request's headers, must arrive within this (slowloris). */
  headersTimeoutMs: number;
  /** Every request, body included, must arrive within this. */
  requestTimeoutMs: number;
  /** An idle keep-alive connection is closed after this. */
  keepAliveTimeoutMs: number;
  /** A connection is closed after this many requests; 0: no limit. */
  maxRequestsPerConnection: number;
  /** Connections beyond this are closed as they are accepted, before any TLS work. */
  maxConnections: number;
  /**
   * Connections from one source address beyond this are closed as they are accepted, before any
   * TLS work: at most maxConnections, so that one client leaves room for the others.
   */
  maxConnectionsPerAddress: number;
  /** Requests beyond this many being served (from their headers to the end of the answer) are answered 429 at once. */
  maxInFlight: number;
}

/**
 * The metrics and health servers': a scraper and the kubelet's probes need little. A scraper keeps
 * one connection, the kubelet opens one per probe: eight addresses must join to fill either server.
 */
export const probeServerLimits: ServerLimits = {
  headersTimeoutMs: 5_000,
  requestTimeoutMs: 10_000,
  keepAliveTimeoutMs: 120_000,
  maxRequestsPerConnection: 0,
  maxConnections: 64,
  maxConnectionsPerAddress: 8,
  maxInFlight: 16,
};

/** Throws on limits Node would reject or that would leave a client unbounded. */
function validateLimits(limits: ServerLimits): void {
  for (const [name, value] of Object.entries(limits)) {
    const zeroAllowed = name === 'maxRequestsPerConnection';
    if (!Number.isInteger(value) || value < (zeroAllowed ? 0 : 1)) {
      throw new Error(
        `${name} must be a${zeroAllowed ? ' non-negative' : ' positive'} integer, not ${value}`,
      );
    }
  }
  if (limits.maxConnectionsPerAddress > limits.maxConnections) {
    throw new Error(
      `the connections per address (${limits.maxConnectionsPerAddress}) must not exceed the connections (${limits.maxConnections})`,
    );
  }
  if (limits.headersTimeoutMs > limits.requestTimeoutMs) {
    throw new Error(
      `the headers timeout (${limits.headersTimeoutMs} ms) must not exceed the request timeout (${limits.requestTimeoutMs} ms)`,
    );
  }
}

/**
 * Options for http(s).createServer. Node enforces the headers and request timeouts only when it
 * checks its connections, every 30 s by default: a slow client would live up to that much longer.
 */
export function serverOptions(limits: ServerLimits): ServerOptions & { handshakeTimeout: number } {
  validateLimits(limits);
  return {
    headersTimeout: limits.headersTimeoutMs,
    requestTimeout: limits.requestTimeoutMs,
    connectionsCheckingInterval: Math.min(1000, Math.ceil(limits.headersTimeoutMs / 4)),
    handshakeTimeout: limits.headersTimeoutMs,
  };
}

/** Why a server refused or dropped a client, as counted in berth_http_rejected_total. */
export type Rejection =
  | 'connections'
  | 'connections_per_address'
  | 'client_certificate'
  | 'in_flight'
  | 'in_flight_bytes'
  | 'timeout';

const refusalText: Record<Rejection, string> = {
  connections: 'over its connection limit',
  connections_per_address: "over one address's connection limit",
  client_certificate: 'no client certificate that --webhook-client-ca signs',
  in_flight: 'over its limit of requests in flight',
  in_flight_bytes: 'over its limit of request bytes in flight',
  timeout: 'too slow',
};

/** The open connections of each source address, within a cap: what keeps one client from filling a server. */
export class AddressConnections {
  private readonly max: number;
  private readonly open = new Map<string, number>();

  constructor(max: number) {
    this.max = max;
  }

  /** Counts a connection from `address`, unless it already has `max` open. */
  admit(address: string): boolean {
    const n = this.open.get(address) ?? 0;
    if (n >= this.max) return false;
    this.open.set(address, n + 1);
    return true;
  }

  release(address: string): void {
    const n = this.open.get(address) ?? 0;
    if (n <= 1) this.open.delete(address);
    else this.open.set(address, n - 1);
  }

  /** Addresses with a connection open (the map holds no others). */
  get addresses(): number {
    return this.open.size;
  }
}

/**
 * Applies the connection limits of `limits` to a server created with serverOptions(limits), and
 * counts what it refuses. `handlerTimeoutMs` bounds how long the server itself may take to answer.
 */
export function limitServer(
  server: Server,
  name: string,
  limits: ServerLimits,
  handlerTimeoutMs: number,
  log: Logger,
): ServerGuard {
  server.keepAliveTimeout = limits.keepAliveTimeoutMs;
  server.maxRequestsPerSocket = limits.maxRequestsPerConnection;
  server.maxConnections = limits.maxConnections;
  // Inactivity while a request is being served: a client that stops reading its answers (Node
  // then stops reading its requests, and no other timeout applies).
  server.timeout = limits.requestTimeoutMs + handlerTimeoutMs;
  const guard = new ServerGuard(name, log, limits);
  server.on('drop', () => guard.count('connections'));
  const byAddress = new AddressConnections(limits.maxConnectionsPerAddress);
  server.on('connection', (socket: Socket) => {
    // A socket already closed by its peer may have no address left; such one is gone anyway.
    const address = socket.remoteAddress ?? '';
    if (!byAddress.admit(address)) {
      guard.count('connections_per_address', { address });
      socket.destroy();
      return;
    }
    httpServerMetrics.connections.inc({ server: name });
    socket.once('close', () => {
      byAddress.release(address);
      httpServerMetrics.connections.dec({ server: name });
    });
  });
  // Replaces Node's default answer to a bad or late request, only to count the timeouts.
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Duplex) => {
    // Node times a connection's first request from the connect, so one that never sent a byte is
    // dropped at the headers timeout too: mostly a client's spare connection (Go's transport dials
    // one for a call that then takes an idle connection, and pools it). Closed as Go's own server
    // closes it: without an answer, which a Go client would log as unsolicited on an idle
    // connection, and uncounted, since no client was refused (maxConnections bounds silent ones).
    if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT' && (socket as Socket).bytesRead === 0) {
      socket.destroy();
      return;
    }
    const status =
      err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
        ? 408
        : err.code === 'HPE_HEADER_OVERFLOW'
          ? 431
          : err.code?.startsWith('HPE_')
            ? 400
            : undefined;
    if (status === 408) guard.count('timeout');
    if (status && socket.writable && (socket as Socket).bytesWritten === 0) {
      socket.write(`HTTP/1.1 ${status} ${http.STATUS_CODES[status]}\r\nConnection: close\r\n\r\n`);
    }
    socket.destroy();
  });
  server.on('tlsClientError', (err: NodeJS.ErrnoException) => {
    if (err.code === 'ERR_TLS_HANDSHAKE_TIMEOUT') guard.count('timeout');
  });
  return guard;
}

/** The in-flight limit of one server, and the count (metric and throttled log) of what it refuses. */
export class ServerGuard {
  private readonly name: string;
  private readonly log: ThrottledLog;
  private readonly limits: ServerLimits;
  private inFlight = 0;

  constructor(name: string, log: Logger, limits: ServerLimits) {
    this.name = name;
    this.log = new ThrottledLog(log);
    this.limits = limits;
  }

  /** False when maxInFlight requests are being served; else counts `res` until it closes. */
  admit(res: ServerResponse): boolean {
    if (this.inFlight >= this.limits.maxInFlight) {
      this.count('in_flight');
      return false;
    }
    this.inFlight++;
    res.once('close', () => this.inFlight--);
    return true;
  }

  /** Counts a refusal; `fields` (the client's address, say) go into its log line, if one is due. */
  count(reason: Rejection, fields: Record<string, unknown> = {}): void {
    httpServerMetrics.rejected.inc({ server: this.name, reason });
    const { maxConnections, maxConnectionsPerAddress, maxInFlight, headersTimeoutMs, requestTimeoutMs } =
      this.limits;
    this.log.warn(
      reason,
      {
        server: this.name,
        reason,
        ...fields,
        ...(reason === 'connections' ? { maxConnections } : {}),
        ...(reason === 'connections_per_address' ? { maxConnectionsPerAddress } : {}),
        ...(reason === 'in_flight' ? { maxInFlight } : {}),
        ...(reason === 'timeout' ? { headersTimeoutMs, requestTimeoutMs } : {}),
      },
      `${this.name} server is refusing clients (${reason}: ${refusalText[reason]}); counted in berth_http_rejected_total`,
    );
  }
}

/** Listens with an accept queue long enough for `maxConnections`, so a burst is queued, not dropped by the kernel. */
export function listen(server: Server, port: number, host: string, limits: ServerLimits): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ port, host, backlog: Math.max(511, limits.maxConnections) }, () => {
      server.off('error', reject);
      resolve();
    });
  });
}

// Gathering metrics takes milliseconds; this only bounds the socket inactivity timeout.
const routeTimeoutMs = 10_000;

export interface RunningServer {
  port: number;
  close(): Promise<void>;
}

export async function serve(
  addr: string,
  name: string,
  routes: Record<string, Route>,
  limits: ServerLimits = probeServerLimits,
  log: Logger = rootLogger.child({ component: `${name}-server` }),
): Promise<RunningServer | undefined> {
  const bind = parseBindAddress(addr);
  if (!bind) return undefined;
  const server = http.createServer(serverOptions(limits));
  const guard = limitServer(server, name, limits, routeTimeoutMs, log);
  server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    const route = routes[(req.url ?? '/').split('?')[0]!];
    if (!route || (req.method !== 'GET' && req.method !== 'HEAD')) {
      res.writeHead(404).end('not found\n');
      return;
    }
    if (!guard.admit(res)) {
      res.writeHead(429).end(`over ${limits.maxInFlight} requests in flight\n`);
      return;
    }
    route().then(
      (r) => res.writeHead(r.status, { 'Content-Type': r.contentType ?? 'text/plain' }).end(r.body),
      (e: unknown) => res.writeHead(500).end(`${e instanceof Error ? e.message : String(e)}\n`),
    );
  });
  await listen(server, bind.port, bind.host, limits);
  return {
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** Reads the body while `accept(size so far, chunk size)` returns no error; after one, discards the rest. */
export function readBody(
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
