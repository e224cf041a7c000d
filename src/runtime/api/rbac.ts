// RBAC from code: capabilities declare the rules they need, mergeRules folds them into the
// smallest sorted set, and the builders wrap them in manifests, so generated YAML does not churn.
import type { KubeObject } from './meta.ts';

export interface PolicyRule {
  apiGroups?: string[];
  resources?: string[];
  verbs: string[];
  resourceNames?: string[];
  nonResourceURLs?: string[];
}

/**
 * A rule as code declares it. `why` explains a grant that a run may never exercise (a create that
 * server-side apply performs as a patch, a path taken only on failure): the RBAC audit check
 * (scripts/rbac-audit.ts) accepts a granted pair that no request used only when its rule says why.
 * It is never part of a generated manifest.
 */
export interface DeclaredRule extends PolicyRule {
  why?: string;
}

export interface ServiceAccountSubject {
  kind: 'ServiceAccount';
  name: string;
  namespace: string;
}

export interface RoleRef {
  kind: 'Role' | 'ClusterRole';
  name: string;
}

const rbacApiVersion = 'rbac.authorization.k8s.io/v1';
const rbacGroup = 'rbac.authorization.k8s.io';

const sorted = (xs: Iterable<string>): string[] => [...new Set(xs)].sort();

/** Collects the values of [key, value] pairs under their keys. */
function collect(pairs: Iterable<[string, string]>): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (const [k, v] of pairs) out.set(k, [...(out.get(k) ?? []), v]);
  return out;
}

/**
 * The smallest deterministic rule set granting exactly what `rules` grant: verbs are merged per
 * (apiGroup, resource, resourceNames), resources with identical verbs and names share a rule, and
 * API groups with identical resource sets share a rule. Output and every list in it are sorted.
 */
export function mergeRules(rules: PolicyRule[]): PolicyRule[] {
  // The verbs granted per [apiGroup, resource, resourceNames], and per nonResourceURL.
  const atoms = new Map<string, Set<string>>();
  const urls = new Map<string, Set<string>>();
  const grant = (m: Map<string, Set<string>>, key: string, verbs: string[]) =>
    m.set(key, new Set([...(m.get(key) ?? []), ...verbs]));
  for (const r of rules) {
    if (r.nonResourceURLs?.length && (r.resources?.length || r.apiGroups?.length)) {
      throw new Error('a policy rule cannot grant both resources and nonResourceURLs');
    }
    for (const url of r.nonResourceURLs ?? []) grant(urls, url, r.verbs);
    const names = sorted(r.resourceNames ?? []);
    for (const group of r.apiGroups ?? []) {
      for (const resource of r.resources ?? [])
        grant(atoms, JSON.stringify([group, resource, names]), r.verbs);
    }
  }

  const resourcesByGroup = collect(
    [...atoms].flatMap(([key, granted]): [string, string][] => {
      const [group, resource, names] = JSON.parse(key) as [string, string, string[]];
      // What a rule without resourceNames grants, it grants for every name.
      const unnamed = names.length ? atoms.get(JSON.stringify([group, resource, []])) : undefined;
      const verbs = unnamed?.has('*') ? [] : normalVerbs([...granted].filter((v) => !unnamed?.has(v)));
      return verbs.length ? [[JSON.stringify([group, names, verbs]), resource]] : [];
    }),
  );
  // Groups with the same resources, names and verbs share a rule: it grants each group × each resource.
  const groupsByResources = collect(
    [...resourcesByGroup].map(([key, resources]): [string, string] => {
      const [group, names, verbs] = JSON.parse(key) as [string, string[], string[]];
      return [JSON.stringify([sorted(resources), names, verbs]), group];
    }),
  );
  const resourceRules = [...groupsByResources].map(([key, groups]): PolicyRule => {
    const [resources, names, verbs] = JSON.parse(key) as [string[], string[], string[]];
    return { apiGroups: sorted(groups), resources, ...(names.length ? { resourceNames: names } : {}), verbs };
  });

  const urlsByVerbs = collect(
    [...urls].flatMap(([url, granted]): [string, string][] => {
      const verbs = normalVerbs(granted);
      return verbs.length ? [[JSON.stringify(verbs), url]] : [];
    }),
  );
  const urlRules = [...urlsByVerbs].map(([verbs, us]): PolicyRule => ({
    nonResourceURLs: sorted(us),
    verbs: JSON.parse(verbs) as string[],
  }));

  return [...sortRules(resourceRules), ...sortRules(urlRules)];
}

// A '*' verb grants every verb: the others add nothing.
function normalVerbs(verbs: Iterable<string>): string[] {
  const all = sorted(verbs);
  return all.includes('*') ? ['*'] : all;
}

// Lexicographic over each list in turn, a shorter list before its extensions.
function compareLists(a: string[] = [], b: string[] = []): number {
  for (let i = 0; i < Math.min(a.length, b.length); i++) if (a[i] !== b[i]) return a[i]! < b[i]! ? -1 : 1;
  return a.length - b.length;
}

const sortRules = (rules: PolicyRule[]): PolicyRule[] =>
  rules.sort(
    (a, b) =>
      compareLists(a.apiGroups, b.apiGroups) ||
      compareLists(a.resources, b.resources) ||
      compareLists(a.resourceNames, b.resourceNames) ||
      compareLists(a.nonResourceURLs, b.nonResourceURLs) ||
      compareLists(a.verbs, b.verbs),
  );

