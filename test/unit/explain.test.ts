// berth explain on a cluster without Berth's CRDs: every kind it cannot list reads as no objects,
// and the explanation says which CRDs are missing, instead of failing whole.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Command } from 'commander';
import { capabilities } from '../../src/capabilities.ts';
import { clusterControllers, controllersOption, runningCapabilities } from '../../src/capability.ts';
import { berthProgram } from '../../src/cli/program.ts';
import { explainerOf, explainObject } from '../../src/explain.ts';
import { ApiError, type KubeClient } from '../../src/runtime/client/client.ts';
import type { ResourceRef } from '../../src/runtime/api/meta.ts';

const node = {
  apiVersion: 'v1',
  kind: 'Node',
  metadata: { name: 'n1', labels: { 'kubernetes.io/hostname': 'n1' } },
  spec: {},
  status: {},
};

/** A cluster that serves the built-in kinds (empty) and answers `custom` for Berth's. */
const cluster = (custom: (ref: ResourceRef) => never): KubeClient =>
  ({
    get: async () => node,
    list: async (ref: ResourceRef) => (ref.group.includes('.') ? custom(ref) : { items: [] }),
  }) as unknown as KubeClient;

const notFound = () => {
  throw new ApiError(404, 'NotFound', 'the server could not find the requested resource', {});
};

test('no CRDs installed: the node is explained, its kinds read as none, and the missing CRDs named', async () => {
  const lines = await explainObject(
    cluster(notFound),
    explainerOf('node')!,
    'n1',
    undefined,
    {},
    'berth-system',
  );
  assert.equal(lines[0], 'Node n1');
  assert.match(lines[1]!, /^Not installed here: .*nodelabelrules\.berth\.dev.*\(read as no objects; install/);
  assert.match(lines[1]!, /nodestartupgates\.berth\.dev/);
  assert.match(lines[1]!, /agentplacements\.berth\.dev/);
  assert.ok(lines.includes('Startup gates: no NodeStartupGate'), lines.join('\n'));
  assert.ok(lines.includes('Agent placement: no AgentPlacement'), lines.join('\n'));
});

test('with the CRDs installed, no such line', async () => {
  const lines = await explainObject(
    cluster(() => ({ items: [] }) as never),
    explainerOf('node')!,
    'n1',
    undefined,
    {},
    'berth-system',
  );
  assert.ok(!lines.some((l) => l.startsWith('Not installed here')), lines.join('\n'));
});

test('each list is read once per explanation, though several capabilities ask for it', async () => {
  const lists: string[] = [];
  const counting = cluster((ref) => {
    lists.push(ref.resource);
    return { items: [] } as never;
  });
  await explainObject(counting, explainerOf('node')!, 'n1', undefined, {}, 'berth-system');
  // The gates and the placements are read for their own lines and for who owns which key.
  assert.ok(lists.includes('nodestartupgates') && lists.includes('agentplacements'), lists.join());
  assert.deepEqual(lists, [...new Set(lists)], lists.join());
});

test('any other refusal (RBAC) still fails the explanation, saying so', async () => {
  const forbidden = () => {
    throw new ApiError(403, 'Forbidden', 'nodestartupgates.berth.dev is forbidden', {});
  };
  await assert.rejects(
    explainObject(cluster(forbidden), explainerOf('node')!, 'n1', undefined, {}, 'berth-system'),
    /forbidden/,
  );
});

test('--controllers: as berth run takes it, defaulting to the cluster controllers; an unknown name is refused', () => {
  const parse = (...args: string[]) => {
    const cmd = new Command()
      .exitOverride()
      .configureOutput({ writeErr: () => {} })
      .addOption(controllersOption(capabilities, 'the controllers'));
    return cmd.parse(args, { from: 'user' }).opts()['controllers'] as string[];
  };
  assert.deepEqual(parse(), clusterControllers(capabilities));
  assert.ok(!parse().includes('cells'), 'a management plane names its own');
  assert.deepEqual(parse('--controllers', ' labels, agents '), ['labels', 'agents']);
  assert.throws(() => parse('--controllers', 'labels,nope'), /unknown controllers: nope \(known: .*labels/);
});

test('berth ui, run, explain and manifests share one --controllers default: the cluster controllers', async () => {
  const program = await berthProgram();
  const defaults = ['run', 'ui', 'manifests', 'explain node', 'explain pod'].map((path) => {
    let c = program;
    for (const name of path.split(' ')) c = c.commands.find((x) => x.name() === name)!;
    return c.options.find((o) => o.long === '--controllers')!.defaultValue as string[];
  });
  for (const d of defaults) assert.deepEqual(d, clusterControllers(capabilities));
});

test('--controllers narrows what explains: the capabilities not run are named, not explained', async () => {
  const lines = await explainObject(
    cluster(() => ({ items: [] }) as never),
    explainerOf('node')!,
    'n1',
    undefined,
    { controllers: ['labels', 'agents'] },
    'berth-system',
  );
  assert.ok(lines.includes('Agent placement: no AgentPlacement'), lines.join('\n'));
  assert.ok(!lines.some((l) => l.startsWith('Startup gates')), lines.join('\n'));
  const off = lines.find((l) => l.startsWith('Not run by this Berth'));
  assert.match(off ?? '', /\(--controllers\): .*gates/);
  assert.doesNotMatch(off!, /labels|agents/);
  assert.deepEqual(
    runningCapabilities(capabilities, { controllers: ['agents', 'labels'] }).map((c) => c.name),
    capabilities.filter((c) => ['labels', 'agents'].includes(c.name)).map((c) => c.name),
    'in the order Berth runs them, not the flag',
  );
});
