// Serving certificates kept in one Secret that every replica shares: the first replica to start
// creates a CA and a serving certificate there, the others read them, and whichever replica notices
// first renews them before they expire. Writes are compare-and-swap on the Secret's resourceVersion,
// so two replicas never install different CAs. A new CA is staged: it joins the bundle (which every
// replica registers as caBundle) a while before it signs the serving certificate, so the apiserver
// trusts the new certificate before any replica serves it.
import { X509Certificate } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { isConflict, isNotFound, type KubeClient } from '../client/client.ts';
import { Resources, type KubeObject } from '../api/meta.ts';
import { runCertificateJobApart, type IssueRequest, type KeyPairPem } from './certificates.ts';

/** The Secret's keys: kubernetes.io/tls's two, the CA bundle, and the current CA's key (to renew). */
const TLS_CRT = 'tls.crt';
const TLS_KEY = 'tls.key';
const CA_CRT = 'ca.crt';
const CA_KEY = 'ca.key';
/** When the CA at the head of the bundle was staged; the serving certificate moves to it after the overlap. */
export const CA_STAGED_ANNOTATION = 'berth.dev/ca-staged-at';

export interface Lifetimes {
  /** Days a CA is valid: 10 years. */
  caDays: number;
  /** Days a serving certificate is valid: 1 year. */
  servingDays: number;
  /** How long a staged CA sits in the bundle before it signs: registrations catch up in between. */
  overlapMs: number;
}

export const defaultLifetimes: Lifetimes = { caDays: 3650, servingDays: 365, overlapMs: 10 * 60_000 };

export interface ServingNames {
  dnsNames: string[];
  ipAddresses?: string[];
}

/** The serving certificate a server with these names asks its CA for. */
export const servingRequest = (names: ServingNames, validDays?: number): IssueRequest => ({
  commonName: names.dnsNames[0] ?? names.ipAddresses?.[0] ?? 'berth-webhook',
  dnsNames: names.dnsNames,
  ipAddresses: names.ipAddresses ?? [],
  usage: 'server',
  ...(validDays === undefined ? {} : { validDays }),
});

/** What the Secret holds, parsed; undefined fields are missing or unreadable. */
export interface SecretState {
  /** The bundle, the signing CA first. */
  cas: X509Certificate[];
  caKey?: string;
  serving?: X509Certificate;
  servingKey?: string;
  stagedAt?: number;
}

export type SecretAction =
  | { action: 'keep' }
  /** Nothing usable: a new CA and serving certificate. */
  | { action: 'create'; why: string }
  /** A serving certificate from the signing CA (expiring, wrong names, or the staged CA's turn). */
  | { action: 'renew'; why: string }
  /** A new CA at the head of the bundle; the serving certificate stays until the overlap has passed. */
  | { action: 'stage'; why: string }
  /** Expired CAs leave the bundle. */
  | { action: 'prune'; why: string };

const remaining = (c: X509Certificate, now: number) => Date.parse(c.validTo) - now;
const lifetime = (c: X509Certificate) => Date.parse(c.validTo) - Date.parse(c.validFrom);
/** Renewed once a third of its lifetime is left, as cert-manager does by default. */
const dueForRenewal = (c: X509Certificate, now: number) => remaining(c, now) < lifetime(c) / 3;

function covers(c: X509Certificate, names: ServingNames): boolean {
  return (
    names.dnsNames.every((n) => c.checkHost(n, { subject: 'never' }) !== undefined) &&
    (names.ipAddresses ?? []).every((ip) => c.checkIP(ip) !== undefined)
  );
}

/** What to do with the Secret as it is: pure, so every case is a unit test. */
export function secretAction(
  s: SecretState | undefined,
  names: ServingNames,
  now: number,
  l: Lifetimes,
): SecretAction {
  const signer = s?.cas[0];
  if (!s || !signer || !s.caKey || remaining(signer, now) <= 0)
    return { action: 'create', why: 'no usable CA in the Secret' };
  // A serving certificate first: staging keeps the one there is, so there must be one to keep.
  // (A renewal forced now signs with the head CA, staged or not: there is no other key.)
  if (!s.serving || !s.servingKey || remaining(s.serving, now) <= 0)
    return { action: 'renew', why: 'no valid serving certificate' };
  if (!covers(s.serving, names))
    return { action: 'renew', why: 'the serving certificate does not name this server' };
  const staged = s.stagedAt !== undefined && s.cas.length > 1;
  if (!staged && dueForRenewal(signer, now)) return { action: 'stage', why: 'the CA expires soon' };
  const signedByHead = s.serving.checkIssued(signer) && s.serving.verify(signer.publicKey);
  if (!signedByHead && (!staged || now - s.stagedAt! >= l.overlapMs))
    return { action: 'renew', why: 'the staged CA has been trusted long enough to sign' };
  if (dueForRenewal(s.serving, now)) return { action: 'renew', why: 'the serving certificate expires soon' };
  if (s.cas.some((c) => remaining(c, now) <= 0))
    return { action: 'prune', why: 'an expired CA is in the bundle' };
  return { action: 'keep' };
}

function splitPem(bundle: string): string[] {
  return bundle.match(/-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----\n?/g) ?? [];
}

const decode = (data: Record<string, string> | undefined, key: string) =>
  data?.[key] === undefined ? undefined : Buffer.from(data[key], 'base64').toString('utf8');

