// `berth arch clean` (and uninstall): every pod that carries Berth's gate is released, whether or
// not it still has the state label the clean lists by.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { cleanArch } from '../../../src/arch/cli.ts';
import { UNLABELLED_UNBOUND } from '../../../src/arch/decide/patches.ts';
import { type ArchPod } from '../../../src/arch/decide/pods.ts';
import { POLICY_ANNOTATION, SCHEDULING_GATE, STATE_LABEL } from '../../../src/arch/types.ts';
import type { JsonPatchOp } from '../../../src/runtime/api/jsonpatch.ts';
import type { ResourceRef } from '../../../src/runtime/api/meta.ts';
import type { KubeClient } from '../../../src/runtime/client/client.ts';
import { applyJsonPatch } from '../../helpers/jsonpatch.ts';

const pod = (name: string, labels: Record<string, string>): ArchPod => ({
  metadata: { name, namespace: 'apps', labels, annotations: { [POLICY_ANNOTATION]: 'web' } },
  spec: { containers: [{ name: 'c', image: 'web:1' }], schedulingGates: [{ name: SCHEDULING_GATE }] },
});

test('clean releases a gated pod that lost its state label, as one that has it', async () => {
  const stored = new Map([
    ['held', pod('held', { [STATE_LABEL]: 'Gated' })],
    ['unlabelled', pod('unlabelled', { app: 'web' })],
  ]);
  const client = {
    list: (ref: ResourceRef, o: { query?: Record<string, string> } = {}) => {
      let items: ArchPod[] = [];
      if (ref.resource === 'pods') {
        const all = [...stored.values()];
        const has = (p: ArchPod) => p.metadata?.labels?.[STATE_LABEL] !== undefined;
        if (o.query?.['labelSelector'] === STATE_LABEL) items = all.filter(has);
        else if (o.query?.['fieldSelector'] === UNLABELLED_UNBOUND.fieldSelector) {
          assert.deepEqual(o.query, UNLABELLED_UNBOUND);
          items = all.filter((p) => !has(p));
        } else items = all;
      }
      return Promise.resolve({ metadata: {}, items: structuredClone(items) });
    },
    patch: (_ref: ResourceRef, name: string, ops: JsonPatchOp[]) => {
      stored.set(name, applyJsonPatch(stored.get(name), ops) as ArchPod);
      return Promise.resolve(stored.get(name));
    },
    get: (_ref: ResourceRef, name: string) => Promise.resolve(structuredClone(stored.get(name))),
  } as unknown as KubeClient;
  const said: string[] = [];
  await cleanArch(client, { say: (s) => said.push(s) });
  for (const name of ['held', 'unlabelled']) {
    assert.equal(stored.get(name)?.spec.schedulingGates, undefined, `${name} released`);
    assert.ok(said.includes(`pod apps/${name}: gate removed, released unplaced`), name);
  }
});
