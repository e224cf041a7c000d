// test-driver: alone — its own control plane and `berth run` beside another file's would starve
// the 2 s health probe and the canaries' seconds on two cores.
// Derived labels under hostile and careless input, against a running `berth run` (a child process,
// so that a blocked event loop shows as a failed probe, not a hung test). It runs on a sandbox of
// its own: its Berth must be the only labels controller writing its nodes. Every case ends with
// the same checks: /healthz answered within the webhook's 2 s throughout, a canary NodeLabelRule
// and a canary rule file still reach their node within seconds, and nothing another field manager
// set on a node changed. Generated cases come from a seeded generator (the seed is printed).
import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { after, before, describe, test } from 'node:test';
import { installCrds } from '../../src/cli/install.ts';
import { NodeLabelRule } from '../../src/labels/crd.ts';
import { ApiError, type KubeClient } from '../../src/runtime/client/client.ts';
import { Resources, type KubeObject } from '../../src/runtime/api/meta.ts';
import { berthRunArgs } from '../../src/sandbox/berth.ts';
import { freePorts } from '../../src/sandbox/net.ts';
import { Sandbox } from '../../src/sandbox/sandbox.ts';
import { berthKubeconfig } from '../helpers/berth.ts';
import { addNodes } from '../helpers/cluster.ts';
import { prng } from '../helpers/prng.ts';
import { REGEXPS, ruleSpec, TEMPLATES } from '../helpers/rulegen.ts';
import { sleep, waitFor } from '../helpers/wait.ts';

const sandbox = new Sandbox(`labels-abuse-${randomBytes(3).toString('hex')}`);
const seed = prng();
let client: KubeClient;
let berth: Berth;
let dir: string; // the rule directory
let outside: string; // a directory beside it, with a secret a link may point at
const SECRET = 'root:*:19000:0:99999:7:::';
/** Cases run, by kind, for the closing count. */
const counted = new Map<string, number>();
const count = (kind: string, n = 1) => counted.set(kind, (counted.get(kind) ?? 0) + n);

// The nodes: a canary, the issue's ReDoS node, and abuse nodes whose labels the generator's terms read.
const CANARY = 'canary-0';
const ABUSE = ['abuse-0', 'abuse-1', 'abuse-2', 'abuse-3'];
// Set by another field manager: Berth must never change these (contested keys included).
const ADMIN = 'abuse-admin';
const foreign: Record<string, { labels: Record<string, string>; annotations: Record<string, string> }> = {};

/** `berth run --controllers labels` as a child process, its output kept and scanned. */
class Berth {
  readonly healthPort: number;
  child!: ChildProcess;
  readonly lines: string[] = [];
  leaked = false;

  constructor(healthPort: number) {
    this.healthPort = healthPort;
  }

