// test-driver: alone — Berth runs with every capability and registers the webhook configurations named
// berth, and the uninstall deletes every object of Berth's kinds and the CRDs themselves (put back after).
// test-driver: registry
//
// The documented uninstall (deploy/README.md "Uninstalling") on a cluster where every capability is in
// use: derived labels from a NodeLabelRule (a label, an annotation, a taint) and from a rule file; a
// startup gate holding a node tainted and another whose completion stamp is on a released node; agent
// placement's claims and label on a node and its finalizer on an owner; an ArchPlacement that placed
// one pod and still gates another; a WorkloadDeployment whose Quota lets one Instance run and keeps
// the other's Pod behind its scheduling gate; Berth's webhook configurations, its certificate Secret
// and its leader-election Lease. Berth runs as its own process; the test follows the procedure step
// by step, with kubectl where the procedure says kubectl, and then finds nothing of Berth's: no
// taint, label, annotation, finalizer or scheduling gate (Berth's keys are the ones under its API
// group's domain, and the keys the policies named), no field of an object still owned by one of
// Berth's field managers, no webhook configuration, Lease, Secret or CRD.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { FIELD_MANAGER as AGENTS, FINALIZER_FIELD_MANAGER } from '../../src/agents/types.ts';
import { AgentPlacement } from '../../src/agents/crd.ts';
import { FIELD_MANAGER as ARCH, SCHEDULING_GATE, STATE_LABEL } from '../../src/arch/types.ts';
import { ArchPlacement } from '../../src/arch/crd.ts';
import { capabilities } from '../../src/capabilities.ts';
import { installCrds } from '../../src/cli/install.ts';
import { crdsGone } from '../../src/cli/uninstall.ts';
import { FIELD_MANAGER as GATES, gateAnnotations } from '../../src/gates/types.ts';
import { NodeStartupGate } from '../../src/gates/crd.ts';
import { FIELD_MANAGER as LABELS } from '../../src/labels/types.ts';
import { NodeLabelRule } from '../../src/labels/crd.ts';
import { POLICY_GROUP } from '../../src/policy/kinds.ts';
import { hasSchedulingGate } from '../../src/policy/pods.ts';
import { secretName } from '../../src/cells/cli.ts';
import { CELL_LABEL } from '../../src/cells/types.ts';
import { LEADER_ELECTION_ID, WEBHOOK_CERT_SECRET } from '../../src/policy/namespace.ts';
import { crdName, Resources, type KubeObject, type ResourceRef } from '../../src/runtime/api/meta.ts';
import { ownedKeys } from '../../src/runtime/api/fields.ts';
import { isNotFound } from '../../src/runtime/client/client.ts';
import { webhookConfigLabels, webhookFieldManager } from '../../src/runtime/webhook/registration.ts';
import { ensureBinaries } from '../../src/sandbox/build.ts';
import type { SandboxRegistry } from '../../src/sandbox/registry.ts';
import {
  DEPLOYMENT_MANAGER,
  INSTANCE_MANAGER,
  QUOTA_GATE,
  QUOTA_MANAGER,
} from '../../src/workloads/types.ts';
import { Instance, InstanceType, Quota, WorkloadDeployment } from '../../src/workloads/crd.ts';
import {
  berthKubeconfig,
  removeBerthIdentity,
  runBerthCli,
  startBerth,
  type BerthProcess,
} from '../helpers/berth.ts';
import {
  addNodes,
  createAdmitted,
  createNamespace,
  deleteNamespace,
  deleteNodes,
  kubectl as runKubectl,
  podManifest,
  schemalessCrd,
  testSandbox,
  uniqueName,
} from '../helpers/cluster.ts';
import { nodeKeys } from '../helpers/nodekeys.ts';
import { platform, RegistryPusher, startFaultProxy, type FaultProxy } from '../helpers/registry.ts';
import { waitFor } from '../helpers/wait.ts';

