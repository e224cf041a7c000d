// The apiserver's CPU per write, for each form of write Berth makes on its hot paths:
// `npm run bench:writes -- --writes 1000`.
// Against the sandbox's own apiserver (and etcd): for each form, `--lanes` writers (16) each write
// their own object in turn (so that no two writes of a form contend for one object) until
// `--writes` writes are answered; the kube-apiserver's and etcd's CPU time (/proc/PID/stat) over
// them, less what they use idle (measured over 10 s first) for as long, divided by the writes.
// Every write changes something (an annotation or a condition's message takes the write's number),
// as Berth's do: a write that changes nothing is not what is measured.
// The forms:
// - a Node (core, watched by the scheduler, kube-controller-manager and kwok): server-side apply
//   (Berth's node writer: agents' claims, derived labels), merge patch, JSON patch, update (PUT of
//   the last answer; a conflict re-reads and counts), and apply and merge patch again once 30 other
//   field managers own annotations on it (managedFields about five times larger), against the same
//   on a node that carries those 120 annotations under one manager (the larger object alone);
// - an Instance (a Berth CRD with a CEL rule on its template) and the same CRD copied without its
//   rules (group nocel.berth.dev): create; status by server-side apply, merge patch, JSON patch and
//   update of the status subresource; an annotation by server-side apply of the main resource;
// - an AgentPlacement (three CEL rules on its spec) and its copy without them: status by
//   server-side apply (agents-status), and the finalizer by server-side apply of the main resource.
// One JSON line: per form, apiserver and etcd milliseconds of CPU per write and the mean time to
// answer; the nodes' managedFields in bytes with one manager and with 31.
import { parseArgs } from 'node:util';
import { AgentPlacement } from '../src/agents/crd.ts';
import { installCrds } from '../src/cli/install.ts';
import { crdManifests } from '../src/manifests.ts';
import { crdName, Resources, type KubeObject, type ResourceRef } from '../src/runtime/api/meta.ts';
import { isConflict } from '../src/runtime/client/client.ts';
import { Instance } from '../src/workloads/crd.ts';
import { benchSandbox, cpuSeconds, forEachLimit, round, report, waitForValue } from './lib.ts';

const { values } = parseArgs({
  options: {
    writes: { type: 'string', default: '1000' },
    lanes: { type: 'string', default: '16' },
  },
});
const writes = Number(values.writes);
const lanes = Number(values.lanes);
const perLane = Math.ceil(writes / lanes);
const MANAGER = 'bench-writes';
const NS = 'bench';
const NOCEL = 'nocel.berth.dev';

// Two nodes per lane: the second carries the same annotations as the first's 30 other managers, under one.
const sb = await benchSandbox('bench-writes', [{ prefix: 'n', count: 2 * lanes }]);
const client = sb.client({ maxInFlight: 64 });
const pidOf = (name: string) => sb.status().find((p) => p.name === name && p.running)!.pid!;
const cpu = () => ({ apiserver: cpuSeconds(pidOf('kube-apiserver')), etcd: cpuSeconds(pidOf('etcd')) });

/** A CRD as Berth installs it, under another group and with every CEL rule taken out. */
const withoutRules = (node: unknown): unknown => {
  if (Array.isArray(node)) return node.map(withoutRules);
  if (!node || typeof node !== 'object') return node;
  return Object.fromEntries(
    Object.entries(node)
      .filter(([k]) => k !== 'x-kubernetes-validations')
      .map(([k, v]) => [k, withoutRules(v)]),
  );
};
const copyRef = (ref: ResourceRef): ResourceRef => ({ ...ref, group: NOCEL });
async function installCopies(refs: ResourceRef[]) {
  const crds = await crdManifests();
  for (const ref of refs) {
    const crd = structuredClone(crds.find((c) => c.metadata!.name === crdName(ref))!) as KubeObject & {
      spec: { group: string };
    };
    const copy = withoutRules(crd) as typeof crd;
    copy.metadata = { name: crdName(copyRef(ref)) };
    copy.spec.group = NOCEL;
    await client.apply(Resources.crds, copy, { fieldManager: MANAGER, force: true });
  }
  for (const ref of refs)
    await waitForValue(`${crdName(copyRef(ref))} served`, () =>
      client.list(copyRef(ref), { namespace: NS, query: { limit: 1 } }).then(
        () => true,
        () => undefined,
      ),
    );
}

