// Shared builders for the startup-gates unit tests: realistic NodeStartupGate objects parsed
// through parseGates (so defaults apply), SlimNode- and SlimPod-shaped objects, and a small
// RFC 6902 applier to check that the patches nodePatch/tolerationsPatch produce do what they say.
import assert from 'node:assert/strict';
import { isDeepStrictEqual } from 'node:util';
import { type Gate, parseGates } from '../../../src/gates/decide/parse.ts';
import type { SlimNode, SlimPod } from '../../../src/policy/slim.ts';
import type { KubeObject, OwnerReference } from '../../../src/runtime/api/meta.ts';
import type { JsonPatchOp } from '../../../src/runtime/api/jsonpatch.ts';

export const NOW = Date.parse('2026-11-21T10:00:00Z');
/** When the gates were created. */
export const GATE_CREATED = '2026-11-21T00:00:00Z';
/** A node that joined after the gates. */
export const NODE_NEW = '2026-11-21T09:50:00Z';
/** A node that existed before the gates. */
export const NODE_OLD = '2026-11-20T00:00:00Z';

export const TAINT_KEY = 'startup.berth.dev/cni';

/** A realistic NodeStartupGate object: waits for the cilium DaemonSet in kube-system. */
export function gateObj(
  name: string,
  spec: Record<string, unknown> = {},
  meta: Record<string, unknown> = {},
): KubeObject {
  return {
    apiVersion: 'berth.dev/v1alpha1',
    kind: 'NodeStartupGate',
    metadata: { name, creationTimestamp: GATE_CREATED, resourceVersion: '100', ...meta },
    spec: {
      taint: { key: TAINT_KEY },
      requirements: { pods: [{ namespace: 'kube-system', daemonSet: 'cilium' }] },
      ...spec,
    },
  };
}

/** One valid, enforced gate, parsed so that defaults apply. */
export function gate(
  name = 'cni',
  spec: Record<string, unknown> = {},
  meta: Record<string, unknown> = {},
): Gate {
  const { gates, problems } = parseGates([gateObj(name, spec, meta)]);
  assert.deepEqual([...problems], [], 'the fixture gate is valid');
  assert.equal(gates.length, 1);
  assert.equal(gates[0]!.enforced, true);
  return gates[0]!;
}

export interface NodeOptions {
  name?: string;
  created?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string> | undefined;
  taints?: { key: string; value?: string; effect: string }[] | undefined;
  conditions?: { type: string; status: string }[];
  managedFields?: unknown[];
  resourceVersion?: string;
}

export function node(o: NodeOptions = {}): SlimNode {
  const metadata: SlimNode['metadata'] = {
    name: o.name ?? 'n1',
    uid: 'uid-n1',
    resourceVersion: o.resourceVersion ?? '42',
    creationTimestamp: o.created ?? NODE_NEW,
    labels: o.labels ?? { 'kubernetes.io/hostname': o.name ?? 'n1' },
  };
  if (!('annotations' in o)) metadata.annotations = {};
  else if (o.annotations) metadata.annotations = o.annotations;
  if (o.managedFields) metadata.managedFields = o.managedFields;
  const spec: SlimNode['spec'] = {};
  if (o.taints) spec.taints = o.taints;
  const status: SlimNode['status'] = {};
  if (o.conditions) status.conditions = o.conditions;
  return { apiVersion: 'v1', kind: 'Node', metadata, spec, status };
}

export interface PodOptions {
  namespace?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  owner?: { kind: string; name: string };
  phase?: string;
  ready?: boolean;
  deleting?: boolean;
}

