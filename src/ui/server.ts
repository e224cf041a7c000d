// The page's HTTP server (node:http, loopback by default): the static page, JSON snapshots of the
// informer caches, one Server-Sent-Events stream that says which sections changed, `berth explain`
// for one object, and `berth plan` of a posted file (the one POST: it reads the cluster and writes
// nothing). Nothing here writes to the cluster. It runs on every replica (it needs no lease) as one
// of the manager's runnables.
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { http } from '../runtime/platform/http.ts';
import { readFileSync } from 'node:fs';
import { getAsset, isSea } from 'node:sea';
import { isIP, type AddressInfo } from 'node:net';
import { explainerOf, explainers, explanationOf, explanationText } from '../explain.ts';
import { manifestsOf, MAX_BYTES, planChange } from '../plan.ts';
import { capabilityPages, type Capability } from '../capability.ts';
import { ApiError } from '../runtime/client/client.ts';
import type { Manager, Runnable } from '../runtime/manager/manager.ts';
import { errorText, type Logger } from '../runtime/observability/log.ts';
import {
  limitServer,
  listen,
  parseBindAddress,
  readBody,
  serverOptions,
  type ServerGuard,
  type ServerLimits,
} from '../runtime/server/http.ts';
import { explainView, planView } from './answers.ts';
import { pageCss, pageHtml } from './assets.ts';
import { UiState, type Section } from './state.ts';
import type { AboutSnapshot, ExplainAnswer, LeaderView } from './types.ts';

/** What the header says of the Berth the page shows, besides what the caches give. */
export interface About {
  version: string;
  controllers: string[];
  leader(): Promise<LeaderView>;
  /** Subscribes to changes of the leader, where they are heard of (berth run's elector). */
  onLeaderChange?(fn: () => void): void;
}

export interface UiOptions {
  /** "host:port"; "0" turns the page off. */
  bindAddress: string;
  /** The capabilities it shows (the enabled ones): their policies, and what their views say. */
  capabilities: Capability[];
  poolLabels: string[];
  /** Host names (besides localhost and IP addresses) the page answers to: a guard against DNS rebinding. */
  allowedHosts: string[];
  /** The flags Berth runs with, for explain (--label-dir). */
  options: Record<string, unknown>;
  berthNamespace: string;
  about: About;
  log: Logger;
  coalesceMs?: number;
}

const limits: ServerLimits = {
  headersTimeoutMs: 10_000,
  requestTimeoutMs: 30_000,
  keepAliveTimeoutMs: 5_000,
  maxRequestsPerConnection: 0,
  maxConnections: 128,
  // Loopback only, and a port-forward's connections all come from 127.0.0.1: no cap of its own.
  maxConnectionsPerAddress: 128,
  maxInFlight: 64,
};
/** Open event streams at most: each holds a connection and an in-flight slot. */
const MAX_STREAMS = 32;
const HEARTBEAT_MS = 15_000;
/** Explain and plan answer within this, or say they took too long. */
const explainTimeoutMs = 20_000;
/** Plans at once: each lists every node and pod from the API, not from the caches. */
const MAX_PLANS = 2;
/** The page script's name among the single executable's assets. */
export const PAGE_ASSET = 'ui/page/app.js';
/** The type /api/plan takes: not one a cross-site form can send, nor a fetch without a preflight. */
const PLAN_TYPE = 'application/yaml';

const securityHeaders = {
  // No inline script, nothing from elsewhere: cluster data that slipped into markup could not run.
  'Content-Security-Policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  'X-Content-Type-Options': 'nosniff',
  'Referrer-Policy': 'no-referrer',
  'Cache-Control': 'no-store',
};

/**
 * The compiled page script: an asset of the single executable (scripts/cli-binary.ts), under this
 * file once built (dist/ui/web), or in dist/ when run from source.
 */
function pageScript(): string | undefined {
  if (isSea()) return getAsset(PAGE_ASSET, 'utf8');
  for (const u of ['./web/page/app.js', '../../dist/ui/web/page/app.js'])
    try {
      return readFileSync(new URL(u, import.meta.url), 'utf8');
    } catch {
      // try the next place
    }
  return undefined;
}

/** True when `host` (a Host header) names localhost, an IP address, or an allowed name. */
export function hostAllowed(host: string | undefined, allowed: string[]): boolean {
  if (!host) return false;
  const name = host.startsWith('[') ? host.slice(1, host.indexOf(']')) : host.replace(/:\d+$/, '');
  return name === 'localhost' || isIP(name) !== 0 || allowed.includes(name.toLowerCase());
}

function json(res: ServerResponse, status: number, body: unknown): void {
  res
    .writeHead(status, { ...securityHeaders, 'Content-Type': 'application/json; charset=utf-8' })
    .end(JSON.stringify(body));
}