export interface Role extends KubeObject {
  apiVersion: typeof rbacApiVersion;
  kind: 'Role' | 'ClusterRole';
  metadata: { name: string; namespace?: string };
  rules: PolicyRule[];
}

export interface RoleBinding extends KubeObject {
  apiVersion: typeof rbacApiVersion;
  kind: 'RoleBinding' | 'ClusterRoleBinding';
  metadata: { name: string; namespace?: string };
  roleRef: RoleRef & { apiGroup: typeof rbacGroup };
  subjects: ServiceAccountSubject[];
}

export function clusterRole(name: string, rules: PolicyRule[]): Role {
  return { apiVersion: rbacApiVersion, kind: 'ClusterRole', metadata: { name }, rules: mergeRules(rules) };
}

export function role(name: string, namespace: string, rules: PolicyRule[]): Role {
  return {
    apiVersion: rbacApiVersion,
    kind: 'Role',
    metadata: { name, namespace },
    rules: mergeRules(rules),
  };
}

export function clusterRoleBinding(
  name: string,
  roleName: string,
  subject: ServiceAccountSubject,
): RoleBinding {
  return {
    apiVersion: rbacApiVersion,
    kind: 'ClusterRoleBinding',
    metadata: { name },
    roleRef: { apiGroup: rbacGroup, kind: 'ClusterRole', name: roleName },
    subjects: [subject],
  };
}

/** Binds a Role, or a ClusterRole's rules within one namespace. */
export function roleBinding(
  name: string,
  namespace: string,
  roleRef: RoleRef,
  subject: ServiceAccountSubject,
): RoleBinding {
  return {
    apiVersion: rbacApiVersion,
    kind: 'RoleBinding',
    metadata: { name, namespace },
    roleRef: { apiGroup: rbacGroup, ...roleRef },
    subjects: [subject],
  };
}

/**
 * What every authenticated user may do in a cluster with the default roles (system:basic-user,
 * system:discovery, system:public-info-viewer), and every ServiceAccount where the ClusterTrustBundle
 * feature is on (system:cluster-trust-bundle-discovery; the feature is GA and on since Kubernetes 1.37): never
 * more than a role needs.
 */
export const EVERYONE_RULES: PolicyRule[] = [
  { apiGroups: ['certificates.k8s.io'], resources: ['clustertrustbundles'], verbs: ['get', 'list', 'watch'] },
  {
    apiGroups: ['authorization.k8s.io'],
    resources: ['selfsubjectaccessreviews', 'selfsubjectrulesreviews'],
    verbs: ['create'],
  },
  { apiGroups: ['authentication.k8s.io'], resources: ['selfsubjectreviews'], verbs: ['create'] },
  {
    nonResourceURLs: [
      '/.well-known/openid-configuration',
      '/.well-known/openid-configuration/',
      '/api',
      '/api/*',
      '/apis',
      '/apis/*',
      '/healthz',
      '/livez',
      '/openapi',
      '/openapi/*',
      '/openid/v1/jwks',
      '/openid/v1/jwks/',
      '/readyz',
      '/version',
      '/version/',
    ],
    verbs: ['get'],
  },
];

const covers = (have: string[] | undefined, want: string): boolean =>
  (have ?? []).some((h) => h === '*' || h === want);

// A URL rule ending in * covers the URLs it is a prefix of (RBAC's own matching).
const coversUrl = (have: string[] | undefined, want: string): boolean =>
  (have ?? []).some((h) => h === want || (h.endsWith('*') && want.startsWith(h.slice(0, -1))));

/** Whether `rule` grants `verb` on group/resource for every name of `names` (none: every object). */
function grants(rule: PolicyRule, group: string, resource: string, verb: string, names: string[]): boolean {
  const limited = rule.resourceNames ?? [];
  return (
    covers(rule.apiGroups, group) &&
    covers(rule.resources, resource) &&
    covers(rule.verbs, verb) &&
    (limited.length === 0 || (names.length > 0 && names.every((n) => limited.includes(n))))
  );
}

/**
 * What `granted` allows beyond `needed`, one line per resource or URL with its verbs
 * (`create, delete core/pods`, `get core/secrets named a`, `get URL /metrics`; a wildcard stays a
 * `*`); a `*` in a grant is beyond anything but a `*` needed.
 */
export function excessGrants(granted: PolicyRule[], needed: PolicyRule[]): string[] {
  const out = new Map<string, Set<string>>();
  const add = (what: string, verb: string) => out.set(what, (out.get(what) ?? new Set()).add(verb));
  for (const r of granted) {
    const names = r.resourceNames ?? [];
    for (const group of r.apiGroups ?? [])
      for (const resource of r.resources ?? [])
        for (const verb of r.verbs)
          if (!needed.some((n) => grants(n, group, resource, verb, names)))
            add(`${group || 'core'}/${resource}${names.length ? ` named ${names.join(', ')}` : ''}`, verb);
    for (const url of r.nonResourceURLs ?? [])
      for (const verb of r.verbs)
        if (!needed.some((n) => covers(n.verbs, verb) && coversUrl(n.nonResourceURLs, url)))
          add(`URL ${url}`, verb);
  }
  return [...out].map(([what, verbs]) => `${sorted(verbs).join(', ')} ${what}`).sort();
}
