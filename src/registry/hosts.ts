// Registries configuration: per registry, mirrors tried in order before the registry itself (as
// containerd's hosts.toml tries `host` entries before `server`), mirrors that serve digests only
// (OpenShift's ImageDigestMirrorSet), a CA bundle per endpoint, and plain HTTP or unverified TLS
// only where `insecure: true` says so. Registries on loopback, private, link-local or the cluster's
// own addresses are read only where `allowPrivate: true` says so (egress.ts, decision 0025).
//
//   registries:
//     docker.io:
//       mirrors:
//         - url: https://mirror.internal:5000
//           ca: /etc/berth/mirror-ca.pem      # a path (relative to this file) or the PEM itself
//         - url: https://digests.internal
//           digestsOnly: true
//     registry.internal:5000:
//       ca: /etc/berth/internal-ca.pem
//     lab.local:5000:
//       server: http://lab.local:5000
//       insecure: true
//       allowPrivate: true
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { yaml } from '../runtime/platform/yaml.ts';
import * as z from '../runtime/platform/zod.ts';
import { apiHost, normaliseDomain, type Reference } from './reference.ts';

const endpointFields = {
  /** A PEM bundle, or the path of one: trusted for this endpoint on top of the system's roots. */
  ca: z.string().min(1).optional(),
  /** Plain http:, or https: without verifying the certificate. Never implied. */
  insecure: z.boolean().optional(),
};

const checkUrl = (v: { url?: string | undefined; insecure?: boolean | undefined }, ctx: z.RefinementCtx) => {
  if (v.url === undefined) return;
  let u: URL;
  try {
    u = new URL(v.url);
  } catch {
    ctx.addIssue({ code: 'custom', message: `"${v.url}" is not a URL`, path: ['url'] });
    return;
  }
  if (u.protocol !== 'https:' && u.protocol !== 'http:') {
    ctx.addIssue({ code: 'custom', message: `"${v.url}" is not http(s)`, path: ['url'] });
  } else if (u.protocol === 'http:' && v.insecure !== true) {
    ctx.addIssue({
      code: 'custom',
      message: `"${v.url}" is plain http: it needs insecure: true`,
      path: ['url'],
    });
  }
  if ((u.pathname !== '/' && u.pathname !== '') || u.search || u.hash || u.username || u.password) {
    ctx.addIssue({
      code: 'custom',
      message: `"${v.url}" must be a scheme, a host and a port only`,
      path: ['url'],
    });
  }
};

const mirrorSchema = z
  .object({
    url: z.string(),
    ...endpointFields,
    /** Only references by digest go to this mirror: its tags may differ from the registry's. */
    digestsOnly: z.boolean().optional(),
  })
  .strict()
  .superRefine(checkUrl);

const registrySchema = z
  .object({
    /** The registry's own URL when it is not https://<host> (Docker Hub's is https://registry-1.docker.io). */
    server: z.string().optional(),
    ...endpointFields,
    mirrors: z.array(mirrorSchema).default([]),
    /**
     * Its endpoints (server and mirrors) may be on loopback, private, link-local or the cluster's own
     * addresses, and so may its token realm and redirects on their host names. Never implied.
     */
    allowPrivate: z.boolean().optional(),
  })
  .strict()
  .superRefine((v, ctx) => checkUrl({ url: v.server, insecure: v.insecure }, ctx));

export const RegistriesConfig = z
  .object({ registries: z.record(z.string(), registrySchema).default({}) })
  .strict();
export type RegistriesConfig = z.output<typeof RegistriesConfig>;

/** One place the client may ask, in the order it asks. */
export interface Endpoint {
  /** The origin: `https://mirror.internal:5000`. */
  url: URL;
  /** The PEM bundle trusted for it, if any. */
  ca?: string;
  insecure: boolean;
  mirror: boolean;
  /** The admin allowed its registry on addresses Berth otherwise does not reach (egress.ts). */
  allowPrivate: boolean;
}

const isPem = (s: string) => s.includes('-----BEGIN');

/**
 * Parses a configuration (the object of a YAML or JSON file), reading CA bundles given as paths
 * relative to `baseDir`, and keying registries as references name them (`index.docker.io` is
 * `docker.io`). Throws with every problem listed.
 */
export function parseRegistriesConfig(doc: unknown, baseDir = process.cwd()): RegistriesConfig {
  const r = RegistriesConfig.safeParse(doc ?? {});
  if (!r.success) {
    throw new Error(
      'registries configuration: ' +
        r.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; '),
    );
  }
  const readCa = (ca: string | undefined, where: string): string | undefined => {
    if (ca === undefined || isPem(ca)) return ca;
    try {
      return readFileSync(path.resolve(baseDir, ca), 'utf8');
    } catch (e) {
      throw new Error(`registries configuration: ${where}.ca: ${(e as Error).message}`, { cause: e });
    }
  };
  const registries: RegistriesConfig['registries'] = {};
  for (const [key, reg] of Object.entries(r.data.registries)) {
    const domain = normaliseDomain(key);
    if (registries[domain])
      throw new Error(`registries configuration: ${key} and another key both name ${domain}`);
    registries[domain] = {
      ...reg,
      ca: readCa(reg.ca, key),
      mirrors: reg.mirrors.map((m, i) => ({ ...m, ca: readCa(m.ca, `${key}.mirrors.${i}`) })),
    };
  }
  return { registries };
}

/** Reads a registries configuration file (YAML or JSON). */
export function loadRegistriesConfig(file: string): RegistriesConfig {
  return parseRegistriesConfig(yaml().parse(readFileSync(file, 'utf8')), path.dirname(path.resolve(file)));
}

/**
 * Where to ask for a reference: its registry's mirrors in order (digest-only mirrors only for a
 * digest), then the registry. `defaultCa` is trusted by endpoints that name no CA of their own.
 */
export function endpointsFor(
  config: RegistriesConfig | undefined,
  ref: Reference,
  defaultCa?: string,
): Endpoint[] {
  const reg = config?.registries[ref.domain];
  const endpoint = (
    url: string,
    ca: string | undefined,
    insecure: boolean | undefined,
    mirror: boolean,
  ): Endpoint => {
    const chosen = ca ?? defaultCa;
    return {
      url: new URL(new URL(url).origin),
      ...(chosen ? { ca: chosen } : {}),
      insecure: insecure === true,
      mirror,
      allowPrivate: reg?.allowPrivate === true,
    };
  };
  const mirrors = (reg?.mirrors ?? [])
    .filter((m) => !m.digestsOnly || ref.digest !== undefined)
    .map((m) => endpoint(m.url, m.ca, m.insecure, true));
  return [
    ...mirrors,
    endpoint(reg?.server ?? `https://${apiHost(ref.domain)}`, reg?.ca, reg?.insecure, false),
  ];
}
