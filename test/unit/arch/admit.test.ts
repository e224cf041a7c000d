import assert from 'node:assert/strict';
import { test } from 'node:test';
import { applyJsonPatch } from '../../helpers/jsonpatch.ts';
import { parsePolicies } from '../../../src/arch/decide/parse.ts';
import { placePatch, placedAtAdmission } from '../../../src/arch/decide/patches.ts';
import { type ArchPod } from '../../../src/arch/decide/pods.ts';
import { explainArch } from '../../../src/arch/explain.ts';
import { ADMISSION_BUDGET_MS, INSPECT_MISS_MS } from '../../../src/arch/decide/admission.ts';
import { MAX_WAITING, podGateHandler, type InspectHint } from '../../../src/arch/admit.ts';
import { ARCH_LABEL, OS_LABEL, SCHEDULING_GATE, STATE_LABEL } from '../../../src/arch/types.ts';
import { archPlacementSpec } from '../../../src/arch/crd.ts';
import { ANONYMOUS, cachedFrom, type KnownImages } from '../../../src/registry/known.ts';
import { rootLogger } from '../../../src/runtime/observability/log.ts';
import type { JsonPatchOp } from '../../../src/runtime/api/jsonpatch.ts';
import type {
  AdmissionHandler,
  AdmissionRequest,
  AdmissionResult,
} from '../../../src/runtime/webhook/admission.ts';

const quiet = rootLogger.child({}, { level: 'silent' });
const policy = (name: string, spec: Record<string, unknown> = {}) => ({
  metadata: { name, uid: name, generation: 1 },
  spec,
});
const { policies } = parsePolicies([policy('web', { podSelector: { matchLabels: { app: 'web' } } })]);
const deps = {
  policies: () => policies,
  namespaceLabels: () => ({}),
  berthNamespace: 'berth-system',
  servesWebhook: () => false,
  cached: () => undefined,
  logger: quiet,
};
const request = (object: unknown, extra: Partial<AdmissionRequest> = {}): AdmissionRequest =>
  ({
    uid: 'u',
    kind: { group: '', version: 'v1', kind: 'Pod' },
    resource: { group: '', version: 'v1', resource: 'pods' },
    operation: 'CREATE',
    namespace: 'apps',
    userInfo: {},
    object,
    ...extra,
  }) as AdmissionRequest;
const newPod = (labels: Record<string, string>, spec: Record<string, unknown> = {}) => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { generateName: 'web-', labels },
  spec: { containers: [{ name: 'c', image: 'web:1' }], ...spec },
});

/** An image's platforms as the registry client knows them without a request: linux, these architectures. */
const known = (image: string, archs: string[]) => ({
  image,
  reference: `docker.io/library/${image}`,
  digest: 'sha256:ab',
  platforms: archs.map((architecture) => ({ os: 'linux', architecture })),
  registry: 'registry-1.docker.io',
  cached: true,
});

/** The pod as `handle` admits it (its patch applied), whether it is gated, and how long the review took. */
async function admitted(handle: AdmissionHandler, p: unknown, extra: Partial<AdmissionRequest> = {}) {
  const started = performance.now();
  const { patch } = (await handle(request(p, extra))) as AdmissionResult & { patch?: JsonPatchOp[] };
  const out = applyJsonPatch(p, patch!) as ArchPod;
  return { gated: out.spec.schedulingGates !== undefined, ms: performance.now() - started, out };
}

test('the webhook gates selected pods, leaves the others, and always allows', async () => {
  const handle = podGateHandler(deps);
  const gated = (await handle(request(newPod({ app: 'web' })))) as AdmissionResult & { patch?: unknown[] };
  assert.equal(gated.allowed, true);
  const out = applyJsonPatch(newPod({ app: 'web' }), gated.patch as never) as ArchPod;
  assert.deepEqual(out.spec.schedulingGates, [{ name: SCHEDULING_GATE }]);
  assert.equal(out.metadata?.labels?.[STATE_LABEL], 'Gated');
  for (const r of [
    request(newPod({ app: 'db' })),
    request(newPod({ app: 'web' }), { namespace: 'kube-system' }),
    request(newPod({ app: 'web' }, { nodeName: 'n1' })),
    request(newPod({ app: 'web' }), { operation: 'UPDATE' }),
    request(newPod({ app: 'web' }), { subResource: 'status' }),
  ])
    assert.deepEqual(await handle(r), { allowed: true });
  // A broken cache or policy list must not deny a pod.
  const broken = podGateHandler({
    ...deps,
    policies: () => {
      throw new Error('boom');
    },
  });
  assert.deepEqual(await broken(request(newPod({ app: 'web' }))), { allowed: true });
});

