// The admission webhook server: AdmissionReview v1 over HTTPS for the handlers capabilities
// register, with a self-generated, file-mounted (hot-reloaded) or shared-Secret serving
// certificate. The serving itself runs in the webhook thread (thread.ts, serving.ts); this, on the
// main thread, keeps the certificates, answers the routes whose handlers live here, and gives the
// thread's metrics to /metrics.
import type { JsonPatchOp } from '../api/jsonpatch.ts';
import { X509Certificate, createPrivateKey } from 'node:crypto';
import fs from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { serverOptions, type ServerLimits } from '../server/http.ts';
import { errorText, logFormat, rootLogger, type Logger } from '../observability/log.ts';
import { addMetricsSource } from '../observability/metrics.ts';
import { runCertificateJobApart } from './certificates.ts';
import { defaultMaxInFlightBytes, defaultMaxRequestBytes, webhookServerLimits } from './serving.ts';
import type { FedHandler, FromThread, ThreadInit, ToThread } from './threaded.ts';
import { ServingSecret, servingRequest, type ServingSecretOptions } from './secret.ts';
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

export { defaultMaxInFlightBytes, defaultMaxRequestBytes, webhookServerLimits };

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
  /**
   * PEM of the CA that signs the apiserver's client certificate for webhooks: given, a client that
   * presents no certificate it signs is refused in the TLS handshake, before any request is read.
   */
  clientCa?: string;
  logger?: Logger;
}

const reloadDebounceMs = 200;
/** How often a replica serving a certificate of its own tries the shared Secret again. */
const fallbackCheckMs = 5000;
// The webhook thread's entry, as a file of the same kind as this one (sources or compiled).
const threadEntry = new URL(`./thread${path.extname(fileURLToPath(import.meta.url))}`, import.meta.url);
// A scrape waits this long for the thread's metrics, then goes without them.
const threadMetricsMs = 1000;
// A thread that exited is started again after this, doubling up to the max while it fails.
const respawnFirstMs = 1000;
const respawnMaxMs = 30_000;

interface ServingPair {
  cert: string;
  key: string;
}

/** A route: answered on the main thread by `handler`, or in the webhook thread by `fed`. */
type Route = { name: string } & ({ handler: AdmissionHandler } | { fed: FedHandler });

export class WebhookServer {
  private readonly certificates: WebhookCertificates;
  private readonly host: string;
  private readonly requestedPort: number;
  private readonly handlerTimeoutMs: number;
  private readonly maxRequestBytes: number;
  private readonly maxInFlightBytes: number;
  private readonly limits: ServerLimits;
  private readonly clientCa: string | undefined;
  private readonly log: Logger;
  private readonly routes = new Map<string, Route>();
  private thread: Worker | undefined;
  private boundPort: number | undefined;
  private serving: ServingPair | undefined;
  private ca: string | undefined;
  private fallbackReason: string | undefined;
  private draining = false;
  private watchers: fs.FSWatcher[] = [];
  private secretTimer: NodeJS.Timeout | undefined;
  private reloadTimer: NodeJS.Timeout | undefined;
  // Reloads run one after another, so a slow read cannot install an older pair over a newer one.
  private reloads: Promise<void> = Promise.resolve();
  private readonly metricsAsked = new Map<number, (metrics: unknown) => void>();
  private nextMetricsId = 0;
  private removeMetricsSource: (() => void) | undefined;
  private respawnTimer: NodeJS.Timeout | undefined;
  private started = false;
  // Set by the first listen(): the thread's start, which later calls share.
  private starting: Promise<void> | undefined;

