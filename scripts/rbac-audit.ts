// `npm run rbac:audit`: are Berth's roles least privilege? Reads the audit log of a sandbox started
// with `audit` (kube-apiserver at Metadata level: who, verb, resource, response code), keeps the
// requests of Berth's ServiceAccounts (every identity test/helpers/berth.ts mints lives in Berth's
// namespace), and compares the (verb, group/resource[/subresource]) pairs they used with the pairs
// the generated roles grant. It fails on a granted pair no request used unless its rule says why
// (DeclaredRule.why), and on a request RBAC refused (a grant missing). `BERTH_TEST_AUDIT=1 npm test`
// runs it after the integration files, over everything they made Berth do.
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { capabilities } from '../src/capabilities.ts';
import { certSecretRules, clusterRules, leaseRules, workloadNamespaceRules } from '../src/manifests.ts';
import { NAMESPACE } from '../src/policy/namespace.ts';
import type { DeclaredRule } from '../src/runtime/api/rbac.ts';
import { Sandbox } from '../src/sandbox/sandbox.ts';

/** `verb group/resource[/subresource]`, the core group written as `core`. */
export const pairOf = (verb: string, group: string, resource: string): string =>
  `${verb} ${group || 'core'}/${resource}`;

/** Every pair the rules grant, with the reasons given for it (none: it must be used). */
export function grantedPairs(rules: DeclaredRule[]): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (const r of rules) {
    for (const group of r.apiGroups ?? [])
      for (const resource of r.resources ?? [])
        for (const verb of r.verbs) {
          const key = pairOf(verb, group, resource);
          out.set(key, [...(out.get(key) ?? []), ...(r.why ? [r.why] : [])]);
        }
  }
  return out;
}

/** The audit.k8s.io/v1 Event fields the check reads. */
interface AuditEvent {
  auditID?: string;
  stage?: string;
  verb?: string;
  user?: { username?: string };
  objectRef?: { apiGroup?: string; resource?: string; subresource?: string };
  annotations?: Record<string, string>;
}

export interface Usage {
  /** Requests per pair that RBAC let through (whatever admission answered after). */
  used: Map<string, number>;
  /** Requests per pair that RBAC refused, by user. */
  forbidden: Map<string, Set<string>>;
  users: Set<string>;
}

/**
 * The pairs that the users `isBerth` accepts used in the audit log's lines (JSON, one event a line);
 * each request counts once (a watch logs ResponseStarted and ResponseComplete), non-resource
 * requests (discovery) not at all.
 */
export function usage(lines: Iterable<string>, isBerth: (user: string) => boolean): Usage {
  const out: Usage = { used: new Map(), forbidden: new Map(), users: new Set() };
  const seen = new Set<string>();
  for (const line of lines) {
    if (!line.trim()) continue;
    const e = JSON.parse(line) as AuditEvent;
    const user = e.user?.username ?? '';
    const ref = e.objectRef;
    if (!isBerth(user) || !ref?.resource || !e.verb) continue;
    if (e.stage !== 'ResponseComplete' && e.stage !== 'ResponseStarted') continue;
    if (e.auditID) {
      if (seen.has(e.auditID)) continue;
      seen.add(e.auditID);
    }
    out.users.add(user);
    const key = pairOf(
      e.verb,
      ref.apiGroup ?? '',
      ref.subresource ? `${ref.resource}/${ref.subresource}` : ref.resource,
    );
    // A 403 may come from admission (a namespace being deleted): only RBAC's own decision counts.
    if (e.annotations?.['authorization.k8s.io/decision'] === 'forbid')
      out.forbidden.set(key, (out.forbidden.get(key) ?? new Set()).add(user));
    else out.used.set(key, (out.used.get(key) ?? 0) + 1);
  }
  return out;
}

export interface Verdict {
  /** Granted, used: the pair and its request count. */
  used: [string, number][];
  /** Granted, never used, explained: the pair and why. */
  explained: [string, string[]][];
  /** Granted, never used, not explained: the failures (remove the grant or say why). */
  unexplained: string[];
  /** Refused by RBAC: the failures (a grant missing, or Berth asked for what it should not). */
  forbidden: [string, string[]][];
  /** Used but granted only by an opt-in role (finalizer owner kinds, --install-crds). */
  optedIn: [string, number][];
}

export function verdict(granted: Map<string, string[]>, u: Usage): Verdict {
  const sorted = <T>(xs: [string, T][]) => xs.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  const unused = [...granted].filter(([k]) => !u.used.has(k));
  return {
    used: sorted([...u.used].filter(([k]) => granted.has(k))),
    explained: sorted(unused.filter(([, why]) => why.length > 0)),
    unexplained: unused
      .filter(([, why]) => why.length === 0)
      .map(([k]) => k)
      .sort(),
    forbidden: sorted([...u.forbidden].map(([k, users]): [string, string[]] => [k, [...users].sort()])),
    optedIn: sorted([...u.used].filter(([k]) => !granted.has(k))),
  };
}

/**
 * The roles Berth is installed with by default, as declared: the ClusterRole, both Roles, and the
 * workloads' Pod writes (bound where the install runs workloads: the tests' Berth, everywhere).
 */
export const defaultRules = (): DeclaredRule[] => [
  ...clusterRules(capabilities),
  ...leaseRules(),
  ...certSecretRules(),
  ...workloadNamespaceRules(capabilities),
];

/** Berth's identities: every ServiceAccount in its namespace (the sandbox's controllers are not SAs). */
export const isBerth = (user: string): boolean => user.startsWith(`system:serviceaccount:${NAMESPACE}:`);

/** Runs the check on an audit log; returns the report's lines and whether it passed. */
export function auditCheck(logPath: string): { lines: string[]; ok: boolean } {
  const u = usage(readFileSync(logPath, 'utf8').split('\n'), isBerth);
  const v = verdict(grantedPairs(defaultRules()), u);
  const lines = [
    `RBAC audit of ${logPath}: ${u.users.size} identities of Berth, ${v.used.length} granted pairs used`,
    ...v.used.map(([k, n]) => `  used        ${k} (${n})`),
    ...v.optedIn.map(([k, n]) => `  opted in    ${k} (${n})`),
    ...v.explained.map(([k, why]) => `  unused      ${k}: ${why.join('; ')}`),
    ...v.unexplained.map((k) => `  FAIL unused ${k}: granted, never used, no why: remove it or explain it`),
    ...v.forbidden.map(([k, users]) => `  FAIL denied ${k} for ${users.join(', ')}: a grant is missing`),
  ];
  return { lines, ok: u.users.size > 0 && v.unexplained.length === 0 && v.forbidden.length === 0 };
}

if (import.meta.main) {
  const { values } = parseArgs({
    options: { sandbox: { type: 'string' }, log: { type: 'string' } },
  });
  const log =
    values.log ?? new Sandbox(values.sandbox ?? process.env['BERTH_TEST_SANDBOX'] ?? 'test').auditLogPath;
  const { lines, ok } = auditCheck(log);
  process.stdout.write(lines.join('\n') + '\n');
  if (!ok) {
    process.stdout.write('RBAC audit failed\n');
    process.exitCode = 1;
  }
}