/** `work`, or a rejection once `ms` pass first: explain and plan read the API on request. */
function withinDeadline<T>(work: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${ms / 1000} s`)), ms);
  });
  return Promise.race([work, late]).finally(() => clearTimeout(timer));
}

/**
 * Why a POST may not come from the page itself, or undefined: a page of another site can make the
 * browser post to this one (a form, or a fetch in no-cors mode) but not with another content type
 * or without the browser naming its origin.
 */
export function crossSite(headers: IncomingMessage['headers']): string | undefined {
  const type = (headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
  if (type !== PLAN_TYPE) return `content type ${type || '(none)'}: the plan takes ${PLAN_TYPE}`;
  const site = headers['sec-fetch-site'];
  if (site !== undefined && site !== 'same-origin') return `a request from ${site}: only the page may plan`;
  const origin = headers.origin;
  if (origin !== undefined && origin !== `http://${headers.host}`)
    return `a request from ${origin}: only the page may plan`;
  return undefined;
}

const intParam = (v: string | null): number | undefined => {
  const n = Number(v);
  return v !== null && Number.isInteger(n) && n >= 0 ? n : undefined;
};

export class UiServer implements Runnable {
  readonly name = 'ui';
  readonly needLeaderElection = false;
  private readonly manager: Manager;
  private readonly opts: UiOptions;
  private state: UiState | undefined;
  private server: Server | undefined;
  private guard: ServerGuard | undefined;
  private readonly streams = new Set<ServerResponse>();
  private plans = 0;
  private script: string | undefined;
  /** The bound port once started. */
  port: number | undefined;

  constructor(manager: Manager, opts: UiOptions) {
    this.manager = manager;
    this.opts = opts;
  }

  async start(): Promise<void> {
    const bind = parseBindAddress(this.opts.bindAddress);
    if (!bind) return;
    this.script = pageScript();
    if (!this.script) this.opts.log.error('the page script is not built (npm run build): the page says so');
    // Made once the manager runs, its informers start at once and do not hold back /readyz.
    this.state = new UiState(this.manager, {
      capabilities: this.opts.capabilities,
      pages: await capabilityPages(this.opts.capabilities),
      poolLabels: this.opts.poolLabels,
      ...(this.opts.coalesceMs !== undefined ? { coalesceMs: this.opts.coalesceMs } : {}),
    });
    this.state.subscribe((sections) => this.broadcast(sections));
    this.opts.about.onLeaderChange?.(() => this.broadcast(['about']));
    const server = http.createServer(serverOptions(limits));
    this.guard = limitServer(server, 'ui', limits, explainTimeoutMs, this.opts.log);
    server.on('request', (req: IncomingMessage, res: ServerResponse) => this.serve(req, res));
    await listen(server, bind.port, bind.host, limits).catch((e: unknown) => {
      this.state?.stop();
      throw new Error(
        `the page cannot listen on ${this.opts.bindAddress} (${errorText(e)}): pass --ui-bind-address ` +
          'with another address (127.0.0.1:0 for any free port), or 0 to turn the page off',
      );
    });
    this.server = server;
    this.port = (server.address() as AddressInfo).port;
    this.opts.log.info(
      { url: `http://${bind.host.includes(':') ? `[${bind.host}]` : bind.host}:${this.port}/` },
      'the page is served',
    );
  }

