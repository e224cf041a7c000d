import { applyJsonPatch } from '../../helpers/jsonpatch.ts';
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import net from 'node:net';
import { describe, test } from 'node:test';
import { promisify } from 'node:util';
import type { Placement } from '../../../src/agents/decide.ts';
import {
  SKIP_WAIT_FOR_AGENT_ANNOTATION,
  WAIT_FOR_AGENT_ANNOTATION,
  agentAdmission,
  waitExemption,
  injectWaitForAgent,
  placementsForPod,
  podMutatingHandler,
  waitForAgentContainer,
  type AgentAdmissionState,
  type Container,
  type WaitingPlacement,
} from '../../../src/agents/admit.ts';
import { agentPlacementSpec } from '../../../src/agents/crd.ts';
import { rootLogger } from '../../../src/runtime/observability/log.ts';
import type { KubeObject } from '../../../src/runtime/api/meta.ts';
import type { AdmissionRequest, AdmissionResult } from '../../../src/runtime/webhook/admission.ts';

const quiet = rootLogger.child({}, { level: 'silent' });
const BERTH = 'berth-system';
const wait = { port: 8085, image: 'busybox:1.36', timeoutSeconds: 0 };

/** As a ReplicaSet creates its pods: what a controllerRef placement claims them by. */
const fromReplicaSet = [
  {
    apiVersion: 'apps/v1',
    kind: 'ReplicaSet',
    name: 'worker-7d9',
    uid: '0f5c2b9e-8d1a-4c3e-9b7a-2e6f4d8c1a35',
    controller: true,
  },
];

function pod(labels: Record<string, string> = { app: 'ateom' }, extra: Partial<KubeObject> = {}): KubeObject {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name: 'worker-1', namespace: 'ate', labels, ownerReferences: fromReplicaSet },
    spec: {
      initContainers: [
        { name: 'setup', image: 'registry.example/setup:1' },
        { name: 'migrate', image: 'registry.example/migrate:1' },
      ],
      containers: [{ name: 'main', image: 'registry.example/ateom:1' }],
    },
    ...extra,
  };
}

// Through the real schema, so defaults (image, timeoutSeconds) apply as in the cluster.
/** A Pod CREATE review in namespace ate, by the ReplicaSet controller unless `extra` says otherwise. */
const request = (object: KubeObject, extra: Partial<AdmissionRequest> = {}): AdmissionRequest => ({
  uid: 'u1',
  kind: { group: '', version: 'v1', kind: 'Pod' },
  resource: { group: '', version: 'v1', resource: 'pods' },
  namespace: 'ate',
  operation: 'CREATE',
  userInfo: { username: 'system:serviceaccount:kube-system:replicaset-controller' },
  object,
  ...extra,
});

function placement(name: string, spec: Record<string, unknown>): Placement {
  return {
    name,
    spec: agentPlacementSpec.parse({
      owner: { controllerRef: true },
      nodeLabel: { key: `agents.berth.dev/${name}` },
      claimAnnotationPrefix: `${name}.agents.berth.dev/`,
      podSelector: {},
      ...spec,
    }),
  };
}

const initContainers = (p: KubeObject): Container[] =>
  (p['spec'] as { initContainers: Container[] }).initContainers;
const script = (c: Container): string => c.command[2]!;

