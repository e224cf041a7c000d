// The sandbox registry from a test's side: push blobs, manifests, indexes and Docker lists by plain
// HTTP (the distribution API, no Docker), add users and private repositories to the token
// service, and a fault proxy in front of the registry that a test steers (429 + Retry-After, 5xx,
// 401, malformed bodies, wrong digests, slow answers, down) and that counts what it was asked.
import { createHash, randomBytes } from 'node:crypto';
import { readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import {
  basicHeader,
  parseChallenges,
  parseTokenResponse,
  tokenRequest,
  type Challenge,
} from '../../src/registry/auth.ts';
import type { SandboxRegistry } from '../../src/sandbox/registry.ts';
import type { TokenPolicy, TokenUser } from '../../src/sandbox/token.ts';
import { uniqueName } from './cluster.ts';

export const MediaType = {
  ociIndex: 'application/vnd.oci.image.index.v1+json',
  ociManifest: 'application/vnd.oci.image.manifest.v1+json',
  ociConfig: 'application/vnd.oci.image.config.v1+json',
  ociLayer: 'application/vnd.oci.image.layer.v1.tar+gzip',
  dockerList: 'application/vnd.docker.distribution.manifest.list.v2+json',
  dockerManifest: 'application/vnd.docker.distribution.manifest.v2+json',
  dockerConfig: 'application/vnd.docker.container.image.v1+json',
  dockerLayer: 'application/vnd.docker.image.rootfs.diff.tar.gzip',
  inToto: 'application/vnd.in-toto+json',
} as const;

/** Every manifest type, as a client that reads indexes and single images sends it. */
export const ACCEPT_ALL = [
  MediaType.ociIndex,
  MediaType.dockerList,
  MediaType.ociManifest,
  MediaType.dockerManifest,
].join(', ');

export interface PlatformSpec {
  os: string;
  architecture: string;
  variant?: string;
}

export interface Descriptor {
  mediaType: string;
  digest: string;
  size: number;
  platform?: PlatformSpec;
  annotations?: Record<string, string>;
}

export type Format = 'oci' | 'docker';

export interface Response {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
}

export const sha256 = (b: Buffer | string): string =>
  `sha256:${createHash('sha256').update(b).digest('hex')}`;

/** `linux/arm/v7` → {os, architecture, variant}. */
export function platform(spec: string): PlatformSpec {
  const [os, architecture, variant] = spec.split('/');
  if (!os || !architecture) throw new Error(`platform "${spec}" is not os/arch[/variant]`);
  return { os, architecture, ...(variant ? { variant } : {}) };
}

export const platformString = (p: PlatformSpec): string =>
  [p.os, p.architecture, p.variant].filter(Boolean).join('/');

/** One HTTPS (or HTTP) request with the sandbox CA; the whole body is read. */
export function request(
  url: string,
  opts: { method?: string; headers?: Record<string, string>; body?: Buffer | string; ca?: Buffer } = {},
): Promise<Response> {
  const u = new URL(url);
  const mod = u.protocol === 'https:' ? https : http;
  return new Promise((resolve, reject) => {
    const req = mod.request(
      u,
      {
        method: opts.method ?? 'GET',
        headers: opts.headers ?? {},
        ...(opts.ca ? { ca: opts.ca } : {}),
        agent: false,
        timeout: 30_000,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (d: Buffer) => chunks.push(d));
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }),
        );
        res.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new Error(`timeout: ${opts.method ?? 'GET'} ${url}`)));
    req.on('error', reject);
    req.end(opts.body);
  });
}

/** The repository a distribution API path names (`/v2/<name>/manifests|blobs|tags/…`). */
const repositoryOf = (path: string): string | undefined =>
  /^\/v2\/(.+?)\/(manifests|blobs|tags)\//.exec(path)?.[1];

export interface Credentials {
  username: string;
  password: string;
}

/**
 * Pushes to (and reads from) a registry the way a client does: a request, on a Bearer challenge a token from its
 * realm for the challenge's scope (with Basic credentials, or anonymously), then the request again.
 * Tokens are kept per scope. `baseUrl` may be the fault proxy instead of the registry.
 */