  constructor(opts: WebhookServerOptions) {
    this.certificates = opts.certificates;
    this.host = opts.host ?? '127.0.0.1';
    this.requestedPort = opts.port ?? 9443;
    this.handlerTimeoutMs = opts.handlerTimeoutMs ?? 5000;
    this.maxRequestBytes = opts.maxRequestBytes ?? defaultMaxRequestBytes;
    this.maxInFlightBytes = opts.maxInFlightBytes ?? defaultMaxInFlightBytes;
    this.limits = { ...webhookServerLimits, ...opts.limits };
    this.clientCa = opts.clientCa;
    this.log = opts.logger ?? rootLogger.child({ component: 'webhook' });
    // Bad limits fail here, before anything starts.
    serverOptions(this.limits);
  }

  /**
   * Serves `handler` at `path`; `name` labels its metrics and logs (default: the path). A function
   * is called on this thread; a FedHandler answers in the webhook thread from the state it is sent.
   */
  register(path: string, handler: AdmissionHandler | FedHandler, opts: { name?: string } = {}): void {
    if (!path.startsWith('/')) throw new Error(`webhook path must start with '/': ${path}`);
    if (path === '/healthz' || this.routes.has(path)) throw new Error(`webhook path already in use: ${path}`);
    const name = opts.name ?? path;
    if (typeof handler === 'function') {
      this.routes.set(path, { name, handler });
      return;
    }
    this.routes.set(path, { name, fed: handler });
    // Sent once per turn of the event loop however many changes came in it (an informer's list).
    let pending = false;
    handler.onChange(() => {
      if (pending) return;
      pending = true;
      setImmediate(() => {
        pending = false;
        this.post({ type: 'state', path, state: handler.read() });
      });
    });
  }

  /** PEM of the CA that signed the serving certificate, when known: the webhook configurations' caBundle. */
  get caBundle(): string | undefined {
    return this.ca;
  }

  /**
   * Why the serving certificate is not the shared Secret's but one of this replica's own, while it
   * is (see loadCertificates): the apiserver trusts no such certificate, and its CA is not to be
   * registered. Undefined otherwise.
   */
  get fallback(): string | undefined {
    return this.fallbackReason;
  }

  /** The bound port, once started. */
  get port(): number {
    if (this.boundPort === undefined) throw new Error('webhook server is not listening');
    return this.boundPort;
  }

  /** https://host:port, for url-mode client configs. */
  get url(): string {
    const host = this.host.includes(':') ? `[${this.host}]` : this.host;
    return `https://${host}:${this.port}`;
  }

  /** prepare(), then listen(). */
  async start(): Promise<void> {
    await this.prepare();
    await this.listen();
  }

  /**
   * Loads the serving certificate and keeps it current, without listening: the caller listens once
   * some webhook configuration is to send requests here, so that a replica no webhook needs holds
   * no webhook thread (its isolate is about 25 MB).
   */
  async prepare(): Promise<void> {
    if (this.started) throw new Error('webhook server is already started');
    this.started = true;
    this.serving = await this.loadCertificates();
    this.removeMetricsSource = addMetricsSource(() => this.threadMetrics());
    if (this.certificates.kind === 'files') this.watch(this.certificates);
    if (this.certificates.kind === 'secret') this.poll(this.certificates);
  }

  /** Whether the webhook thread listens (or is being started again after it exited). */
  get listening(): boolean {
    return this.boundPort !== undefined;
  }

  /** Starts the webhook thread, once; resolves when it listens. After prepare(). */
  listen(): Promise<void> {
    if (!this.started) return Promise.reject(new Error('webhook server is not prepared'));
    this.starting ??= this.spawn(this.requestedPort).then(
      (port) => {
        this.boundPort = port;
        this.log.info(
          {
            port,
            paths: [...this.routes.keys()],
            thread: [...this.routes].flatMap(([path, r]) => ('fed' in r ? [path] : [])),
            clientCertificates: this.clientCa ? 'required' : 'not asked for',
          },
          'webhook server started',
        );
      },
      (err: unknown) => {
        // The next call tries again.
        this.starting = undefined;
        throw err;
      },
    );
    return this.starting;
  }