export function pod(name: string, o: PodOptions = {}): SlimPod {
  const metadata: SlimPod['metadata'] = {
    name,
    namespace: o.namespace ?? 'kube-system',
    uid: `uid-${name}`,
    resourceVersion: '7',
  };
  if (o.labels) metadata.labels = o.labels;
  if (o.annotations) metadata.annotations = o.annotations;
  if (o.owner) {
    const ref: OwnerReference = {
      apiVersion: o.owner.kind === 'Node' ? 'v1' : 'apps/v1',
      kind: o.owner.kind,
      name: o.owner.name,
      uid: `uid-${o.owner.name}`,
      controller: true,
    };
    metadata.ownerReferences = [ref];
  }
  if (o.deleting) metadata.deletionTimestamp = '2026-11-21T09:59:00Z';
  const status: SlimPod['status'] = {};
  if (o.phase !== undefined) status.phase = o.phase;
  if (o.ready !== undefined) status.conditions = [{ type: 'Ready', status: o.ready ? 'True' : 'False' }];
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata,
    spec: { nodeName: 'n1', containers: [{ name: 'c', image: 'registry.k8s.io/pause:3.10' }] },
    status,
  };
}

/** A cilium DaemonSet pod on the node, Ready or not. */
export const cilium = (ready: boolean, name = 'cilium-x7k2p'): SlimPod =>
  pod(name, {
    labels: { 'k8s-app': 'cilium' },
    owner: { kind: 'DaemonSet', name: 'cilium' },
    phase: 'Running',
    ready,
  });

/** A workload pod (a ReplicaSet's) that makes a node busy. */
export const workload = (name = 'web-6d4cf56db6-abcde'): SlimPod =>
  pod(name, {
    namespace: 'shop',
    labels: { app: 'web' },
    owner: { kind: 'ReplicaSet', name: 'web-6d4cf56db6' },
    phase: 'Running',
    ready: true,
  });

/** A managedFields entry saying berth-gates wrote these annotation keys with a JSON patch (Update). */
export const ownedBy = (keys: string[], manager = 'berth-gates', operation = 'Update') => ({
  manager,
  operation,
  apiVersion: 'v1',
  time: '2026-11-21T09:00:00Z',
  fieldsType: 'FieldsV1',
  fieldsV1: { 'f:metadata': { 'f:annotations': Object.fromEntries(keys.map((k) => [`f:${k}`, {}])) } },
});

export const iso = (ms: number): string => new Date(ms).toISOString();
export const minutesAgo = (m: number): string => iso(NOW - m * 60_000);

// ---- RFC 6902, enough of it for these tests: add, remove, replace, test (a failed test throws).

const decode = (seg: string) => seg.replaceAll('~1', '/').replaceAll('~0', '~');

function locate(doc: unknown, path: string): { parent: Record<string, unknown> | unknown[]; key: string } {
  assert.ok(path.startsWith('/'), `pointer ${path}`);
  const segs = path.slice(1).split('/').map(decode);
  let cur = doc as Record<string, unknown>;
  for (const s of segs.slice(0, -1)) {
    const next = Array.isArray(cur) ? cur[Number(s)] : cur[s];
    if (next === undefined || next === null || typeof next !== 'object')
      throw new Error(`patch: ${path}: ${s} does not exist`);
    cur = next as Record<string, unknown>;
  }
  return { parent: cur, key: segs.at(-1)! };
}

export function applyPatch<T>(doc: T, ops: JsonPatchOp[]): T {
  const out = structuredClone(doc);
  for (const op of ops) {
    const { parent, key } = locate(out, op.path);
    const has = Array.isArray(parent) ? key === '-' || Number(key) <= parent.length : key in parent;
    switch (op.op) {
      case 'test': {
        const actual = Array.isArray(parent) ? parent[Number(key)] : parent[key];
        if (!isDeepStrictEqual(actual, op.value)) throw new Error(`patch: test ${op.path} failed`);
        break;
      }
      case 'remove':
        if (!has) throw new Error(`patch: remove ${op.path}: absent`);
        if (Array.isArray(parent)) parent.splice(Number(key), 1);
        else delete parent[key];
        break;
      case 'replace':
        if (!(Array.isArray(parent) ? Number(key) < parent.length : key in parent))
          throw new Error(`patch: replace ${op.path}: absent`);
        if (Array.isArray(parent)) parent[Number(key)] = structuredClone(op.value);
        else parent[key] = structuredClone(op.value);
        break;
      case 'add':
        if (Array.isArray(parent)) {
          if (key === '-') parent.push(structuredClone(op.value));
          else parent.splice(Number(key), 0, structuredClone(op.value));
        } else parent[key] = structuredClone(op.value);
        break;
    }
  }
  return out;
}
