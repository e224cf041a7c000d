// Berth's kinds as the API names them, known without their schemas: each capability's types.ts
// declares its kinds here, its crd.ts builds their CRDs from zod schemas (policy/crd.ts), so what
// every command reads of a capability (capability.ts) loads no zod and builds no schema.
import type { ResourceRef } from '../runtime/api/meta.ts';

/** The API group of every Berth kind. */
export const POLICY_GROUP = 'berth.dev';

/** A Berth kind: group berth.dev, version v1alpha1, its plural the kind in lower case with an s. */
export const berthKind = (kind: string, scope: 'Cluster' | 'Namespaced'): ResourceRef => ({
  group: POLICY_GROUP,
  version: 'v1alpha1',
  resource: `${kind.toLowerCase()}s`,
  kind,
  namespaced: scope === 'Namespaced',
});
