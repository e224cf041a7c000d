// Two replicas (child processes running test/fixtures/elector.ts) compete for one Lease and write
// a heartbeat while they lead. Proves that exactly one leads, that a killed, stalled or stopped
// leader is replaced in time, and that a stalled leader never writes after its successor took over.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import type { Lease } from '../../src/runtime/leaderelection/elector.ts';
import { Resources, type KubeObject } from '../../src/runtime/api/meta.ts';
import { createNamespace, deleteNamespace, testSandbox, uniqueName } from '../helpers/cluster.ts';
import { holdsFor, sleep, waitFor } from '../helpers/wait.ts';

// The fixture's timings.
const leaseDurationMs = 3000;
const maxRetryMs = 500 * 2.2; // retry period with client-go's maximum jitter

const fixture = fileURLToPath(new URL('../fixtures/elector.ts', import.meta.url));
const sandbox = testSandbox();
const client = sandbox.client();
const replicas: Replica[] = [];
let ns: string;

interface Said {
  fixture: string;
  at: number;
  leader?: string;
}

class Replica {
  readonly identity: string;
  readonly child: ChildProcess;
  readonly said: Said[] = [];
  readonly output: string[] = [];
  readonly exited: Promise<unknown[]>;

  constructor(identity: string, lease: string, configMap: string, namespace = ns) {
    this.identity = identity;
    // process.execPath is the Node 24 this test runs on (npx node / npm scripts).
    this.child = spawn(
      process.execPath,
      [fixture, sandbox.kubeconfigPath, namespace, lease, identity, configMap],
      {
        stdio: ['pipe', 'pipe', 'pipe'],
        // The elector's own lines (warnings, the release) are what some tests read; the test
        // driver's default level (error) would hide them, and those checks could never fail.
        env: { ...process.env, BERTH_LOG_LEVEL: 'info' },
      },
    );
    // 'close', not 'exit': its output read to the end, the last lines it printed included.
    this.exited = once(this.child, 'close');
    for (const stream of [this.child.stdout!, this.child.stderr!]) {
      createInterface({ input: stream }).on('line', (line) => {
        this.output.push(line);
        if (this.output.length > 200) this.output.shift();
        try {
          const parsed = JSON.parse(line) as Partial<Said>;
          if (parsed.fixture) this.said.push(parsed as Said);
        } catch {
          // not one of the fixture's lines
        }
      });
    }
  }

  last(what: string): Said | undefined {
    return this.said.findLast((s) => s.fixture === what);
  }