test('every image known without a request: the pod is placed at admission and never gated', async () => {
  const cache = new Map([
    ['web:1', known('web:1', ['amd64', 'arm64'])],
    ['side:1', known('side:1', ['arm64'])],
    ['x86:1', known('x86:1', ['amd64'])],
  ]);
  const asked: { image: string; revalidate: boolean | undefined }[] = [];
  const handle = podGateHandler({
    ...deps,
    cached: (image, o) => (asked.push({ image, revalidate: o?.revalidate === true }), cache.get(image)),
  });
  const two = newPod(
    { app: 'web' },
    {
      containers: [
        { name: 'c', image: 'web:1' },
        { name: 's', image: 'side:1', imagePullPolicy: 'Always' },
      ],
    },
  );
  const r = (await handle(request(two))) as AdmissionResult & { patch?: unknown[] };
  const out = applyJsonPatch(two, r.patch as never) as ArchPod;
  assert.equal(out.spec.schedulingGates, undefined, 'not gated');
  assert.equal(out.metadata?.labels?.[STATE_LABEL], 'Placed');
  assert.deepEqual(
    out.spec.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms,
    [{ matchExpressions: [{ key: ARCH_LABEL, operator: 'In', values: ['arm64'] }] }],
  );
  assert.deepEqual(placedAtAdmission(out), { architectures: ['arm64'], images: ['web:1', 'side:1'] });
  // Always is passed on (the cache answers nothing for it), each image asked once.
  assert.deepEqual(asked, [
    { image: 'web:1', revalidate: false },
    { image: 'side:1', revalidate: true },
  ]);
  // One image not known, or nothing in common: gated, for the controller to read and report.
  for (const images of [
    ['web:1', 'new:1'],
    ['x86:1', 'side:1'],
  ]) {
    const p = newPod({ app: 'web' }, { containers: images.map((image, i) => ({ name: `c${i}`, image })) });
    const g = (await admitted(handle, p)).out;
    assert.deepEqual(g.spec.schedulingGates, [{ name: SCHEDULING_GATE }], images.join(' + '));
    assert.equal(placedAtAdmission(g), undefined);
  }
});

