import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parsePlacements } from '../../../src/agents/parse.ts';
import { explainPlacement, previewPlacements, type ClusterView } from '../../../src/agents/explain.ts';
import { SKIP_WAIT_FOR_AGENT_ANNOTATION } from '../../../src/agents/admit.ts';
import type { SlimPod } from '../../../src/policy/slim.ts';

const BERTH = 'berth-system';

const pod = (
  name: string,
  namespace: string,
  node: string | undefined,
  labels: Record<string, string>,
  annotations: Record<string, string> = {},
): SlimPod => ({
  metadata: { name, namespace, labels, annotations },
  spec: { ...(node ? { nodeName: node } : {}), containers: [] },
  status: { phase: 'Running' },
});

const view: ClusterView = {
  pods: [
    pod('w1', 'ate', 'n1', { app: 'w', pool: 'A' }),
    pod('w2', 'ate', 'n1', { app: 'w', pool: 'B' }),
    pod('w3', 'ate', 'n2', { app: 'w', pool: 'A' }),
    pod('pending', 'ate', undefined, { app: 'w', pool: 'A' }),
    pod('skip', 'ate', 'n2', { app: 'w', pool: 'C' }, { [SKIP_WAIT_FOR_AGENT_ANNOTATION]: 'true' }),
    pod('long', 'ate', 'n2', { app: 'w', pool: 'L'.repeat(63) }),
    pod('web', 'web', 'n3', { app: 'web', pool: 'W' }),
    pod('dns', 'kube-system', 'n3', { app: 'w', pool: 'K' }),
    pod('berth', BERTH, 'n3', { app: 'w', pool: 'K' }),
  ],
  namespaces: new Map(
    ['ate', 'web', 'kube-system', BERTH].map((n) => [n, { 'kubernetes.io/metadata.name': n }]),
  ),
  owners: new Map(),
};

const placement = (name: string, spec: Record<string, unknown>) => ({
  metadata: { name },
  spec: {
    owner: { uidLabel: 'pool' },
    nodeLabel: { key: `x/${name}` },
    claimAnnotationPrefix: `x/${name}.`,
    podSelector: { matchLabels: { app: 'w' } },
    ...spec,
  },
});

test('a dry run counts selected, claimed and mutated pods as the controller and webhook would', () => {
  const { parsed } = parsePlacements([
    placement('workers', {}),
    placement('everyone', { podSelector: {}, waitForAgent: { port: 1 }, acknowledgeAllPods: true }),
    placement('unacknowledged', { podSelector: {}, waitForAgent: { port: 1 } }),
    placement('system', {
      namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'kube-system' } },
      waitForAgent: { port: 1 },
    }),
  ]);
  const [workers, everyone, unacknowledged, system] = previewPlacements(view, parsed, BERTH);

  // w1, w2, w3, pending, skip and long are selected; kube-system and Berth's namespace are not named.
  assert.equal(workers!.selectedPods, 6);
  // Bound pods: n1 claims A and B, n2 claims A and C; "long" has no valid claim key.
  assert.deepEqual([workers!.claims, workers!.owners, workers!.nodes, workers!.claimedPods], [4, 3, 2, 4]);
  assert.equal(workers!.rejected.length, 1);
  assert.match(workers!.rejected[0]!, /^pod ate\/long: claim key/);
  assert.equal(workers!.wouldMutate, undefined);
  assert.equal(workers!.acknowledged, undefined);

  // Every pod outside the protected namespaces; the skip annotation spares one from the init
  // container, and "long", which no claim follows, would wait for an agent forever: it gets none.
  assert.equal(everyone!.selectedPods, 7);
  assert.equal(everyone!.wouldMutate, 5);
  assert.match(everyone!.acknowledged!, /every new pod/);
  assert.deepEqual([everyone!.claims, everyone!.nodes], [5, 3]);

  assert.equal(unacknowledged!.problems.length, 1);
  assert.deepEqual([unacknowledged!.selectedPods, unacknowledged!.claims], [0, 0]);

  // Named explicitly: claimed, but the webhook never changes pods in kube-system.
  assert.deepEqual([system!.selectedPods, system!.claims, system!.wouldMutate], [1, 1, 0]);
});

test('berth explain agentplacement: the nodes it labels and the claims on each, the nodes it leaves alone, its counts; invalid', () => {
  const { parsed } = parsePlacements([
    placement('workers', {}),
    placement('bad', { nodeLabel: { key: 'bad key' } }),
  ]);
  const small: ClusterView = {
    ...view,
    pods: [
      pod('w1', 'ate', 'n1', { app: 'w', pool: 'A' }),
      pod('w2', 'ate', 'n1', { app: 'w', pool: 'B' }),
      pod('w3', 'ate', 'n2', { app: 'w', pool: 'A' }),
      pod('web', 'web', 'n3', { app: 'web', pool: 'W' }),
      // Selected, but no owner label: selected, not counted.
      pod('loose', 'ate', 'n3', { app: 'w' }),
    ],
  };
  const said = explainPlacement('workers', parsed, small, ['n1', 'n2', 'n3'], BERTH);
  assert.deepEqual(said.subjects, [
    {
      kind: 'Node',
      name: 'n1',
      in: true,
      why: ['label x/workers=true', 'claim x/workers.A (ate): ate/w1', 'claim x/workers.B (ate): ate/w2'],
    },
    { kind: 'Node', name: 'n2', in: true, why: ['label x/workers=true', 'claim x/workers.A (ate): ate/w3'] },
    { kind: 'Node', name: 'n3', in: false, why: ['no counted pod here'] },
  ]);
  assert.deepEqual(said.lines, ['  selects 4 pod(s); 3 counted, of 2 owner(s)']);
  // --node: the one node asked about.
  assert.deepEqual(
    explainPlacement('workers', parsed, small, ['n2'], BERTH).subjects!.map((s) => s.name),
    ['n2'],
  );
  assert.match(
    explainPlacement('bad', parsed, small, ['n1'], BERTH).lines[0]!,
    /^ {2}invalid, applies nothing: nodeLabel\.key "bad key": /,
  );
  assert.deepEqual(explainPlacement('gone', parsed, small, ['n1'], BERTH), {
    lines: ['  invalid, applies nothing'],
  });
});
