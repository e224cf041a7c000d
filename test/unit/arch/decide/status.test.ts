import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { nodeArchitectures, report, standingOf } from '../../../../src/arch/decide/status.ts';
import {
  ARCH_LABEL,
  FAILURE_ANNOTATION,
  POLICY_ANNOTATION,
  RESULT_ANNOTATION,
  SCHEDULING_GATE,
  STATE_LABEL,
} from '../../../../src/arch/types.ts';
import { pod } from './fixtures.ts';

describe('standing and report', () => {
  const at = (labels: Record<string, string>, annotations: Record<string, string>, gates?: string[]) =>
    pod(gates ? { schedulingGates: gates.map((name) => ({ name })) } : {}, { labels, annotations });

  test('read back from the pod: a gate wins over the label; results and reasons parsed', () => {
    const a = { [POLICY_ANNOTATION]: 'p' };
    assert.deepEqual(standingOf(at({ [STATE_LABEL]: 'Placed' }, a, [SCHEDULING_GATE])), {
      policy: 'p',
      standing: { state: 'Gated' },
    });
    assert.deepEqual(
      standingOf(
        at({ [STATE_LABEL]: 'Placed' }, { ...a, [RESULT_ANNOTATION]: '{"architectures":["arm64"]}' }),
      ),
      { policy: 'p', standing: { state: 'Placed', architectures: ['arm64'] } },
    );
    assert.deepEqual(standingOf(at({ [STATE_LABEL]: 'Placed' }, { ...a, [RESULT_ANNOTATION]: 'not json' })), {
      policy: 'p',
      standing: { state: 'Placed', architectures: [] },
    });
    assert.deepEqual(
      standingOf(at({ [STATE_LABEL]: 'Failed' }, { ...a, [FAILURE_ANNOTATION]: 'NotFound: x' })),
      {
        policy: 'p',
        standing: { state: 'Failed', reason: 'NotFound' },
      },
    );
    assert.equal(standingOf(at({ [STATE_LABEL]: 'Whatever' }, a)), undefined);
    assert.equal(standingOf(at({ [STATE_LABEL]: 'Placed' }, {})), undefined);
  });

  test('counts, failures by reason, and placed pods no node can run', () => {
    const nodes = nodeArchitectures([
      { metadata: { name: 'a', labels: { [ARCH_LABEL]: 'amd64' } } },
      { metadata: { name: 'b' }, status: { nodeInfo: { architecture: 'arm64' } } },
    ]);
    assert.deepEqual([...nodes].sort(), ['amd64', 'arm64']);
    const r = report(
      [
        { state: 'Gated' },
        { state: 'Placed', architectures: ['arm64', 's390x'] },
        { state: 'Placed', architectures: ['s390x'] },
        { state: 'Placed', architectures: [] },
        { state: 'Failed', reason: 'NotFound' },
        { state: 'Failed', reason: 'NotFound' },
        { state: 'Released' },
      ],
      nodes,
    );
    assert.deepEqual([r.gated, r.placed, r.failed], [1, 3, 2]);
    assert.deepEqual(
      [...r.unschedulable],
      [
        ['s390x', 1],
        ['none in common', 1],
      ],
    );
    assert.deepEqual([...r.failures], [['NotFound', 2]]);
  });
});
