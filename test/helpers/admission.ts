// AdmissionReview bodies as an apiserver sends them, for tests and benchmarks that call Berth's
// webhook server directly.
import type { AdmissionRequest } from '../../src/runtime/webhook/admission.ts';

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