  /** Starts the webhook thread on `port`, with every route's state as it is now; the port it listens on. */
  private spawn(port: number): Promise<number> {
    const init: ThreadInit = {
      host: this.host,
      port,
      certificate: this.serving!,
      ...(this.clientCa ? { clientCa: this.clientCa } : {}),
      handlerTimeoutMs: this.handlerTimeoutMs,
      maxRequestBytes: this.maxRequestBytes,
      maxInFlightBytes: this.maxInFlightBytes,
      limits: this.limits,
      logLevel: this.log.level,
      logFormat: logFormat(),
      draining: this.draining,
      routes: [...this.routes].map(([path, r]) => ({
        path,
        name: r.name,
        ...('fed' in r ? { threaded: { module: r.fed.module, name: r.fed.name, state: r.fed.read() } } : {}),
      })),
    };
    const thread = new Worker(threadEntry, { workerData: init, name: 'berth-webhook' });
    const listening = Promise.withResolvers<number>();
    let listened = false;
    thread.on('message', (m: FromThread) => {
      if (m.type === 'listening') {
        listened = true;
        listening.resolve(m.port);
      } else if (m.type === 'admit') this.admit(m.id, m.path, m.request as AdmissionRequest);
      else if (m.type === 'hint') this.hint(m.path, m.hint);
      else if (m.type === 'metrics') this.metricsAsked.get(m.id)?.(m.metrics);
    });
    thread.on('error', (err) => {
      listening.reject(err);
      this.log.error({ err }, 'webhook thread failed');
    });
    thread.on('exit', (code) => {
      listening.reject(new Error(`webhook thread exited with ${code} before it listened`));
      if (this.thread !== thread || !listened) return;
      // Until another thread listens the apiserver applies each webhook's failurePolicy.
      this.thread = undefined;
      this.log.error({ code }, 'webhook thread exited; starting another');
      this.respawn(respawnFirstMs);
    });
    this.thread = thread;
    return listening.promise.catch(async (err: unknown) => {
      if (this.thread === thread) this.thread = undefined;
      await thread.terminate();
      throw err;
    });
  }

  private respawn(delayMs: number): void {
    this.respawnTimer = setTimeout(() => {
      this.spawn(this.boundPort!).then(
        () => this.log.info({ port: this.boundPort }, 'webhook thread started again'),
        (err: unknown) => {
          const next = Math.min(delayMs * 2, respawnMaxMs);
          this.log.error({ err, retryInMs: next }, 'starting the webhook thread again failed');
          this.respawn(next);
        },
      );
    }, delayMs);
  }

  /** Stops listening, lets requests in flight finish (bounded by the handler timeout), closes connections. */
  async stop(): Promise<void> {
    for (const watcher of this.watchers) watcher.close();
    this.watchers = [];
    clearTimeout(this.reloadTimer);
    clearTimeout(this.secretTimer);
    clearTimeout(this.respawnTimer);
    this.removeMetricsSource?.();
    this.removeMetricsSource = undefined;
    this.started = false;
    await this.starting?.catch(() => {});
    this.starting = undefined;
    const thread = this.thread;
    this.thread = undefined;
    this.boundPort = undefined;
    if (!thread) return;
    const stopped = new Promise<void>((resolve) => {
      thread.on('message', (m: FromThread) => m.type === 'stopped' && resolve());
      thread.once('exit', () => resolve());
    });
    thread.postMessage({ type: 'stop' } satisfies ToThread);
    await stopped;
    await thread.terminate();
    await this.reloads;
  }

  /** The replica is leaving its Service: answers close their connections (serving.ts, drain). */
  drain(): void {
    this.draining = true;
    this.post({ type: 'drain' });
  }

  private post(m: ToThread): void {
    this.thread?.postMessage(m);
  }

  /** A threaded route's hint, to the handler's onHint; one that throws is logged, never the process's end. */
  private hint(path: string, hint: unknown): void {
    const route = this.routes.get(path);
    if (!route || !('fed' in route)) return;
    try {
      route.fed.onHint?.(hint);
    } catch (err) {
      this.log.error({ err, webhook: route.name }, 'webhook hint failed');
    }
  }

