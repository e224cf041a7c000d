// What the registry client knows without sending a request, as a value another thread can hold
// (the webhook thread answers admission from it), and the one lookup the client and that thread
// both use to answer from it.
import { registryMetrics } from './metrics.ts';
import { parseReference, type Reference } from './reference.ts';
import type { CachedOptions, ImageInspector, Inspection, Platform } from './types.ts';

/** A digest's platforms, and the registry host that answered for them. */
export interface KnownDigest {
  platforms: Platform[];
  registry: string;
}

/** The digest a tag named when last read. */
export interface KnownTag {
  digest: string;
  registry: string;
  /** When its registry last answered for it (ms since the epoch): a revalidation since a pod came counts for it. */
  readAt: number;
}

/**
 * Who an entry may answer: the pull secrets (`namespace/name`) whose credentials read it, or
 * ANONYMOUS, which answers everyone. A private image one tenant's secret read must not place the
 * pod of another tenant who has no such secret (issue 47).
 */
export interface Readers {
  readers: string[];
}

/** The reader of a read without credentials. */
export const ANONYMOUS = '';
/** Secrets remembered per entry: more only costs another read, never a wrong answer. */
const MAX_READERS = 8;

/** The readers once `reader` has read the entry too: anonymous makes it public; the oldest go first. */
export function withReader(readers: readonly string[], reader: string): string[] {
  if (readers.includes(ANONYMOUS) || reader === ANONYMOUS) return [ANONYMOUS];
  return [...readers.filter((r) => r !== reader), reader].slice(-MAX_READERS);
}

/** Whether a caller holding `secrets` may be answered from an entry. */
export const mayRead = (entry: Readers, secrets: readonly string[] = []): boolean =>
  entry.readers.some((r) => r === ANONYMOUS || secrets.includes(r));

/** A snapshot of the client's caches: tags (with when each expires, ms) and digests. */
export interface KnownImages {
  tags: Map<string, KnownTag & Readers & { expiresAt: number }>;
  digests: Map<string, KnownDigest & Readers>;
}

/** What one manifest walk learnt; an Inspection without the caller's own fields. */
export interface Resolved extends KnownDigest {
  reference: string;
  digest: string;
}

/** Where a lookup reads: the client's caches, or a snapshot of them. */
export interface KnownLookups {
  tag(canonical: string): (KnownTag & Readers) | undefined;
  platforms(digest: string): (KnownDigest & Readers) | undefined;
}

/**
 * A result with no request at all: a digest known, or a tag whose digest is fresh and known, each
 * read anonymously or with one of the caller's pull secrets. A tag to revalidate is known only if
 * its registry answered for it since `revalidatedSince`.
 */
export function fromKnown(
  ref: Reference,
  lookups: KnownLookups,
  options: CachedOptions = {},
): Resolved | undefined {
  const { revalidate, revalidatedSince, counted = true, secrets } = options;
  let digest = ref.digest;
  if (!digest) {
    if (revalidate && revalidatedSince === undefined) return undefined;
    const seen = lookups.tag(ref.canonical);
    const tag = seen && mayRead(seen, secrets) ? seen : undefined;
    const known = revalidate ? tag && tag.readAt >= revalidatedSince! && tag : tag;
    if (counted) registryMetrics.cache.inc({ cache: 'tag', result: known ? 'hit' : 'miss' });
    if (!known) return undefined;
    digest = known.digest;
  }
  const seen = lookups.platforms(digest);
  const known = seen && mayRead(seen, secrets) ? seen : undefined;
  if (counted) registryMetrics.cache.inc({ cache: 'digest', result: known ? 'hit' : 'miss' });
  return known && { reference: ref.canonical, digest, platforms: known.platforms, registry: known.registry };
}

/** ImageInspector.cached over lookups: what inspect() would answer without a request. */
export function cachedInspection(
  image: string,
  lookups: KnownLookups,
  options: CachedOptions = {},
): Inspection | undefined {
  let ref: Reference;
  try {
    ref = parseReference(image);
  } catch {
    return undefined;
  }
  const hit = fromKnown(ref, lookups, options);
  return hit && { image, ...hit, cached: true };
}

/** ImageInspector.cached over a snapshot, its tags fresh until they expire. */
export const cachedFrom =
  (known: KnownImages, now: () => number = Date.now): ImageInspector['cached'] =>
  (image, options) =>
    cachedInspection(
      image,
      {
        tag: (canonical) => {
          const t = known.tags.get(canonical);
          return t && t.expiresAt > now() ? t : undefined;
        },
        platforms: (digest) => known.digests.get(digest),
      },
      options,
    );
