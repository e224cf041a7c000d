// The sandbox registry from a test's side: on top of the sandbox's own pusher (src/sandbox/push.ts),
// indexes, Docker lists, dangling indexes and tags that move; users and private repositories added to
// the token service; and a fault proxy in front of the registry that a test steers (429 + Retry-After,
// 5xx, 401, malformed bodies, wrong digests, slow answers, down) and that counts what it was asked.
import { randomBytes } from 'node:crypto';
import { readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import net, { type AddressInfo } from 'node:net';
import { join } from 'node:path';
import {
  ImagePusher,
  MediaType,
  repositoryOf,
  sha256,
  unexpected,
  type Descriptor,
  type Format,
  type PlatformSpec,
} from '../../src/sandbox/push.ts';
import type { SandboxRegistry } from '../../src/sandbox/registry.ts';
import type { TokenPolicy, TokenUser } from '../../src/sandbox/token.ts';
import { uniqueName } from './cluster.ts';

export {
  ACCEPT_ALL,
  MediaType,
  platform,
  platformString,
  request,
  sha256,
  type Credentials,
  type Descriptor,
  type Format,
  type PlatformSpec,
  type Response,
} from '../../src/sandbox/push.ts';

/** The sandbox pusher with what only tests push: multi-architecture indexes, dangling ones, retags. */
export class RegistryPusher extends ImagePusher {
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

/** A kubernetes.io/dockerconfigjson Secret with one login for `key` (a host, or host and path, or a glob). */
export const dockerConfigSecret = (
  namespace: string,
  name: string,
  key: string,
  user: string,
  password: string,
) => ({
  apiVersion: 'v1',
  kind: 'Secret',
  metadata: { name, namespace },
  type: 'kubernetes.io/dockerconfigjson',
  data: {
    '.dockerconfigjson': Buffer.from(
      JSON.stringify({ auths: { [key]: { auth: Buffer.from(`${user}:${password}`).toString('base64') } } }),
    ).toString('base64'),
  },
});

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

/** Registries that accept connections and never answer: each on a port of its own, so each a host of its own. */
export interface SilentRegistries {
  /** `127.0.0.1:PORT` of each. */
  hosts: string[];
  /** Connections accepted so far, across all of them. */
  connections(): number;
  close(): Promise<void>;
}

export async function startSilentRegistries(count: number): Promise<SilentRegistries> {
  let accepted = 0;
  const sockets = new Set<net.Socket>();
  const servers = await Promise.all(
    Array.from({ length: count }, async () => {
      const server = net.createServer((socket) => {
        accepted++;
        sockets.add(socket);
        socket.on('error', () => {});
        socket.once('close', () => sockets.delete(socket));
      });
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      return server;
    }),
  );
  return {
    hosts: servers.map((s) => `127.0.0.1:${(s.address() as AddressInfo).port}`),
    connections: () => accepted,
    close: async () => {
      for (const s of sockets) s.destroy();
      await Promise.all(servers.map((s) => new Promise<void>((resolve) => s.close(() => resolve()))));
    },
  };
}
