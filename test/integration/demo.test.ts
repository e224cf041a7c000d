// test-driver: registry — the demo runs the sandbox registry: the driver builds it (the first time)
// before any file runs, so this file's time budget never holds a build.
//
// Keeps the README's first command true: the demo brings up its sandbox with its registry, runs
// Berth, and shows each capability as a step whose summary names what happened; the cluster it
// leaves behind says the same. It runs on a sandbox of its own.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { placedAtAdmission } from '../../src/arch/decide/patches.ts';
import { type ArchPod } from '../../src/arch/decide/pods.ts';
import { STATE_LABEL } from '../../src/arch/types.ts';
import { Resources, type KubeObject } from '../../src/runtime/api/meta.ts';
import { Sandbox } from '../../src/sandbox/sandbox.ts';
import { WorkloadDeployment } from '../../src/workloads/crd.ts';

const name = `demo-${randomBytes(3).toString('hex')}`;
const demo = (...args: string[]) =>
  spawnSync(process.execPath, ['scripts/demo.ts', '--once', `--sandbox=${name}`, ...args], {
    encoding: 'utf8',
    // Three control planes start in it (the demo's and its two cells).
    timeout: 300_000,
    env: { ...process.env, BERTH_LOG_LEVEL: 'warn' },
  });
/** The demo's sandbox, for its clients (its kubeconfig); its state is read again to tear it down. */
const sandbox = new Sandbox(name);
let out = '';

before(() => {
  const r = demo();
  assert.equal(r.status, 0, `demo failed:\n${r.stdout}\n${r.stderr}`);
  out = r.stdout;
});

/** The cells step 6 starts beside the demo's sandbox. */
const cells = { DFW: `${name}-dfw`, LHR: `${name}-lhr` };

after(async () => {
  // A Sandbox reads its state when made: these are made now, after the demo started the processes.
  for (const n of [name, ...Object.values(cells)]) await new Sandbox(n).destroy();
});

/** The summary lines of step `n`, from its header to the next step's. */
const summary = (n: number) => {
  const m = new RegExp(`-- step ${n} summary \\([\\d.]+ s\\)\\n((?:   .*\\n)+)`).exec(out);
  assert.ok(m, `step ${n} printed its summary:\n${out}`);
  return m[1]!;
};
/** The time of day a summary line names after `what`, in ms of the day. */
const timeOf = (text: string, what: string) => {
  const m = new RegExp(`${what} at (\\d\\d):(\\d\\d):(\\d\\d)\\.(\\d{3})`).exec(text);
  assert.ok(m, `"${what} at <time>" in:\n${text}`);
  return ((Number(m[1]) * 60 + Number(m[2])) * 60 + Number(m[3])) * 1000 + Number(m[4]);
};
const node = async (n: string) => {
  const client = sandbox.client();
  try {
    return await client.get(Resources.nodes, n);
  } finally {
    client.close();
  }
};
const taints = (n: KubeObject) =>
  ((n['spec'] as { taints?: { key: string }[] }).taints ?? []).map((t) => t.key);

