// Access to the integration run's sandbox, and factories for the objects tests create.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { crdsGone } from '../../src/cli/uninstall.ts';
import { isNotFound, type KubeClient } from '../../src/runtime/client/client.ts';
import { Resources, type KubeObject, type ResourceRef } from '../../src/runtime/api/meta.ts';
import { hasCondition } from '../../src/runtime/api/conditions.ts';
import type { Event } from '../../src/runtime/events/event.ts';
import { createNodes, nodeNames, type NodeGroupInput } from '../../src/sandbox/nodes.ts';
import { Sandbox } from '../../src/sandbox/sandbox.ts';
import { waitFor } from './wait.ts';

export function testSandbox(): Sandbox {
  const name = process.env['BERTH_TEST_SANDBOX'];
  if (!name) throw new Error('BERTH_TEST_SANDBOX is not set: run integration tests through `npm test`');
  const sb = new Sandbox(name);
  if (!sb.exists) throw new Error(`sandbox ${name} does not exist`);
  return sb;
}

/** kubectl (`ensureBinaries().kubectl`) against the sandbox, as a user runs it; fails the test when it fails. */
export function kubectl(
  sandbox: Sandbox,
  kubectlPath: string,
  args: string[],
  input?: string,
): { stdout: string; stderr: string } {
  const r = spawnSync(kubectlPath, ['--kubeconfig', sandbox.kubeconfigPath, ...args], {
    input,
    encoding: 'utf8',
    timeout: 180_000,
  });
  assert.equal(r.status, 0, `kubectl ${args.join(' ')} failed:\n${r.stderr}${r.error ?? ''}`);
  return { stdout: r.stdout, stderr: r.stderr };
}

/** A DNS-label-safe name unique to this test run. */
export const uniqueName = (prefix: string): string => `${prefix}-${randomBytes(3).toString('hex')}`;

/** Creates a namespace, waits for its default service account (pods need it), and returns its name. */
export async function createNamespace(client: KubeClient, prefix = 'test'): Promise<string> {
  const name = uniqueName(prefix);
  await client.create(Resources.namespaces, { apiVersion: 'v1', kind: 'Namespace', metadata: { name } });
  await waitFor(`service account default in ${name}`, () =>
    client.get(Resources.serviceAccounts, 'default', name).then(
      () => true,
      () => false,
    ),
  );
  return name;
}

export async function deleteNamespace(client: KubeClient, name: string): Promise<void> {
  await client.delete(Resources.namespaces, name).catch((e) => {
    if (!isNotFound(e)) throw e;
  });
}

/**
 * Creates kwok nodes and waits until they are Ready and the node lifecycle controller has taken its
 * `node.kubernetes.io/not-ready` taint off (it lags the condition), so tests see settled nodes;
 * returns their names.
 */
export async function addNodes(client: KubeClient, group: NodeGroupInput): Promise<string[]> {
  await createNodes(client, [group]);
  const names = nodeNames(group);
  await waitFor(
    `nodes ${names.join(', ')} Ready`,
    async () => {
      const nodes = await Promise.all(names.map((n) => client.get(Resources.nodes, n)));
      return nodes.every(
        (n) =>
          hasCondition(n, 'Ready') &&
          !((n['spec'] as { taints?: { key: string }[] } | undefined)?.taints ?? []).some(
            (t) => t.key === 'node.kubernetes.io/not-ready',
          ),
      );
    },
    { timeoutMs: 60_000 },
  );
  return names;
}

export async function deleteNodes(client: KubeClient, names: string[]): Promise<void> {
  await Promise.all(
    names.map((n) =>
      client.delete(Resources.nodes, n).catch((e) => {
        if (!isNotFound(e)) throw e;
      }),
    ),
  );
}

export interface PodInput {
  name: string;
  namespace: string;
  labels?: Record<string, string>;
  nodeName?: string;
  nodeSelector?: Record<string, string>;
  tolerations?: unknown[];
  affinity?: unknown;
}

/** A pod that tolerates kwok's simulated nodes and does nothing. */
export function podManifest(p: PodInput): KubeObject {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name: p.name, namespace: p.namespace, labels: p.labels ?? {} },
    spec: {
      containers: [{ name: 'main', image: 'registry.example/app:1' }],
      ...(p.nodeName ? { nodeName: p.nodeName } : {}),
      ...(p.nodeSelector ? { nodeSelector: p.nodeSelector } : {}),
      ...(p.tolerations ? { tolerations: p.tolerations } : {}),
      ...(p.affinity ? { affinity: p.affinity } : {}),
    },
  };
}

