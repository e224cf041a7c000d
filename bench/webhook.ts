// Berth's admission webhook server under load: `npm run bench:webhook -- --clients 500`.
// Berth runs as `berth run` with every capability (a startup gate selects half of the reviewed
// nodes), on a private sandbox. bench/webhookload, a Go program that calls the server as the
// apiserver does (Go's HTTP/1.1 client over TLS, client-go's 25 idle connections per host), sends
// Node CREATE reviews straight to the gates webhook over loopback:
// 1. Load: N concurrent callers back to back for S seconds; latency of the answered reviews
//    (target: p99 within the registration's 2 s timeout), refusals (fast by design) and timeouts.
// 2. Slow clients: 450 connections sending their headers and 300 their bodies a piece a second,
//    beside 20 callers; when the server dropped each (target: within its timeouts) and the
//    callers' latency meanwhile.
// Every caller comes from 127.0.0.1, so Berth keeps as many connections from one address as in
// all (--webhook-max-connections-per-address, at half by default), as before that limit: this
// measures the server's whole capacity, not one address's share of it.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { installCrds } from '../src/cli/install.ts';
import { NodeStartupGate } from '../src/gates/crd.ts';
import { startBerth, type BerthProcess } from '../test/helpers/berth.ts';
import {
  benchSandbox,
  buildGoProgram,
  nodeCreateReview,
  report,
  webhookClientArgs,
  webhookLoad,
  type LoadSummary,
  registeredWebhook,
} from './lib.ts';

const { values } = parseArgs({
  options: {
    clients: { type: 'string', default: '500' },
    seconds: { type: 'string', default: '15' },
    'slow-headers': { type: 'string', default: '450' },
    'slow-bodies': { type: 'string', default: '300' },
    // More `berth run` flags, e.g. --berth-flag=--webhook-max-connections=600, to try limits.
    'berth-flag': { type: 'string', multiple: true, default: [] },
  },
});
const POOL = 'bench.berth.dev/pool';
const TAINT = 'bench.berth.dev/warmup';

interface Slow {
  started: number;
  refused: number;
  dropped: number;
  notDropped: number;
  maxDropS: number;
}
interface LoadResult {
  perSecond: number;
  answered: LoadSummary;
  late: number;
  refused: LoadSummary;
  refusedBy: Record<string, number>;
  timeouts: number;
  slowHeaders: Slow;
  slowBodies: Slow;
}

const work = mkdtempSync(path.join(tmpdir(), 'bench-webhook-'));
const generator = buildGoProgram('webhookload', work);

const sb = await benchSandbox('bench-webhook');
const client = sb.client();
let berth: BerthProcess | undefined;
let result: Record<string, number>;
try {
  await installCrds(client);
  await client.create(NodeStartupGate.ref, {
    apiVersion: NodeStartupGate.apiVersion,
    kind: NodeStartupGate.kind,
    metadata: { name: 'warmup' },
    spec: {
      taint: { key: TAINT, value: 'warmup', effect: 'NoSchedule' },
      nodeSelector: { matchLabels: { [POOL]: 'gated' } },
      // Never met: the gate only has to select nodes at admission.
      requirements: { pods: [{ namespace: 'bench', daemonSet: 'warmup' }] },
    },
  });
  berth = await startBerth(sb, ['--webhook-max-connections-per-address=600', ...values['berth-flag']]);
  const hook = await registeredWebhook(client, (n) => n === 'nodes.gates.berth.dev');
  const caFile = path.join(work, 'ca.pem');
  writeFileSync(caFile, Buffer.from(hook.caBundle, 'base64'));
  const bodyFile = path.join(work, 'review.json');
  writeFileSync(bodyFile, nodeCreateReview('bench', { [POOL]: 'gated' }));

  const load = (args: string[]) =>
    webhookLoad<LoadResult>(generator, [
      '-url',
      hook.url,
      '-ca',
      caFile,
      ...webhookClientArgs(sb, work).load,
      '-body',
      bodyFile,
      ...args,
    ]);
  const ms = (s: LoadSummary) => `p50 ${s.p50Ms} ms, p99 ${s.p99Ms} ms, max ${s.maxMs} ms`;

  const clients = Number(values.clients);
  console.log(`load: ${clients} concurrent callers for ${values.seconds} s`);
  const loaded = load(['-clients', String(clients), '-duration', `${values.seconds}s`, '-progress']);
  console.log(
    `  ${loaded.answered.count} answered (${loaded.perSecond}/s): ${ms(loaded.answered)}; ` +
      `${loaded.late} after 2 s; ${loaded.refused.count} refused (${JSON.stringify(loaded.refusedBy)}): ` +
      `${ms(loaded.refused)}; ${loaded.timeouts} timed out`,
  );

  const slowHeaders = Number(values['slow-headers']);
  const slowBodies = Number(values['slow-bodies']);
  console.log(`slow clients: ${slowHeaders} slow headers and ${slowBodies} slow bodies beside 20 callers`);
  const slow = load([
    '-clients',
    '20',
    '-duration',
    '20s',
    '-slow-headers',
    String(slowHeaders),
    '-slow-bodies',
    String(slowBodies),
    '-slow-max',
    '30s',
  ]);
  for (const [what, s] of [
    ['slow headers', slow.slowHeaders],
    ['slow bodies', slow.slowBodies],
  ] as const) {
    console.log(
      `  ${what}: ${s.dropped} dropped (the last ${s.maxDropS} s after its TLS handshake), ${s.notDropped} open after 30 s, ` +
        `${s.refused} refused at connect`,
    );
  }
  console.log(
    `  callers meanwhile: ${slow.answered.count} answered: ${ms(slow.answered)}; ${slow.refused.count} refused`,
  );

  const rejected = async (reason: string) =>
    berth!.metric(
      'berth_http_rejected_total',
      (l) => l.includes('server="webhook"') && l.includes(`"${reason}"`),
    );
  result = {
    clients,
    answered: loaded.answered.count,
    perSecond: loaded.perSecond,
    p50Ms: loaded.answered.p50Ms,
    p99Ms: loaded.answered.p99Ms,
    maxMs: loaded.answered.maxMs,
    late: loaded.late,
    refused: loaded.refused.count,
    refusedP99Ms: loaded.refused.p99Ms,
    timeouts: loaded.timeouts,
    slowHeadersMaxDropS: slow.slowHeaders.maxDropS,
    slowHeadersNotDropped: slow.slowHeaders.notDropped,
    slowBodiesMaxDropS: slow.slowBodies.maxDropS,
    slowBodiesNotDropped: slow.slowBodies.notDropped,
    slowPhaseP99Ms: slow.answered.p99Ms,
    rejectedConnections: await rejected('connections'),
    rejectedInFlight: await rejected('in_flight'),
    rejectedTimeouts: await rejected('timeout'),
    rssMB: berth.rssMB(),
  };
} finally {
  await berth?.stop();
  client.close();
  await sb.destroy();
  rmSync(work, { recursive: true, force: true });
}
report(result);
