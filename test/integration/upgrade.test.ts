// test-driver: alone — it puts an earlier generation of Berth's CRDs in place of today's, which would
// break the files beside it (Berth's CRDs are today's again when it ends).
//
// Upgrading keeps what is stored: objects of every kind the CRDs of an earlier commit served
// (test/fixtures/upgrade/crds-72fda8b.yaml) are written under those CRDs, `berth install` applies
// today's, and every object reads back with every field it was written with, parses with today's
// types, and still takes a write (a label: an object valid when stored must not be stuck once a
// newer schema is in place). One stored object would be refused today (an AgentPlacement that
// selects every pod without acknowledging it): it stays readable and writable, and a change to its
// spec is refused with the CEL rule's message until it says acknowledgeAllPods.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { parseAllDocuments } from 'yaml';
import { AgentPlacement } from '../../src/agents/crd.ts';
import { capabilities } from '../../src/capabilities.ts';
import { installCrds } from '../../src/cli/install.ts';
import { NodeStartupGate } from '../../src/gates/crd.ts';
import { NodeLabelRule } from '../../src/labels/crd.ts';
import { hasCondition } from '../../src/runtime/api/conditions.ts';
import type { CustomResource } from '../../src/runtime/api/crd.ts';
import { crdName, Resources, type KubeObject } from '../../src/runtime/api/meta.ts';
import { ApiError } from '../../src/runtime/client/client.ts';
import { ensureBinaries } from '../../src/sandbox/build.ts';
import { packageRoot } from '../../src/sandbox/paths.ts';
import { runBerthCli } from '../helpers/berth.ts';
import {
  createNamespace,
  deleteCrds,
  deleteNamespace,
  kubectl,
  testSandbox,
  uniqueName,
} from '../helpers/cluster.ts';
import { waitFor } from '../helpers/wait.ts';

const sandbox = testSandbox();
const client = sandbox.client();
const id = uniqueName('upgrade');
const D = `${id}.example`;
const fixture = join(packageRoot(), 'test/fixtures/upgrade/crds-72fda8b.yaml');
let ns = '';

const crdNames = () => capabilities.flatMap((c) => c.kinds.map(crdName));
const established = (names: string[]) =>
  waitFor(`CRDs ${names.join(', ')} established`, async () => {
    for (const n of names)
      if (!hasCondition(await client.get(Resources.crds, n), 'Established')) return false;
    return true;
  });

/** Objects of every kind the earlier CRDs serve, written as their users wrote them then. */
const stored: { kind: CustomResource; object: KubeObject }[] = [];
const add = (kind: CustomResource, name: string, spec: Record<string, unknown>) =>
  stored.push({
    kind,
    object: { apiVersion: kind.apiVersion, kind: kind.kind, metadata: { name }, spec },
  });

