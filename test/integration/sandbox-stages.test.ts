// The sandbox's own kwok stages: a pod whose image is under missing.kwok.invalid reports a failed
// pull, one under crash.kwok.invalid a container that keeps crashing, and any other image still
// becomes Ready. Every status a pod passes through is recorded from a watch, so "never Ready" is
// checked on each of them, not on a sample.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { KubeClient } from '../../src/runtime/client/client.ts';
import { Resources, type KubeObject } from '../../src/runtime/api/meta.ts';
import { CRASH_IMAGE_HOST, MISSING_IMAGE_HOST } from '../../src/sandbox/stages.ts';
import {
  addNodes,
  createNamespace,
  deleteNamespace,
  deleteNodes,
  testSandbox,
  uniqueName,
} from '../helpers/cluster.ts';
import { holdsFor, waitFor } from '../helpers/wait.ts';

interface ContainerStatus {
  name: string;
  image: string;
  ready: boolean;
  restartCount: number;
  state: {
    waiting?: { reason: string; message?: string };
    running?: { startedAt: string };
    terminated?: { exitCode: number; reason: string };
  };
  lastState?: { terminated?: { exitCode: number; reason: string } };
}
interface PodStatus {
  phase?: string;
  conditions?: { type: string; status: string }[];
  containerStatuses?: ContainerStatus[];
}

const ready = (s: PodStatus) => s.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;
const app = (s: PodStatus) => s.containerStatuses?.find((c) => c.name === 'app');
const sidecar = (s: PodStatus) => s.containerStatuses?.find((c) => c.name === 'sidecar');
/** A container's state in one word: the waiting reason, "running", or "terminated(exit code)". */
const stateOf = (c: ContainerStatus | undefined): string =>
  c === undefined
    ? 'none'
    : c.state.waiting
      ? c.state.waiting.reason
      : c.state.running
        ? 'running'
        : `terminated(${c.state.terminated?.exitCode})`;

let client: KubeClient;
let ns: string;
let nodes: string[];
/** Every status each pod of the namespace has had, in order, from one watch. */
const seen = new Map<string, PodStatus[]>();
const watching = new AbortController();
let reading: Promise<void>;

before(async () => {
  client = testSandbox().client();
  ns = await createNamespace(client, 'stages');
  nodes = await addNodes(client, { prefix: uniqueName('stages'), count: 1 });
  const stream = client.stream<{ type: string; object: KubeObject }>(`/api/v1/namespaces/${ns}/pods`, {
    query: { watch: 1 },
    signal: watching.signal,
  });
  reading = (async () => {
    try {
      for await (const ev of stream) {
        const name = ev.object.metadata!.name!;
        seen.set(name, [...(seen.get(name) ?? []), (ev.object['status'] ?? {}) as PodStatus]);
      }
    } catch {
      // aborted at the end
    }
  })();
});

after(async () => {
  watching.abort();
  await reading;
  await deleteNamespace(client, ns);
  await deleteNodes(client, nodes);
});

async function createPod(name: string, image: string): Promise<void> {
  await client.create(Resources.pods, {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: ns },
    spec: {
      nodeName: nodes[0],
      containers: [
        { name: 'app', image },
        { name: 'sidecar', image: 'registry.example/sidecar:1' },
      ],
    },
  });
}

const statusOf = async (name: string) =>
  ((await client.get(Resources.pods, name, ns))['status'] ?? {}) as PodStatus;

/** The distinct successive states of the app container, as the watch saw them. */
const history = (name: string): string[] =>
  (seen.get(name) ?? []).map((s) => stateOf(app(s))).filter((s, i, a) => i === 0 || s !== a[i - 1]);

describe('kwok stages of the sandbox', () => {
  test(`an image under ${MISSING_IMAGE_HOST}: ErrImagePull, then ImagePullBackOff, never Ready`, async () => {
    await createPod('missing', `${MISSING_IMAGE_HOST}/team/app:1`);
    await waitFor(
      'ImagePullBackOff',
      async () => stateOf(app(await statusOf('missing'))) === 'ImagePullBackOff',
      {
        observe: () => history('missing'),
      },
    );
    // It stays so (no kubelet will pull it), and the other container of the pod runs.
    await holdsFor(
      'the pod Pending in ImagePullBackOff',
      async () => {
        const s = await statusOf('missing');
        return s.phase === 'Pending' && stateOf(app(s)) === 'ImagePullBackOff' && !ready(s);
      },
      3_000,
      250,
    );
    const s = await statusOf('missing');
    assert.match(
      app(s)!.state.waiting!.message!,
      /Back-off pulling image "missing\.kwok\.invalid\/team\/app:1"/,
    );
    assert.equal(app(s)!.ready, false);
    assert.equal(stateOf(sidecar(s)), 'running');
    assert.deepEqual(
      history('missing').filter((h) => h !== 'none'),
      ['ErrImagePull', 'ImagePullBackOff'],
    );
    assert.ok(!seen.get('missing')!.some(ready), 'the pod was Ready at some point');
  });

  test(`an image under ${CRASH_IMAGE_HOST}: starts, exits 1, CrashLoopBackOff, restarts counted, never Ready`, async () => {
    await createPod('crash', `${CRASH_IMAGE_HOST}/team/app:1`);
    await waitFor(
      'restartCount 3 and CrashLoopBackOff after it',
      async () => {
        const c = app(await statusOf('crash'));
        return (c?.restartCount ?? 0) >= 3 && stateOf(c) === 'CrashLoopBackOff';
      },
      { timeoutMs: 45_000, observe: () => history('crash') },
    );
    const s = await statusOf('crash');
    assert.equal(s.phase, 'Running');
    assert.equal(app(s)!.lastState?.terminated?.exitCode, 1);
    assert.equal(app(s)!.lastState?.terminated?.reason, 'Error');
    assert.equal(app(s)!.ready, false);
    assert.equal(stateOf(sidecar(s)), 'running');
    // Each round: running, exit code 1, back-off; restartCount rises by one on each start.
    const rounds = history('crash').filter((h) => h !== 'none');
    assert.deepEqual(rounds.slice(0, 9), [
      'running',
      'terminated(1)',
      'CrashLoopBackOff',
      'running',
      'terminated(1)',
      'CrashLoopBackOff',
      'running',
      'terminated(1)',
      'CrashLoopBackOff',
    ]);
    const starts = seen
      .get('crash')!
      .map((st) => app(st))
      .filter((c) => c?.state.running)
      .map((c) => c!.restartCount);
    assert.deepEqual([...new Set(starts)].slice(0, 4), [0, 1, 2, 3]);
    assert.ok(!seen.get('crash')!.some(ready), 'the pod was Ready at some point');
  });

  test('any other image becomes Ready as before, and pods of every kind are deleted', async () => {
    await createPod('normal', 'registry.example/team/app:1');
    await waitFor('the normal pod Ready', async () => ready(await statusOf('normal')));
    const s = await statusOf('normal');
    assert.equal(s.phase, 'Running');
    assert.deepEqual(
      s.containerStatuses!.map((c) => [c.name, stateOf(c), c.restartCount, c.ready]),
      [
        ['app', 'running', 0, true],
        ['sidecar', 'running', 0, true],
      ],
    );
    for (const name of ['missing', 'crash', 'normal']) await client.delete(Resources.pods, name, ns);
    await waitFor(
      'the pods gone',
      async () => (await client.list(Resources.pods, { namespace: ns })).items.length === 0,
      {
        observe: async () =>
          (await client.list(Resources.pods, { namespace: ns })).items.map((p) => p.metadata?.name),
      },
    );
  });
});