await installCrds(client);
await client.create(Resources.namespaces, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS } });
await installCopies([Instance.ref, AgentPlacement.ref]);

/** One form of write: `write` makes write number `i` of lane `lane`. */
interface Form {
  name: string;
  /** Creates what the lanes write (once per form), if anything. */
  prepare?: (lane: number) => Promise<void>;
  write: (lane: number, i: number) => Promise<unknown>;
}

const nodeName = (lane: number) => `n-${lane}`;
/** Each form its own key: a key one manager applied and another form patched would conflict. */
const keyOf = (form: string) => `bench.berth.dev/${form.replaceAll('.', '-')}`;
const nodeForms = (suffix: string, offset = 0): Form[] => [
  {
    name: `node.apply${suffix}`,
    write: (lane, i) =>
      client.apply(
        Resources.nodes,
        {
          apiVersion: 'v1',
          kind: 'Node',
          metadata: { name: nodeName(lane + offset), annotations: { [keyOf(`apply${suffix}`)]: `a${i}` } },
        },
        { fieldManager: MANAGER },
      ),
  },
  {
    name: `node.merge${suffix}`,
    write: (lane, i) =>
      client.patch(
        Resources.nodes,
        nodeName(lane + offset),
        { metadata: { annotations: { [keyOf(`merge${suffix}`)]: `m${i}` } } },
        {
          fieldManager: MANAGER,
        },
      ),
  },
];
// The last answer per lane, for updates (PUT) and their conflicts.
const last = new Map<string, KubeObject>();
let conflicts = 0;
/** PUT of the last answer with `change` made; on a conflict (kwok's heartbeat, say) it reads again. */
async function update(
  key: string,
  read: () => Promise<KubeObject>,
  put: (o: KubeObject) => Promise<KubeObject>,
  change: (o: KubeObject) => void,
) {
  for (;;) {
    const o = last.get(key) ?? (await read());
    change(o);
    try {
      last.set(key, await put(o));
      return;
    } catch (e) {
      if (!isConflict(e)) throw e;
      conflicts++;
      last.delete(key);
    }
  }
}
const nodePath = (lane: number) => `/api/v1/nodes/${nodeName(lane)}`;

const conditions = (i: number) =>
  ['Ready', 'Available', 'Programmed', 'QuotaGranted'].map((type) => ({
    type,
    status: 'True',
    reason: type,
    message: `write ${i}`,
    lastTransitionTime: '2026-11-27T00:00:00Z',
    observedGeneration: 1,
  }));
