// test-driver: alone — it creates the objects the docs name (NodeLabelRule gpu, Cell dfw...), which
// another file's Berth would act on, and their names are the docs', not unique to this file.
//
// Every `berth explain KIND NAME` the docs show for a policy kind, a Cell or a Location, run as a
// user runs it (the real command, the docs' own arguments, against the sandbox) on an object of
// that name: it answers with the object's explanation, in the output the command asked for.
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { parse } from 'yaml';
import { explainerOf } from '../../src/explain.ts';
import { Resources, type ResourceRef } from '../../src/runtime/api/meta.ts';
import { installCrds } from '../../src/cli/install.ts';
import { runBerthCli } from '../helpers/berth.ts';
import { addNodes, deleteNodes, podManifest, testSandbox } from '../helpers/cluster.ts';
import { docsExplainCommands, explainFixtures } from '../helpers/docs.ts';
import { waitFor } from '../helpers/wait.ts';

const sandbox = testSandbox();
const client = sandbox.client();
/** What this file made, deleted last to first. */
const made: (() => Promise<unknown>)[] = [];

/** The flags of `berth explain` that take a value, as the docs use them. */
const VALUED = new Set(['--node', '--pod', '-o', '--output', '-n', '--namespace', '--label-dir']);

/** The object a docs command explains, and the node or pod it asks about. */
function target(args: string[]): { name: string; namespace?: string; node?: string; pod?: string } {
  const flags: Record<string, string> = {};
  const positional: string[] = [];
  for (let i = 2; i < args.length; i++)
    if (VALUED.has(args[i]!)) flags[args[i]!] = args[++i]!;
    else if (!args[i]!.startsWith('-')) positional.push(args[i]!);
  const [first = ''] = positional;
  const [namespace, name] = first.includes('/') ? first.split('/') : [flags['-n'], first];
  return {
    name: name!,
    ...(namespace ? { namespace } : {}),
    ...(flags['--node'] ? { node: flags['--node'] } : {}),
    ...(flags['--pod'] ? { pod: flags['--pod'] } : {}),
  };
}

async function ensureNamespace(name: string): Promise<void> {
  const exists = await client.get(Resources.namespaces, name).then(
    () => true,
    () => false,
  );
  if (exists) return;
  await client.create(Resources.namespaces, { apiVersion: 'v1', kind: 'Namespace', metadata: { name } });
  made.push(() => client.delete(Resources.namespaces, name));
  await waitFor(`service account default in ${name}`, () =>
    client.get(Resources.serviceAccounts, 'default', name).then(
      () => true,
      () => false,
    ),
  );
}

/** Creates what a docs command names: the object, its namespace, the node or pod it asks about. */
async function arrange(kind: string, resource: ResourceRef, t: ReturnType<typeof target>): Promise<void> {
  if (t.namespace) await ensureNamespace(t.namespace);
  if (t.node) {
    const [, prefix, start] = /^(.*)-(\d+)$/.exec(t.node)!;
    const nodes = await addNodes(client, { prefix: prefix!, start: Number(start), count: 1 });
    made.push(() => deleteNodes(client, nodes));
  }
  if (t.pod) {
    const [ns, pod] = t.pod.split('/') as [string, string];
    await ensureNamespace(ns);
    await client.create(Resources.pods, podManifest({ name: pod, namespace: ns, labels: { app: 'web' } }));
    made.push(() => client.delete(Resources.pods, pod, ns));
  }
  await client.apply(
    resource,
    {
      apiVersion: `${resource.group}/${resource.version}`,
      kind: resource.kind,
      metadata: { name: t.name, ...(t.namespace ? { namespace: t.namespace } : {}) },
      spec: explainFixtures[kind]!(t.name),
    },
    { fieldManager: 'test-author', force: true },
  );
  made.push(() => client.delete(resource, t.name, t.namespace));
}

after(async () => {
  for (const undo of made.reverse()) await undo().catch(() => {});
  client.close();
});

test('every berth explain of a policy kind, Cell or Location the docs show answers as they say', async () => {
  await installCrds(client);
  const shown = docsExplainCommands().filter(
    ({ args }) => (explainerOf(args[1]!)?.name ?? '') in explainFixtures,
  );
  const kinds = new Set(shown.map(({ args }) => explainerOf(args[1]!)!.name));
  assert.deepEqual([...kinds].sort(), Object.keys(explainFixtures).sort(), 'the docs show each kind');
  const seen = new Set<string>();
  for (const { file, args } of shown) {
    const e = explainerOf(args[1]!)!;
    const t = target(args);
    const id = `${e.name} ${t.namespace ?? ''}/${t.name}`;
    if (!seen.has(id)) await arrange(e.name, e.resource, t);
    seen.add(id);
    const r = runBerthCli([...args, `--kubeconfig=${sandbox.kubeconfigPath}`]);
    const what = `${file}: berth ${args.join(' ')}`;
    assert.equal(r.status, 0, `${what} exited ${r.status}: ${r.stderr}`);
    const title = `${e.resource.kind} ${t.namespace ? `${t.namespace}/` : ''}${t.name}`;
    const output = args.includes('-o') ? args[args.indexOf('-o') + 1] : undefined;
    if (output) {
      const x = parse(r.stdout) as { kind: string; name: string; lines: string[] };
      assert.equal(`${x.kind} ${t.namespace ? `${t.namespace}/` : ''}${x.name}`, title, what);
      assert.ok(Array.isArray(x.lines), `${what}: a structured explanation`);
    } else assert.equal(r.stdout.split('\n')[0], title, what);
    // What the docs say the command shows of the node or pod asked about.
    if (t.node) assert.match(r.stdout, new RegExp(`Node ${t.node}`), what);
    if (t.pod) assert.match(r.stdout, new RegExp(`Pod ${t.pod}`), what);
  }
});
