import assert from 'node:assert/strict';
import { test } from 'node:test';
import { z } from 'zod';
import { definePolicy } from '../../../src/policy/crd.ts';
import { berthKind } from '../../../src/policy/kinds.ts';
import {
  conditionTone,
  PolicyStatusWriter,
  type NodeLoop,
  type PolicyObject,
  type StatusReport,
  type Warning,
} from '../../../src/policy/status.ts';
import { Controller, type Result } from '../../../src/runtime/controller/controller.ts';
import type { KubeClient } from '../../../src/runtime/client/client.ts';
import type { KubeObject } from '../../../src/runtime/api/meta.ts';
import { rootLogger } from '../../../src/runtime/observability/log.ts';

const quiet = rootLogger.child({}, { level: 'silent' });
const Trial = definePolicy({
  ref: { ...berthKind('TrialPolicy', 'Cluster'), resource: 'trialpolicies' },
  shortNames: [],
  spec: z.object({}),
  counts: { seen: 'Nodes seen.', held: 'Nodes held.' },
  printerColumns: [],
});
type Count = 'seen' | 'held';
type Obj = PolicyObject<Count>;
/** A policy's standing on one node. */
interface Standing {
  held: boolean;
  problem?: string;
}

const policy = (name: string, generation = 1, status?: Obj['status']): Obj => ({
  apiVersion: 'berth.dev/v1alpha1',
  kind: 'TrialPolicy',
  metadata: { name, uid: `uid-${name}`, generation },
  ...(status ? { status } : {}),
});

/** What the trial policy reports: counts, and Invalid when a node says there is a problem. */
function trialReport(_obj: Obj, standings: Standing[]): StatusReport<Count> {
  const problem = standings.find((s) => s.problem)?.problem ?? '';
  const held = standings.filter((s) => s.held).length;
  return {
    counts: { seen: standings.length, held: held || undefined },
    conditions: [
      { type: 'Invalid', status: !!problem, reason: problem ? 'InvalidSpec' : 'Valid', message: problem },
      // A change of the counts alone must still be written: they are not in any message.
      {
        type: 'Ready',
        status: !problem,
        reason: problem ? 'Invalid' : 'Holding',
        message: problem || 'holding',
      },
    ],
  };
}

let controllers = 0;

function harness(o: {
  nodes: string[];
  objects: Obj[];
  warnings?: Warning[];
  eventAction?: string;
  report?: (obj: Obj, standings: Standing[]) => StatusReport<Count> | Result;
}) {
  const n = ++controllers;
  const writes: { name: string; status: Record<string, unknown>; fieldManager: string | undefined }[] = [];
  const events: { name: string; type: string; reason: string; action: string; note: string }[] = [];
  const objects = new Map(o.objects.map((p) => [p.metadata!.name!, p]));
  const reports: ((name: string) => void)[] = [];
  const keysAsked: (() => void)[] = [];
  const client = {
    apply: (_ref: unknown, body: KubeObject, opts: { fieldManager?: string }) => {
      writes.push({
        name: body.metadata!.name!,
        status: body['status'] as Record<string, unknown>,
        fieldManager: opts.fieldManager,
      });
      return Promise.resolve(body);
    },
  } as unknown as KubeClient;
  const loop: NodeLoop = {
    manager: { add: () => {}, client: () => client },
    nodes: {
      hasSynced: () => true,
      keys: () => {
        keysAsked.splice(0).forEach((f) => f());
        return o.nodes;
      },
    },
    events: {
      event: (obj, type, reason, action, note) =>
        events.push({ name: (obj as KubeObject).metadata!.name!, type, reason, action, note }),
    },
    log: quiet,
  };
  const source = {
    ref: Trial.ref,
    addEventHandler: () => {},
    waitForSync: async () => {},
    get: (name: string) => objects.get(name),
  };
  class TrialStatusWriter extends PolicyStatusWriter<Obj, Standing, Count> {
    protected report(obj: Obj, standings: Standing[]) {
      const r = (o.report ?? trialReport)(obj, standings);
      reports.splice(0).forEach((f) => f(obj.metadata!.name!));
      return r;
    }
  }
  const writer = new TrialStatusWriter(loop, source, {
    name: `trial-status-${n}`,
    fieldManager: 'berth-trial',
    delayMs: 0,
    warnings: o.warnings ?? [{ type: 'Invalid', status: 'True' }],
    ...(o.eventAction ? { eventAction: o.eventAction } : {}),
  });
  // The node loop whose first pass the writer waits for.
  new Controller({
    name: `trial-node-${n}`,
    reconciler: { reconcile: async () => {} },
    firstPass: writer.firstPass,
  });
  return {
    writer,
    writes,
    events,
    objects,
    /** Resolves once the next report has been made and its write (if any) issued. */
    reported: () => new Promise<string>((resolve) => reports.push(resolve)),
    /** Resolves when the first-pass check next asks for the nodes. */
    asked: () => new Promise<void>((resolve) => keysAsked.push(resolve)),
    /** The object as the informer would have it after the last write. */
    observe(name: string) {
      const last = writes.findLast((w) => w.name === name)!;
      objects.set(name, { ...objects.get(name)!, status: last.status as Obj['status'] });
    },
  };
}

