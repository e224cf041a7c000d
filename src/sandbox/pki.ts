// The sandbox's PKI and kubeconfigs, in its folder: the CA and the apiserver's, the admin's and the
// service accounts' keys (pki/), the apiserver's webhook client certificate from a CA of its own,
// and kubeconfigs for any user the CA signs or any token.
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify as toYaml } from 'yaml';
import {
  createCertificateAuthority,
  createSigningKeyPair,
  loadCertificateAuthority,
  type CertificateAuthority,
} from '../runtime/webhook/certificates.ts';
import { SERVICE_IP } from './processes.ts';

function writePki(dir: string, files: Record<string, string>): void {
  for (const [f, pem] of Object.entries(files)) writeFileSync(join(dir, 'pki', f), pem, { mode: 0o600 });
}

/** The CA, the apiserver's serving certificate, the admin's client certificate and the service account keys, once. */
export async function ensurePki(dir: string, name: string): Promise<void> {
  if (existsSync(join(dir, 'pki', 'sa.pub'))) return;
  mkdirSync(join(dir, 'pki'), { recursive: true });
  const ca = await createCertificateAuthority(`berth-sandbox-${name}`);
  const server = await ca.issue({
    commonName: 'kube-apiserver',
    dnsNames: [
      'localhost',
      'kubernetes',
      'kubernetes.default',
      'kubernetes.default.svc',
      'kubernetes.default.svc.cluster.local',
    ],
    ipAddresses: ['127.0.0.1', SERVICE_IP],
    usage: 'server',
  });
  const admin = await ca.issue({
    commonName: 'berth-admin',
    organizations: ['system:masters'],
    usage: 'client',
  });
  const sa = await createSigningKeyPair();
  writePki(dir, {
    'ca.crt': ca.certPem,
    'ca.key': ca.keyPem,
    'apiserver.crt': server.certPem,
    'apiserver.key': server.keyPem,
    'admin.crt': admin.certPem,
    'admin.key': admin.keyPem,
    'sa.key': sa.privateKeyPem,
    'sa.pub': sa.publicKeyPem,
  });
}

/** A certificate for kube-apiserver to present to webhooks, from a CA of its own (a sandbox made before has it added). */
export async function ensureWebhookClientPki(dir: string, name: string): Promise<void> {
  if (existsSync(join(dir, 'pki', 'webhook-client.key'))) return;
  const ca = await createCertificateAuthority(`berth-sandbox-${name}-webhook-clients`);
  const client = await ca.issue({ commonName: 'kube-apiserver', usage: 'client' });
  writePki(dir, {
    'webhook-client-ca.crt': ca.certPem,
    'webhook-client.crt': client.certPem,
    'webhook-client.key': client.keyPem,
  });
}

/** kube-apiserver's AdmissionConfiguration: its webhook client certificate for every webhook (`*`). */
export function writeAdmissionConfiguration(dir: string): void {
  const kubeConfigFile = join(dir, 'webhook-client.kubeconfig');
  const user = {
    'client-certificate': join(dir, 'pki', 'webhook-client.crt'),
    'client-key': join(dir, 'pki', 'webhook-client.key'),
  };
  writeFileSync(kubeConfigFile, toYaml({ apiVersion: 'v1', kind: 'Config', users: [{ name: '*', user }] }));
  const plugin = (name: string) => ({
    name,
    configuration: {
      apiVersion: 'apiserver.config.k8s.io/v1',
      kind: 'WebhookAdmissionConfiguration',
      kubeConfigFile,
    },
  });
  writeFileSync(
    join(dir, 'admission.yaml'),
    toYaml({
      apiVersion: 'apiserver.config.k8s.io/v1',
      kind: 'AdmissionConfiguration',
      plugins: [plugin('ValidatingAdmissionWebhook'), plugin('MutatingAdmissionWebhook')],
    }),
  );
}

/** The sandbox CA, which signs the apiserver's, the registry's and every user's certificate. */
export function loadCa(dir: string): Promise<CertificateAuthority> {
  return loadCertificateAuthority({
    certPem: readFileSync(join(dir, 'pki', 'ca.crt'), 'utf8'),
    keyPem: readFileSync(join(dir, 'pki', 'ca.key'), 'utf8'),
  });
}

/** Where a sandbox is reached: its name, folder (with pki/) and apiserver address. */
export interface SandboxAddress {
  readonly name: string;
  readonly dir: string;
  readonly server: string;
}

/** A kubeconfig for `user` of the sandbox, with a client certificate or a token. */
export function kubeconfigYaml(
  sb: SandboxAddress,
  user: string,
  credentials: { certPem: string; keyPem: string } | { token: string },
): string {
  const b64 = (s: string) => Buffer.from(s).toString('base64');
  const cluster = `berth-${sb.name}`;
  return toYaml({
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [
      {
        name: cluster,
        cluster: {
          server: sb.server,
          'certificate-authority-data': b64(readFileSync(join(sb.dir, 'pki', 'ca.crt'), 'utf8')),
        },
      },
    ],
    users: [
      {
        name: user,
        user:
          'token' in credentials
            ? { token: credentials.token }
            : {
                'client-certificate-data': b64(credentials.certPem),
                'client-key-data': b64(credentials.keyPem),
              },
      },
    ],
    contexts: [{ name: cluster, context: { cluster, user } }],
    'current-context': cluster,
  });
}

/** The admin's kubeconfig, `kubeconfig` in the sandbox folder. */
export function writeAdminKubeconfig(sb: SandboxAddress): void {
  const certPem = readFileSync(join(sb.dir, 'pki', 'admin.crt'), 'utf8');
  const keyPem = readFileSync(join(sb.dir, 'pki', 'admin.key'), 'utf8');
  writeFileSync(join(sb.dir, 'kubeconfig'), kubeconfigYaml(sb, 'berth-admin', { certPem, keyPem }), {
    mode: 0o600,
  });
}