  async start(): Promise<void> {
    this.child = spawn(
      process.execPath,
      // The shared command line: every server on a free port or off (the page's default port was
      // taken by another process on a CI machine once, and every case here failed).
      berthRunArgs(await berthKubeconfig(sandbox), { metrics: 0, health: this.healthPort }, [
        '--controllers=labels',
        `--label-dir=${dir}`,
        '--webhook-bind-address=0',
        '--log-level=warn',
      ]),
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    for (const stream of [this.child.stdout!, this.child.stderr!]) {
      createInterface({ input: stream }).on('line', (line) => {
        if (line.includes('root:*') || line.includes('19000:0')) this.leaked = true;
        this.lines.push(line);
        if (this.lines.length > 2000) this.lines.shift();
      });
    }
    await waitFor('berth ready', () => this.probe('/readyz').then((ms) => ms !== undefined), {
      timeoutMs: 30_000,
      observe: () => this.lines.slice(-20),
    });
  }

  /** How long the probe took, in ms, or undefined if it did not answer 200 within 2 s. */
  async probe(path = '/healthz'): Promise<number | undefined> {
    const t0 = performance.now();
    try {
      const r = await fetch(`http://127.0.0.1:${this.healthPort}${path}`, {
        signal: AbortSignal.timeout(2000),
      });
      return r.status === 200 ? performance.now() - t0 : undefined;
    } catch {
      return undefined;
    }
  }

  async stop(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    const exited = new Promise((r) => this.child.once('exit', r));
    this.child.kill('SIGTERM');
    await Promise.race([exited, sleep(10_000)]);
    this.child.kill('SIGKILL');
  }
}

/** Polls /healthz every 200 ms while a case runs; the failures and the slowest answer. */
function watchHealth(): { stop(): Promise<{ failures: number; slowestMs: number; probes: number }> } {
  let running = true;
  const seen = { failures: 0, slowestMs: 0, probes: 0 };
  const loop = (async () => {
    while (running) {
      const ms = await berth.probe();
      seen.probes++;
      if (ms === undefined) seen.failures++;
      else seen.slowestMs = Math.max(seen.slowestMs, ms);
      await sleep(200);
    }
  })();
  return {
    async stop() {
      running = false;
      await loop;
      return seen;
    },
  };
}

const labelsOf = async (name: string) => (await client.get(Resources.nodes, name)).metadata?.labels ?? {};
/** What a timed-out wait on the canary shows: its labels and Berth's last words. */
const canaryState = async () => ({ labels: await labelsOf(CANARY), log: berth.lines.slice(-8) });

let canaryRound = 0;
/** The canary NodeLabelRule and rule file follow a change on their node within 5 s each. */
async function canaryWorks(): Promise<void> {
  canaryRound++;
  const value = `v${canaryRound}`;
  await client.patch(
    Resources.nodes,
    CANARY,
    { metadata: { labels: { 'canary.example.com/src': value } } },
    { fieldManager: ADMIN },
  );
  await waitFor(
    `the canary rule copying ${value}`,
    async () => (await labelsOf(CANARY))['canary.example.com/copy'] === value,
    { timeoutMs: 5000, intervalMs: 50, observe: canaryState },
  );
  // The canary file alternates between a key the node has and one it lacks.
  const present = canaryRound % 2 === 0;
  writeFileSync(
    join(dir, 'canary.example.com', 'file'),
    present ? 'canary.example.com/src\n' : 'canary.example.com/absent\n',
  );
  await waitFor(
    `the canary file's label ${present ? 'set' : 'removed'}`,
    async () => ((await labelsOf(CANARY))['canary.example.com/file'] === 'true') === present,
    { timeoutMs: 5000, intervalMs: 50, observe: canaryState },
  );
}

/** What another manager set on the nodes is still there, unchanged. */
async function foreignUnchanged(): Promise<void> {
  for (const [name, want] of Object.entries(foreign)) {
    const n = await client.get(Resources.nodes, name);
    for (const [k, v] of Object.entries(want.labels))
      assert.equal(n.metadata?.labels?.[k], v, `node ${name}: label ${k} set by ${ADMIN} changed`);
    for (const [k, v] of Object.entries(want.annotations))
      assert.equal(n.metadata?.annotations?.[k], v, `node ${name}: annotation ${k} set by ${ADMIN} changed`);
    // The admin's taint (a rule may add the same key with another effect: a taint of its own).
    const taints = (
      (n['spec'] as { taints?: { key: string; value?: string; effect: string }[] }).taints ?? []
    ).filter((t) => t.key === 'example.com/gpu' && t.effect === 'NoSchedule');
    if (name === ABUSE[0])
      assert.deepEqual(taints, [{ key: 'example.com/gpu', value: 'admin', effect: 'NoSchedule' }]);
  }
}

/** Runs a case with /healthz watched, then checks the canaries and the foreign keys. */
async function abuse(fn: () => Promise<void>): Promise<void> {
  const health = watchHealth();
  try {
    await fn();
  } finally {
    const seen = await health.stop();
    assert.equal(seen.failures, 0, `/healthz failed ${seen.failures} of ${seen.probes} times (2 s timeout)`);
    assert.ok(berth.child.exitCode === null, `berth exited: ${berth.lines.slice(-20).join('\n')}`);
  }
  await canaryWorks();
  await foreignUnchanged();
  assert.equal(berth.leaked, false, 'a line of the secret outside the rule directory reached the log');
}

async function createRule(name: string, spec: unknown): Promise<'created' | 'rejected'> {
  try {
    await client.create(NodeLabelRule.ref, {
      apiVersion: NodeLabelRule.apiVersion,
      kind: 'NodeLabelRule',
      metadata: { name },
      spec,
    });
    return 'created';
  } catch (e) {
    if (e instanceof ApiError && (e.status === 422 || e.status === 400)) return 'rejected';
    throw e;
  }
}

type Status = {
  observedGeneration?: number;
  conditions?: { type: string; status: string; reason: string; message: string }[];
};
/** Waits until Berth wrote a status for each rule's current generation; the Ready conditions. */
async function settled(
  names: string[],
): Promise<Map<string, { status: string; reason: string; message: string }>> {
  const out = new Map<string, { status: string; reason: string; message: string }>();
  await waitFor(
    `status for ${names.length} rules`,
    async () => {
      for (const name of names) {
        if (out.has(name)) continue;
        const obj = await client.get<KubeObject & { status?: Status }>(NodeLabelRule.ref, name);
        const ready = obj.status?.conditions?.find((c) => c.type === 'Ready');
        if (obj.status?.observedGeneration === obj.metadata?.generation && ready) out.set(name, ready);
      }
      return out.size === names.length;
    },
    { timeoutMs: 30_000, observe: () => names.filter((n) => !out.has(n)) },
  );
  return out;
}

before(async () => {
  await sandbox.up({ fresh: true });
  client = sandbox.client();
  await installCrds(client);
  const base = mkdtempSync(join(tmpdir(), 'berth-abuse-'));
  dir = join(base, 'rules');
  outside = join(base, 'etc');
  mkdirSync(join(dir, 'canary.example.com'), { recursive: true });
  mkdirSync(outside);
  writeFileSync(join(outside, 'shadow'), `${SECRET}\nbin:*:19000:0:99999:7:::\n`);
  writeFileSync(join(dir, 'canary.example.com', 'file'), 'canary.example.com/src\n');

  await addNodes(client, { prefix: 'canary', count: 1, labels: { 'canary.example.com/src': 'v0' } });
  await addNodes(client, {
    prefix: 'abuse',
    count: ABUSE.length,
    labels: { 'abuse.example.com/node': '', 'example.com/gpu': 'T4', 'probe/redos': `${'a'.repeat(40)}b` },
    annotations: { note: 'line one\nline two', big: 'b'.repeat(3000) },
  });
  for (const [i, name] of [CANARY, ...ABUSE].entries()) {
    // Contested keys (the generator's careful outputs) and a plain one, set by an admin.
    const labels: Record<string, string> = { 'abuse.example.com/keep': 'admin', 'example.com/zone': 'admin' };
    if (i % 2) labels['kkohtaka.org/edgetpu'] = 'admin';
    const annotations = { 'abuse.example.com/keep': 'admin, with "text"' };
    foreign[name] = { labels, annotations };
    await client.patch(Resources.nodes, name, { metadata: { labels, annotations } }, { fieldManager: ADMIN });
  }
  await client.patch(
    Resources.nodes,
    ABUSE[0]!,
    { spec: { taints: [{ key: 'example.com/gpu', value: 'admin', effect: 'NoSchedule' }] } },
    { fieldManager: ADMIN },
  );
  await createRule('canary', {
    match: { allOf: [{ label: 'canary.example.com/src', operator: 'Exists' }] },
    labels: { 'canary.example.com/copy': '{{ .match.value }}' },
  });
  const [healthPort] = await freePorts(1);
  berth = new Berth(healthPort!);
  await berth.start();
  await canaryWorks();
});

after(async () => {
  await berth?.stop();
  client?.close();
  await sandbox.destroy();
  if (dir) rmSync(join(dir, '..'), { recursive: true, force: true });
  const total = [...counted.values()].reduce((a, b) => a + b, 0);
  process.stdout.write(
    `abuse-labels: ${total} cases (${[...counted].map(([k, n]) => `${n} ${k}`).join(', ')}), seed ${seed.seed}\n`,
  );
});

describe('derived labels under abuse', () => {
  test("the issue's repro: (a+)+$ against 40 a's and a b stops nothing, also across a restart", async () => {
    await abuse(async () => {
      assert.equal(
        await createRule('probe-redos', {
          match: { anyOf: [{ label: 'probe/redos', operator: 'InRegexp', values: ['(a+)+$'] }] },
          labels: { 'probe/redos-matched': 'true' },
        }),
        'created',
      );
      // A second, ordinary rule still labels a node within a few seconds.
      const t0 = Date.now();
      await createRule('ordinary', {
        match: { allOf: [{ label: 'abuse.example.com/node', operator: 'Exists' }] },
        labels: { 'abuse.example.com/ordinary': 'true' },
      });
      await waitFor(
        'the ordinary rule applied',
        async () => (await labelsOf(ABUSE[0]!))['abuse.example.com/ordinary'] === 'true',
        {
          timeoutMs: 5000,
          intervalMs: 50,
        },
      );
      assert.ok(Date.now() - t0 < 5000, `took ${Date.now() - t0} ms`);
      const ready = (await settled(['probe-redos'])).get('probe-redos')!;
      // RE2: the pattern needs a's at the end of the value, which ends in b: valid, and matches nothing.
      assert.deepEqual([ready.status, ready.reason], ['True', 'Applied']);
      assert.equal((await labelsOf(ABUSE[0]!))['probe/redos-matched'], undefined);
    });
    count('ReDoS repro');
    // A restart used to hang again until the rule was deleted.
    await berth.stop();
    await berth.start();
    await abuse(async () => {});
    count('restart with the ReDoS rule');
  });

  test(`adversarial regular expressions (${REGEXPS.length}): each refused, Invalid, or matched in linear time`, async () => {
    await abuse(async () => {
      const names: string[] = [];
      for (const [i, re] of REGEXPS.entries()) {
        const name = `regexp-${i}`;
        const spec = {
          match: {
            allOf: [{ label: 'abuse.example.com/node', operator: 'Exists' }],
            anyOf: [
              { label: 'probe/redos', operator: 'InRegexp', values: [re] },
              { annotation: 'big', operator: 'InRegexp', values: [re] },
            ],
          },
          labels: { [`regexp.example.com/r${i}`]: 'true' },
        };
        if ((await createRule(name, spec)) === 'created') names.push(name);
      }
      const ready = await settled(names);
      // The unsupported ones are Invalid with RE2's reason; none leaves the rule unprocessed.
      assert.equal(ready.get(`regexp-${REGEXPS.indexOf('(a)\\1')}`)?.reason, 'Invalid');
      assert.equal(ready.get(`regexp-${REGEXPS.indexOf('(a+)+$')}`)?.reason, 'Applied');
      count('adversarial regexp rules', REGEXPS.length);
    });
  });

  test(`adversarial templates (${TEMPLATES.length}): each refused, Invalid, or rendered with nothing invalid written`, async () => {
    await abuse(async () => {
      const names: string[] = [];
      for (const [i, tpl] of TEMPLATES.entries()) {
        const name = `template-${i}`;
        const spec = {
          match: { allOf: [{ label: 'abuse.example.com/node', operator: 'Exists' }] },
          labels: { [`template.example.com/l${i}`]: tpl },
          annotations: { [`template.example.com/a${i}`]: tpl },
        };
        if ((await createRule(name, spec)) === 'created') names.push(name);
      }
      await settled(names);
      const missing = TEMPLATES.indexOf('{{ label "missing" }}');
      for (const name of ABUSE) {
        const n = await client.get(Resources.nodes, name);
        // A missing input sets nothing (not ""), and the multi-line note is never copied.
        assert.equal(n.metadata?.labels?.[`template.example.com/l${missing}`], undefined);
        assert.equal(
          n.metadata?.annotations?.[`template.example.com/a${TEMPLATES.indexOf('{{ annotation "note" }}')}`],
          undefined,
        );
      }
      count('adversarial template rules', TEMPLATES.length);
    });
  });

  test('generated NodeLabelRules, valid and invalid (seeded)', async (t) => {
    const N = 40;
    t.diagnostic(`seed ${seed.seed} (BERTH_FUZZ_SEED replays it)`);
    await abuse(async () => {
      const names: string[] = [];
      let rejected = 0;
      for (let i = 0; i < N; i++) {
        const name = `gen-${i}`;
        if ((await createRule(name, ruleSpec(seed))) === 'created') names.push(name);
        else rejected++;
      }
      const ready = await settled(names);
      const reasons = new Map<string, number>();
      for (const c of ready.values()) reasons.set(c.reason, (reasons.get(c.reason) ?? 0) + 1);
      t.diagnostic(
        `${rejected} refused by the schema; ${[...reasons].map(([r, n]) => `${n} ${r}`).join(', ')}`,
      );
      assert.ok(rejected > 0 && names.length > 0, 'the generator reaches both the schema and the controller');
      count('generated rules', N);
    });
  });

  test('rule-file trees: binary, huge, links out and in, a FIFO, and rapid churn', async () => {
    await abuse(async () => {
      const ns = join(dir, 'tree.example.com');
      mkdirSync(ns);
      writeFileSync(join(ns, 'ok'), 'canary.example.com/src\n');
      writeFileSync(join(ns, 'binary'), Buffer.from([0x7f, 0x45, 0x4c, 0x46, 0, 1, 2, 0xff]));
      writeFileSync(join(ns, 'huge'), Buffer.alloc(2 << 20, 'a.example.com/x\n'));
      writeFileSync(join(ns, 'junk'), `${'Not A Key!\n'.repeat(90_000)}`); // under 1 MiB, every line bad
      symlinkSync(join(outside, 'shadow'), join(ns, 'shadow'));
      symlinkSync(outside, join(dir, 'etc.example.com'));
      symlinkSync('ok', join(ns, 'inside'));
      const fifo = spawnSync('mkfifo', [join(ns, 'fifo')]).status === 0;
      count('rule-file kinds', fifo ? 8 : 7);
      await waitFor('the good files applied', async () => {
        const l = await labelsOf(CANARY);
        return l['tree.example.com/ok'] === 'true' && l['tree.example.com/inside'] === 'true';
      });
      await waitFor(
        'each bad file rejected in the log, the links by name',
        () => {
          const log = berth.lines.join('\n');
          return ['binary', 'huge', 'junk', 'shadow', ...(fifo ? ['fifo'] : [])].every((f) =>
            log.includes(`tree.example.com/${f}`),
          ) &&
            log.includes('etc.example.com: is a symbolic link that leads out of the rule directory') &&
            log.includes('tree.example.com/shadow: is a symbolic link that leads out of the rule directory')
            ? true
            : undefined;
        },
        { observe: () => berth.lines.slice(-10) },
      );
      for (const bad of ['binary', 'huge', 'junk', 'shadow', 'fifo'])
        assert.equal((await labelsOf(CANARY))[`tree.example.com/${bad}`], undefined);

      // Rapid churn: 200 writes, renames and deletes over about two seconds, then the tree must be
      // exactly what the nodes say.
      const churn = join(dir, 'churn.example.com');
      mkdirSync(churn);
      const r = prng(seed.seed + 1);
      const live = new Set<string>();
      for (let i = 0; i < 200; i++) {
        const f = `f${r.int(20)}`;
        const op = r.int(3);
        if (op === 0 || !live.has(f)) {
          writeFileSync(
            join(churn, `.tmp-${f}`),
            r.chance(0.8) ? 'canary.example.com/src\n' : 'canary.example.com/absent\n',
          );
          renameSync(join(churn, `.tmp-${f}`), join(churn, f));
          live.add(f);
        } else if (op === 1) {
          writeFileSync(join(churn, f), 'canary.example.com/src\n');
        } else {
          rmSync(join(churn, f));
          live.delete(f);
        }
        if (i % 10 === 0) await sleep(100);
      }
      // Settle on a known state: every live file names the canary's label. A key flipped ten times
      // within a minute may be held by the loop breaker: then it differs only with its Warning said.
      for (const f of live) writeFileSync(join(churn, f), 'canary.example.com/src\n');
      const want = [...live].map((f) => `churn.example.com/${f}`);
      const churned = async () => {
        const got = Object.keys(await labelsOf(CANARY)).filter((k) => k.startsWith('churn.example.com/'));
        const differ = [...got.filter((k) => !want.includes(k)), ...want.filter((k) => !got.includes(k))];
        const held = differ.filter((k) => berth.lines.some((l) => l.includes(`"key":"label ${k}"`)));
        return { got: got.sort(), differ, held, log: berth.lines.slice(-8) };
      };
      await waitFor(
        'the churned files exactly reflected on the canary, but for keys the loop breaker held',
        async () => {
          const c = await churned();
          return c.differ.length === c.held.length;
        },
        { timeoutMs: 15_000, observe: churned },
      );
      count('churn operations', 200);
    });
  });
});
