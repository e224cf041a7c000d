// Manifests and platforms, without I/O: what an index, a list or a single manifest says, which
// entries are attestations, which must be followed, how a config blob names its platform, and the
// digest of a body. The client fetches; these decide.
import { createHash } from 'node:crypto';
import { isDigest } from './reference.ts';
import type { Platform } from './types.ts';

export const MediaType = {
  ociIndex: 'application/vnd.oci.image.index.v1+json',
  dockerList: 'application/vnd.docker.distribution.manifest.list.v2+json',
  ociManifest: 'application/vnd.oci.image.manifest.v1+json',
  dockerManifest: 'application/vnd.docker.distribution.manifest.v2+json',
  ociConfig: 'application/vnd.oci.image.config.v1+json',
  dockerConfig: 'application/vnd.docker.container.image.v1+json',
} as const;

/**
 * All four manifest types, always: a registry answers a missing type with a different object (a
 * Docker list by tag becomes its linux/amd64 child) or an error, not always an error (decision 0007).
 */
export const manifestAccept = [
  MediaType.ociIndex,
  MediaType.dockerList,
  MediaType.ociManifest,
  MediaType.dockerManifest,
].join(', ');

const indexTypes: ReadonlySet<string> = new Set([MediaType.ociIndex, MediaType.dockerList]);
const manifestTypes: ReadonlySet<string> = new Set([MediaType.ociManifest, MediaType.dockerManifest]);
const configTypes: ReadonlySet<string> = new Set([MediaType.ociConfig, MediaType.dockerConfig]);

/** A manifest that cannot be read as an image: `notAnImage` for artifacts, `malformed` for the rest. */
export class ManifestError extends Error {
  readonly kind: 'malformed' | 'notAnImage';
  constructor(kind: 'malformed' | 'notAnImage', message: string) {
    super(message);
    this.name = 'ManifestError';
    this.kind = kind;
  }
}

export interface Descriptor {
  mediaType: string;
  digest: string;
  size: number;
}

/** What one manifest body says: the platforms it names and what must be fetched to learn the rest. */
export type Parsed =
  | {
      kind: 'index';
      /** Platforms named by the entries themselves (attestations dropped). */
      platforms: Platform[];
      /** Entries to fetch: nested indexes, and manifests whose entry names no platform. */
      follow: Descriptor[];
    }
  | { kind: 'manifest'; config: Descriptor };

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

function json(body: Buffer, what: string): Record<string, unknown> {
  let v: unknown;
  try {
    v = JSON.parse(body.toString('utf8'));
  } catch {
    // The parser's message quotes the body, which is the registry's to write: not repeated.
    throw new ManifestError('malformed', `${what} is not JSON`);
  }
  if (!isObject(v)) throw new ManifestError('malformed', `${what} is not a JSON object`);
  return v;
}

function descriptor(v: unknown, what: string): Descriptor {
  if (!isObject(v) || typeof v['digest'] !== 'string' || typeof v['mediaType'] !== 'string') {
    throw new ManifestError('malformed', `${what} lacks a digest or a media type`);
  }
  // A digest goes into request paths and messages: only one Berth can verify.
  if (!isDigest(v['digest']))
    throw new ManifestError('malformed', `${what} names no sha256 or sha512 digest`);
  return {
    mediaType: v['mediaType'],
    digest: v['digest'],
    size: typeof v['size'] === 'number' ? v['size'] : -1,
  };
}

/**
 * The media type of a manifest: the body's `mediaType`, else the Content-Type, else its shape (an OCI
 * index or manifest may omit `mediaType`, and some registries answer `application/json`).
 */
function mediaTypeOf(doc: Record<string, unknown>, contentType: string | undefined): string {
  if (typeof doc['mediaType'] === 'string') return doc['mediaType'];
  const header = contentType?.split(';')[0]?.trim();
  if (header && (indexTypes.has(header) || manifestTypes.has(header))) return header;
  if (Array.isArray(doc['manifests'])) return MediaType.ociIndex;
  if (isObject(doc['config'])) return MediaType.ociManifest;
  return header ?? 'unknown';
}

/** Attestation and other non-runnable entries: BuildKit marks them both ways. */
function isAttestation(entry: Record<string, unknown>, platform: Platform | undefined): boolean {
  const annotations = entry['annotations'];
  if (isObject(annotations) && 'vnd.docker.reference.type' in annotations) return true;
  return platform?.os === 'unknown' && platform.architecture === 'unknown';
}