  /** Answers the thread's question for a route whose handler lives on this thread. */
  private admit(id: number, path: string, request: AdmissionRequest): void {
    const route = this.routes.get(path);
    const answer = (r: AdmissionResult) => this.post({ type: 'answer', id, result: r });
    const fail = (err: unknown) => this.post({ type: 'answer', id, error: errorText(err) });
    if (!route || !('handler' in route)) return fail(new Error(`no handler for ${path} on the main thread`));
    try {
      const result = route.handler(request);
      if (result instanceof Promise) result.then(answer, fail);
      else answer(result);
    } catch (err) {
      fail(err);
    }
  }

  /** The thread's registry, as prom-client's JSON; nothing if it does not answer in time. */
  private threadMetrics(): Promise<unknown[]> {
    const thread = this.thread;
    if (!thread) return Promise.resolve([]);
    const id = this.nextMetricsId++;
    return new Promise<unknown[]>((resolve) => {
      const timer = setTimeout(() => {
        this.metricsAsked.delete(id);
        this.log.warn('the webhook thread did not give its metrics in time');
        resolve([]);
      }, threadMetricsMs);
      this.metricsAsked.set(id, (metrics) => {
        clearTimeout(timer);
        this.metricsAsked.delete(id);
        resolve(metrics as unknown[]);
      });
      thread.postMessage({ type: 'metrics', id } satisfies ToThread);
    });
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
        // certificate of this replica's own rather than not at all, and move to the Secret's at
        // the first poll that can use it. Its CA is never registered (registration.ts): the
        // configurations are shared, and the other replicas serve the Secret's certificate.
        const secret = `${source.namespace}/${source.name}`;
        this.fallbackReason = `the Secret ${secret} cannot be used (${errorText(err)}): serving a certificate of this replica's own`;
        this.log.error(
          { err, secret },
          'cannot keep the webhook certificate in its Secret; serving one generated for this replica until it can',
        );
      }
    }
    const { ca, issued } = await runCertificateJobApart({
      newCa: { commonName: 'berth-webhook-ca' },
      issue: servingRequest(source),
    });
    this.ca = ca.certPem;
    return { cert: issued!.certPem, key: issued!.keyPem };
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

  /**
   * Checks the shared Secret now and then: another replica may have renewed it. A replica on a
   * certificate of its own is out of its Service (registration.ts), so it checks every few seconds
   * until it can use the Secret.
   */
  private poll(source: Extract<WebhookCertificates, { kind: 'secret' }>): void {
    const secret = new ServingSecret(source);
    const checkMs = source.checkMs ?? 60_000;
    const schedule = () => {
      const ms = this.fallbackReason ? Math.min(checkMs, fallbackCheckMs) : checkMs;
      this.secretTimer = setTimeout(() => {
        this.reloads = this.reloads
          .then(() => this.reload(() => secret.ensure(), `secret ${source.namespace}/${source.name}`))
          // Stopped meanwhile: no next check.
          .then(() => {
            if (this.started) schedule();
          });
      }, ms);
      this.secretTimer.unref();
    };
    schedule();
  }

  /** Installs what `read` returns if it differs from what is served; a failure keeps the old pair. */
  private async reload(
    read: () => Promise<{ cert: string; key: string; ca?: string | undefined }>,
    from: string,
  ): Promise<void> {
    try {
      const next = await read();
      // Stopped; a thread started later, or again, is given this.serving.
      if (!this.started) return;
      if (next.cert === this.serving?.cert && next.key === this.serving.key && next.ca === this.ca) return;
      this.post({ type: 'certificate', cert: next.cert, key: next.key });
      this.serving = { cert: next.cert, key: next.key };
      this.ca = next.ca;
      this.fallbackReason = undefined;
      this.log.info({ from }, 'serving certificate reloaded');
    } catch (err) {
      this.log.error({ err, from }, 'serving certificate reload failed, keeping the old one');
    }
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
