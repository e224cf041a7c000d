// The test driver behind `npm test`: unit tests, then one sandbox for the whole integration run.
// Test files run in child processes (node:test); they find the sandbox through BERTH_TEST_SANDBOX.
import { globSync, readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { run } from 'node:test';
import { spec } from 'node:test/reporters';
import { Sandbox } from '../src/sandbox/sandbox.ts';
import { defaultKubernetesMinor, ensurePrometheus } from '../src/sandbox/build.ts';
import { abortOnSignals } from '../src/sandbox/wait.ts';
import { DEFAULT_ADDRESSES } from '../src/cli/addresses.ts';
import { parseBindAddress } from '../src/runtime/server/http.ts';
import { auditCheck } from './rbac-audit.ts';

const args = new Set(process.argv.slice(2));
const only = process.env['BERTH_TEST_FILES']?.split(',').filter(Boolean);
const totals = { passed: 0, failed: 0, skipped: 0 };
// Each failure again at the very end: a CI that keeps only the tail of the output still shows why.
const failures: string[] = [];

async function runFiles(files: string[], concurrency: number, env: NodeJS.ProcessEnv): Promise<void> {
  if (files.length === 0) return;
  const stream = run({
    files,
    concurrency,
    // Controllers log JSON to stdout; in tests only errors are worth reading.
    env: { BERTH_LOG_LEVEL: 'error', ...process.env, ...env },
    timeout: 10 * 60_000,
  });
  stream.on('test:pass', (t) => {
    if (t.details.type === 'suite') return;
    if (t.skip || t.todo) totals.skipped++;
    else totals.passed++;
  });
  stream.on('test:fail', (t) => {
    if (t.details.type === 'suite') return;
    totals.failed++;
    // The runner wraps what the test threw (ERR_TEST_FAILURE); the thrown error is its cause.
    const thrown = (t.details.error as Error & { cause?: unknown }).cause ?? t.details.error;
    const why = (thrown instanceof Error ? (thrown.stack ?? thrown.message) : String(thrown))
      .split('\n')
      .filter((line) => !line.includes('(node:internal/') && !line.includes('at node:internal/'))
      .slice(0, 40);
    failures.push(`✖ ${t.name} (${t.file ?? '?'}:${t.line ?? '?'})\n${why.join('\n')}`);
  });
  stream.compose(spec).pipe(process.stdout);
  await new Promise((resolve) => stream.once('end', resolve));
}

/**
 * Berth's default addresses, held while the integration files run: a test whose server takes one
 * (a flag it forgot to give) fails here every time, not only on a machine where something else
 * happens to listen there. An address another process holds already is as good as held.
 */
async function holdDefaultAddresses(): Promise<() => void> {
  const hold = (address: string) =>
    new Promise<Server | undefined>((resolve) => {
      const { host, port } = parseBindAddress(address)!;
      const server = createServer((socket) => socket.destroy());
      server.once('error', () => resolve(undefined));
      server.listen(port, host, () => resolve(server));
    });
  const held = await Promise.all(Object.values(DEFAULT_ADDRESSES).map(hold));
  process.stdout.write(`holding Berth's default addresses ${Object.values(DEFAULT_ADDRESSES).join(', ')}\n`);
  return () => held.forEach((s) => s?.close());
}

const unitFiles = only
  ? only.filter((f) => f.includes('test/unit/'))
  : globSync('test/unit/**/*.test.ts').sort();
const integrationFiles = only
  ? only.filter((f) => f.includes('test/integration/'))
  : globSync('test/integration/**/*.test.ts').sort();

if (!args.has('--integration-only')) await runFiles(unitFiles, 2, {});

if (!args.has('--unit-only') && integrationFiles.length > 0) {
  const name = process.env['BERTH_TEST_SANDBOX'] ?? 'test';
  const sandbox = new Sandbox(name);
  const started = Date.now();
  process.stdout.write(
    `starting sandbox ${name} on Kubernetes ${defaultKubernetesMinor()} (builds the control plane the first time)\n`,
  );
  // The registry (and its build, the first time) only when a file says `test-driver: registry`.
  const registry = integrationFiles.some((f) => readFileSync(f, 'utf8').includes('test-driver: registry'));
  // BERTH_TEST_AUDIT=1: the apiserver logs every service account's requests, and the RBAC audit
  // (scripts/rbac-audit.ts) checks Berth's roles against what the files made Berth do.
  const audit = Boolean(process.env['BERTH_TEST_AUDIT']);
  const interrupt = abortOnSignals();
  // Prometheus (and its build, some ten minutes cold, before any file's timeout runs) only when a
  // file says `test-driver: prometheus`.
  const prometheus = integrationFiles.some((f) =>
    readFileSync(f, 'utf8').includes('test-driver: prometheus'),
  );
  const log = (s: string) => process.stdout.write(`  ${s}\n`);
  await (async () => {
    if (prometheus) await ensurePrometheus(log, interrupt.signal);
    await sandbox.up({ fresh: true, registry, audit, log, signal: interrupt.signal });
  })().finally(interrupt.release);
  process.stdout.write(`sandbox ${name} up in ${((Date.now() - started) / 1000).toFixed(1)} s\n`);
  try {
    // Integration files share the cluster: each keeps to its own namespaces and node names. Files
    // that say `test-driver: alone` run several capabilities' controllers, which would act on the
    // policies of files running beside them: they run afterwards, one at a time.
    const alone = integrationFiles.filter((f) => readFileSync(f, 'utf8').includes('test-driver: alone'));
    const env = { BERTH_TEST_SANDBOX: name };
    const release = await holdDefaultAddresses();
    try {
      await runFiles(
        integrationFiles.filter((f) => !alone.includes(f)),
        2,
        env,
      );
      await runFiles(alone, 1, env);
    } finally {
      release();
    }
    if (audit) {
      const { lines, ok } = auditCheck(sandbox.auditLogPath);
      process.stdout.write(`\n${lines.join('\n')}\n`);
      if (ok) totals.passed++;
      else {
        totals.failed++;
        failures.push(`✖ the RBAC audit\n${lines.join('\n')}`);
      }
    }
  } finally {
    if (process.env['BERTH_TEST_KEEP'])
      process.stdout.write(`kept sandbox ${name}: ${sandbox.kubeconfigPath}\n`);
    else await sandbox.destroy();
  }
}

if (failures.length > 0) process.stdout.write(`\nfailed:\n${failures.join('\n\n')}\n`);
process.stdout.write(`\n${totals.passed} passed, ${totals.failed} failed, ${totals.skipped} skipped\n`);
process.exitCode = totals.failed > 0 || totals.passed === 0 ? 1 : 0;
