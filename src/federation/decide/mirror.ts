// The pure decisions of mirrored Instances: what the management plane's read-only copy of a cell's
// Instance says (name, labels, owner, status), and what it says while its cell does not answer. The
// controller (controllers/mirror.ts) reads the caches and writes.
import { isDeepStrictEqual } from 'node:util';
import { findCondition, sameConditions, setCondition, type Condition } from '../../runtime/api/conditions.ts';
import { apiTime, apiVersionOf, DNS1123_SUBDOMAIN } from '../../runtime/api/meta.ts';
import type { InstanceObject } from '../../workloads/decide/instances.ts';
import {
  type InstanceStatus,
  MIRROR_CELL_LABEL,
  MIRROR_LABEL,
  SOURCE_ANNOTATION,
  SOURCE_UID_ANNOTATION,
} from '../../workloads/types.ts';
import { Instance } from '../../workloads/crd.ts';
import type { DeploymentObject } from './placement.ts';
import {
  CITY_LABEL,
  PLACEMENT_LABEL,
  WORKLOAD_NAME_LABEL,
  WORKLOAD_NAMESPACE_LABEL,
  WORKLOAD_UID_LABEL,
  type WorkloadObject,
} from '../types.ts';
import { Workload } from '../crd.ts';

/** The field manager of the mirrors (their metadata, spec and status). */
export const MIRROR_MANAGER = 'berth-federation-mirror';
/** The mirror's own condition: True while it shows its cell's current status, False (stale) while the cell does not answer. */
export const MIRRORED_CONDITION = 'Mirrored';

/**
 * The mirror's name: `<cell>-<instance>`. A cell name has at most 58 characters and an instance of
 * federation's at most 69 (a WorkloadDeployment name is a DNS label, then `-<ordinal>`), so it is
 * always a valid name; anything else has no mirror.
 */
export function mirrorName(cell: string, instance: string): string | undefined {
  const name = `${cell}-${instance}`;
  return name.length <= 253 && DNS1123_SUBDOMAIN.test(name) ? name : undefined;
}

/** The queue key of a cell's instance: `<cell>/<namespace>/<name>` (a cell name has no '/'). */
export const mirrorKey = (cell: string, namespace: string, name: string): string =>
  `${cell}/${namespace}/${name}`;

export function splitMirrorKey(key: string): { cell: string; namespace: string; name: string } {
  const [cell = '', namespace = '', name = ''] = key.split('/');
  return { cell, namespace, name };
}

/** The key of the cell instance a mirror copies, from its label and annotation. */
export function sourceKeyOf(mirror: InstanceObject): string | undefined {
  const cell = mirror.metadata.labels?.[MIRROR_CELL_LABEL];
  const name = mirror.metadata.annotations?.[SOURCE_ANNOTATION];
  return cell && name && mirror.metadata.namespace
    ? mirrorKey(cell, mirror.metadata.namespace, name)
    : undefined;
}

/** What a mirror is made from: a cell's Instance, the WorkloadDeployment it belongs to, and that one's Workload. */
export interface MirrorSource {
  cell: string;
  instance: InstanceObject;
  deployment: DeploymentObject;
  workload: WorkloadObject;
}

export interface MirrorObject extends InstanceObject {
  metadata: InstanceObject['metadata'] & { name: string; namespace: string };
}

/**
 * The mirror as applied (metadata and spec) and its status: the instance's labels and spec, labels
 * naming the cell, the city, the placement and the workload, an owner reference to the Workload
 * (same cluster: collected with it), and the instance's status with Mirrored=True.
 */
