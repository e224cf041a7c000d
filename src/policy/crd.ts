// Berth's custom resources. Every Berth kind lives in one group and version (policy/kinds.ts) and
// belongs to the `berth` category. A placement policy is one of them that is also cluster scoped and
// reports the same status (observedGeneration, conditions, and counts over the nodes it acts on) with
// the same Ready, Reason and Age columns: a capability states only its kind, its spec, its counts and
// its own columns.
import * as z from '../runtime/platform/zod.ts';
import type { Condition } from '../runtime/api/conditions.ts';
import {
  AGE_COLUMN,
  column,
  conditionColumn,
  conditionsSchema,
  defineCustomResource,
  type CustomResource,
  type CustomResourceOptions,
  type PrinterColumn,
} from '../runtime/api/crd.ts';
import type { ResourceRef } from '../runtime/api/meta.ts';

export type BerthResourceOptions<Spec extends z.ZodType, Status extends z.ZodType | undefined> = Omit<
  CustomResourceOptions<Spec, Status>,
  'group' | 'version' | 'categories' | 'plural' | 'kind' | 'scope'
> & {
  /** The kind as its capability's types.ts declares it (berthKind). */
  ref: ResourceRef;
};

/** A Berth kind: group berth.dev, version v1alpha1, category `berth`. */
export function defineBerthResource<
  Spec extends z.ZodType,
  Status extends z.ZodType | undefined = undefined,
>({ ref, ...o }: BerthResourceOptions<Spec, Status>) {
  return defineCustomResource<Spec, Status>({
    ...o,
    group: ref.group,
    version: ref.version,
    kind: ref.kind,
    plural: ref.resource,
    scope: ref.namespaced ? 'Namespaced' : 'Cluster',
    categories: ['berth'],
  });
}

/** A Berth kind's status: observedGeneration first, the kind's own fields, conditions last. */
export const observedStatus = <Shape extends z.ZodRawShape>(fields: Shape) =>
  z.object({ observedGeneration: z.number().int().optional(), ...fields, conditions: conditionsSchema });

/** The type of an observedStatus schema, its conditions typed as metav1.Condition. */
export type ObservedStatus<S extends z.ZodType> = z.output<S> & { conditions?: Condition[] };

/** A policy's status: what it last saw (observedGeneration), its conditions, and its counts. */
export type PolicyStatus<Count extends string = string> = {
  observedGeneration?: number;
  conditions?: Condition[];
} & { [K in Count]?: number };

export type Policy<Spec, Count extends string> = CustomResource<Spec, PolicyStatus<Count>>;

export interface PolicyOptions<Spec extends z.ZodType, Count extends string> {
  /** The kind as its capability's types.ts declares it (berthKind, cluster scoped). */
  ref: ResourceRef;
  shortNames: string[];
  spec: Spec;
  /** The status counts, in the order they are listed, each with its description. */
  counts: Record<Count, string>;
  /**
   * The kind's own columns, shown before Ready, Reason and Age: a count by its name (the column is
   * the name capitalised), or any column.
   */
  printerColumns: (NoInfer<Count> | PrinterColumn)[];
  /** Show Ready's reason in `kubectl get` by default, not only with `-o wide`. */
  showReason?: boolean;
}

export function definePolicy<Spec extends z.ZodType, Count extends string>(
  o: PolicyOptions<Spec, Count>,
): Policy<z.output<Spec>, Count> {
  const counts = Object.entries<string>(o.counts).map(([count, description]) => [
    count,
    z.number().int().optional().describe(description),
  ]);
  return defineBerthResource({
    ref: o.ref,
    shortNames: o.shortNames,
    spec: o.spec,
    status: observedStatus(Object.fromEntries(counts)) as unknown as z.ZodType<PolicyStatus<Count>>,
    printerColumns: [
      ...o.printerColumns.map((c) => (typeof c === 'string' ? countColumn(c) : c)),
      conditionColumn('Ready', 'Ready'),
      conditionColumn('Reason', 'Ready', 'reason', o.showReason ? undefined : 1),
      AGE_COLUMN,
    ],
  });
}

/** A string column of the spec, by its path under `.spec`. */
export const specColumn = (name: string, path: string): PrinterColumn => column(name, `.spec.${path}`);

const countColumn = (count: string): PrinterColumn =>
  column(count[0]!.toUpperCase() + count.slice(1), `.status.${count}`, 'integer');