export class RegistryPusher {
  readonly registry: SandboxRegistry;
  readonly credentials: Credentials | null;
  readonly baseUrl: string;
  readonly ca: Buffer;
  private readonly tokens = new Map<string, string>();
  /** Token requests made, to assert the flow happened. */
  tokenRequests = 0;

  /** Pushes as the sandbox's push user unless given other credentials (`null`: anonymous). */
  constructor(
    registry: SandboxRegistry,
    credentials: Credentials | null = registry.push,
    baseUrl: string = registry.url,
  ) {
    this.registry = registry;
    this.credentials = credentials;
    this.baseUrl = baseUrl;
    this.ca = readFileSync(registry.caPath);
  }

  /** A request to `path` (under the base URL, or an absolute URL), following one Bearer challenge. */
  async send(
    method: string,
    path: string,
    headers: Record<string, string> = {},
    body?: Buffer | string,
  ): Promise<Response> {
    const url = path.startsWith('https://') || path.startsWith('http://') ? path : `${this.baseUrl}${path}`;
    const scopeKey = this.scopeGuess(url);
    const attempt = (token: string | undefined) =>
      request(url, {
        method,
        ca: this.ca,
        headers: { ...headers, ...(token ? { Authorization: `Bearer ${token}` } : {}) },
        ...(body === undefined ? {} : { body }),
      });
    let res = await attempt(this.tokens.get(scopeKey));
    const challenge =
      res.status === 401
        ? parseChallenges(res.headers['www-authenticate']).find((c) => c.scheme === 'bearer')
        : undefined;
    if (challenge) {
      const token = await this.token(challenge);
      this.tokens.set(scopeKey, token);
      res = await attempt(token);
    }
    return res;
  }

  /** Asks the realm for a token for the challenge's own scope; throws on anything but 200 (a wrong password, a bad service). */
  async token(challenge: Challenge): Promise<string> {
    const { url } = tokenRequest(
      challenge,
      challenge.params['scope'] ?? '',
      new URL(this.baseUrl),
      undefined,
    );
    this.tokenRequests++;
    const res = await request(url.toString(), {
      ca: this.ca,
      headers: this.credentials ? { Authorization: basicHeader(this.credentials) } : {},
    });
    if (res.status !== 200) throw new Error(`token ${url}: ${res.status} ${res.body.toString()}`);
    return parseTokenResponse(JSON.parse(res.body.toString())).token;
  }

  /** Tokens are per repository; a push needs pull,push on it. */
  private scopeGuess(url: string): string {
    return repositoryOf(new URL(url).pathname) ?? '';
  }

  async getManifest(repo: string, reference: string, accept = ACCEPT_ALL): Promise<Response> {
    return this.send('GET', `/v2/${repo}/manifests/${reference}`, { Accept: accept });
  }

  /** Uploads a blob: POST for an upload session, then PUT its Location with `digest=` (one monolithic chunk). */
  async pushBlob(repo: string, data: Buffer, mediaType: string): Promise<Descriptor> {
    const digest = sha256(data);
    const start = await this.send('POST', `/v2/${repo}/blobs/uploads/`, { 'Content-Length': '0' });
    if (start.status !== 202) throw unexpected('blob upload start', repo, start);
    const location = new URL(start.headers.location!, this.registry.url);
    location.searchParams.set('digest', digest);
    const put = await this.send(
      'PUT',
      location.toString(),
      { 'Content-Type': 'application/octet-stream', 'Content-Length': String(data.length) },
      data,
    );
    if (put.status !== 201) throw unexpected(`blob ${digest} upload`, repo, put);
    return { mediaType, digest, size: data.length };
  }

  /** PUTs a manifest under a tag or its digest, with its media type as Content-Type. */
  async pushManifest(
    repo: string,
    reference: string | undefined,
    manifest: unknown,
    mediaType: string,
  ): Promise<Descriptor> {
    const body = Buffer.from(JSON.stringify(manifest));
    const digest = sha256(body);
    const res = await this.send(
      'PUT',
      `/v2/${repo}/manifests/${reference ?? digest}`,
      { 'Content-Type': mediaType, 'Content-Length': String(body.length) },
      body,
    );
    if (res.status !== 201) throw unexpected(`manifest ${reference ?? digest}`, repo, res);
    if (res.headers['docker-content-digest'] !== digest)
      throw new Error(
        `registry stored ${repo} manifest as ${String(res.headers['docker-content-digest'])}, not ${digest}`,
      );
    return { mediaType, digest, size: body.length };
  }