const sandbox = testSandbox();
const client = sandbox.client();
const id = uniqueName('un');
/** The domain of every key the test's policies name: none of them is under Berth's own. */
const D = `${id}.example`;
const POOL = `${D}/pool`;
/** The node label the rule file derives its label from. */
const FILE_INPUT = `${D}/file-input`;
/** Keys the test's policies name as their outputs: Berth's while it runs. */
const keys = {
  ruleLabel: `${D}/rule`,
  ruleAnnotation: `${D}/rule-note`,
  ruleTaint: `${D}/rule-taint`,
  fileLabel: `${D}/from-file`,
  heldTaint: `${D}/held`,
  doneTaint: `${D}/done`,
  agentLabel: `${D}/agent`,
  claimPrefix: `${D}/claim.`,
  ownerFinalizer: `${D}/release-claims`,
};
/** Every field manager Berth writes with. */
const berthManagers = [
  LABELS,
  GATES,
  AGENTS,
  FINALIZER_FIELD_MANAGER,
  ARCH,
  DEPLOYMENT_MANAGER,
  INSTANCE_MANAGER,
  QUOTA_MANAGER,
  webhookFieldManager,
];
const labelDir = mkdtempSync(join(tmpdir(), 'berth-uninstall-'));
const registriesFile = join(sandbox.dir, `${id}-registries.yaml`);
const ruleFile = join(labelDir, D, 'from-file');
const nodes: Record<'labelled' | 'held' | 'released' | 'work', string> = {
  labelled: '',
  held: '',
  released: '',
  work: '',
};
const ns = { berth: `${id}-berth`, agents: '', arch: '', work: '' };
/** Berth's roles, named for this test and bound in its namespace; the owner kind used below opted in. */
const identity = { name: `${id}-berth`, namespace: ns.berth, finalizerOwners: ['configmaps'] };
let reg: SandboxRegistry;
let proxy: FaultProxy;
let berth: BerthProcess | undefined;
let kubectlPath: string;

/** kubectl as the procedure runs it. */
const kubectl = (...args: string[]) => runKubectl(sandbox, kubectlPath, args).stdout;

const apply = (ref: ResourceRef, obj: KubeObject) =>
  client.apply(ref, obj, { fieldManager: 'test-author', force: true });
const exists = (ref: ResourceRef, name: string, namespace?: string) =>
  client.get(ref, name, namespace).then(
    () => true,
    (e: unknown) => {
      if (isNotFound(e)) return false;
      throw e;
    },
  );

/** A berth command as a user runs it, against the sandbox. */
const berthCli = (...args: string[]) => runBerthCli([...args, `--kubeconfig=${sandbox.kubeconfigPath}`]);

// ---- what "nothing of Berth's" means ----------------------------------------------------------------

/** A key of Berth's: in its API group's domain (every key it defines), or one a policy of this test named. */
function berthKey(key: string): boolean {
  const prefix = key.includes('/') ? key.slice(0, key.indexOf('/')) : '';
  if (prefix === POLICY_GROUP || prefix.endsWith(`.${POLICY_GROUP}`)) return true;
  return key.startsWith(keys.claimPrefix) || Object.values(keys).includes(key);
}

/**
 * Keys, finalizers, taints and scheduling gates a Berth field manager still owns on the object (a pod's
 * node affinity and tolerations, which the apiserver never lets anyone remove, are not looked at).
 */
const ownedByBerth = (o: KubeObject): string[] =>
  [
    ...berthManagers,
    // Each AgentPlacement applies its owner finalizer under a manager of its own.
    ...new Set(
      (o.metadata?.managedFields ?? [])
        .map((f) => (f as { manager?: string }).manager ?? '')
        .filter((m) => m.startsWith(`${FINALIZER_FIELD_MANAGER}/`)),
    ),
  ].flatMap((manager) =>
    (['Apply', 'Update'] as const).flatMap((operation) =>
      [
        ['metadata', 'labels'],
        ['metadata', 'annotations'],
        ['metadata', 'finalizers'],
        ['spec', 'taints'],
        ['spec', 'schedulingGates'],
      ].flatMap((path) =>
        ownedKeys(o, manager, path, '', operation).map((k) => `${path.join('.')} ${k} owned by ${manager}`),
      ),
    ),
  );

