// The sandbox's OCI registry, its files: CNCF distribution on 127.0.0.1 with TLS from the sandbox CA
// and token auth (decision 0007, "Local registry for tests"), and the token service's configuration
// and policy. The processes themselves are started and stopped by Sandbox like the control plane's.
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify as toYaml } from 'yaml';
import type { CertificateAuthority } from '../runtime/webhook/certificates.ts';
import { policyDir, type TokenPolicy, type TokenServerConfig } from './token.ts';

export interface RegistryPorts {
  registry: number;
  token: number;
}

/** What a test (or a user) needs to reach the sandbox registry. */
export interface SandboxRegistry {
  /** `127.0.0.1:PORT`, as image references name the registry. */
  host: string;
  url: string;
  /** The sandbox CA, which signed the registry's and the token service's certificates. */
  caPath: string;
  /**
   * A registries configuration (`--arch-registries`) that trusts the CA and allows the registry on
   * its loopback address, as an admin allows a registry on a private address (decision 0025).
   */
  registriesPath: string;
  /** The token service (the realm of the registry's Bearer challenge). */
  realm: string;
  service: string;
  /** A user that may push to and pull from every repository. */
  push: { username: string; password: string };
  /** Where a test adds users and private repositories: `*.json` files, each a partial TokenPolicy. */
  policyDir: string;
  /** The registry's serving certificate and key, for a test proxy that stands in for it. */
  tls: { certPath: string; keyPath: string };
}

export const REGISTRY_SERVICE = 'berth-sandbox-registry';
const PUSH_USER = 'berth-push';
/** The sandbox's own policy file; tests add files named after themselves beside it. */
const BASE_POLICY = '00-sandbox.json';

/**
 * Writes what the registry and the token service read: certificates (once: they are kept across
 * restarts like the control plane's), the push user's password (once), and both configurations
 * (every start, since the ports change).
 */
export async function writeRegistryFiles(
  dir: string,
  pki: string,
  ca: () => Promise<CertificateAuthority>,
  ports: RegistryPorts,
  sandboxName: string,
): Promise<void> {
  mkdirSync(join(dir, 'storage'), { recursive: true });
  mkdirSync(policyDir(dir), { recursive: true });
  if (!existsSync(join(pki, 'registry-token.key'))) await writeRegistryCertificates(pki, await ca());
  const base = join(policyDir(dir), BASE_POLICY);
  if (!existsSync(base)) {
    const policy: TokenPolicy = {
      private: ['private/*'],
      users: { [PUSH_USER]: { password: randomBytes(18).toString('base64url'), push: ['*'] } },
    };
    writeFileSync(base, JSON.stringify(policy, null, 2), { mode: 0o600 });
  }
  const token: TokenServerConfig = {
    port: ports.token,
    issuer: `berth-sandbox-${sandboxName}`,
    service: REGISTRY_SERVICE,
    expiresIn: 300,
    certFile: join(pki, 'registry.crt'),
    keyFile: join(pki, 'registry.key'),
    signingCertFile: join(pki, 'registry-token.crt'),
    signingKeyFile: join(pki, 'registry-token.key'),
  };
  writeFileSync(join(dir, 'token.json'), JSON.stringify(token, null, 2));
  writeFileSync(
    registriesFile(dir),
    toYaml({
      registries: {
        [`127.0.0.1:${ports.registry}`]: { ca: join(pki, 'ca.crt'), allowPrivate: true },
      },
    }),
  );
  writeFileSync(
    join(dir, 'config.yml'),
    toYaml({
      version: 0.1,
      log: { level: 'info', formatter: 'text' },
      storage: {
        filesystem: { rootdirectory: join(dir, 'storage') },
        delete: { enabled: true },
        // Otherwise a purge timer runs in the background of every test.
        maintenance: { uploadpurging: { enabled: false } },
      },
      // No debug address: the debug server (pprof, metrics) would be a second listener.
      http: {
        addr: `127.0.0.1:${ports.registry}`,
        secret: randomBytes(24).toString('base64url'),
        tls: { certificate: join(pki, 'registry.crt'), key: join(pki, 'registry.key') },
      },
      auth: {
        token: {
          realm: `https://127.0.0.1:${ports.token}/token`,
          service: REGISTRY_SERVICE,
          issuer: token.issuer,
          rootcertbundle: join(pki, 'registry-token.crt'),
        },
      },
      // Lets a test store an index that names a missing child: the dangling-index failure case.
      validation: { manifests: { indexes: { platforms: 'none' } } },
    }),
  );
}

/** The registry's serving certificate and its token signing certificate, issued by the sandbox CA. */
async function writeRegistryCertificates(pki: string, authority: CertificateAuthority): Promise<void> {
  const server = await authority.issue({
    commonName: 'berth-sandbox-registry',
    dnsNames: ['localhost'],
    ipAddresses: ['127.0.0.1'],
    usage: 'server',
  });
  // The token signing certificate is the registry's only trusted root for tokens: a certificate
  // merely issued by the sandbox CA (the admin's, the apiserver's) cannot sign registry tokens.
  const signing = await authority.issue({ commonName: 'berth-sandbox-registry-token', usage: 'client' });
  const files: Record<string, string> = {
    'registry.crt': server.certPem,
    'registry.key': server.keyPem,
    'registry-token.crt': signing.certPem,
    'registry-token.key': signing.keyPem,
  };
  for (const [f, pem] of Object.entries(files)) writeFileSync(join(pki, f), pem, { mode: 0o600 });
}

const registriesFile = (dir: string) => join(dir, 'registries.yaml');

export function registryInfo(dir: string, pki: string, ports: RegistryPorts): SandboxRegistry {
  const base = JSON.parse(readFileSync(join(policyDir(dir), BASE_POLICY), 'utf8')) as TokenPolicy;
  const host = `127.0.0.1:${ports.registry}`;
  return {
    host,
    url: `https://${host}`,
    caPath: join(pki, 'ca.crt'),
    registriesPath: registriesFile(dir),
    realm: `https://127.0.0.1:${ports.token}/token`,
    service: REGISTRY_SERVICE,
    push: { username: PUSH_USER, password: base.users[PUSH_USER]!.password },
    policyDir: policyDir(dir),
    tls: { certPath: join(pki, 'registry.crt'), keyPath: join(pki, 'registry.key') },
  };
}
