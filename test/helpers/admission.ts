// AdmissionReview bodies as an apiserver sends them, for tests and benchmarks that call Berth's
// webhook server directly.
import type { AdmissionRequest } from '../../src/runtime/webhook/admission.ts';
import type { WebhookSpec } from '../../src/runtime/webhook/registration.ts';

/**
 * The AdmissionReview for `request`: a CREATE of its object's kind (a Pod without one), by
 * `tester`, unless the request says otherwise.
 */
export function admissionReview(request: Partial<AdmissionRequest> & { uid: string }): string {
  const kind = request.object?.kind ?? 'Pod';
  return JSON.stringify({
    apiVersion: 'admission.k8s.io/v1',
    kind: 'AdmissionReview',
    request: {
      kind: { group: '', version: 'v1', kind },
      // The core kinds reviewed here (Pod, Node) have their plural as resource.
      resource: { group: '', version: 'v1', resource: `${kind.toLowerCase()}s` },
      operation: 'CREATE',
      userInfo: { username: 'tester' },
      ...request,
    },
  });
}

/**
 * The apiserver's wait for a test's webhook. Berth registers 2 s; a machine running the whole suite
 * can take longer to answer, and failurePolicy Ignore then admits the object unchanged, which an
 * assertion on the admitted object would read as Berth's defect. Not for the abuse suites, whose
 * point is that no input slows an answer past Berth's own timeout.
 */
export const TEST_WEBHOOK_TIMEOUT_SECONDS = 10;

/** A validating webhook of pod CREATEs that allows every pod: for tests of serving and registering. */
export const allowPods: WebhookSpec = {
  name: 'pods.test.berth.dev',
  path: '/validate',
  kind: 'validating',
  handler: () => ({ allowed: true }),
  rules: [{ operations: ['CREATE'], apiGroups: [''], apiVersions: ['v1'], resources: ['pods'] }],
  failurePolicy: 'Fail',
};