/** What of Berth's an object still carries: keys, finalizers, scheduling gates, owned fields. */
function leftOn(o: KubeObject): string[] {
  const what = `${o.kind ?? ''} ${o.metadata?.namespace ? `${o.metadata.namespace}/` : ''}${o.metadata?.name}`;
  const spec = o['spec'] as { schedulingGates?: { name: string }[] } | undefined;
  return [
    ...[...nodeKeys(o).keys()].filter((k) => berthKey(k.slice(k.indexOf(' ') + 1).split(':')[0]!)),
    ...(o.metadata?.finalizers ?? []).filter(berthKey).map((f) => `finalizer ${f}`),
    ...(spec?.schedulingGates ?? []).filter((g) => berthKey(g.name)).map((g) => `scheduling gate ${g.name}`),
    ...ownedByBerth(o),
  ].map((s) => `${what}: ${s}`);
}

/** Everything of Berth's on the test's nodes, the pods of its namespaces, and its owner objects. */
async function leftovers(): Promise<string[]> {
  const objects: KubeObject[] = [];
  for (const n of Object.values(nodes))
    objects.push({ kind: 'Node', ...(await client.get(Resources.nodes, n)) });
  for (const namespace of [ns.agents, ns.arch, ns.work])
    for (const ref of [Resources.pods, Resources.configMaps])
      objects.push(
        ...(await client.list(ref, { namespace })).items.map((o) => ({ kind: ref.kind, ...o }) as KubeObject),
      );
  return objects.flatMap(leftOn);
}

/** Adds one node; returns its name. */
const firstNode = async (group: Parameters<typeof addNodes>[1]) => (await addNodes(client, group))[0]!;

// ---- the cluster in use ------------------------------------------------------------------------------

