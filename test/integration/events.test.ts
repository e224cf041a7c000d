// The event recorder against the real apiserver: the Events it writes, how repeats collapse into
// one Event's series in a handful of writes, and that API errors never reach the caller.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { Event } from '../../src/runtime/events/event.ts';
import { EventRecorder } from '../../src/runtime/events/recorder.ts';
import { eventMetrics } from '../../src/runtime/observability/metrics.ts';
import { KubeClient, type RequestOptions } from '../../src/runtime/client/client.ts';
import { Resources, type KubeObject } from '../../src/runtime/api/meta.ts';
import { nodeManifests } from '../../src/sandbox/nodes.ts';
import {
  createNamespace,
  deleteNamespace,
  deleteNodes,
  testSandbox,
  uniqueName,
} from '../helpers/cluster.ts';
import { sleep, waitFor } from '../helpers/wait.ts';

/** Counts the writes the recorder sends, so the tests can bound them. */
class CountingClient extends KubeClient {
  readonly writes: string[] = [];

  override request<T = unknown>(method: string, path: string, opts?: RequestOptions): Promise<T> {
    if (method !== 'GET') this.writes.push(`${method} ${path}`);
    return super.request<T>(method, path, opts);
  }
}

const sandbox = testSandbox();
const client = sandbox.client();
const recorders: EventRecorder[] = [];
const nodes: string[] = [];
const defaultNamespaceEvents: string[] = [];
let ns: string;

function recorder(
  opts: { client?: KubeClient; seriesUpdateIntervalMs?: number; spamBurst?: number; maxQueue?: number } = {},
) {
  const r = new EventRecorder({
    client: opts.client ?? client,
    reportingController: 'berth.dev/test',
    reportingInstance: 'test-0',
    seriesUpdateIntervalMs: opts.seriesUpdateIntervalMs ?? 200,
    spamBurst: opts.spamBurst,
    maxQueue: opts.maxQueue,
  });
  recorders.push(r);
  return r;
}

async function configMap(): Promise<KubeObject> {
  return client.create(Resources.configMaps, {
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: { name: uniqueName('cm'), namespace: ns },
    data: { a: '1' },
  });
}

/** Events about the object named `name` in `namespace`. */
async function eventsAbout(name: string, namespace = ns): Promise<Event[]> {
  const list = await client.list<Event>(Resources.events, { namespace });
  return list.items.filter((e) => e.regarding?.name === name);
}

before(async () => {
  ns = await createNamespace(client, 'events');
});

after(async () => {
  for (const r of recorders) r.stop();
  await Promise.all(defaultNamespaceEvents.map((n) => client.delete(Resources.events, n, 'default')));
  await deleteNodes(client, nodes);
  await deleteNamespace(client, ns);
  client.close();
});

