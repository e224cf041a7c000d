// Berth's kwok stages as kwok reads them: the YAML file carries the templates byte for byte, and
// every stage leaves deleted pods to kwok's pod-delete and outweighs kwok's pod-ready.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseAllDocuments } from 'yaml';
import {
  berthStages,
  CRASH_IMAGE_HOST,
  MISSING_IMAGE_HOST,
  stagesYaml,
} from '../../../src/sandbox/stages.ts';

test('the stages file parses back into exactly the stages, templates included', () => {
  const docs = parseAllDocuments(stagesYaml());
  assert.deepEqual(
    docs.map((d) => d.toJS() as unknown),
    berthStages,
  );
});

test('every stage skips deleted pods, outweighs pod-ready and selects by one reserved host', () => {
  for (const s of berthStages) {
    const keys = s.spec.selector.matchExpressions as { key: string; operator: string }[];
    assert.ok(
      keys.some((e) => e.key === '.metadata.deletionTimestamp' && e.operator === 'DoesNotExist'),
      `${s.metadata.name} may act on a deleted pod`,
    );
    assert.ok(s.spec.weight > 0, `${s.metadata.name} has no weight over pod-ready`);
    const hosts = [MISSING_IMAGE_HOST, CRASH_IMAGE_HOST].filter((h) =>
      keys.some((e) => e.key === `.spec.containers.[] | .image | startswith("${h}/")`),
    );
    assert.equal(hosts.length, 1, `${s.metadata.name} selects by ${hosts.length} hosts`);
  }
});
