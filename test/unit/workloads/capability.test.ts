import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { CapabilityContext } from '../../../src/capability.ts';
import { quotaCapability } from '../../../src/workloads/index.ts';

test('quota beside workloads that grant locally is refused before anything runs', async () => {
  // The refusal comes first: nothing of the manager is touched.
  const context = (options: Record<string, unknown>) => ({ options }) as unknown as CapabilityContext;
  await assert.rejects(
    async () => quotaCapability.setup(context({ controllers: ['workloads', 'quota'], quotaSource: 'local' })),
    /both grant quota here: run the cells with --quota-source=management/,
  );
});