describe('waitForAgentContainer', () => {
  test('probes the host IP on the port with small resources and no privileges', () => {
    const c = waitForAgentContainer('atelet', wait);
    assert.equal(c.name, 'berth-wait-for-agent-atelet');
    assert.equal(c.image, 'busybox:1.36');
    assert.deepEqual(c.env, [{ name: 'HOST_IP', valueFrom: { fieldRef: { fieldPath: 'status.hostIP' } } }]);
    assert.deepEqual(c.command.slice(0, 2), ['sh', '-c']);
    assert.match(script(c), /until nc -z -w 1 "\$HOST_IP" 8085/);
    assert.match(script(c), /echo "waiting for the agent on \$HOST_IP:8085"/);
    assert.match(script(c), /echo "agent is up"/);
    assert.doesNotMatch(script(c), /deadline|exit/);
    assert.deepEqual(c.resources, {
      requests: { cpu: '10m', memory: '8Mi' },
      limits: { cpu: '50m', memory: '16Mi' },
    });
    assert.deepEqual(c.securityContext, {
      runAsNonRoot: true,
      runAsUser: 65534,
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
      capabilities: { drop: ['ALL'] },
      // Pod Security `restricted` for a pod that sets no seccomp profile at its own level.
      seccompProfile: { type: 'RuntimeDefault' },
    });
  });

  test('with a timeout, gives up after it and exits 0', () => {
    const s = script(waitForAgentContainer('atelet', { ...wait, port: 9000, timeoutSeconds: 30 }));
    assert.match(s, /until nc -z -w 1 "\$HOST_IP" 9000/);
    assert.match(s, /deadline=\$\(\(\$\(date \+%s\) \+ 30\)\)/);
    assert.match(s, /exit 0/);
  });

  test('names stay unique DNS labels of at most 63 characters', () => {
    const long = 'a'.repeat(60);
    const names = [long, `${long}b`, 'agents.example.com', 'agents-example-com', 'x'.repeat(253)].map(
      (n) => waitForAgentContainer(n, wait).name,
    );
    assert.equal(new Set(names).size, names.length);
    for (const n of names) {
      assert.ok(n.length <= 63, n);
      assert.match(n, /^berth-wait-for-agent-[a-z0-9-]*[a-z0-9]$/);
    }
    assert.equal(names[3], 'berth-wait-for-agent-agents-example-com');
    assert.equal(waitForAgentContainer(long, wait).name, names[0], 'deterministic');
  });
});

describe('injectWaitForAgent', () => {
  const atelet: WaitingPlacement = { name: 'atelet', waitForAgent: wait };
  const logs: WaitingPlacement = { name: 'logs', waitForAgent: { ...wait, port: 9100 } };

  test('a Windows pod gets no wait (POSIX sh, and Linux security fields it may not carry)', () => {
    const windows = { key: 'kubernetes.io/os', operator: 'In', values: ['windows'] };
    for (const spec of [
      { os: { name: 'windows' } },
      { nodeSelector: { 'kubernetes.io/os': 'windows' } },
      {
        affinity: {
          nodeAffinity: {
            requiredDuringSchedulingIgnoredDuringExecution: {
              nodeSelectorTerms: [{ matchExpressions: [windows] }],
            },
          },
        },
      },
    ]) {
      const before = { ...pod(), spec: { ...(pod()['spec'] as object), ...spec } };
      assert.deepEqual(injectWaitForAgent(before, [atelet]), before);
    }
  });

  test('puts the container first, keeps the rest in order, and annotates the pod', () => {
    const before = pod();
    const after = injectWaitForAgent(before, [atelet]);
    assert.deepEqual(
      initContainers(after).map((c) => c.name),
      ['berth-wait-for-agent-atelet', 'setup', 'migrate'],
    );
    assert.deepEqual(initContainers(after)[0], waitForAgentContainer('atelet', wait));
    assert.equal(after.metadata?.annotations?.[WAIT_FOR_AGENT_ANNOTATION], 'atelet');
    assert.deepEqual(before, pod(), 'the input is not changed');
  });

  test('creates initContainers when the pod has none', () => {
    const after = injectWaitForAgent(pod({}, { spec: { containers: [] } }), [atelet]);
    assert.deepEqual(
      initContainers(after).map((c) => c.name),
      ['berth-wait-for-agent-atelet'],
    );
  });

  test('two placements: two containers in name order', () => {
    const after = injectWaitForAgent(pod(), [logs, atelet]);
    assert.deepEqual(
      initContainers(after).map((c) => c.name),
      ['berth-wait-for-agent-atelet', 'berth-wait-for-agent-logs', 'setup', 'migrate'],
    );
    assert.equal(after.metadata?.annotations?.[WAIT_FOR_AGENT_ANNOTATION], 'atelet,logs');
  });

  test('is idempotent, and keeps what a template already carried', () => {
    const once = injectWaitForAgent(pod(), [atelet, logs]);
    assert.deepEqual(injectWaitForAgent(once, [atelet, logs]), once);

    const fromTemplate = injectWaitForAgent(pod(), [atelet]);
    const more = injectWaitForAgent(fromTemplate, [logs]);
    assert.deepEqual(
      initContainers(more).map((c) => c.name),
      ['berth-wait-for-agent-logs', 'berth-wait-for-agent-atelet', 'setup', 'migrate'],
    );
    assert.equal(more.metadata?.annotations?.[WAIT_FOR_AGENT_ANNOTATION], 'atelet,logs');
  });

  test('no placements: an unchanged copy', () => {
    assert.deepEqual(injectWaitForAgent(pod(), []), pod());
  });
});

