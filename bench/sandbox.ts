// Warm start of the local control plane: time of `up` with N nodes (all Ready), and the resident
// memory of its processes afterwards. Usage: npm run bench:sandbox -- --nodes 3,100,1000
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { Sandbox } from '../src/sandbox/sandbox.ts';

const { values } = parseArgs({ options: { nodes: { type: 'string', default: '3,100,1000' } } });
const counts = values.nodes.split(',').map(Number);

const rssMB = (pid: number): number => {
  const m = readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+) kB/);
  return m ? Number(m[1]) / 1024 : 0;
};

const results: Record<string, unknown>[] = [];
for (const nodes of counts) {
  const sb = new Sandbox('bench-sandbox');
  await sb.destroy();
  const started = performance.now();
  await sb.up({ nodes: [{ prefix: 'bench', count: nodes }], timeoutMs: 600_000 });
  const upSeconds = (performance.now() - started) / 1000;
  // Let the heartbeats and controllers settle before reading memory.
  await new Promise((r) => setTimeout(r, 5000));
  const perProcess = Object.fromEntries(sb.status().map((p) => [p.name, Math.round(rssMB(p.pid!))]));
  const total = Object.values(perProcess).reduce((a, b) => a + b, 0);
  console.log(`${nodes} nodes: up in ${upSeconds.toFixed(1)} s, control plane RSS ${total} MB`, perProcess);
  results.push({ nodes, upSeconds: Number(upSeconds.toFixed(2)), rssMB: total });
  await sb.destroy();
}
console.log(JSON.stringify({ runs: results }));
