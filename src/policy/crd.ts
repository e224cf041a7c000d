// A placement policy's custom resource. Every policy kind lives in one group and version, is
// cluster scoped, belongs to the `berth` category, and reports the same status (observedGeneration,
// conditions, and counts over the nodes it acts on) with the same Ready, Reason and Age columns: a
// capability states only its kind, its spec, its counts and its own columns.
import { z } from 'zod';
import type { Condition } from '../runtime/api/conditions.ts';
import {
  AGE_COLUMN,
  conditionColumn,
  conditionsSchema,
  defineCustomResource,
  type CustomResource,
  type PrinterColumn,
} from '../runtime/api/crd.ts';

/** The API group of every Berth policy kind. */
export const POLICY_GROUP = 'berth.dev';

/** A policy's status: what it last saw (observedGeneration), its conditions, and its counts. */
export type PolicyStatus<Count extends string = string> = {
  observedGeneration?: number;
  conditions?: Condition[];
} & { [K in Count]?: number };

export type Policy<Spec, Count extends string> = CustomResource<Spec, PolicyStatus<Count>>;

export interface PolicyOptions<Spec extends z.ZodType, Count extends string> {
  kind: string;
  plural: string;
  shortNames: string[];
  spec: Spec;
  /** The status counts, in the order they are listed, each with its description. */
  counts: Record<Count, string>;
  /** The kind's own columns, shown before Ready, Reason and Age. */
  printerColumns: PrinterColumn[];
  /** Show Ready's reason in `kubectl get` by default, not only with `-o wide`. */
  showReason?: boolean;
}

export function definePolicy<Spec extends z.ZodType, Count extends string>(
  o: PolicyOptions<Spec, Count>,
): Policy<z.output<Spec>, Count> {
  const status = z.object({
    observedGeneration: z.number().int().optional(),
    ...Object.fromEntries(
      Object.entries<string>(o.counts).map(([count, description]) => [
        count,
        z.number().int().optional().describe(description),
      ]),
    ),
    conditions: conditionsSchema,
  });
  return defineCustomResource({
    group: POLICY_GROUP,
    version: 'v1alpha1',
    kind: o.kind,
    plural: o.plural,
    shortNames: o.shortNames,
    categories: ['berth'],
    scope: 'Cluster',
    spec: o.spec,
    status: status as unknown as z.ZodType<PolicyStatus<Count>>,
    printerColumns: [
      ...o.printerColumns,
      conditionColumn('Ready', 'Ready'),
      conditionColumn('Reason', 'Ready', 'reason', o.showReason ? undefined : 1),
      AGE_COLUMN,
    ],
  });
}
