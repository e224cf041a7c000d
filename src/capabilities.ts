import { declaringAnnotations, type Capability } from './capability.ts';
import { agentsCapability } from './agents/index.ts';
import { archCapability } from './arch/index.ts';
import { cellsCapability } from './cells/index.ts';
import { federationCapability } from './federation/index.ts';
import { gatesCapability } from './gates/index.ts';
import { labelsCapability } from './labels/index.ts';
import { quotaCapability, workloadsCapability } from './workloads/index.ts';

/** Every capability `berth run` knows, in the order they start; the caches keep what they all read. */
export const capabilities: Capability[] = declaringAnnotations([
  labelsCapability,
  gatesCapability,
  agentsCapability,
  archCapability,
  workloadsCapability,
  cellsCapability,
  federationCapability,
  quotaCapability,
]);