/**
 * Creates a pod through `create` until the apiserver admits it as `admitted` says (gated, say, by
 * one of Berth's webhooks). Those fail open after 2 s: a pod admitted otherwise is deleted and
 * created again under its name, so a machine too loaded to answer in time is not read as Berth not
 * acting. One Berth never acts on still fails the wait.
 */
export function createAdmitted<T extends KubeObject>(
  client: KubeClient,
  pod: { namespace: string; name: string },
  create: () => Promise<T>,
  admitted: (p: T) => boolean,
): Promise<T> {
  const { namespace, name } = pod;
  return waitFor(
    `pod ${namespace}/${name} admitted as asked`,
    async () => {
      const p = await create();
      if (admitted(p)) return p;
      await client.delete(Resources.pods, name, namespace, { gracePeriodSeconds: 0 });
      await waitFor(`pod ${namespace}/${name} gone`, () =>
        client.get(Resources.pods, name, namespace).then(() => false, isNotFound),
      );
      return false;
    },
    { intervalMs: 500 },
  );
}

/**
 * Deletes the named CRDs (their objects with them) and waits until they are gone. The apiserver's
 * CRD finalizer lists the objects before it deletes them; shortly after a CRD was installed or
 * changed, that list fails with "storage is (re)initializing" (InstanceDeletionFailed) until the
 * watch cache is ready, and each failure is retried with a doubling backoff, so on a loaded
 * apiserver the deletion can take well over 30 s (operator-framework/operator-controller#1437 saw
 * minutes). The wait (berth uninstall's) allows 90 s; on a timeout the CRDs left are named with the
 * apiserver's Terminating message.
 */
export async function deleteCrds(client: KubeClient, names: string[]): Promise<void> {
  // Each kind listed once, and until it answers, first: the storage the CRD finalizer lists through
  // then exists and is ready (CI saw the finalizer's list of a kind nobody had read stall past 90 s).
  for (const name of names) {
    const crd = await client
      .get<
        KubeObject & {
          spec: { group: string; names: { plural: string }; versions: { name: string; storage: boolean }[] };
        }
      >(Resources.crds, name)
      .catch((e: unknown) => {
        if (isNotFound(e)) return undefined;
        throw e;
      });
    if (!crd) continue;
    const version = crd.spec.versions.find((v) => v.storage)?.name;
    await waitFor(`the ${crd.spec.names.plural} storage answering a list`, () =>
      client.request('GET', `/apis/${crd.spec.group}/${version}/${crd.spec.names.plural}`).then(() => true),
    );
  }
  for (const name of names)
    await client.delete(Resources.crds, name).catch((e: unknown) => {
      if (!isNotFound(e)) throw e;
    });
  await crdsGone(client, names, { timeoutMs: 90_000 });
}

/**
 * A CRD of a test's own kind (served and stored as v1, any fields), and the ResourceRef to reach
 * its objects: for what Berth must meet on kinds it does not define.
 */
export function schemalessCrd(o: { group: string; kind: string; plural: string; namespaced: boolean }): {
  crd: KubeObject;
  ref: ResourceRef;
} {
  return {
    crd: {
      apiVersion: 'apiextensions.k8s.io/v1',
      kind: 'CustomResourceDefinition',
      metadata: { name: `${o.plural}.${o.group}` },
      spec: {
        group: o.group,
        scope: o.namespaced ? 'Namespaced' : 'Cluster',
        names: { plural: o.plural, singular: o.kind.toLowerCase(), kind: o.kind, listKind: `${o.kind}List` },
        versions: [
          {
            name: 'v1',
            served: true,
            storage: true,
            schema: { openAPIV3Schema: { type: 'object', 'x-kubernetes-preserve-unknown-fields': true } },
          },
        ],
      },
    },
    ref: { group: o.group, version: 'v1', resource: o.plural, kind: o.kind, namespaced: o.namespaced },
  };
}

/** Applies an object of a Berth kind as a user would (field manager `test-author`), forcing. */
export function applyAsAuthor(
  client: KubeClient,
  cr: { ref: Parameters<KubeClient['apply']>[0]; apiVersion: string; kind: string },
  metadata: { name: string; namespace?: string },
  spec: object,
): Promise<KubeObject> {
  return client.apply(
    cr.ref,
    { apiVersion: cr.apiVersion, kind: cr.kind, metadata, spec },
    { fieldManager: 'test-author', force: true },
  );
}

