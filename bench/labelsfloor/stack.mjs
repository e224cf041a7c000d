// The stack floor of bench:memory: node.mjs's job (see there), with the libraries Berth's stack
// names for what every controller of it carries, each used once in the simplest way: commander
// reads the arguments, zod validates the NodeLabelRules (listed, as a controller reads its
// policies), pino logs, prom-client's registry serves the default metrics and a counter on
// /metrics, beside a /healthz, on node:http. It says how much of Berth's memory is the stack's and
// how much Berth's own (`stackFloorMB`). Arguments as node.mjs's, and --metrics PORT (0: any).
import { createServer } from 'node:http';
import { Command } from 'commander';
import pino from 'pino';
import { collectDefaultMetrics, Counter, Registry } from 'prom-client';
import { z } from 'zod';
import { listAll } from '../nodefloor/client.mjs';

// node.mjs's Go-style arguments pass through; commander reads the one of this floor's own.
const { metrics } = new Command()
  .allowUnknownOption()
  .allowExcessArguments()
  .option('--metrics <port>', 'port of /metrics and /healthz (0: any free port)', '0')
  .parse()
  .opts();
const log = pino({ level: 'info' });

const registry = new Registry();
collectDefaultMetrics({ register: registry });
const rules = new Counter({
  name: 'floor_rules_total',
  help: 'rules read',
  labelNames: ['valid'],
  registers: [registry],
});
createServer(async (req, res) => {
  if (req.url === '/metrics') res.end(await registry.metrics());
  else res.end('ok');
}).listen(Number(metrics), '127.0.0.1');

const rule = z.object({
  metadata: z.looseObject({ name: z.string().min(1) }),
  spec: z.object({
    match: z.object({
      allOf: z
        .array(
          z.object({
            label: z.string().min(1).max(317),
            operator: z.enum(['In', 'NotIn', 'Exists', 'DoesNotExist', 'Gt', 'Lt', 'InRegexp']),
            values: z.array(z.string().max(1024)).max(64).optional(),
          }),
        )
        .min(1)
        .max(32),
    }),
    labels: z.record(z.string(), z.string().max(63)),
  }),
});
await listAll('/apis/berth.dev/v1alpha1/nodelabelrules', (o) => {
  const r = rule.safeParse(o);
  rules.inc({ valid: String(r.success) });
  if (!r.success) log.warn({ rule: o.metadata.name, err: r.error.message }, 'invalid rule');
});
log.info('rules read');
// The job itself, as node.mjs does it: it says "ready", then watches.
void import('./node.mjs');