before(async () => {
  const r = sandbox.registry;
  assert.ok(r, 'the test sandbox runs a registry (this file says test-driver: registry)');
  reg = r;
  proxy = await startFaultProxy(reg);
  // The sandbox registry and its fault proxy, on 127.0.0.1: allowed, as an admin allows a registry
  // on a private address (decision 0025).
  writeFileSync(
    registriesFile,
    `registries:\n  "${reg.host}": { allowPrivate: true }\n  "${proxy.host}": { allowPrivate: true }\n`,
  );
  kubectlPath = (await ensureBinaries()).kubectl;
  await installCrds(client);
  const pusher = new RegistryPusher(reg);
  await pusher.pushImage(`${id}/app`, 'v1', platform('linux/amd64'));
  await pusher.pushImage(`${id}/slow`, 'v1', platform('linux/amd64'));

  const pool = { [POOL]: id };
  nodes.labelled = await firstNode({
    prefix: `${id}-labelled`,
    labels: { ...pool, [FILE_INPUT]: 'yes', [`${D}/derive`]: 'true' },
  });
  nodes.held = await firstNode({ prefix: `${id}-held`, labels: { ...pool, [`${D}/gate`]: 'held' } });
  nodes.work = await firstNode({ prefix: `${id}-work`, labels: pool });
  ns.agents = await createNamespace(client, `${id}-agents`);
  ns.arch = await createNamespace(client, `${id}-arch`);
  ns.work = await createNamespace(client, `${id}-work`);
  await client.create(Resources.namespaces, {
    apiVersion: 'v1',
    kind: 'Namespace',
    metadata: { name: ns.berth },
  });

  mkdirSync(join(labelDir, D));
  writeFileSync(ruleFile, `${FILE_INPUT}\n`);
  await apply(NodeLabelRule.ref, {
    apiVersion: NodeLabelRule.apiVersion,
    kind: NodeLabelRule.kind,
    metadata: { name: id },
    spec: {
      match: { allOf: [{ label: `${D}/derive`, operator: 'In', values: ['true'] }] },
      labels: { [keys.ruleLabel]: 'true' },
      annotations: { [keys.ruleAnnotation]: 'from a rule' },
      taints: [{ key: keys.ruleTaint, value: 'yes', effect: 'NoSchedule' }],
    },
  });
  const gate = (name: string, which: string, taint: string, requirements: unknown) =>
    apply(NodeStartupGate.ref, {
      apiVersion: NodeStartupGate.apiVersion,
      kind: NodeStartupGate.kind,
      metadata: { name },
      spec: {
        taint: { key: taint, value: 'wait', effect: 'NoSchedule' },
        nodeSelector: { matchLabels: { [`${D}/gate`]: which } },
        requirements,
        backfill: true,
      },
    });
  await gate(`${id}-held`, 'held', keys.heldTaint, {
    pods: [{ namespace: ns.work, selector: { matchLabels: { app: 'never' } } }],
  });
  await gate(`${id}-done`, 'done', keys.doneTaint, { nodeConditions: [{ type: 'Ready', status: 'True' }] });
  await apply(AgentPlacement.ref, {
    apiVersion: AgentPlacement.apiVersion,
    kind: AgentPlacement.kind,
    metadata: { name: id },
    spec: {
      namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': ns.agents } },
      podSelector: { matchLabels: { app: 'worker' } },
      owner: { uidLabel: `${D}/pool-uid`, apiVersion: 'v1', kind: 'ConfigMap' },
      nodeLabel: { key: keys.agentLabel, value: 'true' },
      claimAnnotationPrefix: keys.claimPrefix,
      finalizer: { name: keys.ownerFinalizer },
    },
  });
  await apply(ArchPlacement.ref, {
    apiVersion: ArchPlacement.apiVersion,
    kind: ArchPlacement.kind,
    metadata: { name: id },
    spec: { namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': ns.arch } } },
  });
  await apply(InstanceType.ref, {
    apiVersion: InstanceType.apiVersion,
    kind: InstanceType.kind,
    metadata: { name: id },
    spec: { cpu: '1', memory: '1Gi' },
  });
  await apply(Quota.ref, {
    apiVersion: Quota.apiVersion,
    kind: Quota.kind,
    metadata: { name: 'budget', namespace: ns.work },
    spec: { instances: 1 },
  });
  await apply(WorkloadDeployment.ref, {
    apiVersion: WorkloadDeployment.apiVersion,
    kind: WorkloadDeployment.kind,
    metadata: { name: 'web', namespace: ns.work },
    spec: {
      replicas: 2,
      instanceManagementPolicy: 'Parallel',
      template: {
        instanceType: id,
        containers: [{ name: 'app', image: 'registry.example/web:1' }],
      },
    },
  });

  process.env['POD_NAMESPACE'] = ns.berth;
  // Berth's identity in its own namespace (its Lease and certificate Secret are there), as a user's
  // install binds it; removed with Berth in step 2.
  const kubeconfig = await berthKubeconfig(sandbox, identity);
  berth = await startBerth(
    sandbox,
    [
      `--label-dir=${labelDir}`,
      `--arch-registry-ca=${reg.caPath}`,
      `--arch-registries=${registriesFile}`,
      `--webhook-cert-secret=${WEBHOOK_CERT_SECRET}`,
      '--leader-elect',
      '--log-level=error',
    ],
    { capture: true, kubeconfig },
  );
});

after(async () => {
  await berth?.stop();
  if (process.env['BERTH_TEST_VERBOSE']) process.stderr.write(berth?.output() ?? '');
  await proxy?.close();
  for (const n of Object.values(ns)) if (n) await deleteNamespace(client, n);
  await deleteNodes(client, Object.values(nodes).filter(Boolean));
  rmSync(labelDir, { recursive: true, force: true });
  // The files that run after this one find the CRDs as the driver left them.
  await installCrds(client);
  client.close();
});

describe('the documented uninstall', () => {
  test('leaves nothing of Berth on a cluster where every capability was in use', async () => {
    // Every capability at work, seen on the cluster.
    const node = (n: string) => client.get(Resources.nodes, n).then(nodeKeys);
    await waitFor('derived labels, annotation and taint from the rule and the file', async () => {
      const k = await node(nodes.labelled);
      return (
        k.get(`label ${keys.ruleLabel}`) === 'true' &&
        k.has(`annotation ${keys.ruleAnnotation}`) &&
        k.has(`taint ${keys.ruleTaint}:NoSchedule`) &&
        k.get(`label ${keys.fileLabel}`) === 'true'
      );
    });
    const held = gateAnnotations(`${id}-held`, {});
    const done = gateAnnotations(`${id}-done`, {});
    await waitFor('the held node gated', async () => {
      const k = await node(nodes.held);
      return k.has(`taint ${keys.heldTaint}:NoSchedule`) && k.has(`annotation ${held.gatedAt}`);
    });

    const owner = await client.create(Resources.configMaps, {
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name: 'pool', namespace: ns.agents },
    });
    await client.create(
      Resources.pods,
      podManifest({
        name: 'worker',
        namespace: ns.agents,
        nodeName: nodes.work,
        labels: { app: 'worker', [`${D}/pool-uid`]: owner.metadata!.uid! },
      }),
    );
    await waitFor('the agent claim and label', async () => {
      const k = await node(nodes.work);
      return (
        k.get(`label ${keys.agentLabel}`) === 'true' &&
        k.has(`annotation ${keys.claimPrefix}${owner.metadata!.uid}`)
      );
    });
    await waitFor('the owner finalizer', async () =>
      (await client.get(Resources.configMaps, 'pool', ns.agents)).metadata?.finalizers?.includes(
        keys.ownerFinalizer,
      ),
    );

    // Arch: a pod placed, once the webhook is registered.
    const archPod = (name: string, image: string) =>
      client.create(Resources.pods, {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name, namespace: ns.arch },
        spec: { nodeSelector: { [POOL]: id }, containers: [{ name: 'app', image }] },
      });
    await waitFor(
      'a pod placed by the ArchPlacement',
      async () => {
        const name = uniqueName('placed');
        const p = await archPod(name, `${reg.host}/${id}/app:v1`);
        if (!p.metadata?.labels?.[STATE_LABEL]) {
          await client.delete(Resources.pods, name, ns.arch, { gracePeriodSeconds: 0 });
          return false;
        }
        return waitFor(`${name} placed`, async () => {
          const now = await client.get(Resources.pods, name, ns.arch);
          return now.metadata?.labels?.[STATE_LABEL] === 'Placed';
        });
      },
      { intervalMs: 500 },
    );
    // A node that joins now: the gate's webhook taints it, the gate releases it and stamps it.
    nodes.released = await firstNode({
      prefix: `${id}-released`,
      labels: { [POOL]: id, [`${D}/gate`]: 'done' },
    });
    await waitFor('the released node stamped', async () => {
      const k = await node(nodes.released);
      return k.has(`annotation ${done.completedAt}`) && !k.has(`taint ${keys.doneTaint}:NoSchedule`);
    });

    await waitFor('one instance running, the other behind the quota gate', async () => {
      const pods = (await client.list(Resources.pods, { namespace: ns.work })).items;
      const gated = pods.filter((p) => hasSchedulingGate(p, QUOTA_GATE));
      return pods.length === 2 && gated.length === 1;
    });
    assert.equal((await client.list(Instance.ref, { namespace: ns.work })).items.length, 2);
    const webhooks = async () =>
      (
        await Promise.all(
          [Resources.mutatingWebhookConfigurations, Resources.validatingWebhookConfigurations].map((ref) =>
            client.list(ref, {
              query: {
                labelSelector: Object.entries(webhookConfigLabels)
                  .map(([k, v]) => `${k}=${v}`)
                  .join(','),
              },
            }),
          ),
        )
      ).flatMap((l) => l.items.map((o) => o.metadata!.name!));
    assert.ok((await webhooks()).length >= 2, 'mutating and validating webhook configurations registered');
    assert.ok(await exists(Resources.secrets, WEBHOOK_CERT_SECRET, ns.berth), 'the certificate Secret');
    await waitFor('the leader Lease', () => exists(Resources.leases, LEADER_ELECTION_ID, ns.berth));
    // One more held gated by a registry that stalls, from now until its ArchPlacement is deleted.
    proxy.fail({ path: new RegExp(`/${id}/slow/`), delayMs: 30_000, times: Infinity });
    await createAdmitted(
      client,
      { namespace: ns.arch, name: 'stalled' },
      () => archPod('stalled', `${proxy.host}/${id}/slow:v1`),
      (p) => hasSchedulingGate(p, SCHEDULING_GATE),
    );
    // What the search below finds while Berth is at work: it looks where Berth's things are.
    const before = await leftovers();
    for (const what of [
      ...Object.values(nodes).map((n) => `Node ${n}: `),
      `Pod ${ns.arch}/stalled: scheduling gate ${SCHEDULING_GATE}`,
      `Pod ${ns.work}/web-`,
      `ConfigMap ${ns.agents}/pool: finalizer ${keys.ownerFinalizer}`,
    ])
      assert.ok(
        before.some((l) => l.startsWith(what)),
        `${what} in ${before.join('\n')}`,
      );
    assert.ok(before.some((l) => l.endsWith(`scheduling gate ${QUOTA_GATE}`)));

    // berth uninstall refuses to run before step 1: only a running Berth releases what policies hold.
    const early = berthCli('uninstall', `--namespace=${ns.berth}`);
    assert.notEqual(early.status, 0);
    assert.match(
      early.stderr,
      /objects of Berth's kinds still exist \(.*nodestartupgates.*\): delete them while Berth runs/,
    );

    // Step 1: while Berth runs, delete every object of Berth's kinds (kubectl waits for their
    // finalizers, and for the Instances and Pods of the WorkloadDeployments), and the rule files.
    const plurals = capabilities.flatMap((c) => c.kinds.map((r) => r.resource));
    kubectl('delete', plurals.join(','), '--all', '--all-namespaces', '--cascade=foreground');
    rmSync(ruleFile);
    // Step 2: remove Berth (here, its process and its identity; in a cluster, kubectl delete -k or
    // helm uninstall).
    await berth!.stop();
    await removeBerthIdentity(client, identity);
    berth = undefined;
    // A cell's kubeconfig as `berth cells join` keeps it (its credentials), beside a Secret of the user's.
    const secret = (name: string, labels: Record<string, string>) =>
      client.create(Resources.secrets, {
        apiVersion: 'v1',
        kind: 'Secret',
        metadata: { name, namespace: ns.berth, labels },
        data: { kubeconfig: Buffer.from('x').toString('base64') },
      });
    await secret(secretName('dfw'), { [CELL_LABEL]: 'dfw' });
    await secret('users-own', {});
    // Step 3: berth uninstall.
    const uninstalled = berthCli('uninstall', `--namespace=${ns.berth}`);
    assert.equal(uninstalled.status, 0, uninstalled.stderr);
    assert.match(uninstalled.stdout, /MutatingWebhookConfiguration berth: deleted/);
    assert.match(
      uninstalled.stdout,
      /Secret .*\/cell-dfw-kubeconfig: deleted \(the kubeconfig of cell dfw\)/,
    );
    assert.equal(
      await exists(Resources.secrets, secretName('dfw'), ns.berth),
      false,
      "the cell's kubeconfig",
    );
    assert.equal(await exists(Resources.secrets, 'users-own', ns.berth), true, "the user's Secret");

    assert.deepEqual(await leftovers(), []);
    // The arch records came off in step 3: Berth leaves them when it releases a pod.
    assert.match(uninstalled.stdout, new RegExp(`pod ${ns.arch}/stalled: removed ${STATE_LABEL}`));
    assert.deepEqual(await webhooks(), []);
    // berth uninstall returns once the apiserver has finalized the CRDs it deleted (a CI run found
    // one still there a moment after a berth uninstall that did not wait).
    for (const name of capabilities.flatMap((c) => c.kinds.map(crdName)))
      assert.equal(await exists(Resources.crds, name), false, name);
    // Again, as after a kustomize delete, which takes the CRDs first: nothing left to do, and no error.
    const again = berthCli('uninstall', `--namespace=${ns.berth}`);
    assert.equal(again.status, 0, again.stderr);
    assert.equal(await exists(Resources.secrets, WEBHOOK_CERT_SECRET, ns.berth), false, 'the Secret');
    assert.equal(await exists(Resources.leases, LEADER_ELECTION_ID, ns.berth), false, 'the Lease');
  });

  test('Berth removed before its gates: their finalizers taken off by hand, berth uninstall takes back what they held', async () => {
    await installCrds(client);
    const gate = `${id}-orphan`;
    const taint = `${D}/orphan`;
    const keysOf = gateAnnotations(gate, {});
    const kubeconfig = await berthKubeconfig(sandbox, identity);
    berth = await startBerth(
      sandbox,
      ['--controllers=gates', `--webhook-cert-secret=${WEBHOOK_CERT_SECRET}`, '--log-level=error'],
      { capture: true, kubeconfig },
    );
    await apply(NodeStartupGate.ref, {
      apiVersion: NodeStartupGate.apiVersion,
      kind: NodeStartupGate.kind,
      metadata: { name: gate },
      spec: {
        taint: { key: taint, value: 'wait', effect: 'NoSchedule' },
        nodeSelector: { matchLabels: { [`${D}/gate`]: 'orphan' } },
        requirements: { pods: [{ namespace: ns.work, selector: { matchLabels: { app: 'never' } } }] },
        backfill: true,
      },
    });
    const node = await firstNode({ prefix: gate, labels: { [`${D}/gate`]: 'orphan' } });
    try {
      const held = async () => nodeKeys(await client.get(Resources.nodes, node));
      await waitFor('the node held', async () => {
        const k = await held();
        return k.has(`taint ${taint}:NoSchedule`) && k.has(`annotation ${keysOf.gatedAt}`);
      });
      // Berth goes first (the procedure's step 2 before its step 1); the gate then waits for a
      // finalizer no one runs, which the user takes off by hand (deploy/README.md says how).
      await berth.stop();
      berth = undefined;
      await removeBerthIdentity(client, identity);
      kubectl('delete', 'nodestartupgate', gate, '--wait=false');
      kubectl(
        'patch',
        'nodestartupgate',
        gate,
        '--type=json',
        '-p',
        '[{"op":"remove","path":"/metadata/finalizers"}]',
      );
      await waitFor('the gate gone', async () => !(await exists(NodeStartupGate.ref, gate)));
      assert.ok((await held()).has(`taint ${taint}:NoSchedule`), 'the taint stranded until berth uninstall');

      const uninstalled = berthCli('uninstall', `--namespace=${ns.berth}`);
      assert.equal(uninstalled.status, 0, uninstalled.stderr);
      assert.match(uninstalled.stdout, new RegExp(`node ${node}: released gates ${gate}`));
      const left = [...(await held()).keys()].filter((k) => k.includes(taint) || k.includes(gate));
      assert.deepEqual(left, []);
    } finally {
      await deleteNodes(client, [node]);
    }
  });

  test("waits for a deleted CRD while an object holds it, and names the apiserver's reason", async () => {
    const group = `${id}.example`;
    const name = `holds.${group}`;
    const { crd, ref: holds } = schemalessCrd({ group, kind: 'Hold', plural: 'holds', namespaced: false });
    await client.create(Resources.crds, crd);
    const finalizer = `${group}/hold`;
    await waitFor('the Hold kind served', () =>
      client
        .create(holds, {
          apiVersion: `${group}/v1`,
          kind: 'Hold',
          metadata: { name: 'one', finalizers: [finalizer] },
        })
        .then(
          () => true,
          () => false,
        ),
    );
    await client.delete(Resources.crds, name);
    await assert.rejects(crdsGone(client, [name], { timeoutMs: 2000 }), (err: Error) => {
      assert.match(
        err.message,
        new RegExp(`deleted CRDs still present after 2 s: ${name.replaceAll('.', '\\.')} \\(.+\\)`),
      );
      return true;
    });
    // Released, the object goes, and with it the CRD: the wait returns.
    await client.patch(holds, 'one', { metadata: { finalizers: null } });
    await crdsGone(client, [name], { timeoutMs: 30_000 });
    assert.equal(await exists(Resources.crds, name), false);
  });
});
