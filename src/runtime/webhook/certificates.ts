// Small certificate authority for the sandbox and for the webhook server's self-managed certificates.
// ECDSA P-256 keys, like envtest: fast to generate and accepted everywhere Kubernetes reads PEM.
import { spawn } from 'node:child_process';
import { webcrypto } from 'node:crypto';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type * as X509 from '@peculiar/x509';

type CryptoKey = webcrypto.CryptoKey;
type CryptoKeyPair = webcrypto.CryptoKeyPair;

let library: Promise<typeof X509> | undefined;
/**
 * @peculiar/x509, loaded with the first certificate made or read: with its ASN.1 and injection
 * libraries it costs some 10 MB of resident memory, which a Berth serving no webhook never needs.
 */
function x509lib(): Promise<typeof X509> {
  return (library ??= (async () => {
    await import('reflect-metadata');
    const x509 = await import('@peculiar/x509');
    x509.cryptoProvider.set(webcrypto as unknown as Parameters<typeof x509.cryptoProvider.set>[0]);
    return x509;
  })());
}

const alg = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;
const day = 24 * 60 * 60 * 1000;

export interface KeyPairPem {
  certPem: string;
  keyPem: string;
}

export interface CertificateAuthority extends KeyPairPem {
  issue(req: IssueRequest): Promise<KeyPairPem>;
}

export interface IssueRequest {
  commonName: string;
  organizations?: string[];
  dnsNames?: string[];
  ipAddresses?: string[];
  usage: 'server' | 'client' | 'both';
  validDays?: number;
}

async function newKeys(): Promise<CryptoKeyPair> {
  return (await webcrypto.subtle.generateKey(alg, true, ['sign', 'verify'])) as CryptoKeyPair;
}

async function keyToPem(key: CryptoKey): Promise<string> {
  const der = Buffer.from(await webcrypto.subtle.exportKey('pkcs8', key));
  return toPem(der, 'PRIVATE KEY');
}

function toPem(der: Buffer, label: string): string {
  const body = der.toString('base64').replace(/.{1,64}/g, '$&\n');
  return `-----BEGIN ${label}-----\n${body}-----END ${label}-----\n`;
}