test(
  'no status before every node has a standing; then counts and conditions over all of them',
  { timeout: 5000 },
  async () => {
    const h = harness({ nodes: ['n1', 'n2'], objects: [policy('p', 4)] });
    await h.writer.controller.start();
    try {
      const looked = Promise.race([h.asked(), h.reported()]);
      h.writer.set('n1', new Map([['p', { held: true }]]));
      await looked;
      assert.equal(h.writes.length, 0, 'nothing written from n1 alone');
      assert.equal(h.writer.firstPassDone(), false, 'n2 has no standing yet');
      const reported = h.reported();
      h.writer.set('n2', new Map([['p', { held: false }]]));
      assert.equal(h.writer.firstPassDone(), true);
      // The requeue of the first, partial look comes too late to matter: the second finds both nodes.
      h.writer.controller.queue.add('p');
      await reported;
      assert.equal(h.writes.length, 1, 'one write, never a partial one');
      const [w] = h.writes;
      assert.equal(w!.fieldManager, 'berth-trial');
      assert.equal(w!.status['observedGeneration'], 4);
      assert.equal(w!.status['seen'], 2);
      assert.equal(w!.status['held'], 1);
      const conditions = w!.status['conditions'] as {
        type: string;
        status: string;
        observedGeneration: number;
      }[];
      assert.deepEqual(
        conditions.map((c) => [c.type, c.status, c.observedGeneration]),
        [
          ['Invalid', 'False', 4],
          ['Ready', 'True', 4],
        ],
      );
    } finally {
      await h.writer.controller.stop();
    }
  },
);

test(
  'written only when something changed; a count it leaves out is compared as absent',
  { timeout: 5000 },
  async () => {
    const h = harness({ nodes: ['n1'], objects: [policy('p')] });
    await h.writer.controller.start();
    try {
      let reported = h.reported();
      h.writer.set('n1', new Map([['p', { held: true }]]));
      await reported;
      assert.equal(h.writes.length, 1);
      h.observe('p');

      reported = h.reported();
      h.writer.controller.queue.add('p');
      await reported;
      assert.equal(h.writes.length, 1, 'the same status again: no write');

      reported = h.reported();
      h.writer.set('n1', new Map([['p', { held: false }]]));
      await reported;
      assert.equal(h.writes.length, 2, 'held went');
      assert.equal('held' in h.writes[1]!.status, false, 'an undefined count is left out');
      assert.equal(h.writes[1]!.status['seen'], 1);
      h.observe('p');

      reported = h.reported();
      h.objects.set('p', { ...h.objects.get('p')!, metadata: { ...policy('p').metadata, generation: 2 } });
      h.writer.controller.queue.add('p');
      await reported;
      assert.equal(h.writes.length, 3, 'a new generation is observed');
      assert.equal(h.writes[2]!.status['observedGeneration'], 2);
    } finally {
      await h.writer.controller.stop();
    }
  },
);

test(
  'a report that asks to look again later writes nothing; a policy with no object is left alone',
  { timeout: 5000 },
  async () => {
    let wait = true;
    const h = harness({
      nodes: ['n1'],
      objects: [policy('p')],
      report: (obj, standings) => (wait ? { requeueAfterMs: 60_000 } : trialReport(obj, standings)),
    });
    await h.writer.controller.start();
    try {
      let reported = h.reported();
      h.writer.set(
        'n1',
        new Map([
          ['p', { held: true }],
          ['gone', { held: true }],
        ]),
      );
      await reported;
      assert.equal(h.writes.length, 0);
      wait = false;
      reported = h.reported();
      h.writer.controller.queue.add('p');
      await reported;
      assert.deepEqual(
        h.writes.map((w) => w.name),
        ['p'],
      );
    } finally {
      await h.writer.controller.stop();
    }
  },
);