  /**
   * A single-architecture image: a tiny synthetic layer, a config blob stating the platform (the
   * only place a single image says it), and its manifest. Each push makes new content (and digest).
   */
  async pushImage(
    repo: string,
    tag: string | undefined,
    p: PlatformSpec,
    format: Format = 'oci',
  ): Promise<Descriptor> {
    const raw = Buffer.from(`berth test layer ${platformString(p)} ${randomBytes(8).toString('hex')}\n`);
    const layer = await this.pushBlob(
      repo,
      gzipSync(raw),
      format === 'oci' ? MediaType.ociLayer : MediaType.dockerLayer,
    );
    const config = await this.pushBlob(
      repo,
      Buffer.from(
        JSON.stringify({
          ...p,
          created: new Date().toISOString(),
          config: {},
          rootfs: { type: 'layers', diff_ids: [sha256(raw)] },
        }),
      ),
      format === 'oci' ? MediaType.ociConfig : MediaType.dockerConfig,
    );
    const mediaType = format === 'oci' ? MediaType.ociManifest : MediaType.dockerManifest;
    const manifest = { schemaVersion: 2, mediaType, config, layers: [layer] };
    return { ...(await this.pushManifest(repo, tag, manifest, mediaType)), platform: p };
  }

  /**
   * A multi-architecture image: one image per platform, then the OCI index (or Docker manifest
   * list) naming them. With `attestations`, each image also gets a BuildKit-style attestation entry
   * (platform unknown/unknown, annotation `vnd.docker.reference.type`), which is not a platform.
   */
  async pushIndex(
    repo: string,
    tag: string,
    platforms: PlatformSpec[],
    opts: { format?: Format; attestations?: boolean } = {},
  ): Promise<{ index: Descriptor; images: Descriptor[]; attestations: Descriptor[] }> {
    const format = opts.format ?? 'oci';
    const images: Descriptor[] = [];
    for (const p of platforms) images.push(await this.pushImage(repo, undefined, p, format));
    const attestations: Descriptor[] = [];
    if (opts.attestations) {
      for (const image of images) {
        const statement = await this.pushBlob(
          repo,
          Buffer.from(
            JSON.stringify({
              _type: 'https://in-toto.io/Statement/v0.1',
              subject: [{ digest: image.digest }],
            }),
          ),
          MediaType.inToto,
        );
        const config = await this.pushBlob(repo, Buffer.from('{}'), MediaType.ociConfig);
        const a = await this.pushManifest(
          repo,
          undefined,
          { schemaVersion: 2, mediaType: MediaType.ociManifest, config, layers: [statement] },
          MediaType.ociManifest,
        );
        attestations.push({
          ...a,
          platform: { os: 'unknown', architecture: 'unknown' },
          annotations: {
            'vnd.docker.reference.type': 'attestation-manifest',
            'vnd.docker.reference.digest': image.digest,
          },
        });
      }
    }
    const mediaType = format === 'oci' ? MediaType.ociIndex : MediaType.dockerList;
    const index = await this.pushManifest(
      repo,
      tag,
      { schemaVersion: 2, mediaType, manifests: [...images, ...attestations] },
      mediaType,
    );
    return { index, images, attestations };
  }

  /** An index whose entries name manifests the registry does not have (stored thanks to `validation.manifests.indexes.platforms: none`). */
  async pushDanglingIndex(repo: string, tag: string, platforms: PlatformSpec[]): Promise<Descriptor> {
    const manifests = platforms.map((p) => ({
      mediaType: MediaType.ociManifest,
      digest: sha256(randomBytes(32)),
      size: 512,
      platform: p,
    }));
    return this.pushManifest(
      repo,
      tag,
      { schemaVersion: 2, mediaType: MediaType.ociIndex, manifests },
      MediaType.ociIndex,
    );
  }