before(async () => {
  const { kubectl: kubectlPath } = await ensureBinaries();
  // Objects stored under the earlier schema: today's CRDs go first (with any object of theirs).
  await deleteCrds(client, crdNames());
  kubectl(sandbox, kubectlPath, ['apply', '--server-side', '--field-manager=berth-install', '-f', fixture]);
  const earlier = parseAllDocuments(readFileSync(fixture, 'utf8')).map(
    (d) => (d.toJS() as KubeObject).metadata!.name!,
  );
  await established(earlier);
  ns = await createNamespace(client, id);

  add(NodeLabelRule, `${id}-gpu`, {
    match: {
      allOf: [{ field: 'architecture', operator: 'In', values: ['amd64'] }],
      anyOf: [
        { label: `${D}/pci-10de`, operator: 'In', values: ['true'] },
        { label: `${D}/gpu`, operator: 'Exists' },
      ],
    },
    labels: { [`${D}/gpu`]: 'true', [`${D}/product`]: '{{ label "nvidia.com/gpu.product" }}' },
    annotations: { [`${D}/matched-by`]: '{{ .match.key }}' },
    taints: [{ key: `${D}/gpu`, value: 'dedicated', effect: 'NoSchedule' }],
  });
  add(NodeStartupGate, `${id}-warmup`, {
    taint: {
      key: `startup-taint.cluster-autoscaler.kubernetes.io/${id}`,
      value: 'wait',
      effect: 'NoSchedule',
    },
    nodeSelector: { matchLabels: { [`${D}/pool`]: 'none' } },
    requirements: {
      pods: [
        { namespace: ns, daemonSet: 'warmup' },
        { namespace: ns, selector: { matchLabels: { app: 'prefetch' } }, readyAnnotation: `${D}/ready` },
      ],
      nodeConditions: [{ type: 'Ready', status: 'True' }],
    },
    minHoldSeconds: 10,
    timeout: { seconds: 600, outcome: 'Release' },
    mode: 'BootstrapOnly',
  });
  add(AgentPlacement, `${id}-atelet`, {
    namespaceSelector: { matchLabels: { team: id } },
    podSelector: { matchLabels: { app: 'ateom' } },
    owner: { uidLabel: `${D}/workerpool-uid`, apiVersion: 'v1', kind: 'ConfigMap' },
    nodeLabel: { key: `${D}/atelet`, value: 'true' },
    claimAnnotationPrefix: `${D}/claim.`,
    finalizer: { name: `${D}/release-node-claims` },
    waitForAgent: { port: 8085 },
  });
  // Valid then; today's CRD refuses it without acknowledgeAllPods.
  add(AgentPlacement, `${id}-every-pod`, {
    podSelector: {},
    owner: { controllerRef: true },
    nodeLabel: { key: `${D}/every`, value: 'true' },
    claimAnnotationPrefix: `${D}/every.`,
  });
  for (const { kind, object } of stored) await client.create(kind.ref, object);
});

after(async () => {
  for (const { kind, object } of stored)
    await client.delete(kind.ref, object.metadata!.name!).catch(() => {});
  await deleteNamespace(client, ns);
  // The files after this one find today's CRDs whatever happened here.
  await installCrds(client);
  client.close();
});

describe('upgrading the CRDs', () => {
  test('objects stored under the CRDs of 72fda8b read back whole after berth install, and take writes', async () => {
    const install = runBerthCli(['install', `--kubeconfig=${sandbox.kubeconfigPath}`]);
    assert.equal(install.status, 0, install.stderr);
    await established(crdNames());

    for (const { kind, object } of stored) {
      const name = object.metadata!.name!;
      const read = await client.get(kind.ref, name);
      assert.partialDeepStrictEqual(read, object, `${kind.kind} ${name} reads back with every field`);
      const parsed = kind.parse(read);
      assert.ok(parsed.success, `${kind.kind} ${name}: ${parsed.success ? '' : parsed.error}`);
      // A write that leaves the spec alone: validation ratchets what was valid when stored.
      const labelled = await client.patch(kind.ref, name, { metadata: { labels: { upgraded: 'true' } } });
      assert.equal(labelled.metadata?.labels?.['upgraded'], 'true');
      // Listed too, as every informer of Berth's reads them.
      const listed = (await client.list(kind.ref)).items.find((o) => o.metadata?.name === name);
      assert.partialDeepStrictEqual(listed, object);
    }

    // Today's rule holds for a change of the stored spec that does not acknowledge it.
    const every = `${id}-every-pod`;
    const refused = await client
      .patch(AgentPlacement.ref, every, { spec: { claimAnnotationPrefix: `${D}/every-pod.` } })
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    assert.ok(refused instanceof ApiError && refused.status === 422, String(refused));
    assert.match(refused.message, /acknowledgeAllPods/);
    await client.patch(AgentPlacement.ref, every, {
      spec: { claimAnnotationPrefix: `${D}/every-pod.`, acknowledgeAllPods: true },
    });

    // Every kind is served now, those 72fda8b did not have included.
    for (const c of capabilities) for (const ref of c.kinds) await client.list(ref);
  });
});
