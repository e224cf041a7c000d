// Derived node labels against the real apiserver. Each test runs its own labels controller (one at a
// time: they share Berth's field manager) and uses its own node names and label keys.
import { PolicyKit } from '../../src/policy/kit.ts';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, test } from 'node:test';
import type { Plan } from '../../src/plan.ts';
import { installCrds } from '../../src/cli/install.ts';
import { setupLabels } from '../../src/labels/setup.ts';
import { FIELD_MANAGER } from '../../src/labels/types.ts';
import { NodeLabelRule } from '../../src/labels/crd.ts';
import { NodeStartupGate } from '../../src/gates/crd.ts';
import { findCondition, hasCondition, type Condition } from '../../src/runtime/api/conditions.ts';
import { ApiError, KubeClient, type RequestOptions } from '../../src/runtime/client/client.ts';
import { Manager } from '../../src/runtime/manager/manager.ts';
import { Resources, type KubeObject } from '../../src/runtime/api/meta.ts';
import {
  addNodes,
  createNamespace,
  deleteNamespace,
  deleteNodes,
  podManifest,
  refuseNodeLabel,
  testSandbox,
  uniqueName,
} from '../helpers/cluster.ts';
import { berthClient } from '../helpers/berth.ts';
import { holdsFor, waitFor } from '../helpers/wait.ts';

const sandbox = testSandbox();
const client = sandbox.client();
const created: string[] = [];
const rules: string[] = [];

before(async () => {
  await installCrds(client);
});

after(async () => {
  await Promise.all(rules.map((r) => client.delete(NodeLabelRule.ref, r).catch(() => {})));
  await deleteNodes(client, created);
  client.close();
});

/** Runs a labels controller for the duration of fn, in a manager of its own. */
async function withController<T>(
  opts: { labelDir?: string; client?: KubeClient },
  fn: (c: ReturnType<typeof setupLabels>) => Promise<T>,
): Promise<T> {
  const manager = new Manager({
    client: opts.client ?? (await berthClient(sandbox)),
    metricsBindAddress: '0',
    healthBindAddress: '0',
  });
  const controller = setupLabels(new PolicyKit(manager), {
    ...(opts.labelDir ? { labelDir: opts.labelDir } : {}),
    workers: 8,
  });
  await manager.start();
  try {
    await manager.waitForCacheSync();
    return await fn(controller);
  } finally {
    await manager.stop();
  }
}

async function nodes(prefix: string, count: number, labels: Record<string, string> = {}, arch = 'amd64') {
  const names = await addNodes(client, { prefix, count, labels, arch });
  created.push(...names);
  return names;
}

/** `berth rules test` with `args`, against the sandbox. */
const rulesTestCli = (...args: string[]) =>
  promisify(execFile)(process.execPath, [
    'src/cli/main.ts',
    'rules',
    'test',
    ...args,
    '--kubeconfig',
    sandbox.kubeconfigPath,
  ]);

