import assert from 'node:assert/strict';
import { test } from 'node:test';
import { podTerms } from '../../../src/arch/webhook.ts';
import { parsePolicies } from '../../../src/arch/decide/parse.ts';

const policy = (name: string, spec: Record<string, unknown>) => ({
  apiVersion: 'berth.dev/v1alpha1',
  kind: 'ArchPlacement',
  metadata: { name, uid: name, generation: 1 },
  spec,
});

test('the pod webhook is sent the pods of the live ArchPlacements, by their selectors', () => {
  const namespaceSelector = { matchLabels: { team: 'a' } };
  const podSelector = { matchLabels: { app: 'web' } };
  const { policies } = parsePolicies([policy('p', { namespaceSelector, podSelector })]);
  assert.deepEqual(podTerms(policies), [{ namespaceSelector, objectSelector: podSelector }]);
  assert.deepEqual(podTerms(policies.map((p) => ({ ...p, deleting: true }))), []);
});