test(
  'a Warning event when a condition comes to hold or says something new, never again for the same',
  { timeout: 5000 },
  async () => {
    const h = harness({
      nodes: ['n1'],
      objects: [policy('p')],
      warnings: [
        { type: 'Invalid', status: 'True', event: 'InvalidTrial' },
        { type: 'Ready', status: 'False', reason: 'Stuck' },
      ],
      eventAction: 'Validate',
    });
    await h.writer.controller.start();
    const step = async (standing: Standing) => {
      const reported = h.reported();
      h.writer.set('n1', new Map([['p', standing]]));
      await reported;
      h.observe('p');
    };
    try {
      await step({ held: true });
      assert.equal(h.events.length, 0, 'valid: nothing to say');
      await step({ held: true, problem: 'bad size' });
      assert.deepEqual(h.events, [
        { name: 'p', type: 'Warning', reason: 'InvalidTrial', action: 'Validate', note: 'bad size' },
      ]);
      await step({ held: false, problem: 'bad size' });
      assert.equal(h.events.length, 1, 'a count changed, the condition did not: no new event');
      assert.equal(h.writes.length, 3);
      await step({ held: false, problem: 'worse size' });
      assert.deepEqual(
        h.events.map((e) => e.note),
        ['bad size', 'worse size'],
      );
      await step({ held: false });
      assert.equal(h.events.length, 2, 'recovered');
      // Ready was False meanwhile, but with reason Invalid, not the Stuck its warning names: no event.
      assert.equal(h.writes.length, 5);
      assert.ok(h.events.every((e) => e.reason === 'InvalidTrial'));
    } finally {
      await h.writer.controller.stop();
    }
  },
);

/** The keys a writer's (unstarted) controller has queued, taken off the queue. */
async function drain(writer: PolicyStatusWriter<Obj, Standing, Count>): Promise<string[]> {
  const keys: string[] = [];
  while (writer.controller.queue.len() > 0) {
    const item = await writer.controller.queue.get();
    if (item.shutdown) break;
    keys.push(item.key);
    writer.controller.queue.done(item.key);
  }
  return keys.sort();
}

test('set() queues exactly the policies whose standing on the node changed', async () => {
  const { writer } = harness({ nodes: ['n1', 'n2'], objects: [] });
  writer.set(
    'n1',
    new Map([
      ['a', { held: true }],
      ['b', { held: false }],
    ]),
  );
  assert.deepEqual(await drain(writer), ['a', 'b']);
  writer.set(
    'n1',
    new Map([
      ['a', { held: true }],
      ['b', { held: false }],
    ]),
  );
  assert.deepEqual(await drain(writer), [], 'equal standings, new objects: nothing');
  writer.set(
    'n1',
    new Map([
      ['a', { held: true }],
      ['b', { held: true }],
      ['c', { held: false }],
    ]),
  );
  assert.deepEqual(await drain(writer), ['b', 'c']);
  writer.set('n2', new Map([['a', { held: true }]]));
  assert.deepEqual(await drain(writer), ['a'], 'another node');
  assert.deepEqual([...(writer.get('n1')?.keys() ?? [])], ['a', 'b', 'c']);
  writer.set('n1', undefined);
  assert.deepEqual(await drain(writer), ['a', 'b', 'c'], 'a node gone changes every policy it stood in');
  assert.equal(writer.get('n1'), undefined);
});

// Random standings over a few nodes and policies: what set() queues is always exactly the policies
// whose standing on that node differs from the one recorded before (compared as JSON, independently).
test('generated: set() queues exactly the changed policies', async () => {
  const h = harness({ nodes: [], objects: [] });
  let seed = 11;
  const random = (n: number) => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed % n;
  };
  const model = new Map<string, Map<string, string>>();
  let changes = 0;
  for (let step = 0; step < 500; step++) {
    const node = `n${random(4)}`;
    const gone = random(10) === 0;
    const next = new Map<string, Standing>();
    if (!gone)
      for (const p of ['a', 'b', 'c', 'd'])
        if (random(3) > 0)
          next.set(p, { held: random(2) === 0, ...(random(4) === 0 ? { problem: 'x' } : {}) });
    const before = model.get(node) ?? new Map<string, string>();
    const after = new Map([...next].map(([p, s]) => [p, JSON.stringify(s)]));
    const expected = [...new Set([...before.keys(), ...after.keys()])]
      .filter((p) => before.get(p) !== after.get(p))
      .sort();
    if (gone) model.delete(node);
    else model.set(node, after);
    h.writer.set(node, gone ? undefined : next);
    assert.deepEqual(await drain(h.writer), expected, `step ${step}`);
    changes += expected.length;
  }
  assert.ok(changes > 100, 'the generated steps change standings often');
});

test('conditionTone: a condition whose True is bad is bad only when True; a positive one when False', () => {
  for (const type of ['Invalid', 'Conflicting', 'InspectionsFailing', 'StartedEarly'])
    assert.deepEqual(
      ['True', 'False', 'Unknown'].map((s) => conditionTone(type, s)),
      ['bad', 'good', 'unknown'],
      type,
    );
  for (const type of ['Ready', 'Available', 'Reachable', 'RequiredPodsSchedulable', 'QuotaGranted'])
    assert.deepEqual(
      ['True', 'False', 'Unknown', ''].map((s) => conditionTone(type, s)),
      ['good', 'bad', 'unknown', 'unknown'],
      type,
    );
});
