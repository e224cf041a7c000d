// Workloads' pure decisions: a template's revision (the hash that names it, its size) and the names
// and bounds of a deployment's instances. No I/O.
import { createHash } from 'node:crypto';
import { DEPLOYMENT_LABEL, INSTANCE_LABEL, type InstanceTemplate } from '../types.ts';

/** JSON with object keys sorted, so equal templates hash equally whatever order they were written in. */
function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  if (v && typeof v === 'object')
    return `{${Object.keys(v)
      .filter((k) => (v as Record<string, unknown>)[k] !== undefined)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonical((v as Record<string, unknown>)[k])}`)
      .join(',')}}`;
  return JSON.stringify(v);
}

/**
 * The revision of a template: a short stable hash (a label value), as a ReplicaSet's
 * pod-template-hash, and its size in bytes (each instance carries a copy: ReplicasBounded).
 */
export function templateRevision(template: InstanceTemplate): { hash: string; bytes: number } {
  const c = canonical(template);
  return { hash: createHash('sha256').update(c).digest('hex').slice(0, 10), bytes: Buffer.byteLength(c) };
}

/** The revision's hash alone (templateRevision). */
export const templateHash = (template: InstanceTemplate): string => templateRevision(template).hash;

/**
 * The most bytes of templates a WorkloadDeployment's instances carry in all (replicas × its
 * template's size): 1,000 instances of a 16 KiB template. Each Instance holds a full copy of the
 * template, so one deployment would otherwise multiply its template into etcd and every cache of
 * Instances (issue 59); the CRD bounds replicas (MAX_REPLICAS) and the template's strings
 * (MAX_TEMPLATE_STRINGS), not their product.
 */
export const MAX_DEPLOYMENT_BYTES = 16 * 1024 * 1024;

/**
 * The replicas a deployment runs: as many as it asks, within MAX_DEPLOYMENT_BYTES of templates; and
 * why fewer, when fewer (its ReplicaFailure condition, reason ReplicasBounded).
 */
export function boundedReplicas(
  replicas: number,
  templateBytes: number,
): { replicas: number; bounded?: string } {
  const most = Math.floor(MAX_DEPLOYMENT_BYTES / Math.max(templateBytes, 1));
  if (replicas <= most) return { replicas };
  return {
    replicas: most,
    bounded:
      `${replicas} replicas of a ${templateBytes}-byte template exceed the ${MAX_DEPLOYMENT_BYTES} bytes ` +
      `of templates a deployment's instances may carry: ${most} run (a smaller template runs more)`,
  };
}

/** Berth's own RBAC refused a Pod or an Instance: its namespace was not opted in for workloads. */
export const workloadNamespaceHint = (e: { status: number; message: string }): string =>
  e.status === 403 && /cannot create resource "(pods|instances)"/.test(e.message)
    ? ' (let Berth run workloads in this namespace: berth manifests --workload-namespace, Helm workloads.namespaces)'
    : '';

export const instanceName = (deployment: string, ordinal: number): string => `${deployment}-${ordinal}`;

/**
 * The longest WorkloadDeployment name: an instance's name, `<name>-<ordinal>`, is the value of its
 * Pod's instance label, and a label value has at most 63 characters. Room is left for four-digit
 * ordinals, as before replicas were bounded to MAX_REPLICAS (999 at most): the documented bound,
 * which federation's names are made within, stays.
 */
export const MAX_DEPLOYMENT_NAME = 63 - instanceName('', 9999).length;

/** Why a WorkloadDeployment of this name can have no instances, if it cannot: its name is too long. */
export function deploymentNameProblem(name: string): string | undefined {
  if (name.length <= MAX_DEPLOYMENT_NAME) return undefined;
  return (
    `the WorkloadDeployment name ${name} is longer than ${MAX_DEPLOYMENT_NAME} characters: its instances ` +
    `(${instanceName(name, 0)} and on) label their Pods ${INSTANCE_LABEL}=<instance>, a value of at most 63`
  );
}

/** The label selector of a deployment's instances (status.selector, for the scale subresource). */
export const deploymentSelector = (deployment: string): string => `${DEPLOYMENT_LABEL}=${deployment}`;