describe('placementsForPod', () => {
  const placements = [
    placement('zeta', { podSelector: { matchLabels: { app: 'ateom' } }, waitForAgent: { port: 1 } }),
    placement('alpha', {
      podSelector: { matchExpressions: [{ key: 'app', operator: 'In', values: ['ateom', 'other'] }] },
      namespaceSelector: { matchLabels: { team: 'ate' } },
      waitForAgent: { port: 2, timeoutSeconds: 5 },
    }),
    placement('no-wait', { podSelector: { matchLabels: { app: 'ateom' } } }),
    placement('web', { podSelector: { matchLabels: { app: 'web' } }, waitForAgent: { port: 3 } }),
  ];

  test('selector and namespaceSelector both decide; name order; defaults applied', () => {
    assert.deepEqual(placementsForPod(pod(), 'ate', { team: 'ate' }, placements, BERTH), [
      { name: 'alpha', waitForAgent: { port: 2, image: 'busybox:1.36', timeoutSeconds: 5 } },
      { name: 'zeta', waitForAgent: { port: 1, image: 'busybox:1.36', timeoutSeconds: 0 } },
    ]);
    assert.deepEqual(
      placementsForPod(pod(), 'ate', { team: 'other' }, placements, BERTH).map((p) => p.name),
      ['zeta'],
    );
    assert.deepEqual(
      placementsForPod(pod({ app: 'web' }), 'ate', {}, placements, BERTH).map((p) => p.name),
      ['web'],
    );
    assert.deepEqual(placementsForPod(pod({}), 'ate', { team: 'ate' }, placements, BERTH), []);
  });

  test('an unknown namespace matches only placements without a namespaceSelector', () => {
    assert.deepEqual(
      placementsForPod(pod(), 'ate', undefined, placements, BERTH).map((p) => p.name),
      ['zeta'],
    );
    const empty = placement('empty', { namespaceSelector: {}, waitForAgent: { port: 1 } });
    assert.deepEqual(placementsForPod(pod(), 'ate', undefined, [empty], BERTH), []);
    assert.equal(placementsForPod(pod(), 'ate', {}, [empty], BERTH).length, 1);
  });
});