  running(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  async kill(): Promise<void> {
    this.child.kill('SIGKILL');
    await this.exited;
  }
}

function startPair(lease: string, configMap: string): [Replica, Replica] {
  const pair: [Replica, Replica] = [
    new Replica(`${lease}-a`, lease, configMap),
    new Replica(`${lease}-b`, lease, configMap),
  ];
  replicas.push(...pair);
  return pair;
}

/** `<identity>-last` → { seq, at } of that replica's last heartbeat, as stored in the ConfigMap. */
async function heartbeats(configMap: string): Promise<Map<string, { seq: number; at: number }>> {
  const cm = await client.get<KubeObject & { data?: Record<string, string> }>(
    Resources.configMaps,
    configMap,
    ns,
  );
  const beats = new Map<string, { seq: number; at: number }>();
  for (const [key, value] of Object.entries(cm.data ?? {})) {
    const [seq, at] = value.split('@').map(Number);
    beats.set(key.replace(/-last$/, ''), { seq: seq!, at: at! });
  }
  return beats;
}

const readLease = (name: string) => client.get<Lease>(Resources.leases, name, ns);

/** Starts two replicas and waits until exactly one leads and writes; returns [leader, follower]. */
async function electOne(): Promise<{ lease: string; configMap: string; leader: Replica; follower: Replica }> {
  const lease = uniqueName('lease');
  const configMap = uniqueName('beats');
  await client.create(Resources.configMaps, {
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: { name: configMap, namespace: ns },
    data: {},
  });
  const pair = startPair(lease, configMap);
  const leader = await waitFor('one replica leading', () => pair.find((r) => r.last('leading')), {
    timeoutMs: 20_000,
    observe: () => pair.map((r) => r.output.slice(-10)),
  });
  const follower = pair.find((r) => r !== leader)!;
  await waitFor('a heartbeat from the leader', async () =>
    (await heartbeats(configMap)).has(leader.identity),
  );
  await waitFor(
    'the follower seeing the leader',
    () => follower.last('newLeader')?.leader === leader.identity,
    {
      observe: () => follower.output.slice(-10),
    },
  );
  await holdsFor(
    'only the leader holds the lease and writes',
    async () => {
      const [beats, held] = await Promise.all([heartbeats(configMap), readLease(lease)]);
      return beats.size === 1 && held.spec?.holderIdentity === leader.identity && !follower.last('leading');
    },
    1500,
  );
  return { lease, configMap, leader, follower };
}

/** The new holder's acquireTime, once `who` holds the lease. */
async function acquiredBy(lease: string, who: Replica): Promise<number> {
  const held = await waitFor(`${who.identity} holding the lease`, async () => {
    const l = await readLease(lease);
    return l.spec?.holderIdentity === who.identity ? l : undefined;
  });
  return Date.parse(held.spec!.acquireTime!);
}

before(async () => {
  ns = await createNamespace(client, 'le');
});

after(async () => {
  await Promise.all(replicas.map((r) => r.kill()));
  await deleteNamespace(client, ns);
  client.close();
});

describe('leader election on a Lease', () => {
  test('a killed leader is replaced within the lease duration and never wrote after the takeover', async (t) => {
    const { lease, configMap, leader, follower } = await electOne();
    const killedAt = Date.now();
    await leader.kill();

    const took = await waitFor('the follower leading', () => follower.last('leading'), { timeoutMs: 10_000 });
    const limit = leaseDurationMs + 2 * maxRetryMs + 1000;
    t.diagnostic(`takeover ${took.at - killedAt} ms after the kill`);
    assert.ok(took.at - killedAt < limit, `takeover after ${took.at - killedAt} ms, limit ${limit} ms`);
    const acquiredAt = await acquiredBy(lease, follower);
    await waitFor('a heartbeat from the new leader', async () =>
      (await heartbeats(configMap)).has(follower.identity),
    );
    const old = (await heartbeats(configMap)).get(leader.identity)!;
    assert.ok(old.at < acquiredAt, `old leader wrote at ${old.at}, new leader acquired at ${acquiredAt}`);
  });

  test('a stalled leader stops writing and steps down when it resumes after losing the lease', async (t) => {
    const { lease, configMap, leader, follower } = await electOne();
    leader.child.kill('SIGSTOP');
    const stalledAt = Date.now();
    try {
      await waitFor('the follower leading', () => follower.last('leading'), { timeoutMs: 10_000 });
      const acquiredAt = await acquiredBy(lease, follower);
      t.diagnostic(`takeover ${acquiredAt - stalledAt} ms after the stall`);
      const resumedAt = Date.now();
      leader.child.kill('SIGCONT');

      // It steps down at once: its last renew is older than the renew deadline.
      const stepped = await waitFor('the old leader stepping down', () => {
        const s = leader.last('stopped');
        return s && s.at >= resumedAt ? s : undefined;
      });
      t.diagnostic(`stepped down ${stepped.at - resumedAt} ms after resuming`);
      assert.ok(stepped.at - resumedAt < 1000, `stepped down ${stepped.at - resumedAt} ms after resuming`);
      // Give a wrongly resumed heartbeat every chance to land, then look for it.
      const earlier = await waitFor('a heartbeat from the new leader', async () =>
        (await heartbeats(configMap)).get(follower.identity),
      );
      await sleep(1500);
      const beats = await heartbeats(configMap);
      const old = beats.get(leader.identity)!;
      assert.ok(old.at < stalledAt, `old leader wrote at ${old.at} after stalling at ${stalledAt}`);
      assert.ok(old.at < acquiredAt, `old leader wrote at ${old.at}, new leader acquired at ${acquiredAt}`);
      assert.ok(beats.get(follower.identity)!.seq > earlier.seq, 'the new leader keeps writing');
      assert.equal((await readLease(lease)).spec?.holderIdentity, follower.identity);
      assert.equal(leader.said.filter((s) => s.fixture === 'leading').length, 1, 'the old leader led once');
      assert.ok(leader.running(), 'the old leader keeps running as a candidate');
    } finally {
      leader.child.kill('SIGCONT');
    }
  });

  test('a leader stopped with SIGTERM releases the lease and the follower takes over at once', async (t) => {
    const { lease, leader, follower } = await electOne();
    const stoppedAt = Date.now();
    leader.child.kill('SIGTERM');
    const [code] = await leader.exited;
    assert.equal(code, 0);
    assert.ok(leader.last('stopped'), 'onStoppedLeading ran');

    const took = await waitFor('the follower leading', () => follower.last('leading'), { timeoutMs: 10_000 });
    // Without the release the follower would wait a full lease duration after the last renew.
    t.diagnostic(`takeover ${took.at - stoppedAt} ms after SIGTERM`);
    assert.ok(took.at - stoppedAt < 2000, `takeover after ${took.at - stoppedAt} ms`);
    await acquiredBy(lease, follower);
  });

  test('the release survives a Lease changed since the leader last wrote it (a renew cut short by the stop)', async (t) => {
    const { lease, leader, follower } = await electOne();
    // Moves the Lease's resourceVersion without touching its spec, as a renew that landed after
    // the stop had cancelled it would; the leader's next write must not rely on its old copy.
    await client.patch(
      Resources.leases,
      lease,
      { metadata: { annotations: { 'test/touched': 'yes' } } },
      { namespace: ns },
    );
    const stoppedAt = Date.now();
    leader.child.kill('SIGTERM');
    const [code] = await leader.exited;
    assert.equal(code, 0);
    assert.ok(
      !leader.output.some((line) => line.includes('cannot release leader lease')),
      leader.output.filter((line) => line.includes('release')).join('\n'),
    );
    const took = await waitFor('the follower leading', () => follower.last('leading'), { timeoutMs: 10_000 });
    t.diagnostic(`takeover ${took.at - stoppedAt} ms after SIGTERM`);
    assert.ok(took.at - stoppedAt < 2000, `takeover after ${took.at - stoppedAt} ms`);
  });

  test('a Lease namespace that does not exist is said as a warning, and the replica leads once it exists', async () => {
    const missing = uniqueName('le-missing');
    const lease = uniqueName('lease');
    const replica = new Replica(`${lease}-solo`, lease, uniqueName('beats'), missing);
    replicas.push(replica);
    try {
      const warned = await waitFor(
        'the warning that no replica can lead',
        () => replica.output.find((line) => line.includes('cannot create the leader lease')),
        { timeoutMs: 20_000, observe: () => replica.output.slice(-10) },
      );
      assert.match(warned, /"level":"warn"/);
      assert.ok(!replica.last('leading'));
      await client.create(Resources.namespaces, {
        apiVersion: 'v1',
        kind: 'Namespace',
        metadata: { name: missing },
      });
      await waitFor('the replica leading', () => replica.last('leading'), { timeoutMs: 20_000 });
    } finally {
      await replica.kill();
      await deleteNamespace(client, missing);
    }
  });
});