export function mirrorOf(
  src: MirrorSource,
  existing: InstanceObject | undefined,
  now = new Date(),
): { object: MirrorObject; status: InstanceStatus } | undefined {
  const { instance, deployment, workload } = src;
  const name = mirrorName(src.cell, instance.metadata.name!);
  if (!name) return undefined;
  const wl = deployment.metadata.labels ?? {};
  const object: MirrorObject = {
    apiVersion: apiVersionOf(Instance.ref),
    kind: Instance.kind,
    metadata: {
      name,
      namespace: workload.metadata.namespace!,
      labels: {
        ...instance.metadata.labels,
        [MIRROR_LABEL]: 'true',
        [MIRROR_CELL_LABEL]: src.cell,
        [WORKLOAD_NAMESPACE_LABEL]: workload.metadata.namespace!,
        [WORKLOAD_NAME_LABEL]: workload.metadata.name!,
        [WORKLOAD_UID_LABEL]: workload.metadata.uid!,
        ...(wl[PLACEMENT_LABEL] ? { [PLACEMENT_LABEL]: wl[PLACEMENT_LABEL] } : {}),
        ...(wl[CITY_LABEL] ? { [CITY_LABEL]: wl[CITY_LABEL] } : {}),
      },
      annotations: {
        [SOURCE_ANNOTATION]: instance.metadata.name!,
        [SOURCE_UID_ANNOTATION]: instance.metadata.uid!,
      },
      ownerReferences: [
        {
          apiVersion: Workload.apiVersion,
          kind: Workload.kind,
          name: workload.metadata.name!,
          uid: workload.metadata.uid!,
        },
      ],
    },
    spec: instance.spec,
  };
  const cellConditions = (instance.status?.conditions ?? []).filter((c) => c.type !== MIRRORED_CONDITION);
  const mirrored = setCondition(
    existing?.status?.conditions?.filter((c) => c.type === MIRRORED_CONDITION),
    {
      type: MIRRORED_CONDITION,
      status: 'True',
      reason: 'Current',
      message: `the status of instance ${instance.metadata.name} in cell ${src.cell}`,
    },
    now,
  );
  return { object, status: { ...instance.status, conditions: [...cellConditions, ...mirrored] } };
}

/**
 * The status of a mirror whose cell does not answer: the last status it showed, Mirrored=False
 * CellUnreachable since the cell stopped answering (a partition is not a deletion).
 */
export function staleStatus(mirror: InstanceObject, cell: string, since: string | undefined): InstanceStatus {
  const when = since && !Number.isNaN(Date.parse(since)) ? new Date(since) : new Date();
  return {
    ...mirror.status,
    conditions: setCondition(
      mirror.status?.conditions,
      {
        type: MIRRORED_CONDITION,
        status: 'False',
        reason: 'CellUnreachable',
        message: `cell ${cell} has not answered since ${apiTime(when.getTime())}: the last status it gave is kept`,
      },
      when,
    ),
  };
}

/**
 * Whether the mirror already says what would be applied (metadata and spec). Labels compare whole: a
 * label the cell's instance lost must go from its mirror too (mirrors are read-only; nobody else labels them).
 */
export function sameMirror(have: InstanceObject, want: MirrorObject): boolean {
  return (
    isDeepStrictEqual(have.metadata.labels ?? {}, want.metadata.labels) &&
    isDeepStrictEqual(have.metadata.annotations ?? {}, want.metadata.annotations) &&
    have.metadata.ownerReferences?.[0]?.uid === want.metadata.ownerReferences?.[0]?.uid &&
    isDeepStrictEqual(have.spec, want.spec)
  );
}

/** Equal but for the conditions' transition times: no status write needed. */
export function sameStatus(have: InstanceStatus | undefined, want: InstanceStatus): boolean {
  const { conditions: a, ...ra } = have ?? {};
  const { conditions: b, ...rb } = want;
  return (
    isDeepStrictEqual(ra, rb) && sameConditions(a as Condition[] | undefined, b as Condition[] | undefined)
  );
}

/** Whether a mirror says its cell is unreachable. */
export const isStale = (mirror: InstanceObject): boolean =>
  findCondition(mirror.status?.conditions, MIRRORED_CONDITION)?.status === 'False';