describe('only pods a claim will follow', () => {
  const waiting = { podSelector: { matchLabels: { app: 'ateom' } }, waitForAgent: { port: 1 } };
  const byController = placement('by-controller', waiting);
  const byLabel = placement('by-label', { ...waiting, owner: { uidLabel: 'ate.dev/pool-uid' } });
  const names = (p: KubeObject, placements: Placement[]) =>
    placementsForPod(p, 'ate', {}, placements, BERTH).map((w) => w.name);

  test('a pod without an owner under the placement gets no container (nothing would place its agent)', () => {
    const bare = pod({ app: 'ateom' }, { metadata: { name: 'bare', labels: { app: 'ateom' } } });
    assert.deepEqual(names(bare, [byController]), [], 'no controller: no claim in controllerRef mode');
    assert.deepEqual(names(pod(), [byLabel]), [], 'no uidLabel: no claim');
    const pooled = pod({ app: 'ateom', 'ate.dev/pool-uid': 'A' });
    assert.deepEqual(names(pooled, [byController, byLabel]), ['by-controller', 'by-label']);
  });

  test('nor does a pod whose claim key the apiserver would refuse', () => {
    const prefixed = placement('prefixed', {
      ...waiting,
      owner: { uidLabel: 'ate.dev/pool-uid' },
      claimAnnotationPrefix: 'ate.dev/claim.',
    });
    // "claim." and a 63-character label value make a name part longer than 63.
    const long = pod({ app: 'ateom', 'ate.dev/pool-uid': 'u'.repeat(63) });
    assert.deepEqual(names(long, [prefixed]), []);
    assert.deepEqual(names(pod({ app: 'ateom', 'ate.dev/pool-uid': 'u' }), [prefixed]), ['prefixed']);
  });

  test('the webhook answers so', async () => {
    const handler = podMutatingHandler({
      placements: () => [byLabel],
      namespaceLabels: () => ({}),
      berthNamespace: BERTH,
      logger: quiet,
    });
    const review = (object: KubeObject) => request(object, { userInfo: { username: 'someone' } });
    assert.deepEqual(await handler(review(pod())), { allowed: true });
    const claimed = await handler(review(pod({ app: 'ateom', 'ate.dev/pool-uid': 'A' })));
    assert.ok(claimed.allowed && claimed.patch && claimed.patch.length > 0);
  });
});

describe('exempt', () => {
  test('kube-system, the skip annotation and mirror pods', () => {
    assert.equal(waitExemption(pod()), undefined);
    assert.match(waitExemption(pod({}, { metadata: { namespace: 'kube-system' } }))!, /kube-system/);
    assert.match(waitExemption(pod({}, { metadata: {} }), 'kube-system')!, /kube-system/);
    const annotated = (annotations: Record<string, string>) =>
      pod({}, { metadata: { namespace: 'ate', annotations } });
    assert.match(
      waitExemption(annotated({ [SKIP_WAIT_FOR_AGENT_ANNOTATION]: 'true' }))!,
      /skip-wait-for-agent/,
    );
    assert.equal(waitExemption(annotated({ [SKIP_WAIT_FOR_AGENT_ANNOTATION]: 'false' })), undefined);
    assert.match(waitExemption(annotated({ 'kubernetes.io/config.mirror': 'abc' }))!, /mirror/);
  });

  test('host network pods still get the container', () => {
    const hostNetwork = pod({}, { spec: { hostNetwork: true, containers: [] } });
    assert.equal(waitExemption(hostNetwork), undefined);
  });
});