test('an image not known yet: the webhook asks for it and places the pod if it is read within the wait', async () => {
  const inspection = (image: string, architecture: string) => ({
    image,
    reference: `docker.io/library/${image}`,
    digest: `sha256:${image}`,
    platforms: [{ os: 'linux', architecture }],
    registry: 'registry-1.docker.io',
    cached: true,
  });
  const cache = new Map([['web:1', inspection('web:1', 'arm64')]]);
  const failed = new Set<string>();
  const hints: InspectHint[] = [];
  let now = 1_000_000;
  // A state replaced whole, as the webhook thread's is: the cache is read again only once it is new.
  let state = {};
  let counted = 0;
  let uncounted = 0;
  const handle = podGateHandler({
    ...deps,
    cached: (image, o) => (o?.counted === false ? uncounted++ : counted++, cache.get(image)),
    failed: (image) => failed.has(image),
    state: () => state,
    inspectWaitMs: 200,
    now: () => now,
    inspect: (hint) => {
      hints.push(hint);
      // The controller reads the image a moment later, or fails to, and sends a new state.
      const image = hint.images[0]?.image;
      if (image === 'new:1' || image === 'broken:1')
        setTimeout(() => {
          if (image === 'new:1') cache.set(image, inspection(image, 'arm64'));
          else failed.add(image);
          state = {};
        }, 50);
    },
  });
  const pod = (image: string, spec: Record<string, unknown> = {}) =>
    newPod(
      { app: 'web' },
      {
        containers: [
          { name: 'c', image: 'web:1' },
          { name: 's', image },
        ],
        ...spec,
      },
    );
  const timed = (p: ReturnType<typeof pod>, extra: Partial<AdmissionRequest> = {}) =>
    admitted(handle, p, extra);

  const placed = await timed(pod('new:1', { imagePullSecrets: [{ name: 'pull' }] }));
  assert.equal(placed.gated, false, 'placed once read, not gated');
  assert.deepEqual(placedAtAdmission(placed.out)?.architectures, ['arm64']);
  assert.deepEqual(hints, [
    { namespace: 'apps', images: [{ image: 'new:1', revalidate: false }], imagePullSecrets: ['pull'] },
  ]);
  // Each image looked up once for the metrics; while waiting, only when the state is new.
  assert.equal(counted, 2);
  assert.ok(uncounted <= 4, `the cache read again only for a new state (${uncounted} reads)`);

  // A read that fails ends the wait at once, and no pod waits for that image meanwhile.
  const broken = await timed(pod('broken:1'));
  assert.ok(broken.gated && broken.ms < 150, `gated when the read failed (${broken.ms} ms)`);
  hints.length = 0;
  const afterFailure = await timed(pod('broken:1'));
  assert.ok(afterFailure.gated && afterFailure.ms < 50);
  assert.deepEqual(hints, []);

  // Not read by its deadline (a slow registry): gated after the wait. The image's deadline is
  // shared: a pod that comes in the middle waits only for the rest of it, and is not asked again.
  const first = timed(pod('slow:1'));
  await new Promise((r) => setTimeout(r, 100));
  now += 100;
  const second = await timed(pod('slow:1'));
  const firstDone = await first;
  assert.ok(firstDone.gated && firstDone.ms >= 190, `the first waited its 200 ms (${firstDone.ms})`);
  assert.ok(second.gated && second.ms < 160, `the second waited the rest only (${second.ms})`);
  assert.equal(hints.length, 1, 'asked once');
  // Missed: the next pod within INSPECT_MISS_MS is gated at once; after it, asked again.
  now += 200;
  const missed = await timed(pod('slow:1'));
  assert.ok(missed.gated && missed.ms < 50);
  assert.equal(hints.length, 1);
  now += INSPECT_MISS_MS;
  await timed(pod('slow:1'));
  assert.equal(hints.length, 2, 'asked again once the miss is old');

  // Gated at once, never asked: a dry run (it must have no effect outside its answer).
  hints.length = 0;
  assert.equal((await timed(pod('dry:1'), { dryRun: true })).gated, true);
  assert.deepEqual(hints, []);
});