  /** Points `tag` at the manifest `digest` already in `repo`: a tag that moves. */
  async retag(repo: string, tag: string, digest: string): Promise<Descriptor> {
    const res = await this.getManifest(repo, digest);
    if (res.status !== 200) throw unexpected(`manifest ${digest}`, repo, res);
    const mediaType = String(res.headers['content-type']);
    const put = await this.send(
      'PUT',
      `/v2/${repo}/manifests/${tag}`,
      { 'Content-Type': mediaType },
      res.body,
    );
    if (put.status !== 201) throw unexpected(`retag ${tag}`, repo, put);
    return { mediaType, digest, size: res.body.length };
  }
}

function unexpected(what: string, repo: string, res: Response): Error {
  return new Error(`${what} in ${repo}: HTTP ${res.status} ${res.body.toString().slice(0, 500)}`);
}

/**
 * Adds users or private repositories to the sandbox's token service (a policy file of its own,
 * read on the next token request); returns the function that removes them again.
 */
export function addTokenPolicy(
  registry: SandboxRegistry,
  policy: { private?: string[]; users?: Record<string, TokenUser> },
): () => void {
  const file = join(registry.policyDir, `${uniqueName('test')}.json`);
  // Written aside and renamed: the token service never reads half a file.
  writeFileSync(`${file}.tmp`, JSON.stringify(policy satisfies Partial<TokenPolicy>));
  renameSync(`${file}.tmp`, file);
  return () => rmSync(file, { force: true });
}

/** What the fault proxy does to the next matching requests instead of (or on top of) forwarding. */
export interface Fault {
  /** Only requests with this method (default: any). */
  method?: string;
  /** Only requests whose path matches (default: any). */
  path?: RegExp;
  /** How many matching requests it hits (default 1; Infinity until cleared). */
  times?: number;
  /** Answer this status without forwarding: 429 (with retryAfter), 500, 503, 401 (with a Bearer challenge), 404. */
  status?: number;
  /** The Retry-After header: seconds or an HTTP date. */
  retryAfter?: string;
  /**
   * Forward, then spoil the body: `malformed` is truncated JSON whose Docker-Content-Digest matches
   * it (only parsing fails); `wrong-digest` is the real manifest plus a byte, under its old digest.
   */
  body?: 'malformed' | 'wrong-digest';
  /** Wait this long before answering. */
  delayMs?: number;
}

export interface ProxiedRequest {
  method: string;
  path: string;
}

export interface FaultProxy {
  /** `https://127.0.0.1:PORT` (or http:// without TLS). */
  url: string;
  /** `127.0.0.1:PORT`, as an image reference names it. */
  host: string;
  fail(fault: Fault): void;
  clear(): void;
  /** Every request received, faulted or not, in order. */
  readonly requests: readonly ProxiedRequest[];
  /** Requests with this method (or any) whose path matches (a substring or a RegExp). */
  count(method?: string, path?: string | RegExp): number;
  resetCounts(): void;
  /** Stops listening and drops open connections: the registry is down (connection refused). */
  down(): Promise<void>;
  /** Listens again on the same port. */
  up(): Promise<void>;
  close(): Promise<void>;
}

const errorBody = (code: string, message: string) => JSON.stringify({ errors: [{ code, message }] });

/**
 * A proxy on 127.0.0.1 in front of the sandbox registry, serving TLS with the registry's own
 * certificate (so the sandbox CA trusts it) unless `tls: false`. Token requests go to the realm
 * directly, as the registry's challenge says.
 */
