// Workloads' pure decisions: an Instance as the controllers read it (whole or slim), the Instance a
// deployment runs at an ordinal and the Pod an instance runs as. No I/O.
import type { KubeObject, ObjectMeta, OwnerReference } from '../../runtime/api/meta.ts';
import type { InstanceTypeSize, Size, SizedTemplate } from '../resources.ts';
import {
  DEPLOYMENT_LABEL,
  INSTANCE_LABEL,
  ORDINAL_LABEL,
  OWN_INSTANCES,
  QUOTA_GATE,
  TEMPLATE_HASH_LABEL,
  type InstanceStatus,
  type InstanceTemplate,
} from '../types.ts';
import { Instance } from '../crd.ts';
import { instanceName } from './revisions.ts';

/** An InstanceType as the controllers read it. */
export type InstanceTypeObject = KubeObject & { spec?: InstanceTypeSize };

/** The index of instances by the InstanceType they name: its changes resize them. */
export const byInstanceType = (i: { spec?: { template?: { instanceType?: string } } }): string[] =>
  i.spec?.template?.instanceType ? [i.spec.template.instanceType] : [];

/** An Instance as the controllers read it: from the apiserver, or (CachedInstance) from their cache. */
export interface InstanceObject<T extends SizedTemplate = InstanceTemplate> extends KubeObject {
  metadata: ObjectMeta;
  spec: { template: T; templateHash: string; ordinal: number };
  status?: InstanceStatus;
}

/** An Instance as its cache keeps it (slimInstance): its template only as far as it sizes it. */
export type CachedInstance = InstanceObject<SizedTemplate>;

/**
 * What the controllers, the metrics and the page read of an Instance: its identity, labels, owners
 * and deletion, its ordinal and template hash, what sizes it, and its status. The rest of the
 * template (images, commands, env: up to the apiserver's object size) and managedFields are not
 * kept, so a cache of many instances costs what they are, not what their templates hold; the
 * instance controller reads the whole Instance when it makes its Pod.
 */
export function slimInstance(o: KubeObject): CachedInstance {
  const i = o as InstanceObject;
  const m = i.metadata;
  const t = i.spec?.template;
  const meta: ObjectMeta = {
    name: m.name,
    namespace: m.namespace,
    uid: m.uid,
    resourceVersion: m.resourceVersion,
  };
  for (const k of [
    'generation',
    'creationTimestamp',
    'deletionTimestamp',
    'labels',
    'ownerReferences',
  ] as const)
    if (m[k] !== undefined) Object.assign(meta, { [k]: m[k] });
  return {
    apiVersion: i.apiVersion,
    kind: i.kind,
    metadata: meta,
    spec: {
      ordinal: i.spec?.ordinal,
      templateHash: i.spec?.templateHash,
      template: {
        ...(t?.instanceType ? { instanceType: t.instanceType } : {}),
        containers: (t?.containers ?? []).map((c) => ({
          name: c.name,
          ...(c.resources ? { resources: c.resources } : {}),
        })),
      },
    },
    ...(i.status ? { status: i.status } : {}),
  };
}

/** The informer request for the instances this part acts on (OWN_INSTANCES), slim: one cache for its controllers and the page. */
export const INSTANCE_CACHE = { ...OWN_INSTANCES, transform: { name: 'slim-instance', fn: slimInstance } };

/** The Pod an instance runs as: its template, sized, labelled, owned, gated until quota is granted. */
export function podManifest(
  inst: InstanceObject,
  owner: OwnerReference,
  size: Size,
  gate: boolean,
): KubeObject {
  const t = inst.spec.template;
  const labels = inst.metadata.labels ?? {};
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name: inst.metadata.name!,
      namespace: inst.metadata.namespace!,
      labels: {
        ...t.metadata?.labels,
        ...(labels[DEPLOYMENT_LABEL] ? { [DEPLOYMENT_LABEL]: labels[DEPLOYMENT_LABEL] } : {}),
        [ORDINAL_LABEL]: String(inst.spec.ordinal),
        [TEMPLATE_HASH_LABEL]: inst.spec.templateHash,
        [INSTANCE_LABEL]: inst.metadata.name!,
      },
      ...(t.metadata?.annotations ? { annotations: t.metadata.annotations } : {}),
      ownerReferences: [{ ...owner, controller: true, blockOwnerDeletion: true }],
    },
    spec: {
      containers: t.containers.map((c) => ({
        name: c.name,
        image: c.image,
        ...(c.command ? { command: c.command } : {}),
        ...(c.args ? { args: c.args } : {}),
        ...(c.env ? { env: c.env } : {}),
        ...(c.ports ? { ports: c.ports } : {}),
        ...(c.resources ? { resources: c.resources } : {}),
      })),
      ...(size.pod ? { resources: { requests: size.pod, limits: size.pod } } : {}),
      ...(gate ? { schedulingGates: [{ name: QUOTA_GATE }] } : {}),
      // The cell's namespace is not the Workload author's to hand credentials out of: only on request.
      automountServiceAccountToken: t.automountServiceAccountToken === true,
    },
  };
}

/** The Instance a deployment runs at `ordinal`, on its current template. */
export function instanceManifest(
  deployment: KubeObject & { metadata: ObjectMeta },
  owner: OwnerReference,
  template: InstanceTemplate,
  hash: string,
  ordinal: number,
): KubeObject {
  const name = deployment.metadata.name!;
  return {
    apiVersion: Instance.apiVersion,
    kind: Instance.kind,
    metadata: {
      name: instanceName(name, ordinal),
      namespace: deployment.metadata.namespace!,
      labels: { [DEPLOYMENT_LABEL]: name, [ORDINAL_LABEL]: String(ordinal), [TEMPLATE_HASH_LABEL]: hash },
      ownerReferences: [{ ...owner, controller: true, blockOwnerDeletion: true }],
    },
    spec: { template, templateHash: hash, ordinal },
  };
}

/** The controller owner reference of `obj` if it names `uid`. */
export const controlledBy = (obj: KubeObject, uid: string | undefined): boolean =>
  !!uid && (obj.metadata?.ownerReferences ?? []).some((o) => o.controller && o.uid === uid);