test('an image pulled Always: every pod asks for it, and is placed only on a read answered since it came', async () => {
  let now = 5_000;
  const canonical = 'docker.io/library/live:latest';
  const digest = `sha256:${'c'.repeat(64)}`;
  const registry = 'registry-1.docker.io';
  const tagRead = (readAt: number) => ({ digest, registry, expiresAt: 1e12, readAt, readers: [ANONYMOUS] });
  // What the thread holds: the tag read long ago, still fresh for a pod that does not pull Always.
  const images: KnownImages = {
    tags: new Map([[canonical, tagRead(1_000)]]),
    digests: new Map([
      [digest, { platforms: [{ os: 'linux', architecture: 'arm64' }], registry, readers: [ANONYMOUS] }],
    ]),
  };
  let state = {};
  const hints: InspectHint[] = [];
  // The controller's read, answered a moment later (its registry's answer is timed by the clock then).
  const answering: Promise<void>[] = [];
  const answer = () =>
    answering.push(
      new Promise((resolve) =>
        setTimeout(() => {
          images.tags.set(canonical, tagRead(now));
          state = {};
          resolve();
        }, 30),
      ),
    );
  let answers = true;
  const handle = podGateHandler({
    ...deps,
    cached: (image, o) => cachedFrom(images, () => now)(image, o),
    state: () => state,
    inspectWaitMs: 200,
    now: () => now,
    inspect: (hint) => {
      hints.push(hint);
      if (answers) answer();
    },
  });
  const pod = (imagePullPolicy?: string) =>
    newPod({ app: 'web' }, { containers: [{ name: 'c', image: 'live:latest', imagePullPolicy }] });
  const admit = (p: ReturnType<typeof pod>, extra: Partial<AdmissionRequest> = {}) =>
    admitted(handle, p, extra);

  // Not Always: the fresh tag places it at once, with no question.
  assert.equal((await admit(pod('IfNotPresent'))).gated, false);
  assert.deepEqual(hints, []);
  // Always: the tag read before the pod came does not count; a read since does.
  const first = await admit(pod('Always'));
  assert.equal(first.gated, false, 'placed once the tag was read again');
  assert.ok(first.ms >= 25, `it waited for the read (${first.ms} ms)`);
  assert.deepEqual(placedAtAdmission(first.out)?.architectures, ['arm64']);
  assert.deepEqual(hints, [
    { namespace: 'apps', images: [{ image: 'live:latest', revalidate: true }], imagePullSecrets: [] },
  ]);
  // The next pod, later: that read was before it came, so it asks and waits again.
  now += 1_000;
  const second = await admit(pod('Always'));
  assert.equal(second.gated, false);
  assert.ok(second.ms >= 25, `it waited for its own read (${second.ms} ms)`);
  assert.equal(hints.length, 2);
  // Two at once: both ask; the read answered after both came places both.
  now += 1_000;
  const [a, b] = await Promise.all([admit(pod('Always')), admit(pod('Always'))]);
  assert.deepEqual([a.gated, b.gated], [false, false]);
  assert.equal(hints.length, 4);
  // No answer by the deadline: gated after the wait, then at once while the miss is recent. (Every
  // answer asked for so far in first: a late one would answer the next pod.)
  await Promise.all(answering);
  answers = false;
  now += 1_000;
  const slow = await admit(pod('Always'));
  assert.ok(slow.gated && slow.ms >= 190, `gated after its wait (${slow.ms} ms)`);
  now += 300;
  const after = await admit(pod('Always'));
  assert.ok(after.gated && after.ms < 50, `gated at once after a miss (${after.ms} ms)`);
  // The late read comes in: the miss is over, and the next pod waits (and is placed) again.
  images.tags.set(canonical, tagRead(now));
  state = {};
  answers = true;
  now += 100;
  const recovered = await admit(pod('Always'));
  assert.equal(recovered.gated, false, 'placed: a slow read does not gate the image for 30 s');
  // A dry run neither asks nor waits.
  now += 100;
  const asked = hints.length;
  assert.equal((await admit(pod('Always'), { dryRun: true })).gated, true);
  assert.equal(hints.length, asked);
});

test('a review spends no more than its budget waiting, and no more than MAX_WAITING are held', async () => {
  let now = 0;
  const hints: InspectHint[] = [];
  const handle = podGateHandler({
    ...deps,
    // The namespace is learnt only after its wait, which the clock says took the budget's all but 50 ms.
    namespaceLabels: () => {
      now = ADMISSION_BUDGET_MS - 50;
      return {};
    },
    inspect: (hint) => hints.push(hint),
    inspectWaitMs: 1000,
    now: () => now,
  });
  const started = performance.now();
  await handle(request(newPod({ app: 'web' }, { containers: [{ name: 'c', image: 'late:1' }] })));
  const ms = performance.now() - started;
  assert.ok(ms >= 40 && ms < 200, `waited the 50 ms left of the budget, not the 1 s wait (${ms})`);

  // Held reviews: at MAX_WAITING the next pod is gated without a wait.
  now = 0;
  const handle2 = podGateHandler({ ...deps, inspect: () => {}, inspectWaitMs: 300, now: () => now });
  const held = Array.from({ length: MAX_WAITING }, (_, i) =>
    handle2(request(newPod({ app: 'web' }, { containers: [{ name: 'c', image: `held:${i}` }] }))),
  );
  const t = performance.now();
  await handle2(request(newPod({ app: 'web' }, { containers: [{ name: 'c', image: 'one-more:1' }] })));
  assert.ok(performance.now() - t < 100, 'over MAX_WAITING: not held');
  await Promise.all(held);
});