export async function startFaultProxy(
  registry: SandboxRegistry,
  opts: { tls?: boolean } = {},
): Promise<FaultProxy> {
  const tls = opts.tls ?? true;
  const ca = readFileSync(registry.caPath);
  const upstream = new URL(registry.url);
  const faults: (Fault & { left: number })[] = [];
  const requests: ProxiedRequest[] = [];

  const handler: http.RequestListener = (req, res) => {
    const method = req.method ?? 'GET';
    const path = new URL(req.url ?? '/', 'http://x').pathname;
    requests.push({ method, path });
    const fault = faults.find(
      (f) => f.left > 0 && (!f.method || f.method === method) && (!f.path || f.path.test(path)),
    );
    if (fault) fault.left--;
    // The caller gone (it gave up, or the proxy closed) ends the request upstream too: a response piped
    // to nowhere would hold its connection to the registry open, and the test process with it.
    let upstreamRequest: http.ClientRequest | undefined;
    let gone = false;
    res.once('close', () => {
      gone = true;
      upstreamRequest?.destroy();
    });
    const act = () => {
      if (gone) return; // the client gave up while a fault delayed its request
      if (fault?.status !== undefined) {
        const headers: Record<string, string> = { 'Content-Type': 'application/json' };
        if (fault.retryAfter !== undefined) headers['Retry-After'] = fault.retryAfter;
        const repo = repositoryOf(path);
        if (fault.status === 401)
          headers['WWW-Authenticate'] =
            `Bearer realm="${registry.realm}",service="${registry.service}"` +
            (repo ? `,scope="repository:${repo}:pull"` : '');
        const code =
          { 401: 'UNAUTHORIZED', 404: 'MANIFEST_UNKNOWN', 429: 'TOOMANYREQUESTS' }[fault.status] ??
          'UNAVAILABLE';
        res.writeHead(fault.status, headers);
        res.end(method === 'HEAD' ? undefined : errorBody(code, `fault proxy: ${fault.status}`));
        return;
      }
      const headers = { ...req.headers, host: upstream.host };
      const up = https.request(
        { host: upstream.hostname, port: upstream.port, method, path: req.url, headers, ca, agent: false },
        (ures) => {
          if (!fault?.body || method === 'HEAD' || ures.statusCode !== 200) {
            res.writeHead(ures.statusCode ?? 502, ures.headers);
            ures.pipe(res);
            return;
          }
          const chunks: Buffer[] = [];
          ures.on('data', (d: Buffer) => chunks.push(d));
          ures.on('end', () => {
            const real = Buffer.concat(chunks);
            const out = { ...ures.headers };
            let body: Buffer;
            if (fault.body === 'malformed') {
              body = real.subarray(0, Math.max(1, Math.floor(real.length / 2)));
              out['docker-content-digest'] = sha256(body);
            } else {
              body = Buffer.concat([real, Buffer.from(' ')]);
            }
            out['content-length'] = String(body.length);
            delete out['etag'];
            res.writeHead(200, out);
            res.end(body);
          });
        },
      );
      upstreamRequest = up;
      up.on('error', (e) => {
        res.writeHead(502, { 'Content-Type': 'application/json' });
        res.end(errorBody('UNAVAILABLE', `fault proxy upstream: ${e.message}`));
      });
      req.pipe(up);
    };
    if (fault?.delayMs) setTimeout(act, fault.delayMs);
    else act();
  };

  const server = tls
    ? https.createServer(
        { cert: readFileSync(registry.tls.certPath), key: readFileSync(registry.tls.keyPath) },
        handler,
      )
    : http.createServer(handler);
  const listen = (port: number) =>
    new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, '127.0.0.1', () => {
        server.off('error', reject);
        resolve();
      });
    });
  const stop = () =>
    new Promise<void>((resolve) => {
      if (!server.listening) return resolve();
      server.close(() => resolve());
      server.closeAllConnections();
    });
  await listen(0);
  const port = (server.address() as AddressInfo).port;
  const host = `127.0.0.1:${port}`;
  return {
    url: `${tls ? 'https' : 'http'}://${host}`,
    host,
    requests,
    fail: (f) => faults.push({ ...f, left: f.times ?? 1 }),
    clear: () => void faults.splice(0),
    count: (method, path) =>
      requests.filter(
        (r) =>
          (!method || r.method === method) &&
          (path === undefined || (typeof path === 'string' ? r.path.includes(path) : path.test(r.path))),
      ).length,
    resetCounts: () => void requests.splice(0),
    down: stop,
    up: () => listen(port),
    close: stop,
  };
}
