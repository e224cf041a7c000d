// bench:scale's Node.js list floor: main.go's job (see there) in the simplest Node program, run with
// the image's Node flags, so that the benchmark can say how much of Berth's time to cache is the
// runtime's (receiving and JSON.parse of every page on one thread) and how much Berth's own.
// Arguments as main.go's, and the same one JSON line out.
import { performance } from 'node:perf_hooks';
import process from 'node:process';
import { arg, listAll } from '../nodefloor/client.mjs';

const paths = (arg('paths') || '/api/v1/nodes,/api/v1/pods').split(',');
const start = performance.now();
const out = {};
await Promise.all(
  paths.map(async (p) => {
    const keys = new Map();
    await listAll(p, (o) =>
      keys.set(`${o.metadata.namespace ?? ''}/${o.metadata.name}`, o.metadata.resourceVersion),
    );
    out[p] = { seconds: (performance.now() - start) / 1000, objects: keys.size };
  }),
);
out.seconds = (performance.now() - start) / 1000;
process.stdout.write(JSON.stringify(out) + '\n');
