// What the Node.js floors share: the simplest Kubernetes client on node:https and JSON, no library
// and no TypeScript (type stripping would load a compiler), so that a floor run with the image's
// Node flags measures the runtime's share. Arguments as the Go floors': -server= -ca= -cert= -key=.
import { readFileSync } from 'node:fs';
import { Agent, request } from 'node:https';
import process from 'node:process';
import { URL } from 'node:url';

export const arg = (name) =>
  process.argv.find((a) => a.startsWith(`-${name}=`))?.slice(name.length + 2) ?? '';
const server = new URL(arg('server'));
const agent = new Agent({
  keepAlive: true,
  maxSockets: 16,
  ca: readFileSync(arg('ca')),
  cert: readFileSync(arg('cert')),
  key: readFileSync(arg('key')),
});

export function call(method, path, body) {
  return new Promise((resolve, reject) => {
    const req = request({ hostname: server.hostname, port: server.port, method, path, agent }, resolve);
    req.on('error', reject);
    if (body) req.setHeader('Content-Type', 'application/merge-patch+json');
    req.end(body);
  });
}

export async function text(res) {
  let s = '';
  for await (const chunk of res.setEncoding('utf8')) s += chunk;
  if (res.statusCode !== 200) throw new Error(`${res.statusCode}: ${s}`);
  return s;
}

/** Pages through a list (500 a page), keeping each object; returns its resourceVersion. */
export async function listAll(path, keep) {
  for (let cont = ''; ;) {
    const l = JSON.parse(
      await text(await call('GET', `${path}?limit=500&continue=${encodeURIComponent(cont)}`)),
    );
    for (const o of l.items) keep(o);
    if (!l.metadata.continue) return l.metadata.resourceVersion;
    cont = l.metadata.continue;
  }
}
