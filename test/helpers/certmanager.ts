// The cert-manager objects Helm and kustomize render for the webhook: what both install tests check.
import assert from 'node:assert/strict';
import type { KubeObject } from '../../src/runtime/api/meta.ts';

type CertManagerObject = KubeObject & {
  spec: {
    secretName?: string;
    isCA?: boolean;
    issuerRef?: { kind: string; name: string };
    ca?: { secretName: string };
    selfSigned?: object;
  };
};

/**
 * The Certificate whose Secret is `mounted` is signed by a CA Issuer, whose CA is a Certificate of
 * its own from a self-signed Issuer: the ca.crt Berth registers stays the same across renewals of
 * the serving certificate.
 */
export function assertCaChain(objects: KubeObject[], mounted: string): void {
  const all = objects as CertManagerObject[];
  const certificate = (secret: string) =>
    all.find((o) => o.kind === 'Certificate' && o.spec.secretName === secret);
  const issuer = (ref: { kind: string; name: string } | undefined) =>
    all.find((o) => o.kind === ref?.kind && o.metadata?.name === ref?.name);
  const serving = certificate(mounted);
  assert.ok(serving && !serving.spec.isCA, `a serving Certificate for the mounted Secret ${mounted}`);
  const caIssuer = issuer(serving.spec.issuerRef);
  assert.ok(caIssuer?.spec.ca, 'the serving Certificate is signed by a CA Issuer');
  const ca = certificate(caIssuer.spec.ca.secretName);
  assert.ok(ca?.spec.isCA, "the CA Issuer's Secret is a CA Certificate of its own");
  assert.ok(issuer(ca.spec.issuerRef)?.spec.selfSigned, 'the CA is self-signed');
}