test('a Windows pod that says so only by its nodeSelector is placed on its Windows images at admission', async () => {
  const win = {
    image: 'win:1',
    reference: 'docker.io/library/win:1',
    digest: 'sha256:cd',
    platforms: [
      { os: 'linux', architecture: 'arm64' },
      { os: 'windows', architecture: 'amd64' },
    ],
    registry: 'registry-1.docker.io',
    cached: true,
  };
  const handle = podGateHandler({ ...deps, cached: () => win });
  const p = newPod(
    { app: 'web' },
    { containers: [{ name: 'c', image: 'win:1' }], nodeSelector: { [OS_LABEL]: 'windows' } },
  );
  const { out } = await admitted(handle, p);
  assert.equal(out.spec.schedulingGates, undefined, 'not gated');
  assert.deepEqual(placedAtAdmission(out)?.architectures, ['amd64']);
});

test('asked again after a later webhook changed a pod it placed: placed anew on every image, or gated; unchanged, left as it is', async () => {
  const cache = new Map([
    ['web:1', known('web:1', ['amd64', 'arm64'])],
    ['proxy:1', known('proxy:1', ['amd64'])],
  ]);
  const { policies: preferring } = parsePolicies([
    policy('web', {
      podSelector: { matchLabels: { app: 'web' } },
      preferredArchitectures: [{ architecture: 'arm64', weight: 10 }],
    }),
  ]);
  const handle = podGateHandler({ ...deps, policies: () => preferring, cached: (image) => cache.get(image) });
  const zone = { key: 'topology.kubernetes.io/zone', operator: 'In', values: ['a'] };
  const p = newPod(
    { app: 'web' },
    {
      affinity: {
        nodeAffinity: {
          requiredDuringSchedulingIgnoredDuringExecution: {
            nodeSelectorTerms: [{ matchExpressions: [zone] }],
          },
        },
      },
    },
  );
  const first = (await admitted(handle, p)).out;
  assert.deepEqual(placedAtAdmission(first)?.architectures, ['amd64', 'arm64']);
  // The apiserver asks again though nothing of Berth's concern changed (another webhook's label).
  assert.deepEqual(await handle(request(first)), { allowed: true });
  // A sidecar injector adds an amd64-only container: the pod is placed on both images.
  const injected = {
    ...first,
    spec: { ...first.spec, containers: [...first.spec.containers, { name: 'proxy', image: 'proxy:1' }] },
  };
  const again = (await admitted(handle, injected)).out;
  assert.equal(again.spec.schedulingGates, undefined, 'not gated');
  assert.deepEqual(placedAtAdmission(again), { architectures: ['amd64'], images: ['web:1', 'proxy:1'] });
  const affinity = again.spec.affinity?.nodeAffinity;
  assert.deepEqual(affinity?.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms, [
    { matchExpressions: [zone, { key: ARCH_LABEL, operator: 'In', values: ['amd64'] }] },
  ]);
  // arm64 is preferred no more: no architecture in common with it.
  assert.equal(affinity?.preferredDuringSchedulingIgnoredDuringExecution, undefined);
  // An image rewritten to one Berth has not read: gated, the first placement taken off, for the
  // controller to place on what it reads.
  const rewritten = {
    ...first,
    spec: { ...first.spec, containers: [{ name: 'c', image: 'mirror.example/web:1' }] },
  };
  const gated = (await admitted(handle, rewritten)).out;
  assert.deepEqual(gated.spec.schedulingGates, [{ name: SCHEDULING_GATE }]);
  assert.equal(gated.metadata?.labels?.[STATE_LABEL], 'Gated');
  assert.equal(placedAtAdmission(gated), undefined);
  assert.deepEqual(
    gated.spec.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms,
    [{ matchExpressions: [zone] }],
  );
});