/** `berth rules test` of one NodeLabelRule, given as a file, with `args`; the file goes afterwards. */
async function rulesTest(name: string, spec: Record<string, unknown>, ...args: string[]) {
  const dir = mkdtempSync(join(tmpdir(), 'berth-rules-test-'));
  const file = join(dir, `${name}.yaml`);
  writeFileSync(
    file,
    JSON.stringify({ apiVersion: NodeLabelRule.apiVersion, kind: 'NodeLabelRule', metadata: { name }, spec }),
  );
  try {
    return await rulesTestCli(file, ...args);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const labelsOf = async (name: string) => (await client.get(Resources.nodes, name)).metadata?.labels ?? {};

async function applyRule(name: string, spec: unknown): Promise<void> {
  rules.push(name);
  await client.apply(
    NodeLabelRule.ref,
    { apiVersion: NodeLabelRule.apiVersion, kind: 'NodeLabelRule', metadata: { name }, spec },
    { fieldManager: 'test-author', force: true },
  );
}

/** A client that remembers every write it sends. */
class RecordingClient extends KubeClient {
  readonly writes: string[] = [];
  override request<T = unknown>(method: string, path: string, opts?: RequestOptions): Promise<T> {
    if (method !== 'GET') this.writes.push(`${method} ${path}`);
    return super.request<T>(method, path, opts);
  }
}

const ruleStatus = async (name: string) =>
  (await client.get<KubeObject & { status?: Record<string, unknown> }>(NodeLabelRule.ref, name)).status;

async function eventsFor(name: string): Promise<{ reason: string; note: string; type: string }[]> {
  const list = await client.list<
    KubeObject & { reason: string; note: string; type: string; regarding: { name: string } }
  >(Resources.events, {
    namespace: 'default',
  });
  return list.items.filter((e) => e.regarding.name === name);
}

describe('derived node labels', () => {
  test('the seed example: rule files label every EdgeTPU variant, and edits reach nodes within a second', async () => {
    const p = uniqueName('tpu');
    const dir = mkdtempSync(join(tmpdir(), 'berth-labels-'));
    const ns = `${p}.example.com`;
    mkdirSync(join(dir, ns));
    writeFileSync(
      join(dir, ns, 'edgetpu'),
      '# EdgeTPU variants\nkkohtaka.org/edgetpu\nfeature.node.kubernetes.io/usb-fe_1a6e_089a.present\nfeature.node.kubernetes.io/pci-0880_1ac1.present\nbeta.devicetree.org/fsl-imx8mq-phanbell\n',
    );
    const plugin = await nodes(`${p}-plugin`, 1, { 'kkohtaka.org/edgetpu': '' });
    const usb = await nodes(`${p}-usb`, 1, { 'feature.node.kubernetes.io/usb-fe_1a6e_089a.present': 'true' });
    const pci = await nodes(`${p}-pci`, 1, { 'feature.node.kubernetes.io/pci-0880_1ac1.present': 'true' });
    const dt = await nodes(`${p}-dt`, 1, { 'beta.devicetree.org/fsl-imx8mq-phanbell': '1' }, 'arm64');
    const plain = await nodes(`${p}-plain`, 1, { [`${p}.example.com/gpu`]: 'yes' });
    const key = `${ns}/edgetpu`;
    try {
      await withController({ labelDir: dir }, async () => {
        const all = [...plugin, ...usb, ...pci, ...dt];
        await waitFor(
          'every EdgeTPU node labelled',
          async () => (await Promise.all(all.map(labelsOf))).every((l) => l[key] === 'true'),
          {
            observe: () => Promise.all(all.map(labelsOf)),
          },
        );
        assert.equal((await labelsOf(plain[0]!))[key], undefined);

        // Edit the file: the PCI variant no longer counts.
        let t = Date.now();
        writeFileSync(
          join(dir, ns, 'edgetpu'),
          'kkohtaka.org/edgetpu\nfeature.node.kubernetes.io/usb-fe_1a6e_089a.present\nbeta.devicetree.org/fsl-imx8mq-phanbell\n',
        );
        await waitFor('the PCI node unlabelled', async () => (await labelsOf(pci[0]!))[key] === undefined, {
          intervalMs: 20,
        });
        const editMs = Date.now() - t;
        assert.equal((await labelsOf(usb[0]!))[key], 'true', 'the other variants keep the label');

        // A new namespace directory with a new rule file.
        t = Date.now();
        mkdirSync(join(dir, `${p}.gpu.example.com`));
        writeFileSync(join(dir, `${p}.gpu.example.com`, 'present'), `${p}.example.com/gpu\n`);
        await waitFor(
          'the GPU node labelled',
          async () => (await labelsOf(plain[0]!))[`${p}.gpu.example.com/present`] === 'true',
          { intervalMs: 20 },
        );
        const addMs = Date.now() - t;

        // Remove the EdgeTPU file: every label it backed goes, and only those.
        t = Date.now();
        rmSync(join(dir, ns, 'edgetpu'));
        await waitFor(
          'EdgeTPU labels cleared',
          async () => (await Promise.all(all.map(labelsOf))).every((l) => l[key] === undefined),
          { intervalMs: 20 },
        );
        const removeMs = Date.now() - t;
        assert.equal(
          (await labelsOf(usb[0]!))['feature.node.kubernetes.io/usb-fe_1a6e_089a.present'],
          'true',
        );
        // Within a second from the file system to the node, each time (generous for a loaded machine would hide a polling bug).
        for (const [what, ms] of [
          ['edit', editMs],
          ['add', addMs],
          ['remove', removeMs],
        ] as const) {
          assert.ok(ms < 1000, `${what} took ${ms} ms to reach the node`);
        }
      });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('a bad rule file gets an error naming the file and line, and the other rules keep working', async () => {
    const p = uniqueName('badfile');
    const dir = mkdtempSync(join(tmpdir(), 'berth-labels-'));
    mkdirSync(join(dir, `${p}.example.com`));
    writeFileSync(join(dir, `${p}.example.com`, 'good'), `${p}.example.com/src\n`);
    writeFileSync(join(dir, `${p}.example.com`, 'bad'), `${p}.example.com/src\nNot A Key!\n`);
    writeFileSync(join(dir, `${p}.example.com`, 'binary'), Buffer.from([0x00, 0xff, 0x10]));
    const [n] = await nodes(p, 1, { [`${p}.example.com/src`]: '1' });
    try {
      await withController({ labelDir: dir }, async (c) => {
        await waitFor(
          'the good rule applied',
          async () => (await labelsOf(n!))[`${p}.example.com/good`] === 'true',
        );
        const errors = c.ruleFileErrors;
        assert.ok(
          errors.some(
            (e) => e.file.endsWith('/bad') && e.line === 2 && /not a valid label key/i.test(e.message),
          ),
          JSON.stringify(errors),
        );
        assert.ok(
          errors.some((e) => e.file.endsWith('/binary')),
          JSON.stringify(errors),
        );
        const labels = await labelsOf(n!);
        assert.equal(labels[`${p}.example.com/bad`], undefined);
        assert.equal(labels[`${p}.example.com/binary`], undefined);
      });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('NodeLabelRule: labels, templates, taints and annotations follow the rule as it changes and are removed with it', async () => {
    const p = uniqueName('nlr');
    // Every node of this test carries `mine`, so that the rule's counts cannot include other nodes.
    const mine = { [`${p}.example.com/mine`]: '' };
    const [gpu] = await nodes(`${p}-gpu`, 1, {
      ...mine,
      [`${p}.example.com/pci-10de`]: 'true',
      [`${p}.example.com/product`]: 'T4',
    });
    const [arm] = await nodes(`${p}-arm`, 1, mine, 'arm64');
    const [other] = await nodes(`${p}-other`, 1, mine);
    await withController({}, async () => {
      await applyRule(p, {
        match: {
          allOf: [{ label: `${p}.example.com/mine`, operator: 'Exists' }],
          anyOf: [
            { label: `${p}.example.com/pci-10de`, operator: 'In', values: ['true'] },
            { field: 'architecture', operator: 'In', values: ['arm64'] },
          ],
        },
        labels: { [`${p}.example.com/accel`]: 'true', [`${p}.example.com/why`]: '{{ .match.value }}' },
        annotations: { [`${p}.example.com/note`]: 'arch {{ field "architecture" }}' },
        taints: [{ key: `${p}.example.com/dedicated`, value: 'accel', effect: 'NoSchedule' }],
      });
      // Labels and annotations go by server-side apply, taints by a patch of their own: wait for both.
      await waitFor(
        'both nodes labelled, the GPU node tainted',
        async () =>
          (await labelsOf(gpu!))[`${p}.example.com/accel`] === 'true' &&
          (await labelsOf(arm!))[`${p}.example.com/accel`] === 'true' &&
          (
            ((await client.get(Resources.nodes, gpu!))['spec'] as { taints?: { key: string }[] }).taints ?? []
          ).some((t) => t.key === `${p}.example.com/dedicated`),
      );
      const g = await client.get(Resources.nodes, gpu!);
      assert.equal(g.metadata?.labels?.[`${p}.example.com/why`], 'true');
      assert.equal(g.metadata?.annotations?.[`${p}.example.com/note`], 'arch amd64');
      assert.deepEqual(
        ((g['spec'] as { taints?: { key: string }[] }).taints ?? []).map((t) => t.key),
        [`${p}.example.com/dedicated`],
      );
      assert.equal((await labelsOf(arm!))[`${p}.example.com/why`], 'arm64');
      assert.equal((await labelsOf(other!))[`${p}.example.com/accel`], undefined);
      await waitFor(
        'status: 2 matched, Ready',
        async () => {
          const s = await ruleStatus(p);
          return s?.['matchedNodes'] === 2 && s['appliedNodes'] === 2 && hasCondition({ status: s }, 'Ready')
            ? s
            : undefined;
        },
        { observe: () => ruleStatus(p) },
      );

      // Narrow the rule: the arm node loses exactly what the rule gave it.
      await applyRule(p, {
        match: { anyOf: [{ label: `${p}.example.com/pci-10de`, operator: 'In', values: ['true'] }] },
        labels: { [`${p}.example.com/accel`]: 'true' },
      });
      await waitFor('arm node unlabelled, gpu node reduced', async () => {
        const a = await client.get(Resources.nodes, arm!);
        const gl = await client.get(Resources.nodes, gpu!);
        return (
          a.metadata?.labels?.[`${p}.example.com/accel`] === undefined &&
          a.metadata?.annotations?.[`${p}.example.com/note`] === undefined &&
          gl.metadata?.labels?.[`${p}.example.com/why`] === undefined &&
          ((gl['spec'] as { taints?: unknown[] }).taints ?? []).length === 0 &&
          gl.metadata?.labels?.[`${p}.example.com/accel`] === 'true'
        );
      });
      assert.equal((await labelsOf(arm!))['kubernetes.io/arch'], 'arm64', 'labels Berth did not set stay');

      await client.delete(NodeLabelRule.ref, p);
      await waitFor(
        'labels removed with the rule',
        async () => (await labelsOf(gpu!))[`${p}.example.com/accel`] === undefined,
      );
      assert.equal((await labelsOf(gpu!))[`${p}.example.com/product`], 'T4');
    });
  });

  test('foreign labels are never removed or overwritten; a conflict is reported instead', async () => {
    const p = uniqueName('foreign');
    const key = `${p}.example.com/tier`;
    const [taken, shared, free] = await nodes(p, 3, { [`${p}.example.com/src`]: '1' });
    // Another manager owns the key with another value on one node, the same value on another.
    await client.patch(
      Resources.nodes,
      taken!,
      { metadata: { labels: { [key]: 'bronze' } } },
      { fieldManager: 'kubectl-label' },
    );
    await client.patch(
      Resources.nodes,
      shared!,
      { metadata: { labels: { [key]: 'gold', [`${p}.example.com/mine`]: 'keep' } } },
      { fieldManager: 'kubectl-label' },
    );
    await withController({}, async () => {
      await applyRule(p, {
        match: { allOf: [{ label: `${p}.example.com/src`, operator: 'Exists' }] },
        labels: { [key]: 'gold' },
      });
      await waitFor('the free node labelled', async () => (await labelsOf(free!))[key] === 'gold');
      await holdsFor('the foreign value stays', async () => (await labelsOf(taken!))[key] === 'bronze', 1500);
      const status = await waitFor('Conflicting=True', async () => {
        const s = await ruleStatus(p);
        return hasCondition({ status: s }, 'Conflicting') ? s : undefined;
      });
      assert.match(JSON.stringify(status), /another field manager/);
      await waitFor('a Warning event on the rule', async () =>
        (await eventsFor(p)).some((e) => e.type === 'Warning' && e.reason === 'Conflict'),
      );

      // Removing the rule removes its label only where Berth alone owned it.
      await client.delete(NodeLabelRule.ref, p);
      await waitFor(
        'label removed from the free node',
        async () => (await labelsOf(free!))[key] === undefined,
      );
      await holdsFor(
        'shared and foreign labels stay',
        async () => {
          const s = await labelsOf(shared!);
          return (
            s[key] === 'gold' &&
            s[`${p}.example.com/mine`] === 'keep' &&
            (await labelsOf(taken!))[key] === 'bronze'
          );
        },
        1000,
      );
    });
  });

  test('two rules writing one key with different values are both Conflicting, with a stable winner', async () => {
    const p = uniqueName('conflict');
    const key = `${p}.example.com/zone`;
    const [n] = await nodes(p, 1, { [`${p}.example.com/src`]: '1' });
    await withController({}, async () => {
      await applyRule(`${p}-b`, {
        match: { allOf: [{ label: `${p}.example.com/src`, operator: 'Exists' }] },
        labels: { [key]: 'b' },
      });
      await applyRule(`${p}-a`, {
        match: { allOf: [{ label: `${p}.example.com/src`, operator: 'Exists' }] },
        labels: { [key]: 'a' },
      });
      await waitFor('both Conflicting', async () => {
        const [a, b] = await Promise.all([ruleStatus(`${p}-a`), ruleStatus(`${p}-b`)]);
        return hasCondition({ status: a }, 'Conflicting') && hasCondition({ status: b }, 'Conflicting');
      });
      await holdsFor(
        'the first rule by name wins and stays',
        async () => (await labelsOf(n!))[key] === 'a',
        1500,
      );
      for (const r of [`${p}-a`, `${p}-b`]) {
        await waitFor(`a Warning event on ${r}`, async () =>
          (await eventsFor(r)).some((e) => e.type === 'Warning' && e.reason === 'Conflict'),
        );
      }
    });
  });

  test('invalid rules: rejected by the schema, or marked Invalid with a Warning event', async () => {
    const p = uniqueName('invalid');
    const bad = (spec: unknown) =>
      client.create(NodeLabelRule.ref, {
        apiVersion: NodeLabelRule.apiVersion,
        kind: 'NodeLabelRule',
        metadata: { name: uniqueName(p) },
        spec,
      });
    for (const [spec, pattern] of [
      [
        { match: { anyOf: [{ label: 'a', operator: 'Near' }] }, labels: { x: 'y' } },
        /Unsupported value: "Near"/,
      ],
      [
        { match: { anyOf: [{ label: 'a', operator: 'Exists', values: ['v'] }] }, labels: { x: 'y' } },
        /take no values/,
      ],
      [
        { match: { anyOf: [{ label: 'a', field: 'name', operator: 'Exists' }] }, labels: { x: 'y' } },
        /exactly one of label/,
      ],
      [{ match: {}, labels: { x: 'y' } }, /at least one term/],
      [
        {
          match: { anyOf: [{ label: 'a', operator: 'Exists' }] },
          taints: [{ key: 'example.com/drain', effect: 'NoExecute' }],
        },
        /set acknowledgeNoExecute: true/,
      ],
    ] as const) {
      await assert.rejects(
        bad(spec),
        (e: unknown) => e instanceof ApiError && e.status === 422 && pattern.test(e.message),
      );
    }
    await withController({}, async () => {
      await applyRule(p, {
        match: { anyOf: [{ label: 'a', operator: 'InRegexp', values: ['(unclosed'] }] },
        labels: { 'kubernetes.io/hostname': 'x' },
      });
      const s = await waitFor('Invalid=True', async () => {
        const st = await ruleStatus(p);
        return hasCondition({ status: st }, 'Invalid') ? st : undefined;
      });
      assert.match(JSON.stringify(s), /bad regular expression/);
      assert.match(JSON.stringify(s), /reserved for Kubernetes/);
      assert.ok(hasCondition({ status: s }, 'Ready', 'False'));
      await waitFor('a Warning event', async () =>
        (await eventsFor(p)).some((e) => e.type === 'Warning' && e.reason === 'InvalidRule'),
      );
    });
  });

  test('outputs tell the truth: a missing template input sets nothing, an invalid rendering is reported', async () => {
    const p = uniqueName('truth');
    const src = `${p}.example.com/src`;
    const [full, bare, multiline] = await nodes(p, 3, { [src]: '1' });
    await client.patch(
      Resources.nodes,
      full!,
      {
        metadata: {
          labels: { [`${p}.example.com/zone`]: 'z1' },
          annotations: { [`${p}.example.com/note`]: 'one line' },
        },
      },
      { fieldManager: 'test-admin' },
    );
    await client.patch(
      Resources.nodes,
      multiline!,
      {
        metadata: {
          labels: { [`${p}.example.com/zone`]: 'z2' },
          annotations: { [`${p}.example.com/note`]: 'line one\nline two' },
        },
      },
      { fieldManager: 'test-admin' },
    );
    const zone = `${p}.example.com/zone-copy`;
    const note = `${p}.example.com/note-copy`;
    await withController({}, async () => {
      await applyRule(p, {
        match: { allOf: [{ label: src, operator: 'Exists' }] },
        labels: { [zone]: `{{ label "${p}.example.com/zone" }}` },
        annotations: { [note]: `{{ annotation "${p}.example.com/note" }}` },
      });
      await waitFor('the full node carries both copies', async () => {
        const n = await client.get(Resources.nodes, full!);
        return n.metadata?.labels?.[zone] === 'z1' && n.metadata?.annotations?.[note] === 'one line';
      });
      await waitFor('the multi-line note is not copied; its zone is', async () => {
        const n = await client.get(Resources.nodes, multiline!);
        return n.metadata?.labels?.[zone] === 'z2' && !(note in (n.metadata?.annotations ?? {}));
      });
      // A missing input sets nothing: not an empty label (the probe/missing="").
      const b = await client.get(Resources.nodes, bare!);
      assert.equal(b.metadata?.labels?.[zone], undefined);
      assert.equal(b.metadata?.annotations?.[note], undefined);

      const s = await waitFor(
        'Ready=False, InvalidOutput, naming the node and the value',
        async () => {
          const st = await ruleStatus(p);
          const ready = (
            st?.['conditions'] as { type: string; reason: string; message: string }[] | undefined
          )?.find((c) => c.type === 'Ready');
          return ready?.reason === 'InvalidOutput' ? ready : undefined;
        },
        { observe: () => ruleStatus(p) },
      );
      assert.match(
        s.message,
        new RegExp(
          `node ${multiline}: annotation "${note}": rendered "line one\\\\nline two": must not contain control characters`,
        ),
      );
      await waitFor('an InvalidOutput Warning event', async () =>
        (await eventsFor(p)).some((e) => e.type === 'Warning' && e.reason === 'InvalidOutput'),
      );
      // Retried: a CRD another test file re-applies can answer 429 for a moment.
      const explain = await waitFor('berth explain node', () =>
        promisify(execFile)(process.execPath, [
          'src/cli/main.ts',
          'explain',
          'node',
          bare!,
          '--kubeconfig',
          sandbox.kubeconfigPath,
        ]),
      );
      assert.match(
        explain.stdout,
        new RegExp(
          `label "${zone}": not set: this node has no input for \\{\\{ label "${p}.example.com/zone" }}`,
        ),
      );

      // A single-line note is copied and the rule becomes Ready; its message still counts the bare node.
      await client.patch(
        Resources.nodes,
        multiline!,
        { metadata: { annotations: { [`${p}.example.com/note`]: 'fixed' } } },
        { fieldManager: 'test-admin' },
      );
      await waitFor('Ready once every rendering is valid', async () =>
        hasCondition({ status: await ruleStatus(p) }, 'Ready'),
      );
      const ready = ((await ruleStatus(p))?.['conditions'] as { type: string; message: string }[]).find(
        (c) => c.type === 'Ready',
      );
      assert.match(ready!.message, /on 1 of them an output reads an input the node lacks and is not set/);
    });
  });

  test('berth rules test counts the pods a NoExecute taint would evict, and writes nothing', async () => {
    const p = uniqueName('evict');
    const ns = await createNamespace(client, p);
    const [n] = await nodes(p, 1, { [`${p}.example.com/drain`]: 'yes' });
    const pod = (name: string, tolerations?: unknown[]) =>
      client.create(
        Resources.pods,
        podManifest({ name, namespace: ns, nodeName: n!, ...(tolerations ? { tolerations } : {}) }),
      );
    await pod('plain');
    await pod('tolerant', [{ key: `${p}.example.com/drain`, operator: 'Exists', effect: 'NoExecute' }]);
    const run = (...args: string[]) =>
      rulesTest(
        p,
        {
          match: { allOf: [{ label: `${p}.example.com/drain`, operator: 'Exists' }] },
          taints: [{ key: `${p}.example.com/drain`, effect: 'NoExecute' }],
          acknowledgeNoExecute: true,
        },
        ...args,
      );
    try {
      // A deprecated alias of berth plan: the plan, and a line on stderr that says so.
      const json = JSON.parse((await run('-o', 'json')).stdout) as Plan;
      assert.deepEqual(
        json.effects.filter((e) => e.kind === 'Pod'),
        [
          {
            kind: 'Pod',
            name: `${ns}/plain`,
            op: '!',
            what: `evicted by taint ${p}.example.com/drain:NoExecute`,
            by: `node ${n}`,
          },
        ],
      );
      assert.deepEqual(json.evictions, { namespaces: { [ns]: 1 }, budgets: {} });
      const { stdout, stderr } = await run();
      assert.match(stdout, new RegExp(`warning: this change would evict 1 pod\\(s\\): ${ns} 1\\n`));
      assert.match(stderr, /^berth: deprecated: use berth plan -f /);
      const taints = ((await client.get(Resources.nodes, n!))['spec'] as { taints?: unknown[] }).taints ?? [];
      assert.deepEqual(taints, [], 'a dry run writes nothing');
    } finally {
      await deleteNamespace(client, ns);
    }
  });

  test('berth rules test refuses rule files and names of current rules together: they ask different questions', async () => {
    const p = uniqueName('mixed');
    const spec = {
      match: { allOf: [{ label: `${p}.example.com/in`, operator: 'Exists' }] },
      labels: { [`${p}.example.com/out`]: 'yes' },
    };
    await applyRule(p, spec);
    await assert.rejects(rulesTest(`${p}-new`, spec, p), (e: Error & { code?: number; stderr?: string }) => {
      assert.equal(e.code, 1);
      assert.match(e.stderr ?? '', /berth: give files to plan, or names of existing objects, not both/);
      return true;
    });
  });

  test('berth rules test of a fix for a broken rule file: no change where Berth holds its label, a gain where it was never set', async () => {
    const p = uniqueName('heldfix');
    const ns = `${p}.example.com`;
    const dir = mkdtempSync(join(tmpdir(), 'berth-labels-'));
    const fixes = mkdtempSync(join(tmpdir(), 'berth-fixes-'));
    mkdirSync(join(dir, ns));
    mkdirSync(join(fixes, ns));
    writeFileSync(join(dir, ns, 'out'), `${ns}/src\n`);
    const [labelled] = await nodes(p, 1, { [`${ns}/src`]: '1' });
    try {
      await withController({ labelDir: dir }, async (c) => {
        await waitFor('the label set', async () => (await labelsOf(labelled!))[`${ns}/out`] === 'true');
        // The file breaks: Berth holds the label it set. A node joining now does not get it.
        writeFileSync(join(dir, ns, 'out'), `${ns}/src\nNot A Key!\n`);
        await waitFor('the broken file seen', () =>
          c.ruleFileErrors.some((e) => e.file.endsWith(`${ns}/out`)),
        );
        await holdsFor(
          'the label held',
          async () => (await labelsOf(labelled!))[`${ns}/out`] === 'true',
          1000,
        );
      });
      const [joined] = await nodes(`${p}-late`, 1, { [`${ns}/src`]: '1' });
      assert.equal((await labelsOf(labelled!))[`${ns}/out`], 'true', 'held');
      // The fix, also reading a second source label.
      writeFileSync(join(fixes, ns, 'out'), `${ns}/src\n${ns}/other\n`);
      const { stdout, stderr } = await rulesTestCli(join(fixes, ns, 'out'), '--label-dir', dir, '-o', 'json');
      const fixed = JSON.parse(stdout) as Plan;
      assert.deepEqual(
        fixed.effects.filter((e) => e.name.startsWith(p)),
        [{ kind: 'Node', name: joined, op: '+', what: `label ${ns}/out=true`, by: `file:${ns}/out` }],
      );
      assert.match(stderr, /^berth: deprecated: use berth plan --rule-file /);
      assert.match(
        fixed.warnings.join('\n'),
        /current rule skipped: .*\/out:2: "Not A Key!" is not a valid label key/,
      );
      // Without the fix, the held label stays: testing another file changes nothing on the held node.
      writeFileSync(join(fixes, ns, 'more'), `${ns}/src\n`);
      const other = JSON.parse(
        (await rulesTestCli(join(fixes, ns, 'more'), '--label-dir', dir, '-o', 'json')).stdout,
      ) as Plan;
      assert.deepEqual(
        other.effects
          .filter((e) => e.name.startsWith(p))
          .map((e) => `${e.name} ${e.op} ${e.what}`)
          .sort(),
        [`${labelled} + label ${ns}/more=true`, `${joined} + label ${ns}/more=true`].sort(),
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
      rmSync(fixes, { recursive: true, force: true });
    }
  });

  test("berth rules test refuses, as Berth would, a rule that writes a gate's taint, naming the gate", async () => {
    const p = uniqueName('owned');
    const gate = `${p}-warm`;
    // A gate whose taint the rule would write; it selects no node.
    await client.create(NodeStartupGate.ref, {
      apiVersion: NodeStartupGate.apiVersion,
      kind: NodeStartupGate.kind,
      metadata: { name: gate },
      spec: {
        taint: { key: `${p}.example.com/warming`, effect: 'NoSchedule' },
        nodeSelector: { matchLabels: { [`${p}.example.com/none`]: 'x' } },
        requirements: { nodeConditions: [{ type: 'Ready' }] },
      },
    });
    try {
      const run = rulesTest(p, {
        match: { allOf: [{ label: 'kubernetes.io/hostname', operator: 'Exists' }] },
        taints: [{ key: `${p}.example.com/warming`, effect: 'NoSchedule' }],
      });
      await assert.rejects(run, (e: { code?: number; stderr?: string; stdout?: string }) => {
        assert.equal(e.code, 1);
        assert.match(
          e.stdout ?? '',
          new RegExp(
            `error: NodeLabelRule ${p} would be Invalid and apply nothing: taint ${p}.example.com/warming is owned by NodeStartupGate ${gate}`,
          ),
        );
        assert.match(e.stdout ?? '', /^no change\n/, 'a rule Berth would refuse changes nothing');
        return true;
      });
    } finally {
      await client.delete(NodeStartupGate.ref, gate).catch(() => {});
    }
  });

  test('a node Berth may not write: the rule says WriteFailed and why, a Warning on the node, status written after a restart; applied once allowed', async () => {
    const id = uniqueName('wf');
    const input = `${id}.example.com/in`;
    const out = `${id}.example.com/out`;
    const [fine, refused] = (await nodes(id, 2, { [input]: 'true' })) as [string, string];
    // An admission policy refusing the derived label on one node (as one refusing node writes would).
    const allow = await refuseNodeLabel(client, id, refused, out, 'refused by the test');
    const ready = async () => findCondition((await ruleStatus(id))?.['conditions'] as Condition[], 'Ready');
    const failed = (generation: number) => async () => {
      const r = await ready();
      return (
        r?.status === 'False' &&
        r.reason === 'WriteFailed' &&
        r.observedGeneration === generation &&
        r.message.includes(`node ${refused} could not be written`) &&
        r.message.includes('refused by the test')
      );
    };
    const spec = (extra: Record<string, unknown> = {}) => ({
      match: { allOf: [{ label: input, operator: 'Exists' }] },
      labels: { [out]: 'true' },
      ...extra,
    });
    try {
      await withController({}, async () => {
        await applyRule(id, spec());
        await waitFor('Ready=False WriteFailed, naming the node and the refusal', failed(1), {
          observe: ready,
        });
        assert.equal((await labelsOf(fine))[out], 'true', 'the other node is labelled');
        await waitFor('a Warning WriteFailed on the node', async () =>
          (await eventsFor(refused)).some((e) => e.type === 'Warning' && e.reason === 'WriteFailed'),
        );
      });
      // Restarted (a new leader): the node still refused, its standing counts, so status is written.
      await withController({}, async () => {
        await applyRule(id, spec({ annotations: { [`${id}.example.com/note`]: 'v2' } }));
        await waitFor("the new generation's status, WriteFailed", failed(2), { observe: ready });
      });
    } finally {
      await allow();
    }
    await withController({}, async () => {
      await waitFor('applied once allowed', async () => (await labelsOf(refused))[out] === 'true', {
        timeoutMs: 60_000,
      });
      await waitFor('Ready', async () => (await ready())?.status === 'True', { observe: ready });
    });
  });

  test('a restart removes and re-adds nothing: zero node writes, counted through a watch', async () => {
    const p = uniqueName('restart');
    const names = await nodes(p, 20, { [`${p}.example.com/src`]: '1' });
    await applyRule(p, {
      match: { allOf: [{ label: `${p}.example.com/src`, operator: 'Exists' }] },
      labels: { [`${p}.example.com/derived`]: 'true' },
    });
    await withController({}, async () => {
      await waitFor('20 nodes labelled', async () =>
        (await Promise.all(names.map(labelsOf))).every((l) => l[`${p}.example.com/derived`] === 'true'),
      );
      await waitFor('the status settled', async () => (await ruleStatus(p))?.['appliedNodes'] === 20);
    });
    // Watch every change to these nodes while a new controller starts, syncs and settles, and record
    // the writes it sends: an identical apply would be invisible to the watch, but not to this.
    const recording = new RecordingClient((await berthClient(sandbox)).access);
    const changes = await countNodeWrites(client, names, async () => {
      await withController({ client: recording }, async (c) => {
        await waitFor(
          'status reports 20 applied',
          async () => (await ruleStatus(p))?.['appliedNodes'] === 20,
        );
        await waitFor('the node queue drained', () => c.nodeController.queue.len() === 0);
        await new Promise((r) => setTimeout(r, 1500));
      });
    });
    assert.deepEqual(changes, [], 'no node was written during the restart');
    const mine = recording.writes.filter(
      (w) => names.some((n) => w.endsWith(`/nodes/${n}`)) || w.includes(`/nodelabelrules/${p}/`),
    );
    assert.deepEqual(mine, [], 'the restarted controller sent no write for these nodes or this rule');
  });
});

/**
 * Runs fn and returns the writes Berth made to the named nodes meanwhile, seen through a watch: a
 * write by Berth changes its managedFields entry (its time, or the fields it owns).
 */
async function countNodeWrites(
  client: KubeClient,
  names: string[],
  fn: () => Promise<void>,
): Promise<string[]> {
  const list = await client.list(Resources.nodes);
  const berthEntry = (n: KubeObject) =>
    JSON.stringify(
      (n.metadata?.managedFields as { manager: string }[] | undefined)?.find(
        (m) => m.manager === FIELD_MANAGER,
      ) ?? null,
    );
  const last = new Map(
    list.items
      .filter((n) => names.includes(n.metadata!.name!))
      .map((n) => [n.metadata!.name!, berthEntry(n)]),
  );
  const changes: string[] = [];
  const abort = new AbortController();
  const stream = client.stream<{ type: string; object: KubeObject }>('/api/v1/nodes', {
    query: { watch: 1, resourceVersion: list.metadata.resourceVersion },
    signal: abort.signal,
  });
  const reading = (async () => {
    try {
      for await (const ev of stream) {
        const name = ev.object.metadata?.name ?? '';
        if (!last.has(name)) continue;
        const entry = berthEntry(ev.object);
        if (entry !== last.get(name)) changes.push(`${ev.type} ${name}: ${entry}`);
        last.set(name, entry);
      }
    } catch {
      // aborted
    }
  })();
  await fn();
  abort.abort();
  await reading;
  return changes;
}