const instanceName = (lane: number) => `lane-${lane}`;
const instance = (ref: ResourceRef, name: string) => ({
  apiVersion: `${ref.group}/${ref.version}`,
  kind: ref.kind,
  metadata: { name, namespace: NS },
  spec: {
    template: {
      containers: [
        { name: 'app', image: 'registry.example/app:1' },
        { name: 'sidecar', image: 'registry.example/sidecar:1' },
      ],
    },
    templateHash: 'h1',
    ordinal: 0,
  },
});
const instanceForms = (ref: ResourceRef, tag: string): Form[] => {
  const path = (lane: number) =>
    `/apis/${ref.group}/${ref.version}/namespaces/${NS}/${ref.resource}/${instanceName(lane)}/status`;
  const statusOf = (i: number) => ({ observedGeneration: 1, podName: `p-${i}`, conditions: conditions(i) });
  const prepare = async (lane: number) => {
    await client.create(ref, instance(ref, instanceName(lane)));
  };
  return [
    {
      name: `instance${tag}.create`,
      write: (lane, i) => client.create(ref, instance(ref, `c-${lane}-${i}`)),
    },
    {
      name: `instance${tag}.status.apply`,
      prepare,
      write: (lane, i) =>
        client.apply(
          ref,
          {
            apiVersion: `${ref.group}/${ref.version}`,
            kind: ref.kind,
            metadata: { name: instanceName(lane), namespace: NS },
            status: statusOf(i),
          },
          { fieldManager: MANAGER, subresource: 'status' },
        ),
    },
    ...(tag
      ? []
      : ([
          {
            name: `instance.status.merge`,
            write: (lane, i) =>
              client.patch(
                ref,
                instanceName(lane),
                { status: statusOf(i) },
                { namespace: NS, fieldManager: MANAGER, subresource: 'status' },
              ),
          },
          {
            name: `instance.status.json`,
            write: (lane, i) =>
              client.patch(
                ref,
                instanceName(lane),
                [{ op: 'replace', path: '/status/conditions/0/message', value: `j${i}` }],
                {
                  namespace: NS,
                  type: 'json',
                  fieldManager: MANAGER,
                  subresource: 'status',
                },
              ),
          },
          {
            name: `instance.status.update`,
            write: (lane, i) =>
              update(
                `instance/${lane}`,
                () => client.get(ref, instanceName(lane), NS),
                (o) => client.request('PUT', path(lane), { body: o, query: { fieldManager: MANAGER } }),
                (o) => void ((o as { status?: unknown }).status = statusOf(i)),
              ),
          },
        ] satisfies Form[])),
    {
      name: `instance${tag}.annotation.apply`,
      write: (lane, i) =>
        client.apply(
          ref,
          {
            apiVersion: `${ref.group}/${ref.version}`,
            kind: ref.kind,
            metadata: {
              name: instanceName(lane),
              namespace: NS,
              annotations: { [keyOf('instance')]: `a${i}` },
            },
          },
          { fieldManager: MANAGER },
        ),
    },
  ];
};
const placementForms = (ref: ResourceRef, tag: string): Form[] => {
  const name = (lane: number) => `lane-${lane}`;
  const body = (lane: number) => ({
    apiVersion: `${ref.group}/${ref.version}`,
    kind: ref.kind,
    metadata: { name: name(lane) },
  });
  return [
    {
      name: `placement${tag}.status.apply`,
      prepare: async (lane) => {
        await client.create(ref, {
          ...body(lane),
          spec: {
            podSelector: { matchLabels: { app: `agent-${lane}` } },
            owner: { uidLabel: 'bench.berth.dev/owner' },
            nodeLabel: { key: `bench.berth.dev/agent-${lane}` },
            claimAnnotationPrefix: `bench.berth.dev/claim-${lane}.`,
          },
        });
      },
      write: (lane, i) =>
        client.apply(
          ref,
          {
            ...body(lane),
            status: {
              observedGeneration: 1,
              labelledNodes: i,
              claims: i,
              owners: 1,
              conditions: conditions(i).slice(0, 1),
            },
          },
          { fieldManager: MANAGER, subresource: 'status' },
        ),
    },
    {
      // Berth applies its finalizer to a placement once; here each write adds another, then takes it off.
      name: `placement${tag}.finalizer.apply`,
      write: (lane, i) =>
        client.apply(
          ref,
          {
            ...body(lane),
            metadata: { ...body(lane).metadata, finalizers: i % 2 ? [] : ['bench.berth.dev/f'] },
          },
          { fieldManager: MANAGER },
        ),
    },
  ];
};