test("asked again in Taints mode: only Berth's tolerations change, the pod's own affinity stays; a gated pod is left to the controller", async () => {
  const cache = new Map([
    ['web:1', known('web:1', ['amd64', 'arm64'])],
    ['proxy:1', known('proxy:1', ['amd64'])],
  ]);
  const { policies: taints } = parsePolicies([
    policy('web', { podSelector: { matchLabels: { app: 'web' } }, mode: 'Taints' }),
  ]);
  const handle = podGateHandler({ ...deps, policies: () => taints, cached: (image) => cache.get(image) });
  // Its own arch requirement in one term of two: not exempt, and not Berth's.
  const own = { key: ARCH_LABEL, operator: 'In', values: ['amd64', 'arm64'] };
  const zone = { key: 'topology.kubernetes.io/zone', operator: 'In', values: ['a'] };
  const terms = [{ matchExpressions: [own] }, { matchExpressions: [zone] }];
  const p = newPod(
    { app: 'web' },
    {
      affinity: {
        nodeAffinity: { requiredDuringSchedulingIgnoredDuringExecution: { nodeSelectorTerms: terms } },
      },
    },
  );
  const first = (await admitted(handle, p)).out;
  assert.deepEqual(placedAtAdmission(first)?.architectures, ['amd64', 'arm64']);
  const injected = {
    ...first,
    spec: { ...first.spec, containers: [...first.spec.containers, { name: 'proxy', image: 'proxy:1' }] },
  };
  const again = (await admitted(handle, injected)).out;
  assert.deepEqual(
    again.spec.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms,
    terms,
  );
  assert.deepEqual(
    again.spec.tolerations?.map((t) => t.value),
    ['amd64'],
  );
  // Gated at the first call: nothing at the second, no read asked for.
  const hints: InspectHint[] = [];
  const asking = podGateHandler({ ...deps, inspect: (h) => hints.push(h), inspectWaitMs: 0 });
  const g = (await admitted(asking, newPod({ app: 'web' }))).out;
  assert.deepEqual(g.spec.schedulingGates, [{ name: SCHEDULING_GATE }]);
  const asked = hints.length;
  assert.deepEqual(await asking(request(g)), { allowed: true });
  assert.equal(hints.length, asked);
});

test('a namespace created a moment before its pod: the webhook waits for the cache to learn it, not guess', async () => {
  const { policies: byTeam } = parsePolicies([
    policy('team-a', {
      priority: 1,
      namespaceSelector: { matchLabels: { team: 'a' } },
      podSelector: { matchLabels: { app: 'web' } },
    }),
    policy('db', { podSelector: { matchLabels: { app: 'db' } } }),
  ]);
  // The cache learns the namespace 30 ms after the review arrives, as a watch event would bring it.
  const arrives = performance.now() + 30;
  const namespaceLabels = (ns: string) =>
    ns === 'fresh' && performance.now() >= arrives ? { team: 'a' } : undefined;
  const handle = podGateHandler({ ...deps, policies: () => byTeam, namespaceLabels, namespaceWaitMs: 1000 });
  const r = (await handle(request(newPod({ app: 'web' }), { namespace: 'fresh' }))) as AdmissionResult & {
    patch?: unknown[];
  };
  const out = applyJsonPatch(newPod({ app: 'web' }), r.patch as never) as ArchPod;
  assert.deepEqual(out.spec.schedulingGates, [{ name: SCHEDULING_GATE }], 'gated by team-a');
  assert.equal(out.metadata?.annotations?.['arch.berth.dev/policy'], 'team-a');

  // A namespace the cache never learns: answered once the wait is over, as no namespaceSelector's.
  const never = podGateHandler({
    ...deps,
    policies: () => byTeam,
    namespaceLabels: () => undefined,
    namespaceWaitMs: 40,
  });
  const started = performance.now();
  assert.deepEqual(await never(request(newPod({ app: 'web' }), { namespace: 'lost' })), { allowed: true });
  assert.ok(performance.now() - started >= 40, 'waited');
  // No wait where the namespace cannot change the answer: the only policies that could select the
  // pod have no namespaceSelector, or the namespace is known.
  const db = never(request(newPod({ app: 'db' }), { namespace: 'lost' }));
  assert.ok(!(db instanceof Promise), 'answered at once');
  assert.ok((db as AdmissionResult & { patch?: unknown[] }).patch?.length, 'gated by db');
  assert.ok(!(handle(request(newPod({ app: 'web' }), { namespace: 'fresh' })) instanceof Promise));
});

