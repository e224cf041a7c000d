// Image references parsed and normalised as distribution/reference v0.6.0 does (normalize.go,
// regexp.go), so Berth reads `nginx`, `host:5000/a/b` and `[::1]:5000/a@sha256:...` exactly as
// the kubelet and containerd do. The anchor's bugs (short names, host:port read as a tag, tag plus
// digest) come from parsing these by hand.
import { InspectionError } from './types.ts';

export interface Reference {
  /** The registry as images name it: `docker.io`, `quay.io`, `host:5000`, `[::1]:5000`, `localhost`. */
  domain: string;
  /** The repository below the domain: `library/nginx`, `a/b`. */
  path: string;
  /** The tag (`latest` when neither tag nor digest is given); kept for messages when a digest is present too. */
  tag?: string;
  /** The digest to fetch: when a reference carries a tag and a digest, the digest wins. */
  digest?: string;
  /** `domain/path@digest` or `domain/path:tag`: the key of caches and single-flight. */
  canonical: string;
}

const dockerHub = 'docker.io';
const legacyDockerHub = 'index.docker.io';
const dockerHubApi = 'registry-1.docker.io';

// regexp.go, piece by piece: the one module whose RegExps are built (from these constants only; the
// lint allows it), anchored, and run on at most referenceMax characters (fuzz-tested for time).
const alphaNumeric = '[a-z0-9]+';
const separator = '(?:[._]|__|[-]+)';
const pathComponent = `${alphaNumeric}(?:${separator}${alphaNumeric})*`;
const domainComponent = '(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])';
const host = `(?:${domainComponent}(?:\\.${domainComponent})*|\\[[a-fA-F0-9:]+\\])`;
const domainRe = new RegExp(`^${host}(?::[0-9]+)?$`);
const pathRe = new RegExp(`^${pathComponent}(?:/${pathComponent})*$`);
const tagRe = /^[\w][\w.-]{0,127}$/;
const anyDigestRe = /^[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}$/;
/** The algorithms Berth can verify, with their encoded length (go-digest: lower-case hex only). */
const digestRe = /^(?:sha256:[a-f0-9]{64}|sha512:[a-f0-9]{128})$/;
const nameMax = 255;
/** A name, a tag of 128 and a sha512 digest: longer is refused before any pattern reads it. */
const referenceMax = nameMax + 1 + 128 + 1 + 'sha512:'.length + 128;

export const isDigest = (s: string): boolean => digestRe.test(s);

function invalid(image: string, why: string): InspectionError {
  return new InspectionError('InvalidReference', image, `invalid image reference "${image}": ${why}`);
}

/** Parses an image as a pod names it; throws an InspectionError `InvalidReference` saying what is wrong. */
export function parseReference(image: string): Reference {
  if (image === '') throw invalid(image, 'empty');
  if (image.length > referenceMax)
    throw invalid(image.slice(0, 64) + '…', `longer than ${referenceMax} characters`);
  if (/^[a-f0-9]{64}$/.test(image))
    throw invalid(image, 'a bare 64-character hexadecimal string is an image ID, not a reference');
  let rest = image;
  let digest: string | undefined;
  const at = rest.indexOf('@');
  if (at >= 0) {
    digest = rest.slice(at + 1);
    rest = rest.slice(0, at);
    if (!anyDigestRe.test(digest)) throw invalid(image, `"${digest}" is not a digest`);
    if (!isDigest(digest))
      throw invalid(image, `digest "${digest}" is not sha256 or sha512 in lower-case hex`);
  }
  // splitDockerDomain: the first component is a host when it has a dot or a port, is localhost,
  // or has an upper-case letter (repository paths are lower-case, host names need not be).
  const slash = rest.indexOf('/');
  const first = slash < 0 ? '' : rest.slice(0, slash);
  let domain: string;
  let remainder: string;
  if (slash < 0 || (!/[.:]/.test(first) && first !== 'localhost' && first.toLowerCase() === first)) {
    domain = dockerHub;
    remainder = rest;
  } else {
    domain = first;
    remainder = rest.slice(slash + 1);
  }
  if (domain === legacyDockerHub) domain = dockerHub;
  if (domain === dockerHub && !remainder.includes('/')) remainder = `library/${remainder}`;
  let path = remainder;
  let tag: string | undefined;
  const colon = remainder.lastIndexOf(':');
  if (colon >= 0) {
    path = remainder.slice(0, colon);
    tag = remainder.slice(colon + 1);
    if (!tagRe.test(tag)) throw invalid(image, `"${tag}" is not a valid tag`);
  }
  if (!domainRe.test(domain)) throw invalid(image, `"${domain}" is not a valid registry host`);
  if (path.toLowerCase() !== path) throw invalid(image, `repository name "${path}" must be lower-case`);
  if (!pathRe.test(path)) throw invalid(image, `"${path}" is not a valid repository name`);
  if (domain.length + 1 + path.length > nameMax)
    throw invalid(image, `the name is longer than ${nameMax} characters`);
  if (tag === undefined && digest === undefined) tag = 'latest';
  const name = `${domain}/${path}`;
  const canonical = digest ? `${name}@${digest}` : `${name}:${tag}`;
  return {
    domain,
    path,
    ...(tag === undefined ? {} : { tag }),
    ...(digest === undefined ? {} : { digest }),
    canonical,
  };
}

/** The host that serves a domain's API: Docker Hub's images are named `docker.io` but served elsewhere. */
export const apiHost = (domain: string): string => (domain === dockerHub ? dockerHubApi : domain);

export const isDockerHub = (domain: string): boolean => domain === dockerHub;

/** A registry domain as configuration and pull secrets may spell it, normalised like a reference's. */
export const normaliseDomain = (domain: string): string =>
  domain === legacyDockerHub || domain === dockerHubApi ? dockerHub : domain;

/** A domain's host and its `:port` (empty without one); an IPv6 host keeps its brackets. */
const splitPort = (domain: string): [string, string] => {
  const colon = domain.lastIndexOf(':');
  return colon > domain.lastIndexOf(']') ? [domain.slice(0, colon), domain.slice(colon)] : [domain, ''];
};

/**
 * Whether a registry domain is among `patterns`: a domain as images name it (`ghcr.io`,
 * `registry.internal:5000`, `docker.io` for Docker Hub), or `*.` and a domain for every host below
 * it at any depth, the port as written (none matches none). Compared, never compiled: linear in
 * the patterns' length, whatever they hold.
 */
export function registryListed(patterns: readonly string[], domain: string): boolean {
  const [host, port] = splitPort(normaliseDomain(domain.toLowerCase()));
  return patterns.some((p) => {
    const [want, wantPort] = splitPort(normaliseDomain(p.toLowerCase()));
    if (wantPort !== port) return false;
    return want.startsWith('*.') ? host.endsWith(want.slice(1)) : host === want;
  });
}
