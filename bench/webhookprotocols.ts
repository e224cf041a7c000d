// What HTTP/2 would cost a webhook server, apart from Berth and from any control plane:
// `npm run bench:webhook-protocols -- --rounds 3`. The apiserver's webhook client (client-go's
// transport) offers h2 by ALPN and speaks it to a server that accepts it; `node:https` offers only
// HTTP/1.1, so the apiserver calls Berth over HTTP/1.1. Decision 0023 records the runs.
// The smallest servers answering the gates' Node CREATE review with bench/webhookfloor's patch, each
// in a process of its own and in turn: bench/webhookfloor called over HTTP/1.1 and over h2, then
// `node:https`, `node:http2` (allowHTTP1) through its request/response API and through its stream
// API, these three called by bench/webhookload -h2 (as the apiserver calls them). For each, after an
// untimed warm-up run: the protocol spoken, the whole process's time on a core per review
// (/proc/PID/task/*/schedstat), p50, p99.
// The machine is shared by whatever else runs: compare servers within a round.
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http2 from 'node:http2';
import type { ServerResponse } from 'node:http';
import https from 'node:https';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import type { Readable } from 'node:stream';
import { parseArgs } from 'node:util';
import { escapeKey } from '../src/runtime/api/jsonpatch.ts';
import { createCertificateAuthority } from '../src/runtime/webhook/certificates.ts';
import {
  buildGoProgram,
  nodeCreateReview,
  report,
  round,
  schedstat,
  webhookLoad,
  type LoadSummary,
} from './lib.ts';

const { values } = parseArgs({
  options: {
    rounds: { type: 'string', default: '3' },
    rate: { type: 'string', default: '200' },
    seconds: { type: 'string', default: '15' },
    // Internal: this file started as one of the Node servers (its mode, certificate and key).
    serve: { type: 'string', multiple: true },
  },
});

const POOL = 'bench.berth.dev/pool';
const GATE = { select: `${POOL}=gated`, taint: 'bench.berth.dev/gate=on:NoSchedule' };
const ANNOTATION = 'bench.berth.dev/gated-at';
const RECORD = 'bench.berth.dev/gate-taint';

/** bench/webhookfloor's gates answer (decision 0006's patch), for the Node servers. */
function answer(body: string): string {
  const review = JSON.parse(body) as { request: { uid: string } };
  const [keyValue, effect] = GATE.taint.split(':') as [string, string];
  const [key, value] = keyValue.split('=');
  const patch = [
    { op: 'add', path: `/metadata/annotations/${escapeKey(ANNOTATION)}`, value: new Date().toISOString() },
    { op: 'add', path: `/metadata/annotations/${escapeKey(RECORD)}`, value: GATE.taint },
    { op: 'add', path: '/spec/taints/-', value: { key, value, effect } },
  ];
  const response = {
    uid: review.request.uid,
    allowed: true,
    patchType: 'JSONPatch',
    patch: Buffer.from(JSON.stringify(patch)).toString('base64'),
  };
  return `${JSON.stringify({ apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', response })}\n`;
}

/** Reads a request's body to its end, then writes `answer` of it through `respond`. */
function answering(body: Readable, respond: (out: string) => void): void {
  const chunks: Buffer[] = [];
  body.on('data', (c: Buffer) => chunks.push(c));
  body.on('end', () => respond(answer(Buffer.concat(chunks).toString())));
}

function serve([mode, certFile, keyFile]: string[]): void {
  const tls = { cert: readFileSync(certFile!), key: readFileSync(keyFile!) };
  const onRequest = (req: Readable, res: ServerResponse | http2.Http2ServerResponse) =>
    answering(req, (out) => {
      res.setHeader('content-type', 'application/json');
      res.setHeader('content-length', Buffer.byteLength(out));
      res.end(out);
    });
  const server =
    mode === 'https'
      ? https.createServer(tls, onRequest)
      : http2.createSecureServer(
          { ...tls, allowHTTP1: true },
          mode === 'http2-compat' ? onRequest : undefined,
        );
  if (mode === 'http2-stream')
    server.on('stream', (stream: http2.ServerHttp2Stream) =>
      answering(stream, (out) => {
        stream.respond({
          ':status': 200,
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(out),
        });
        stream.end(out);
      }),
    );
  server.listen(0, '127.0.0.1', () => {
    const { port } = server.address() as { port: number };
    console.log(`https://127.0.0.1:${port}/gates/mutate-node`);
  });
}

