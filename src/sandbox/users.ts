// The sandbox's users, for RBAC tests and for programs run with only what their roles grant: a
// user with a client certificate from the sandbox CA (`berth sandbox user`), or a ServiceAccount
// bound exactly to given roles with a token from the TokenRequest API.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { resourcePath, type KubeClient } from '../runtime/client/client.ts';
import { Resources, type KubeObject, type ResourceRef } from '../runtime/api/meta.ts';
import type { PolicyRule } from '../runtime/api/rbac.ts';
import { writeFileAtomic } from './files.ts';
import { kubeconfigYaml, loadCa, type SandboxAddress } from './pki.ts';
import { waitFor } from './wait.ts';

/** A started sandbox, as minting sees it: its address and an admin client. */
export interface Minter extends SandboxAddress {
  client(): KubeClient;
}

/** Where each RBAC kind lives, for mintServiceAccount. */
const RBAC_REFS: Record<string, ResourceRef> = {
  ClusterRole: Resources.clusterRoles,
  ClusterRoleBinding: Resources.clusterRoleBindings,
  Role: Resources.roles,
  RoleBinding: Resources.roleBindings,
};

/** See Sandbox.mintUser. */
export async function mintUser(sb: Minter, user: string, groups: string[]): Promise<string> {
  const ca = await loadCa(sb.dir);
  const pair = await ca.issue({ commonName: user, organizations: groups, usage: 'client' });
  mkdirSync(join(sb.dir, 'users'), { recursive: true });
  const file = join(sb.dir, 'users', `${user.replace(/[^a-zA-Z0-9_.-]/g, '_')}.kubeconfig`);
  writeFileSync(file, kubeconfigYaml(sb, user, pair), { mode: 0o600 });
  return file;
}

/** See Sandbox.mintServiceAccount. */
export async function mintServiceAccount(
  sb: Minter,
  rbac: KubeObject[],
  expirationSeconds: number,
): Promise<string> {
  const subjects = new Map(
    rbac.flatMap((o) =>
      ((o['subjects'] as { kind: string; name: string; namespace: string }[] | undefined) ?? [])
        .filter((s) => s.kind === 'ServiceAccount')
        .map((s) => [`${s.namespace}/${s.name}`, s] as const),
    ),
  );
  if (subjects.size !== 1)
    throw new Error(`the bindings name ${subjects.size} service accounts, not exactly one`);
  const sa = [...subjects.values()][0]!;
  const client = sb.client();
  const fieldManager = 'berth-sandbox';
  try {
    await client.apply(
      Resources.namespaces,
      { apiVersion: 'v1', kind: 'Namespace', metadata: { name: sa.namespace } },
      { fieldManager },
    );
    await client.apply(
      Resources.serviceAccounts,
      { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: sa.name, namespace: sa.namespace } },
      { fieldManager },
    );
    for (const o of rbac) {
      const ref = RBAC_REFS[o.kind ?? ''];
      if (!ref) throw new Error(`mintServiceAccount applies RBAC objects only, not a ${o.kind}`);
      // force: the roles are exactly what was given, whoever applied them before.
      await client.apply(ref, o, { fieldManager, force: true });
    }
    await waitFor(`the roles in effect in sandbox ${sb.name}`, Date.now() + 30_000, undefined, () =>
      rolesInEffect(client, rbac, sa),
    );
    const review = await client.request<{ status: { token: string } }>(
      'POST',
      resourcePath(Resources.serviceAccounts, sa.namespace, sa.name, 'token'),
      {
        body: {
          apiVersion: 'authentication.k8s.io/v1',
          kind: 'TokenRequest',
          spec: { expirationSeconds },
        },
      },
    );
    mkdirSync(join(sb.dir, 'users'), { recursive: true });
    const file = join(sb.dir, 'users', `sa-${sa.namespace}-${sa.name}.kubeconfig`);
    writeFileAtomic(file, kubeconfigYaml(sb, `${sa.namespace}/${sa.name}`, { token: review.status.token }));
    return file;
  } finally {
    client.close();
  }
}

/**
 * Whether the authorizer grants the ServiceAccount the first rule of every role in `rbac` yet: RBAC
 * objects reach it through a watch, a moment after they are written.
 */
async function rolesInEffect(
  admin: KubeClient,
  rbac: KubeObject[],
  sa: { name: string; namespace: string },
): Promise<boolean> {
  // A role takes effect where it is bound: a ClusterRole bound only by RoleBindings, in their namespace.
  const binding = (role: KubeObject) =>
    rbac.find((b) => {
      const ref = b['roleRef'] as { kind?: string; name?: string } | undefined;
      return ref?.kind === role.kind && ref?.name === role.metadata?.name;
    });
  const reviews = rbac
    .filter((o) => o.kind === 'ClusterRole' || o.kind === 'Role')
    .flatMap((o) => {
      const rule = (o['rules'] as PolicyRule[] | undefined)?.find((r) => r.resources?.length);
      const bound = binding(o);
      if (!rule || !bound) return [];
      return [
        {
          namespace: o.metadata?.namespace ?? bound.metadata?.namespace,
          verb: rule.verbs[0],
          group: rule.apiGroups?.[0],
          resource: rule.resources![0]!.split('/')[0],
          subresource: rule.resources![0]!.split('/')[1],
          name: rule.resourceNames?.[0],
        },
      ];
    });
  for (const resourceAttributes of reviews) {
    const review = await admin.request<{ status?: { allowed?: boolean } }>(
      'POST',
      '/apis/authorization.k8s.io/v1/subjectaccessreviews',
      {
        body: {
          apiVersion: 'authorization.k8s.io/v1',
          kind: 'SubjectAccessReview',
          spec: {
            user: `system:serviceaccount:${sa.namespace}:${sa.name}`,
            groups: [
              'system:serviceaccounts',
              `system:serviceaccounts:${sa.namespace}`,
              'system:authenticated',
            ],
            resourceAttributes,
          },
        },
      },
    );
    if (!review.status?.allowed) return false;
  }
  return true;
}