export function parseManifest(body: Buffer, contentType?: string): Parsed {
  const doc = json(body, 'the manifest');
  const mediaType = mediaTypeOf(doc, contentType);
  if (indexTypes.has(mediaType)) {
    if (!Array.isArray(doc['manifests']))
      throw new ManifestError('malformed', `the ${mediaType} has no manifests`);
    const platforms: Platform[] = [];
    const follow: Descriptor[] = [];
    for (const [i, entry] of doc['manifests'].entries()) {
      const d = descriptor(entry, `entry ${i} of the index`);
      const e = entry as Record<string, unknown>;
      // An OCI 1.1 artifact (a signature, an SBOM) says so by its artifactType, in an image
      // manifest's media type: never an image, whatever platform it names. go-containerregistry
      // (crane, ko) names an image's own config type there: that entry is an image.
      if (typeof e['artifactType'] === 'string' && !configTypes.has(e['artifactType'])) continue;
      const p =
        e['platform'] === undefined ? undefined : platformOf(e['platform'], `entry ${i} of the index`);
      if (isAttestation(e, p)) continue;
      if (indexTypes.has(d.mediaType)) follow.push(d);
      else if (!manifestTypes.has(d.mediaType))
        continue; // an artifact beside the images (a signature, an SBOM)
      else if (p) platforms.push(p);
      else follow.push(d);
    }
    return { kind: 'index', platforms: mergePlatforms(platforms), follow };
  }
  if (manifestTypes.has(mediaType)) {
    const config = descriptor(doc['config'], 'the manifest config');
    if (!configTypes.has(config.mediaType)) {
      throw new ManifestError('notAnImage', 'an artifact, not an image: its config is not an image config');
    }
    return { kind: 'manifest', config };
  }
  if (doc['schemaVersion'] === 1) {
    throw new ManifestError(
      'malformed',
      'a Docker schema 1 manifest, which Berth does not read (push it again)',
    );
  }
  throw new ManifestError('notAnImage', 'not a manifest type Berth reads (an OCI or Docker image or index)');
}

/** The platform a config blob states (single-architecture images say it only there). */
export function parseConfig(body: Buffer): Platform {
  return platformOf(json(body, 'the image config'), 'the image config');
}

/** GOOS, GOARCH and variant values: `linux`, `ppc64le`, `v7`. */
const goName = /^[a-z0-9][a-z0-9._-]{0,31}$/;

function platformOf(v: unknown, what: string): Platform {
  if (
    !isObject(v) ||
    typeof v['os'] !== 'string' ||
    typeof v['architecture'] !== 'string' ||
    !v['architecture']
  ) {
    throw new ManifestError('malformed', `${what} names no os and architecture`);
  }
  const variant = typeof v['variant'] === 'string' && v['variant'] ? v['variant'] : undefined;
  const p = normalisePlatform({
    os: v['os'],
    architecture: v['architecture'],
    ...(variant ? { variant } : {}),
  });
  // Platforms reach messages, annotations and node affinities: Go's names only, never free text.
  if (![p.os, p.architecture, p.variant ?? 'v'].every((n) => goName.test(n)))
    throw new ManifestError(
      'malformed',
      `${what} names an os, architecture or variant that is not a Go name`,
    );
  return p;
}

/**
 * containerd's spelling (platforms.Normalize): x86_64 → amd64, aarch64 → arm64, armhf → arm/v7,
 * armel → arm/v6, i386 → 386, a bare variant number gains its `v`. A stated variant is kept (an
 * arm/v6 node cannot run an arm/v7-only image); none is invented where none was stated, except
 * where the architecture name itself carries one (armhf, armel).
 */
export function normalisePlatform(p: Platform): Platform {
  const os = p.os.toLowerCase() === 'macos' ? 'darwin' : p.os.toLowerCase();
  let architecture = p.architecture.toLowerCase();
  let variant = p.variant?.toLowerCase();
  if (variant && /^\d/.test(variant)) variant = `v${variant}`;
  switch (architecture) {
    case 'x86_64':
    case 'x86-64':
      architecture = 'amd64';
      break;
    case 'aarch64':
      architecture = 'arm64';
      break;
    case 'armhf':
      architecture = 'arm';
      variant = 'v7';
      break;
    case 'armel':
      architecture = 'arm';
      variant = 'v6';
      break;
    case 'i386':
    case 'i686':
      architecture = '386';
      break;
  }
  return variant ? { os, architecture, variant } : { os, architecture };
}

const platformKey = (p: Platform): string => `${p.os}/${p.architecture}/${p.variant ?? ''}`;

/** Duplicates merged, sorted, so equal sets compare equal. */
export function mergePlatforms(platforms: Platform[]): Platform[] {
  const byKey = new Map(platforms.map((p) => [platformKey(p), p]));
  return [...byKey.keys()].sort().map((k) => byKey.get(k)!);
}

/** The digest of a body with the algorithm of `like` (`sha256:` unless told `sha512:`). */
export function digestOf(body: Buffer, like = 'sha256:'): string {
  const algorithm = like.startsWith('sha512:') ? 'sha512' : 'sha256';
  return `${algorithm}:${createHash(algorithm).update(body).digest('hex')}`;
}