describe('the event recorder', () => {
  test('an event about a ConfigMap is written with the reporting and regarding fields', async () => {
    const cm = await configMap();
    const r = recorder();
    r.event(cm, 'Normal', 'Synced', 'Reconcile', 'synced the config map');
    await r.flush();
    const [event, ...more] = await eventsAbout(cm.metadata!.name!);
    assert.ok(event, 'the event exists');
    assert.deepEqual(more, []);
    assert.equal(event.metadata?.namespace, ns);
    assert.ok(event.metadata?.name?.startsWith(`${cm.metadata!.name}.`), event.metadata?.name);
    assert.match(event.eventTime, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/);
    assert.equal(event.series, undefined);
    assert.deepEqual(
      {
        type: event.type,
        reason: event.reason,
        action: event.action,
        note: event.note,
        reportingController: event.reportingController,
        reportingInstance: event.reportingInstance,
        regarding: event.regarding,
      },
      {
        type: 'Normal',
        reason: 'Synced',
        action: 'Reconcile',
        note: 'synced the config map',
        reportingController: 'berth.dev/test',
        reportingInstance: 'test-0',
        regarding: {
          apiVersion: 'v1',
          kind: 'ConfigMap',
          name: cm.metadata!.name,
          namespace: ns,
          uid: cm.metadata!.uid,
          resourceVersion: cm.metadata!.resourceVersion,
        },
      },
    );
  });

  test('100 quick repeats are one Event with series.count 100 after flush', async () => {
    const cm = await configMap();
    const counting = new CountingClient(client.access);
    try {
      const r = recorder({ client: counting, seriesUpdateIntervalMs: 30_000 });
      for (let i = 0; i < 100; i++) r.event(cm, 'Warning', 'Unplaceable', 'Place', 'no node matches');
      await r.flush();
      const events = await eventsAbout(cm.metadata!.name!);
      assert.equal(events.length, 1);
      assert.equal(events[0]!.series?.count, 100);
      assert.ok(counting.writes.length <= 2, `writes: ${counting.writes.join(', ')}`);
    } finally {
      counting.close();
    }
  });

  test('repeats over time are patched into the series at most once per interval', async (t) => {
    const cm = await configMap();
    const counting = new CountingClient(client.access);
    try {
      const r = recorder({ client: counting, seriesUpdateIntervalMs: 200 });
      const started = Date.now();
      for (let i = 0; i < 100; i++) {
        r.event(cm, 'Normal', 'Labelled', 'Label', 'labelled the node');
        if (i % 10 === 9) await sleep(50);
      }
      // No flush: the recorder patches the last count when the interval comes round.
      const [event] = await waitFor(
        'series.count 100',
        async () => {
          const events = await eventsAbout(cm.metadata!.name!);
          return events.length === 1 && events[0]!.series?.count === 100 ? events : undefined;
        },
        { timeoutMs: 5000, observe: () => eventsAbout(cm.metadata!.name!) },
      );
      const elapsed = Date.now() - started;
      const creates = counting.writes.filter((w) => w.startsWith('POST'));
      const patches = counting.writes.filter((w) => w.startsWith('PATCH'));
      t.diagnostic(`${creates.length} create, ${patches.length} patches in ${elapsed} ms`);
      assert.equal(creates.length, 1, `writes: ${counting.writes.join(', ')}`);
      assert.ok(patches.length <= Math.ceil(elapsed / 200) + 1, `${patches.length} patches in ${elapsed} ms`);
      assert.ok(patches.length >= 1);
      assert.ok(
        Date.parse(event!.series!.lastObservedTime) >= Date.parse(event!.eventTime),
        'lastObservedTime is the last occurrence',
      );
    } finally {
      counting.close();
    }
  });

  test('a Warning with a different reason is a separate Event', async () => {
    const cm = await configMap();
    const r = recorder();
    r.event(cm, 'Normal', 'Synced', 'Reconcile', 'synced');
    r.event(cm, 'Warning', 'SyncFailed', 'Reconcile', 'sync failed');
    r.event(cm, 'Normal', 'Synced', 'Reconcile', 'synced');
    await r.flush();
    const events = await eventsAbout(cm.metadata!.name!);
    const byReason = new Map(events.map((e) => [e.reason, e]));
    assert.equal(events.length, 2);
    assert.equal(byReason.get('Synced')?.type, 'Normal');
    assert.equal(byReason.get('Synced')?.series?.count, 2);
    assert.equal(byReason.get('SyncFailed')?.type, 'Warning');
    assert.equal(byReason.get('SyncFailed')?.series, undefined);
  });

  test('an event about a cluster-scoped Node lands in namespace default', async () => {
    const [manifest] = nodeManifests({ prefix: uniqueName('ev-node'), count: 1 });
    const node = await client.create(Resources.nodes, manifest!);
    nodes.push(node.metadata!.name!);
    const r = recorder();
    r.event(node, 'Normal', 'Gated', 'Taint', 'startup gate applied');
    await r.flush();
    const [event] = await eventsAbout(node.metadata!.name!, 'default');
    assert.ok(event, 'the event is in namespace default');
    defaultNamespaceEvents.push(event.metadata!.name!);
    assert.equal(event.regarding.kind, 'Node');
    assert.equal(event.regarding.namespace, undefined);
    assert.equal(event.regarding.uid, node.metadata!.uid);
  });

  test('a series whose Event was deleted starts a new Event', async () => {
    const cm = await configMap();
    const r = recorder();
    r.event(cm, 'Normal', 'Synced', 'Reconcile', 'synced');
    await r.flush();
    const [first] = await eventsAbout(cm.metadata!.name!);
    await client.delete(Resources.events, first!.metadata!.name!, ns);
    r.event(cm, 'Normal', 'Synced', 'Reconcile', 'synced');
    await r.flush();
    const events = await eventsAbout(cm.metadata!.name!);
    assert.equal(events.length, 1);
    assert.notEqual(events[0]!.metadata!.name, first!.metadata!.name);
    assert.equal(events[0]!.series?.count, 2);
  });

  test('the spam filter drops new Events about one object beyond the burst', async () => {
    const cm = await configMap();
    const r = recorder({ spamBurst: 3 });
    for (let i = 0; i < 5; i++) r.event(cm, 'Normal', `Step${i}`, 'Reconcile', `step ${i}`);
    // Repeats of an admitted series are still counted.
    r.event(cm, 'Normal', 'Step0', 'Reconcile', 'step 0');
    await r.flush();
    const events = await eventsAbout(cm.metadata!.name!);
    assert.deepEqual(events.map((e) => e.reason).sort(), ['Step0', 'Step1', 'Step2']);
    assert.equal(events.find((e) => e.reason === 'Step0')?.series?.count, 2);
    assert.equal(r.stats.spamDropped, 2);
  });

  test('a full queue drops the oldest Events and counts them in berth_events_dropped_total', async () => {
    const dropped = async () =>
      (await eventMetrics.dropped.get()).values.find(
        (v) => v.labels.controller === 'berth.dev/test' && v.labels.reason === 'queue_full',
      )?.value ?? 0;
    const before = await dropped();
    const r = recorder({ maxQueue: 2 });
    const cms = await Promise.all(Array.from({ length: 5 }, () => configMap()));
    // All at once, before the sender takes any: two fit, the three oldest make room.
    for (const cm of cms) r.event(cm, 'Normal', 'Made', 'Reconcile', `made ${cm.metadata!.name}`);
    await r.flush();
    assert.equal(r.stats.queueDropped, 3);
    assert.equal((await dropped()) - before, 3);
    const written = await Promise.all(cms.map(async (cm) => (await eventsAbout(cm.metadata!.name!)).length));
    assert.deepEqual(written, [0, 0, 0, 1, 1]);
  });

  test('an API error is logged and counted, never thrown', async () => {
    const cm = await configMap();
    const limited = KubeClient.fromFile(await sandbox.mintUser(uniqueName('no-events')));
    try {
      const r = recorder({ client: limited });
      assert.doesNotThrow(() => r.event(cm, 'Warning', 'Denied', 'Reconcile', 'no rights'));
      await r.flush();
      assert.equal(r.stats.failedWrites, 1);
      assert.deepEqual(await eventsAbout(cm.metadata!.name!), []);
    } finally {
      limited.close();
    }
  });
});