describe('podMutatingHandler', () => {
  const placements = [
    placement('atelet', {
      podSelector: { matchLabels: { app: 'ateom' } },
      namespaceSelector: { matchLabels: { team: 'ate' } },
      waitForAgent: { port: 8085 },
    }),
  ];
  const namespaces: Record<string, Record<string, string>> = { ate: { team: 'ate' }, web: {} };
  const handler = podMutatingHandler({
    placements: () => placements,
    namespaceLabels: (ns) => namespaces[ns],
    berthNamespace: BERTH,
    logger: quiet,
  });
  const admit = async (req: AdmissionRequest): Promise<AdmissionResult> => await handler(req);

  test('a templated pod (namespace only in the request) gets a patch that injects', async () => {
    const templated = pod(
      { app: 'ateom' },
      { metadata: { generateName: 'worker-', labels: { app: 'ateom' }, ownerReferences: fromReplicaSet } },
    );
    const result = await admit(request(templated));
    assert.equal(result.allowed, true);
    assert.ok(result.allowed && result.patch && result.patch.length > 0);
    assert.deepEqual(
      applyJsonPatch(templated, result.patch),
      injectWaitForAgent(templated, placementsForPod(templated, 'ate', namespaces['ate'], placements, BERTH)),
    );
    assert.equal(
      (applyJsonPatch(templated, result.patch) as KubeObject).metadata?.annotations?.[
        WAIT_FOR_AGENT_ANNOTATION
      ],
      'atelet',
    );
  });

  test('a namespace created a moment before its pod: the webhook waits for the cache to learn it, not guess', async () => {
    const owned = pod(
      { app: 'ateom' },
      { metadata: { labels: { app: 'ateom' }, ownerReferences: fromReplicaSet } },
    );
    // The cache learns the namespace 30 ms after the review arrives, as a watch event would bring it.
    const arrives = performance.now() + 30;
    const fresh = podMutatingHandler({
      placements: () => placements,
      namespaceLabels: (ns) => (ns === 'fresh' && performance.now() >= arrives ? { team: 'ate' } : undefined),
      namespaceWaitMs: 1000,
      berthNamespace: BERTH,
      logger: quiet,
    });
    const r = await fresh(request(owned, { namespace: 'fresh' }));
    assert.ok(r.allowed && r.patch && r.patch.length > 0, 'injected once the namespace was known');
    // One the cache never learns: answered once the wait is over, as a namespaceSelector's that does not match.
    const lost = podMutatingHandler({
      placements: () => placements,
      namespaceLabels: () => undefined,
      namespaceWaitMs: 40,
      berthNamespace: BERTH,
      logger: quiet,
    });
    const started = performance.now();
    assert.deepEqual(await lost(request(owned, { namespace: 'lost' })), { allowed: true });
    assert.ok(performance.now() - started >= 40, 'waited');
    // No wait where the namespace cannot change the answer: no placement selects the pod's labels.
    assert.ok(
      !(lost(request(pod({ app: 'other' }), { namespace: 'lost' })) instanceof Promise),
      'answered at once',
    );
  });

  test('a pod without init containers gets them added', async () => {
    const bare = pod({ app: 'ateom' }, { spec: { containers: [{ name: 'main', image: 'x' }] } });
    const result = await admit(request(bare));
    assert.ok(result.allowed && result.patch);
    assert.deepEqual(
      initContainers(applyJsonPatch(bare, result.patch) as KubeObject).map((c) => c.name),
      ['berth-wait-for-agent-atelet'],
    );
  });

  test('no patch for non-matching, exempt, already injected and non-CREATE requests', async () => {
    const cases: AdmissionRequest[] = [
      request(pod({ app: 'web' })),
      request(pod({ app: 'ateom' }, { metadata: { labels: { app: 'ateom' } } }), { namespace: 'web' }),
      request(pod({}, { metadata: { namespace: 'kube-system', labels: { app: 'ateom' } } })),
      request(pod({}, { metadata: { labels: { app: 'ateom' } } }), { namespace: 'kube-system' }),
      request(
        injectWaitForAgent(pod(), placementsForPod(pod(), 'ate', namespaces['ate'], placements, BERTH)),
      ),
      request(pod(), { operation: 'UPDATE', oldObject: pod() }),
      request(pod(), { subResource: 'ephemeralcontainers' }),
    ];
    for (const req of cases) assert.deepEqual(await admit(req), { allowed: true }, JSON.stringify(req));
  });

  test('in the webhook thread it answers from the latest state it was sent, cloned as a message is', async () => {
    // What the webhook thread holds: the state after postMessage's structured clone.
    let state = structuredClone<AgentAdmissionState>({
      placements: [],
      berthNamespace: BERTH,
      namespaceLabels: new Map(Object.entries(namespaces)),
    });
    const threaded = agentAdmission.handler(() => state);
    assert.deepEqual(await threaded(request(pod())), { allowed: true });
    state = structuredClone({ ...state, placements });
    const result = await threaded(request(pod()));
    assert.ok(result.allowed && result.patch);
    assert.deepEqual(
      initContainers(applyJsonPatch(pod(), result.patch) as KubeObject).map((c) => c.name),
      ['berth-wait-for-agent-atelet', 'setup', 'migrate'],
    );
    // A namespace that loses the label the placement selects it by.
    state = structuredClone({ ...state, namespaceLabels: new Map([['ate', {}]]) });
    assert.deepEqual(await threaded(request(pod())), { allowed: true });
  });

  test('fails open when the placements cannot be read', async () => {
    const broken = podMutatingHandler({
      placements: () => {
        throw new Error('cache not synced');
      },
      namespaceLabels: () => ({}),
      berthNamespace: BERTH,
      logger: quiet,
    });
    assert.deepEqual(await broken(request(pod())), { allowed: true });
  });
});