function subjectName(commonName: string, organizations: string[] = []): string {
  const escape = (v: string) => v.replace(/([,+"\\<>;=])/g, '\\$1');
  return [`CN=${escape(commonName)}`, ...organizations.map((o) => `O=${escape(o)}`)].join(', ');
}

function serial(): string {
  // Positive 16-byte serial: clear the top bit so DER does not read it as negative.
  const bytes = webcrypto.getRandomValues(new Uint8Array(16));
  bytes[0] = bytes[0]! & 0x7f;
  return Buffer.from(bytes).toString('hex');
}

/** Creates a new self-signed CA that can issue server and client certificates. */
export async function createCertificateAuthority(
  commonName: string,
  validDays = 3650,
): Promise<CertificateAuthority> {
  const x509 = await x509lib();
  const keys = await newKeys();
  const now = Date.now();
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: serial(),
    name: subjectName(commonName),
    notBefore: new Date(now - 60_000),
    notAfter: new Date(now + validDays * day),
    keys,
    signingAlgorithm: alg,
    extensions: [
      new x509.BasicConstraintsExtension(true, 0, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
    ],
  });
  return caFrom(cert, keys.privateKey, await keyToPem(keys.privateKey));
}

/** Loads a CA written earlier by createCertificateAuthority, so a restarted sandbox keeps its trust root. */
export async function loadCertificateAuthority(pair: KeyPairPem): Promise<CertificateAuthority> {
  const x509 = await x509lib();
  const cert = new x509.X509Certificate(pair.certPem);
  const der = Buffer.from(pair.keyPem.replace(/-----[^-]+-----|\s/g, ''), 'base64');
  const key = await webcrypto.subtle.importKey('pkcs8', der, alg, true, ['sign']);
  return caFrom(cert, key, pair.keyPem);
}

function caFrom(caCert: X509.X509Certificate, caKey: CryptoKey, caKeyPem: string): CertificateAuthority {
  return {
    certPem: caCert.toString('pem') + '\n',
    keyPem: caKeyPem,
    async issue(req: IssueRequest): Promise<KeyPairPem> {
      const x509 = await x509lib();
      const keys = await newKeys();
      const now = Date.now();
      const usages: string[] = [];
      if (req.usage !== 'client') usages.push(x509.ExtendedKeyUsage.serverAuth);
      if (req.usage !== 'server') usages.push(x509.ExtendedKeyUsage.clientAuth);
      const sans: X509.JsonGeneralName[] = [
        ...(req.dnsNames ?? []).map((value) => ({ type: 'dns' as const, value })),
        ...(req.ipAddresses ?? []).map((value) => ({ type: 'ip' as const, value })),
      ];
      const extensions: X509.Extension[] = [
        new x509.BasicConstraintsExtension(false, undefined, true),
        new x509.KeyUsagesExtension(
          x509.KeyUsageFlags.digitalSignature | x509.KeyUsageFlags.keyEncipherment,
          true,
        ),
        new x509.ExtendedKeyUsageExtension(usages),
        await x509.AuthorityKeyIdentifierExtension.create(caCert.publicKey),
      ];
      if (sans.length > 0) extensions.push(new x509.SubjectAlternativeNameExtension(sans));
      const cert = await x509.X509CertificateGenerator.create({
        serialNumber: serial(),
        subject: subjectName(req.commonName, req.organizations),
        issuer: caCert.subject,
        notBefore: new Date(now - 60_000),
        notAfter: new Date(now + (req.validDays ?? 365) * day),
        publicKey: keys.publicKey,
        signingKey: caKey,
        signingAlgorithm: alg,
        extensions,
      });
      return { certPem: cert.toString('pem') + '\n', keyPem: await keyToPem(keys.privateKey) };
    },
  };
}

/** A bare key pair (PKCS#8 private key, SPKI public key), for service-account token signing. */
export async function createSigningKeyPair(): Promise<{ privateKeyPem: string; publicKeyPem: string }> {
  const keys = await newKeys();
  const spki = Buffer.from(await webcrypto.subtle.exportKey('spki', keys.publicKey));
  return { privateKeyPem: await keyToPem(keys.privateKey), publicKeyPem: toPem(spki, 'PUBLIC KEY') };
}

/** One CA, loaded (`ca`) or created (`newCa`), and the certificate it issues, if any. */
export type CertificateJob = ({ ca: KeyPairPem } | { newCa: { commonName: string; validDays?: number } }) & {
  issue?: IssueRequest;
};

export interface CertificateJobResult {
  ca: KeyPairPem;
  issued?: KeyPairPem;
}

export async function runCertificateJob(job: CertificateJob): Promise<CertificateJobResult> {
  const ca =
    'ca' in job
      ? await loadCertificateAuthority(job.ca)
      : await createCertificateAuthority(job.newCa.commonName, job.newCa.validDays);
  const issued = job.issue ? await ca.issue(job.issue) : undefined;
  return { ca: { certPem: ca.certPem, keyPem: ca.keyPem }, ...(issued ? { issued } : {}) };
}

const issuerEntry = fileURLToPath(
  new URL(`./issuer${path.extname(fileURLToPath(import.meta.url))}`, import.meta.url),
);
const jobTimeoutMs = 60_000;

/**
 * The job in a child process (issuer.ts), which exits with its libraries: a webhook server needs
 * them at start and at renewals, and in a thread they would stay resident after it ended.
 */
export function runCertificateJobApart(job: CertificateJob): Promise<CertificateJobResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [issuerEntry], { stdio: 'pipe', timeout: jobTimeoutMs });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on('data', (d: Buffer) => out.push(d));
    child.stderr.on('data', (d: Buffer) => err.push(d));
    child.on('error', reject);
    child.on('close', (code, signal) => {
      if (code === 0) return resolve(JSON.parse(Buffer.concat(out).toString('utf8')) as CertificateJobResult);
      const why = Buffer.concat(err).toString('utf8').trim().slice(-500);
      reject(new Error(`the certificate issuer exited with ${signal ?? code}: ${why}`));
    });
    child.stdin.end(JSON.stringify(job));
  });
}
