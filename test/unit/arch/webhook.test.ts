import assert from 'node:assert/strict';
import { test } from 'node:test';
import { applyJsonPatch } from '../../helpers/jsonpatch.ts';
import { parsePolicies, placePatch, type ArchPod } from '../../../src/arch/decide.ts';
import { explainArch } from '../../../src/arch/explain.ts';
import { podGateHandler } from '../../../src/arch/webhook.ts';
import { ARCH_LABEL, SCHEDULING_GATE, STATE_LABEL, archPlacementSpec } from '../../../src/arch/types.ts';
import { rootLogger } from '../../../src/runtime/observability/log.ts';
import type { AdmissionRequest, AdmissionResult } from '../../../src/runtime/webhook/admission.ts';

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
