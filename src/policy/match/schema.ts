// The schemas of the match kernel's shapes for custom resources (zod), apart from the matching
// (selector.ts), which the webhook thread loads without zod.
import * as z from '../../runtime/platform/zod.ts';
import { SELECTOR_OPERATORS } from './requirement.ts';

/** A label selector in a custom resource's spec. */
export const labelSelectorSchema = z
  .object({
    matchLabels: z.record(z.string(), z.string()).optional(),
    matchExpressions: z
      .array(
        z.object({
          key: z.string().min(1),
          operator: z.enum(SELECTOR_OPERATORS),
          values: z.array(z.string()).optional(),
        }),
      )
      .optional(),
  })
  .describe('A Kubernetes label selector; empty selects everything.');