interface RateResult {
  targets: [{ answered: LoadSummary; refused: LoadSummary; timeouts: number; protocol: string }];
}

async function measure(dir: string): Promise<object> {
  const ca = await createCertificateAuthority('bench-webhookprotocols');
  const pair = await ca.issue({ commonName: '127.0.0.1', ipAddresses: ['127.0.0.1'], usage: 'server' });
  const file = (name: string, data: string) => {
    writeFileSync(path.join(dir, name), data);
    return path.join(dir, name);
  };
  const [cert, key, caFile] = [
    file('tls.crt', pair.certPem),
    file('tls.key', pair.keyPem),
    file('ca.pem', ca.certPem),
  ];
  const body = file('review.json', nodeCreateReview('h2-bench', { [POOL]: 'gated' }));
  const floor = buildGoProgram('webhookfloor', dir);
  const generator = buildGoProgram('webhookload', dir);
  const floorArgs = [`-cert=${cert}`, `-key=${key}`, `-select=${GATE.select}`, `-taint=${GATE.taint}`];
  const node = (mode: string) => [
    process.execPath,
    import.meta.filename,
    '--serve',
    mode,
    '--serve',
    cert,
    '--serve',
    key,
  ];
  const servers: { name: string; command: string[]; h2: boolean }[] = [
    {
      name: 'go http/1.1',
      command: [floor, ...floorArgs, `-annotation=${ANNOTATION}`, `-record=${RECORD}`],
      h2: false,
    },
    {
      name: 'go h2',
      command: [floor, ...floorArgs, `-annotation=${ANNOTATION}`, `-record=${RECORD}`],
      h2: true,
    },
    { name: 'node:https (http/1.1)', command: node('https'), h2: true },
    { name: 'node:http2 request/response (h2)', command: node('http2-compat'), h2: true },
    { name: 'node:http2 stream (h2)', command: node('http2-stream'), h2: true },
  ];
  const runs = [];
  for (let r = 1; r <= Number(values.rounds); r++) {
    for (const s of servers) {
      const child: ChildProcess = spawn(s.command[0]!, s.command.slice(1), {
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      try {
        const [url] = (await once(createInterface({ input: child.stdout! }), 'line')) as [string];
        const args = [
          `-url=${url}`,
          `-ca=${caFile}`,
          `-body=${body}`,
          `-rate=${values.rate}`,
          ...(s.h2 ? ['-h2'] : []),
        ];
        // Connections made, code warm: what is measured is the steady state.
        webhookLoad(generator, [...args, '-duration=3s']);
        const before = schedstat(child.pid!);
        const load = webhookLoad<RateResult>(generator, [
          ...args,
          `-duration=${values.seconds}s`,
          '-warmup=1',
        ]);
        const cpuMs = schedstat(child.pid!).runMs - before.runMs;
        const t = load.targets[0];
        const run = {
          round: r,
          server: s.name,
          protocol: t.protocol,
          cpuPerReviewMs: round(cpuMs / (t.answered.count + 1), 3),
          p50Ms: t.answered.p50Ms,
          p99Ms: t.answered.p99Ms,
          failed: t.refused.count + t.timeouts,
        };
        console.error(JSON.stringify(run));
        runs.push(run);
      } finally {
        child.kill();
      }
    }
  }
  return { rate: Number(values.rate), seconds: Number(values.seconds), runs };
}

if (values.serve) serve(values.serve);
else {
  const dir = mkdtempSync(path.join(tmpdir(), 'bench-webhookprotocols-'));
  try {
    report(await measure(dir));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