// The script for real: it needs an nc with -z (busybox's default build has it, Debian's busybox does
// not), so it is probed against a live listener first.
const run = promisify(execFile);

function listen(port = 0): Promise<net.Server> {
  return new Promise((resolve, reject) => {
    const server = net.createServer((socket) => socket.destroy());
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve(server));
  });
}

const portOf = (server: net.Server): number => (server.address() as net.AddressInfo).port;
const close = (server: net.Server): Promise<void> => new Promise((resolve) => server.close(() => resolve()));

async function freePort(): Promise<number> {
  const server = await listen();
  const port = portOf(server);
  await close(server);
  return port;
}

async function ncUnavailable(): Promise<string | false> {
  try {
    await run('sh', ['-c', 'command -v nc']);
  } catch {
    return 'no nc on PATH';
  }
  const server = await listen();
  try {
    // Through sh, as the script runs it: a busybox sh may take its own nc applet over the one on PATH.
    await run('sh', ['-c', `nc -z -w 1 127.0.0.1 ${portOf(server)}`], { timeout: 5000 });
    return false;
  } catch {
    return "sh's nc does not support -z (as Debian's busybox, built without nc-1.10 compatibility)";
  } finally {
    await close(server);
  }
}

function runScript(s: string): Promise<{ code: number | null; stdout: string; ms: number }> {
  const started = Date.now();
  return new Promise((resolve, reject) => {
    const child = spawn('sh', ['-c', s], { env: { ...process.env, HOST_IP: '127.0.0.1' } });
    let stdout = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, ms: Date.now() - started }));
  });
}

describe('the wait script under sh', async () => {
  const skip = await ncUnavailable();

  test('waits until the port answers', { skip }, async () => {
    const port = await freePort();
    let server: net.Server | undefined;
    const late = setTimeout(() => void listen(port).then((s) => (server = s)), 300);
    try {
      const { code, stdout, ms } = await runScript(
        script(waitForAgentContainer('atelet', { ...wait, port, timeoutSeconds: 20 })),
      );
      assert.equal(code, 0);
      assert.equal(stdout.match(/waiting for the agent on 127\.0\.0\.1:\d+/g)?.length, 1, stdout);
      assert.match(stdout, new RegExp(`127\\.0\\.0\\.1:${port}`));
      assert.match(stdout, /agent is up\n$/);
      assert.ok(ms >= 300, `returned after ${ms} ms, before the listener started`);
    } finally {
      clearTimeout(late);
      if (server) await close(server);
    }
  });

  test('gives up after timeoutSeconds and exits 0', { skip }, async () => {
    const port = await freePort();
    const { code, stdout, ms } = await runScript(
      script(waitForAgentContainer('atelet', { ...wait, port, timeoutSeconds: 1 })),
    );
    assert.equal(code, 0);
    assert.match(stdout, /starting without it/);
    assert.doesNotMatch(stdout, /agent is up/);
    assert.ok(ms < 3000, `took ${ms} ms`);
  });
});