test('explain: exempt, not selected, gated, and placed pods say why', () => {
  const ctx = { berthNamespace: 'berth-system', servesWebhook: () => false };
  const base = newPod({ app: 'web' }) as unknown as ArchPod;
  base.metadata = { name: 'p', namespace: 'apps', labels: { app: 'web' }, resourceVersion: '1' };
  assert.match(
    explainArch({ ...base, spec: { ...base.spec, nodeName: 'n' } }, policies, {}, ctx).join('\n'),
    /never gated: .*nodeName/,
  );
  // Bound by the scheduler, an opted-out pod still says why it was never gated.
  assert.match(
    explainArch(
      {
        ...base,
        metadata: { ...base.metadata, annotations: { 'arch.berth.dev/skip': 'true' } },
        spec: { ...base.spec, nodeName: 'n' },
      },
      policies,
      {},
      ctx,
    ).join('\n'),
    /never gated: annotation arch\.berth\.dev\/skip=true\n?$/,
  );
  assert.match(
    explainArch({ ...base, metadata: { ...base.metadata, labels: {} } }, policies, {}, ctx).join('\n'),
    /no ArchPlacement selects/,
  );
  assert.match(
    explainArch(base, policies, {}, ctx).join('\n'),
    /not gated, though ArchPlacement web selects it/,
  );
  const gated = applyJsonPatch(base, podGateHandlerPatch(base)) as ArchPod;
  assert.match(
    explainArch(gated, policies, {}, ctx).join('\n'),
    /web \(mode NodeAffinity\): Gated[\s\S]*waiting for Berth/,
  );
  // Its state label taken off (Berth puts it back when it runs): still gated, and said so.
  const { [STATE_LABEL]: _label, ...labels } = gated.metadata!.labels!;
  const unlabelled = explainArch(
    { ...gated, metadata: { ...gated.metadata, labels } },
    policies,
    {},
    ctx,
  ).join('\n');
  assert.match(
    unlabelled,
    /web \(mode NodeAffinity\): Gated, its arch\.berth\.dev\/state label missing[\s\S]*waiting for Berth/,
  );
  assert.doesNotMatch(unlabelled, /not gated/);
  const placed = applyJsonPatch(
    gated,
    placePatch(
      gated,
      {
        kind: 'Placed',
        architectures: ['arm64'],
        inspections: [
          {
            image: 'web:1',
            reference: 'r/web:1',
            digest: 'sha256:ab',
            platforms: [{ os: 'linux', architecture: 'arm64' }],
            registry: 'r',
            cached: true,
          },
        ],
      },
      archPlacementSpec.parse({}),
    ),
  ) as ArchPod;
  const text = explainArch(placed, policies, {}, ctx).join('\n');
  assert.match(text, /every image supports: arm64/);
  assert.match(text, /web:1 @ sha256:ab: linux\/arm64/);
  assert.match(text, new RegExp(`${ARCH_LABEL} In \\[arm64\\]`));
});

function podGateHandlerPatch(p: ArchPod) {
  const r = podGateHandler(deps)(request(p, { namespace: 'apps' })) as { patch?: never };
  return r.patch!;
}

test('a pod naming a registry its policy does not list is gated, and nothing is read for it', async () => {
  const hints: InspectHint[] = [];
  const listed = parsePolicies([policy('web', { registries: ['ghcr.io'] })]).policies;
  const handle = podGateHandler({
    ...deps,
    policies: () => listed,
    // Known already: still not placed at admission, since the policy does not list its registry.
    cached: (image) => known(image, ['arm64']),
    inspect: (hint) => hints.push(hint),
  });
  const internal = await admitted(
    handle,
    newPod({ app: 'web' }, { containers: [{ name: 'c', image: '10.0.0.5:5000/x:1' }] }),
  );
  assert.equal(internal.gated, true);
  assert.deepEqual(hints, []);
  const ours = await admitted(
    handle,
    newPod({ app: 'web' }, { containers: [{ name: 'c', image: 'ghcr.io/a:1' }] }),
  );
  assert.equal(ours.gated, false);
});
