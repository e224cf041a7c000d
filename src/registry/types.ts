// What the registry client answers, and how it fails: the contract between Berth's OCI registry client
// and the capabilities that ask it which platforms an image supports (architecture-aware placement).
// A capability depends on ImageInspector, never on how the client speaks HTTP.
import type { KnownImages } from './known.ts';

/** One platform an image runs on, as the index or the config blob states it (names normalised as containerd does). */
export interface Platform {
  os: string;
  architecture: string;
  /** arm/v6, arm/v7, arm64/v8, ...: kept, since an arm/v6 node cannot run an arm/v7-only image. */
  variant?: string;
}

/** The platforms of one image, and what they were read from. */
export interface Inspection {
  /** The image as the pod names it. */
  image: string;
  /** The normalised reference (`docker.io/library/nginx:latest`, `host:5000/a/b@sha256:...`). */
  reference: string;
  /** The digest of the manifest or index the platforms were read from. */
  digest: string;
  /** Every runnable platform: attestation entries are dropped, duplicates merged. */
  platforms: Platform[];
  /** The registry host that answered (a mirror, when one did). */
  registry: string;
  /** True when no request was needed (the digest and, for a tag, its TTL were cached). */
  cached: boolean;
}

/**
 * Why an inspection failed: each becomes the pod's reason and the Warning's text, so each names
 * something the user can fix (a pull secret, a reference, a registry's reachability).
 */
export type FailureReason =
  | 'InvalidReference'
  | 'Unauthorized'
  | 'NotFound'
  | 'RateLimited'
  | 'Unreachable'
  | 'Malformed'
  | 'DigestMismatch'
  | 'NotAnImage'
  /** Its registry's address is loopback, private, link-local or the cluster's own: no connection made. */
  | 'AddressNotAllowed'
  /** Its registry is not among those the caller lists (an ArchPlacement's `registries`): no request made. */
  | 'RegistryNotAllowed'
  /** Berth's own bound on registry reads held it (too many images at once: fewer, or later). */
  | 'Bounded';

/** The longest Retry-After the client honours by default (a registry asking for more gets this). */
export const MAX_RETRY_AFTER_MS = 5 * 60_000;

export class InspectionError extends Error {
  readonly reason: FailureReason;
  readonly image: string;
  /** Worth retrying later (rate limits, unreachable registries, 5xx) rather than a fact about the image. */
  readonly transient: boolean;
  /**
   * When the registry may be asked again (ms since the epoch), when it asked to wait (429 or 503
   * with Retry-After) for longer than a request may: trying before then fails at once.
   */
  readonly retryAt: number | undefined;
  constructor(reason: FailureReason, image: string, message: string, transient = false, retryAt?: number) {
    super(message);
    this.name = 'InspectionError';
    this.reason = reason;
    this.image = image;
    this.transient = transient;
    this.retryAt = retryAt;
  }
}

/** A pull secret as the kubelet reads it: its type and its base64 data (`.dockerconfigjson` or `.dockercfg`). */
export interface PullSecret {
  /** `namespace/name`, for messages. */
  name: string;
  type: string;
  data: Record<string, string>;
}

export interface InspectOptions {
  /** The pod's pull secrets (its own, then the cluster-wide one), matched the way the kubelet matches. */
  pullSecrets?: PullSecret[];
  /** `imagePullPolicy: Always`: revalidate the tag (one HEAD) instead of trusting the tag cache. */
  revalidate?: boolean;
  /**
   * The namespace of the pod the read is for: registry requests in flight are shared fairly
   * between namespaces (RegistryClientOptions' per-namespace bounds). None is one flow of its own.
   */
  namespace?: string;
  signal?: AbortSignal;
}

/** A lookup without a request: `counted` false leaves the cache metrics alone (a lookup repeated while waiting). */
export type CachedOptions = Pick<InspectOptions, 'revalidate'> & {
  /**
   * With `revalidate`: a tag its registry answered for at or after this time (ms since the epoch)
   * counts as revalidated (a pod's admission, waiting for the controller's HEAD); without, none does.
   */
  revalidatedSince?: number;
  counted?: boolean;
  /**
   * The pull secrets (`namespace/name`) the caller reads with: an entry read with credentials
   * answers only a caller holding the secret that read it; one read anonymously answers any.
   */
  secrets?: readonly string[];
};

/** Reads an image's platforms from its registry without pulling it. */
export interface ImageInspector {
  inspect(image: string, options?: InspectOptions): Promise<Inspection>;
  /**
   * What inspect() would answer without sending a request (a digest known, or a tag fresh in the
   * cache), or undefined: for admission, which sends no request of its own.
   */
  cached(image: string, options?: CachedOptions): Inspection | undefined;
  /** What cached() answers from, as a value: for the webhook thread (registry/known.ts). */
  known(): KnownImages;
  /** Calls `listener` after each tag or digest the client learns. */
  onLearn(listener: () => void): void;
}