describe('npm run demo --once', () => {
  test("prints the page's URL and the management plane's, once each, and says every step was seen", () => {
    assert.equal(out.match(/ the page: http:\/\/127\.0\.0\.1:\d+\//g)?.length, 1, out);
    assert.equal(out.match(/ the management plane's page: http:\/\/127\.0\.0\.1:\d+\//g)?.length, 1, out);
    assert.match(out, /\nevery step seen\n/);
  });

  test('step 1: the sample nodes carry their derived labels', () => {
    for (const n of ['edgetpu-plugin-0', 'edgetpu-usb-0', 'edgetpu-pci-0', 'coral-devboard-0']) {
      assert.match(out, new RegExp(`${n}\\s+.*accelerators/edgetpu=true`));
    }
    assert.match(out, /gpu-0\s+.*accelerators\/gpu-product=Tesla-T4/);
    assert.match(out, /coral-devboard-0\s+.*node-class\.berth\.dev\/edge=true/);
    for (const n of ['arm-0', 'arm-1'])
      assert.match(out, new RegExp(`${n}\\s+node-class\\.berth\\.dev/edge=true`));
    assert.match(out, /plain-0\s+-/);
    assert.match(summary(1), /derived labels on 7 of 9 nodes/);
  });

  test('step 2: the gate holds the joining nodes at creation and releases them once their init pods are Ready', async () => {
    const s = summary(2);
    assert.match(s, /created nodes joining-0, joining-1/);
    for (const n of ['joining-0', 'joining-1']) {
      assert.match(
        s,
        new RegExp(
          `held ${n} at [\\d:.]+: tainted demo\\.berth\\.dev/initialising=node-init:NoSchedule at creation`,
        ),
      );
      assert.match(
        s,
        new RegExp(`released ${n} at [\\d:.]+ \\(held [\\d.]+ s\\), its node-init pod node-init-\\w+ Ready`),
      );
      assert.ok(timeOf(s, `released ${n}`) >= timeOf(s, `held ${n}`), 'released after it was held');
      const after = await node(n);
      assert.ok(!taints(after).includes('demo.berth.dev/initialising'), `${n} has no gate taint left`);
      assert.ok(after.metadata?.annotations?.['node-init.gates.berth.dev/completed-at'], `${n} completed`);
    }
  });

  test('step 3: the agent label follows the web Deployment from plain-0 to plain-1', async () => {
    const s = summary(3);
    assert.match(s, /claimed plain-0 at [\d:.]+: demo\.berth\.dev\/web-agent=true/);
    assert.match(s, /claimed plain-1 at [\d:.]+: demo\.berth\.dev\/web-agent=true/);
    assert.match(s, /released plain-0 at/);
    assert.match(s, /claim: annotation demo\.berth\.dev\/web-agent\.claim-[0-9a-f-]{36}/);
    assert.ok(timeOf(s, 'claimed plain-1') >= timeOf(s, 'claimed plain-0'));
    assert.equal((await node('plain-1')).metadata?.labels?.['demo.berth.dev/web-agent'], 'true');
    assert.equal((await node('plain-0')).metadata?.labels?.['demo.berth.dev/web-agent'], undefined);
  });

  test('step 4: the arm64-only image runs only on an arm64 node, with the affinity Berth added', async () => {
    const s = summary(4);
    const pod = /created pod (arm-only-\w+)/.exec(s)?.[1];
    assert.ok(pod, s);
    assert.match(s, /pushed 127\.0\.0\.1:\d+\/demo\/arm-only:v1 for linux\/arm64 only/);
    // Read while the review waited (placed at admission), or, past --arch-admission-wait, gated
    // until the controller read it: the pod's result says which, and the summary must say the same.
    const admitted = new RegExp(`placed ${pod} at admission \\(the image's platforms read by then\\)`).test(
      s,
    );
    if (!admitted)
      assert.match(
        s,
        new RegExp(`gated ${pod} at admission \\(scheduling gate arch\\.berth\\.dev/inspect\\)`),
      );
    assert.match(s, /read its platforms: linux\/arm64\n/);
    assert.match(s, /added node affinity kubernetes\.io\/arch In \[arm64\]\n/);
    const ran = new RegExp(
      `${pod} ran on (\\S+) \\(arm64; the arm64 nodes are arm-0, arm-1, coral-devboard-0\\)`,
    ).exec(s)?.[1];
    assert.ok(ran, s);
    const client = sandbox.client();
    try {
      const p = await client.get(Resources.pods, pod, 'berth-demo');
      assert.equal((p['spec'] as { nodeName?: string }).nodeName, ran);
      assert.equal(p.metadata?.labels?.[STATE_LABEL], 'Placed');
      assert.equal(
        placedAtAdmission(p as ArchPod) !== undefined,
        admitted,
        'the summary says how it was placed',
      );
    } finally {
      client.close();
    }
    assert.equal((await node(ran)).metadata?.labels?.['kubernetes.io/arch'], 'arm64');
  });

  test('step 5: the WorkloadDeployment runs three Ready instances within its Quota', () => {
    const s = summary(5);
    for (const i of ['hello-0', 'hello-1', 'hello-2'])
      assert.match(s, new RegExp(`instance ${i} Ready, its pod on [a-z][\\w.-]*`));
    assert.match(s, /granted by Quota budget: 3 of 4 instances, 1500m of 2 vCPU, 1536Mi of 2Gi/);
  });

  test('step 6: the Workload runs in both cities, each in its own cell, rolls out to a new image in each, and the cells hold exactly its WorkloadDeployments', async () => {
    const s = summary(6);
    assert.match(s, /joined it as cell dfw \(berth cells join --location=DFW\)/);
    assert.match(s, /joined it as cell lhr \(berth cells join --location=LHR\)/);
    assert.match(s, /placement us: DFW in cell dfw, 2 of 2 instances Ready/);
    assert.match(s, /placement eu: LHR in cell lhr, 1 of 1 instances Ready/);
    assert.match(s, /Workload web: 3 of 3 Ready in total, Available/);
    assert.match(s, /did: {3}changed Workload web's image to registry\.example\/web:2\n/);
    assert.match(s, /DFW in cell dfw runs registry\.example\/web:2: 2 of 2 instances updated and Ready at /);
    assert.match(s, /LHR in cell lhr runs registry\.example\/web:2: 1 of 1 instances updated and Ready at /);
    assert.match(
      s,
      /Workload web rolled out to registry\.example\/web:2 in [\d.]+ s: 3 of 3 instances updated, Available/,
    );
    // The cells were started as `berth sandbox up --cells` starts them: each runs its own Berth.
    const status = new Sandbox(name).cells.map((c) => [
      c.city,
      c.sandbox,
      new Sandbox(c.sandbox).status().find((p) => p.name === 'berth')?.running,
    ]);
    assert.deepEqual(status, [
      ['DFW', cells.DFW, true],
      ['LHR', cells.LHR, true],
    ]);
    for (const [city, sandboxName] of Object.entries(cells)) {
      const client = new Sandbox(sandboxName).client();
      try {
        type WD = KubeObject & {
          spec: { template: { containers: { image: string }[] } };
          status?: { readyReplicas?: number; updatedReplicas?: number };
        };
        const wds = (await client.list<WD>(WorkloadDeployment.ref, { namespace: 'berth-demo' })).items;
        const want = city === 'DFW' ? ['web-us-dfw', 2, 2] : ['web-eu-lhr', 1, 1];
        assert.deepEqual(
          wds.map((d) => [d.metadata?.name, d.status?.readyReplicas, d.status?.updatedReplicas]),
          [want],
          `the WorkloadDeployments of the ${city} cell`,
        );
        assert.equal(wds[0]!.spec.template.containers[0]!.image, 'registry.example/web:2');
      } finally {
        client.close();
      }
    }
  });

  // Last: it cordons the arm64 nodes, and stops the cells step 6 started (the run it makes ends
  // before step 6; two control planes fewer on the machine leave steps 1 to 3 their time).
  test('a step that does not happen ends --once with 1, naming the step (the demo run again, every arm64 node cordoned)', async () => {
    for (const c of Object.values(cells)) await new Sandbox(c).destroy();
    const client = sandbox.client();
    try {
      for (const n of ['arm-0', 'arm-1', 'coral-devboard-0'])
        await client.patch(Resources.nodes, n, { spec: { unschedulable: true } });
    } finally {
      client.close();
    }
    // Long enough for the steps before it on a loaded machine (CI runs another file beside this one).
    const r = demo('--step-timeout=45');
    assert.equal(r.status, 1, `${r.stdout}\n${r.stderr}`);
    // The steps before it happen again on the same sandbox: new joining nodes are held and released.
    assert.match(r.stdout, /held joining-2 at [\d:.]+: tainted demo\.berth\.dev\/initialising/);
    assert.match(r.stdout, /-- step 3 summary/);
    assert.match(
      r.stdout,
      /step 4 \(architecture-aware placement of an arm64-only image\) did not happen: timed out after 45000 ms waiting for pod arm-only-\w+ placed and scheduled/,
    );
    assert.doesNotMatch(r.stdout, /step 5|every step seen/);
  });
});