function parse(secret: KubeObject | undefined): SecretState | undefined {
  if (!secret) return undefined;
  const data = secret['data'] as Record<string, string> | undefined;
  const read = (pem: string | undefined) => {
    try {
      return pem ? new X509Certificate(pem) : undefined;
    } catch {
      return undefined;
    }
  };
  const cas = splitPem(decode(data, CA_CRT) ?? '').map(read);
  const staged = Date.parse(secret.metadata?.annotations?.[CA_STAGED_ANNOTATION] ?? '');
  const caKey = decode(data, CA_KEY);
  const servingKey = decode(data, TLS_KEY);
  const serving = read(decode(data, TLS_CRT));
  return {
    cas: cas.every((c) => c !== undefined) ? cas : [],
    ...(caKey ? { caKey } : {}),
    ...(serving ? { serving } : {}),
    ...(servingKey ? { servingKey } : {}),
    ...(Number.isFinite(staged) ? { stagedAt: staged } : {}),
  };
}

/** What a server installs: the serving pair and the bundle to register. */
export interface ServingMaterial {
  cert: string;
  key: string;
  ca: string;
}

export interface ServingSecretOptions extends ServingNames {
  client: KubeClient;
  namespace: string;
  name: string;
  lifetimes?: Lifetimes;
}

export class ServingSecret {
  private readonly o: ServingSecretOptions;
  private readonly lifetimes: Lifetimes;

  constructor(o: ServingSecretOptions) {
    this.o = o;
    this.lifetimes = o.lifetimes ?? defaultLifetimes;
  }

  /**
   * Reads the Secret, writes it first if secretAction says so (a conflict means another replica wrote:
   * read again), and returns what to serve. Throws when the apiserver cannot be asked.
   */
  async ensure(now = Date.now): Promise<ServingMaterial> {
    // A few passes: each writes one step (create, stage, renew, prune) or meets another replica's write.
    for (let pass = 0; pass < 6; pass++) {
      const secret = await this.o.client
        .get(Resources.secrets, this.o.name, this.o.namespace)
        .catch((e: unknown) => (isNotFound(e) ? undefined : Promise.reject(e)));
      const state = parse(secret);
      const p = secretAction(state, this.o, now(), this.lifetimes);
      if (p.action === 'keep') return material(secret!);
      try {
        await this.write(secret, state, p, now());
      } catch (e) {
        // 409: another replica created or changed the Secret since it was read.
        if (!isConflict(e)) throw e;
        await sleep(50 * (pass + 1));
      }
    }
    throw new Error(`the Secret ${this.o.namespace}/${this.o.name} did not settle after 6 writes`);
  }

  private async write(
    secret: KubeObject | undefined,
    s: SecretState | undefined,
    p: Exclude<SecretAction, { action: 'keep' }>,
    now: number,
  ): Promise<KubeObject> {
    const l = this.lifetimes;
    let cas = s?.cas.map((c) => c.toString()) ?? [];
    let caKey = s?.caKey;
    let serving: KeyPairPem | undefined =
      s?.serving && s.servingKey ? { certPem: s.serving.toString(), keyPem: s.servingKey } : undefined;
    let stagedAt = s?.stagedAt;
    const request = servingRequest(this.o, l.servingDays);
    const newCa = { commonName: 'berth-webhook-ca', validDays: l.caDays };
    switch (p.action) {
      case 'create': {
        const { ca, issued } = await runCertificateJobApart({ newCa, issue: request });
        [cas, caKey, stagedAt, serving] = [[ca.certPem], ca.keyPem, undefined, issued];
        break;
      }
      case 'stage': {
        const { ca } = await runCertificateJobApart({ newCa });
        [cas, caKey, stagedAt] = [[ca.certPem, ...cas], ca.keyPem, now];
        break;
      }
      case 'renew':
        ({ issued: serving } = await runCertificateJobApart({
          ca: { certPem: cas[0]!, keyPem: caKey! },
          issue: request,
        }));
        break;
      case 'prune':
        cas = s!.cas.filter((c) => Date.parse(c.validTo) > now).map((c) => c.toString());
        break;
    }
    // The staging mark goes once the serving certificate has moved to the new CA.
    if (p.action === 'renew') stagedAt = undefined;
    const data = {
      [TLS_CRT]: serving!.certPem,
      [TLS_KEY]: serving!.keyPem,
      [CA_CRT]: cas.map((c) => (c.endsWith('\n') ? c : c + '\n')).join(''),
      [CA_KEY]: caKey!,
    };
    const encoded = Object.fromEntries(
      Object.entries(data).map(([k, v]) => [k, Buffer.from(v).toString('base64')]),
    );
    const annotations = {
      [CA_STAGED_ANNOTATION]: stagedAt === undefined ? null : new Date(stagedAt).toISOString(),
    };
    if (!secret) {
      return this.o.client.create(Resources.secrets, {
        apiVersion: 'v1',
        kind: 'Secret',
        metadata: {
          name: this.o.name,
          namespace: this.o.namespace,
          labels: { 'app.kubernetes.io/managed-by': 'berth' },
          ...(stagedAt !== undefined
            ? { annotations: { [CA_STAGED_ANNOTATION]: annotations[CA_STAGED_ANNOTATION]! } }
            : {}),
        },
        type: 'kubernetes.io/tls',
        data: encoded,
      });
    }
    // A merge patch carrying the resourceVersion read is a compare-and-swap: 409 if another replica wrote.
    return this.o.client.patch(
      Resources.secrets,
      this.o.name,
      { metadata: { resourceVersion: secret.metadata!.resourceVersion, annotations }, data: encoded },
      { namespace: this.o.namespace },
    );
  }
}

function material(secret: KubeObject): ServingMaterial {
  const data = secret['data'] as Record<string, string>;
  return { cert: decode(data, TLS_CRT)!, key: decode(data, TLS_KEY)!, ca: decode(data, CA_CRT)! };
}
