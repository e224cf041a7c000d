// Why the arch gate holds a pod, as the page says it (arch/view.ts, given through Capability.page).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { heldPodReason } from '../../../src/arch/view.ts';
import type { SlimPod } from '../../../src/policy/slim.ts';

test('heldPodReason: the arch gate waits for the images’ platforms, in the state its label says, with the failure', () => {
  // As the pod cache keeps it: the failure annotation is one arch declares (Capability.annotations).
  const pod = (labels: Record<string, string>, annotations: Record<string, string> = {}) =>
    ({
      metadata: { name: 'p', namespace: 'ns', labels, annotations },
      spec: { containers: [] },
    }) as unknown as SlimPod;
  assert.equal(heldPodReason(pod({})), "architecture-aware placement: reading its images' platforms (Gated)");
  assert.equal(
    heldPodReason(pod({ 'arch.berth.dev/state': 'Retrying' }, { 'arch.berth.dev/failure': 'registry down' })),
    "architecture-aware placement: reading its images' platforms (Retrying); registry down",
  );
});
