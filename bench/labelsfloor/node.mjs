// The Node.js floor of bench:memory: main.go's job (see there) in the simplest Node program, so that
// the benchmark can say how much of Berth's memory is the runtime's and how much Berth's own (the
// client in ../nodefloor/client.mjs), run with the image's Node flags. Arguments as main.go's:
// -server= -ca= -cert= -key= -input= -derived=. Prints "ready" once both lists are in and its
// patches answered.
import process from 'node:process';
import { arg, call, listAll, text } from '../nodefloor/client.mjs';

const input = arg('input');
const derived = arg('derived');
const nodes = new Map();
const pods = new Map();

async function watch(path, rv, keep, drop) {
  for (;;) {
    const res = await call('GET', `${path}?watch=1&allowWatchBookmarks=true&resourceVersion=${rv}`);
    let buf = '';
    for await (const chunk of res.setEncoding('utf8')) {
      buf += chunk;
      for (let i; (i = buf.indexOf('\n')) >= 0;) {
        const e = JSON.parse(buf.slice(0, i));
        buf = buf.slice(i + 1);
        rv = e.object.metadata.resourceVersion;
        if (e.type === 'ADDED' || e.type === 'MODIFIED') keep(e.object);
        else if (e.type === 'DELETED') drop(e.object);
      }
    }
  }
}

const label = async (name) =>
  text(
    await call(
      'PATCH',
      `/api/v1/nodes/${name}`,
      JSON.stringify({ metadata: { labels: { [derived]: 'true' } } }),
    ),
  );

/** Keeps a node's labels; says whether it needs the derived label. */
function keepNode(o) {
  const labels = o.metadata.labels ?? {};
  nodes.set(o.metadata.name, labels);
  return input in labels && labels[derived] !== 'true';
}
const keepPod = (o) =>
  pods.set(`${o.metadata.namespace}/${o.metadata.name}`, {
    node: o.spec.nodeName,
    selector: o.spec.nodeSelector,
  });

const todo = [];
const nodeRV = await listAll('/api/v1/nodes', (o) => keepNode(o) && todo.push(o.metadata.name));
const podRV = await listAll('/api/v1/pods', keepPod);
await Promise.all(
  Array.from({ length: 16 }, async () => {
    for (let n; (n = todo.pop()) !== undefined;) await label(n);
  }),
);
process.stdout.write('ready\n');
void watch('/api/v1/pods', podRV, keepPod, (o) => pods.delete(`${o.metadata.namespace}/${o.metadata.name}`));
await watch(
  '/api/v1/nodes',
  nodeRV,
  (o) => keepNode(o) && void label(o.metadata.name),
  (o) => nodes.delete(o.metadata.name),
);