const forms: Form[] = [
  ...nodeForms(''),
  {
    name: 'node.json',
    write: (lane, i) =>
      client.patch(
        Resources.nodes,
        nodeName(lane),
        [{ op: 'add', path: `/metadata/annotations/${keyOf('json').replace('/', '~1')}`, value: `j${i}` }],
        {
          type: 'json',
          fieldManager: MANAGER,
        },
      ),
  },
  {
    name: 'node.update',
    write: (lane, i) =>
      update(
        `node/${lane}`,
        () => client.get(Resources.nodes, nodeName(lane)),
        (o) => client.request('PUT', nodePath(lane), { body: o, query: { fieldManager: MANAGER } }),
        (o) => void (o.metadata!.annotations = { ...o.metadata!.annotations, [keyOf('update')]: `u${i}` }),
      ),
  },
  {
    // 30 other managers, 4 annotations each, on every node: what a node shared by many controllers
    // carries; on each lane's second node the same 120 annotations under one manager, so that the
    // cost of managedFields is told from the cost of a larger object.
    name: 'node.managers',
    prepare: async (lane) => {
      const others = (m: number) =>
        Object.fromEntries([0, 1, 2, 3].map((k) => [`bench.berth.dev/m${m}-${k}`, 'x']));
      const apply = (node: string, annotations: Record<string, string>, fieldManager: string) =>
        client.apply(
          Resources.nodes,
          { apiVersion: 'v1', kind: 'Node', metadata: { name: node, annotations } },
          {
            fieldManager,
          },
        );
      for (let m = 0; m < 30; m++) await apply(nodeName(lane), others(m), `bench-other-${m}`);
      await apply(
        nodeName(lane + lanes),
        Object.assign({}, ...Array.from({ length: 30 }, (_, m) => others(m))),
        'bench-other',
      );
    },
    write: async () => {},
  },
  ...nodeForms('.managers31'),
  ...nodeForms('.annotations121', lanes),
  ...instanceForms(Instance.ref, ''),
  ...instanceForms(copyRef(Instance.ref), '.nocel'),
  ...placementForms(AgentPlacement.ref, ''),
  ...placementForms(copyRef(AgentPlacement.ref), '.nocel'),
];

/** Runs `count` writes of a form per lane, all lanes at once; the mean time to answer, in ms. */
async function run(form: Form, from: number, count: number): Promise<number> {
  let answered = 0;
  await forEachLimit([...Array(lanes).keys()], lanes, async (lane) => {
    for (let i = from; i < from + count; i++) {
      const t = performance.now();
      await form.write(lane, i);
      answered += performance.now() - t;
    }
  });
  return answered / (lanes * count);
}

const managedFieldsBytes = async () =>
  JSON.stringify((await client.get(Resources.nodes, nodeName(0))).metadata?.managedFields ?? []).length;

// What the apiserver and etcd use idle (watches, kwok's heartbeats, the controllers' resyncs).
const idleFrom = cpu();
const idleStart = performance.now();
await new Promise((r) => setTimeout(r, 10_000));
const idleSeconds = (performance.now() - idleStart) / 1000;
const idleNow = cpu();
const idle = {
  apiserver: (idleNow.apiserver - idleFrom.apiserver) / idleSeconds,
  etcd: (idleNow.etcd - idleFrom.etcd) / idleSeconds,
};
console.log(`idle: apiserver ${round(idle.apiserver, 3)} of a core, etcd ${round(idle.etcd, 3)}`);

const results: Record<string, { apiserverMs: number; etcdMs: number; answerMs: number }> = {};
const bytes: Record<string, number> = {};
try {
  for (const form of forms) {
    if (form.prepare) await forEachLimit([...Array(lanes).keys()], lanes, form.prepare);
    if (form.name === 'node.managers') {
      bytes['managers31'] = await managedFieldsBytes();
      continue;
    }
    // A few writes first: caches, connections and (for SSA) the type converters warm.
    await run(form, 0, 3);
    const before = cpu();
    const started = performance.now();
    const answerMs = await run(form, 3, perLane);
    const seconds = (performance.now() - started) / 1000;
    const after = cpu();
    const n = lanes * perLane;
    const per = (k: 'apiserver' | 'etcd') =>
      round(((after[k] - before[k] - idle[k] * seconds) * 1000) / n, 2);
    results[form.name] = { apiserverMs: per('apiserver'), etcdMs: per('etcd'), answerMs: round(answerMs, 1) };
    // The node's managedFields as Berth's writer and the node's own managers leave them.
    if (form.name === 'node.update') bytes['managers1'] = await managedFieldsBytes();
    console.log(
      `${form.name}: ${n} writes in ${seconds.toFixed(1)} s; apiserver ${results[form.name]!.apiserverMs} ms, etcd ${results[form.name]!.etcdMs} ms of CPU per write; answered in ${results[form.name]!.answerMs} ms`,
    );
  }
} finally {
  client.close();
  await sb.destroy();
}
report({
  writes: lanes * perLane,
  lanes,
  idleApiserverCores: round(idle.apiserver, 3),
  updateConflicts: conflicts,
  managedFieldsBytes: bytes,
  forms: results,
});