/**
 * A ValidatingAdmissionPolicy (and its binding) that refuses the requests `resourceRules` match
 * whenever `expression` (CEL, over `object`, `oldObject`, `request`) is false; the function returned
 * removes both. The apiserver enforces it a moment after it exists: with `probe` (a dry run it must
 * refuse), this returns once it does.
 */
export async function refuseByPolicy(
  client: KubeClient,
  name: string,
  resourceRules: { apiGroups: string[]; operations: string[]; resources: string[] }[],
  expression: string,
  message: string,
  probe?: () => Promise<unknown>,
): Promise<() => Promise<void>> {
  const policy = {
    group: 'admissionregistration.k8s.io',
    version: 'v1',
    resource: 'validatingadmissionpolicies',
    kind: 'ValidatingAdmissionPolicy',
    namespaced: false,
  };
  const binding = {
    ...policy,
    resource: 'validatingadmissionpolicybindings',
    kind: 'ValidatingAdmissionPolicyBinding',
  };
  const apiVersion = 'admissionregistration.k8s.io/v1';
  await client.create(policy, {
    apiVersion,
    kind: policy.kind,
    metadata: { name },
    spec: {
      failurePolicy: 'Fail',
      matchConstraints: { resourceRules: resourceRules.map((r) => ({ apiVersions: ['*'], ...r })) },
      validations: [{ expression, message }],
    },
  });
  await client.create(binding, {
    apiVersion,
    kind: binding.kind,
    metadata: { name },
    spec: { policyName: name, validationActions: ['Deny'] },
  });
  if (probe)
    await waitFor(`the admission policy ${name} in force`, () =>
      probe().then(
        () => false,
        (e: unknown) => String(e).includes(message),
      ),
    );
  return async () => {
    await client.delete(binding, name).catch(() => {});
    await client.delete(policy, name).catch(() => {});
  };
}

/**
 * An admission policy refusing any write that leaves `label` on `node` (as one refusing Berth's
 * node writes would), in force when this returns; the function returned removes it.
 */
export const refuseNodeLabel = (
  client: KubeClient,
  name: string,
  node: string,
  label: string,
  message: string,
): Promise<() => Promise<void>> =>
  refuseByPolicy(
    client,
    name,
    [{ apiGroups: [''], operations: ['UPDATE'], resources: ['nodes'] }],
    `object.metadata.name != '${node}' || !has(object.metadata.labels) || !('${label}' in object.metadata.labels)`,
    message,
    () =>
      client.apply(
        Resources.nodes,
        { apiVersion: 'v1', kind: 'Node', metadata: { name: node, labels: { [label]: 'x' } } },
        { fieldManager: 'test-probe', dryRun: true },
      ),
  );

/**
 * Waits until `as` may `verb` `resource` in `namespace`, asked as that user: RBAC reaches the
 * authorizer through a watch, a moment after a binding is written, and a tenant's first request
 * could be refused (a 403 failed one CI run).
 */
export async function untilAllowed(
  as: KubeClient,
  namespace: string,
  verb: string,
  resource: string,
  group = '',
): Promise<void> {
  await waitFor(`${verb} ${resource} allowed in ${namespace}`, async () => {
    const review = await as.request<{ status?: { allowed?: boolean } }>(
      'POST',
      '/apis/authorization.k8s.io/v1/selfsubjectaccessreviews',
      {
        body: {
          apiVersion: 'authorization.k8s.io/v1',
          kind: 'SelfSubjectAccessReview',
          spec: { resourceAttributes: { namespace, verb, group, resource } },
        },
      },
    );
    return review.status?.allowed === true;
  });
}

/** Waits for a Warning event of `reason` about `regarding` in a namespace, its note holding `note`. */
export async function untilWarning(
  client: KubeClient,
  namespace: string,
  w: { reason: string; regarding: string; note?: string },
  timeoutMs?: number,
): Promise<void> {
  await waitFor(
    `a Warning ${w.reason} on ${w.regarding}`,
    async () =>
      (await client.list<Event>(Resources.events, { namespace })).items.some(
        (e) =>
          e.type === 'Warning' &&
          e.reason === w.reason &&
          e.regarding?.name === w.regarding &&
          (e.note ?? '').includes(w.note ?? ''),
      ),
    { timeoutMs },
  );
}
