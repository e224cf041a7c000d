// Pushing to the sandbox registry by plain HTTP (the distribution API, no Docker): blobs, manifests
// and single-architecture images, as the demo and the tests push them, and the HTTPS request with
// the sandbox CA that both use. The tests' helper adds indexes, Docker lists and retagging on top.
import { createHash, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { IncomingHttpHeaders } from 'node:http';
import { http } from '../runtime/platform/http.ts';
import https from 'node:https';
import { gzipSync } from 'node:zlib';
import {
  basicHeader,
  parseChallenges,
  parseTokenResponse,
  tokenRequest,
  type Challenge,
} from '../registry/auth.ts';
import type { SandboxRegistry } from './registry.ts';

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
  headers: IncomingHttpHeaders;
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
export const repositoryOf = (path: string): string | undefined =>
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
export class ImagePusher {
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
      { url: new URL(this.baseUrl), insecure: false },
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
}

export function unexpected(what: string, repo: string, res: Response): Error {
  return new Error(`${what} in ${repo}: HTTP ${res.status} ${res.body.toString().slice(0, 500)}`);
}