  async stop(): Promise<void> {
    this.state?.stop();
    for (const s of this.streams) s.end();
    const server = this.server;
    if (!server) return;
    await new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    });
  }

  private broadcast(sections: (Section | 'about')[]): void {
    const msg = `event: change\ndata: ${JSON.stringify(sections)}\n\n`;
    for (const s of this.streams) s.write(msg);
  }

  private serve(req: IncomingMessage, res: ServerResponse): void {
    const post = req.url?.split('?')[0] === '/api/plan';
    if (post ? req.method !== 'POST' : req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { Allow: post ? 'POST' : 'GET, HEAD' }).end(post ? 'only POST\n' : 'only GET\n');
      return;
    }
    if (!hostAllowed(req.headers.host, this.opts.allowedHosts)) {
      res.writeHead(403).end('host not allowed (--ui-allowed-hosts)\n');
      return;
    }
    if (!this.guard!.admit(res)) {
      res.writeHead(429).end(`over ${limits.maxInFlight} requests in flight\n`);
      return;
    }
    const url = new URL(req.url ?? '/', 'http://page');
    const state = this.state!;
    const q = url.searchParams;
    switch (url.pathname) {
      case '/':
        res.writeHead(200, { ...securityHeaders, 'Content-Type': 'text/html; charset=utf-8' }).end(pageHtml);
        return;
      case '/style.css':
        res.writeHead(200, { ...securityHeaders, 'Content-Type': 'text/css; charset=utf-8' }).end(pageCss);
        return;
      case '/app.js':
        if (!this.script) {
          res.writeHead(503).end('the page script is not built: npm run build\n');
          return;
        }
        res
          .writeHead(200, { ...securityHeaders, 'Content-Type': 'text/javascript; charset=utf-8' })
          .end(this.script);
        return;
      case '/api/nodes': {
        const held = q.get('held') === 'true';
        return json(res, 200, {
          synced: state.hasSynced(),
          ...state.queryNodes({
            text: q.get('text') ?? '',
            pool: q.get('pool') ?? '',
            arch: q.get('arch') ?? '',
            ...(held ? { held } : {}),
            ...(intParam(q.get('offset')) !== undefined ? { offset: intParam(q.get('offset'))! } : {}),
            ...(intParam(q.get('limit')) !== undefined ? { limit: intParam(q.get('limit'))! } : {}),
          }),
        });
      }
      case '/api/policies':
        return json(res, 200, state.policies());
      case '/api/pods':
        return json(res, 200, state.heldPods());
      case '/api/workloads':
        return json(res, 200, state.workloads());
      case '/api/about':
        return void this.about(res);
      case '/api/explain':
        return void this.explain(q, res);
      case '/api/plan':
        return void this.plan(req, q, res);
      case '/api/stream':
        return this.stream(req, res);
      default:
        res.writeHead(404).end('not found\n');
    }
  }

  private async about(res: ServerResponse): Promise<void> {
    const { version, controllers } = this.opts.about;
    const leader = await this.opts.about
      .leader()
      .catch((e: unknown): LeaderView => ({ holder: '', self: false, note: `not known: ${errorText(e)}` }));
    const explainable = Object.fromEntries(explainers.map((e) => [e.resource.kind, e.name]));
    json(res, 200, { version, controllers, leader, explainable } satisfies AboutSnapshot);
  }

  /** `berth explain` of one object: the same code as the command (src/explain.ts), read from the API on request. */
  private async explain(q: URLSearchParams, res: ServerResponse): Promise<void> {
    const e = explainerOf(q.get('kind') ?? '');
    const name = q.get('name') ?? '';
    if (!e || !name)
      return json(res, 400, { error: 'kind (node, pod, instance, ...) and name are required' });
    try {
      const explanation = await withinDeadline(
        explanationOf(
          this.manager.client(),
          e,
          name,
          q.get('namespace') ?? undefined,
          this.opts.options,
          this.opts.berthNamespace,
        ),
        explainTimeoutMs,
      );
      // The lines the command prints, and the same result in parts for the page to render.
      const now = new Date();
      json(res, 200, {
        lines: explanationText(explanation, now),
        view: explainView(explanation, now),
      } satisfies ExplainAnswer);
    } catch (err) {
      json(res, err instanceof ApiError && err.status === 404 ? 404 : 500, { error: errorText(err) });
    }
  }

  /**
   * `berth plan -f -` of the posted YAML (`?delete=true`: `--delete`): src/plan.ts, as the command
   * runs it, with the flags this Berth runs with. It reads the cluster and writes nothing.
   */
  private async plan(req: IncomingMessage, q: URLSearchParams, res: ServerResponse): Promise<void> {
    const refused = crossSite(req.headers);
    if (refused) return json(res, 403, { error: refused });
    const tooLarge = new Error(`more than ${MAX_BYTES} bytes of manifests`);
    if (this.plans >= MAX_PLANS)
      return json(res, 429, { error: `${MAX_PLANS} plans are running: try again` });
    if (Number(req.headers['content-length'] ?? 0) > MAX_BYTES)
      return json(res, 413, { error: tooLarge.message });
    // Counted until the plan ends, which may be after its answer said it took too long.
    this.plans++;
    let running: Promise<unknown> = Promise.resolve();
    try {
      const body = await readBody(req, (size) => (size > MAX_BYTES ? tooLarge : undefined));
      const { objects, errors } = manifestsOf([[body.toString('utf8'), 'the pasted file']]);
      if (errors.length) return json(res, 400, { error: errors.join('\n') });
      const work = planChange(this.manager.client(), objects, {
        deleting: q.get('delete') === 'true',
        options: this.opts.options,
        berthNamespace: this.opts.berthNamespace,
      });
      running = work;
      const plan = await withinDeadline(work, explainTimeoutMs);
      json(res, 200, planView(plan));
    } catch (err) {
      json(res, err === tooLarge ? 413 : 500, { error: errorText(err) });
    } finally {
      void running.catch(() => {}).finally(() => this.plans--);
    }
  }

  private stream(req: IncomingMessage, res: ServerResponse): void {
    if (this.streams.size >= MAX_STREAMS) {
      res.writeHead(429).end(`over ${MAX_STREAMS} event streams\n`);
      return;
    }
    // A stream stays open: only the heartbeat keeps it from looking idle.
    req.socket.setTimeout(0);
    res.writeHead(200, { ...securityHeaders, 'Content-Type': 'text/event-stream', Connection: 'keep-alive' });
    res.write('retry: 1000\nevent: hello\ndata: {}\n\n');
    this.streams.add(res);
    const beat = setInterval(() => res.write(': heartbeat\n\n'), HEARTBEAT_MS);
    res.once('close', () => {
      clearInterval(beat);
      this.streams.delete(res);
    });
  }
}
