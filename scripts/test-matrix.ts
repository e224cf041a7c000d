// `npm run test:matrix`: the whole suite (`npm test`) once per Kubernetes minor the sandbox builds,
// oldest first, each on a fresh sandbox of that minor (BERTH_KUBERNETES_VERSION); then a line per
// minor and the totals. BERTH_TEST_MINORS=1.35,1.37 runs only those. Several hours on two cores.
// `npm run test:oldest` (`--oldest --main`): each capability's main integration files on the oldest
// minor, as CI runs them.
import { spawn } from 'node:child_process';
import { KUBERNETES_MINORS, kubernetesMinorOf, kubernetesVersion } from '../src/sandbox/build.ts';

/** Each capability's main integration file, and the admission scope, explain/plan and version files. */
const MAIN_FILES = [
  'labels',
  'gates',
  'agents',
  'arch',
  'workloads',
  'cells',
  'federation',
  'admission-scope',
  'plan',
  'kubernetes-version',
].map((f) => `test/integration/${f}.test.ts`);

const args = new Set(process.argv.slice(2));
const all = Object.keys(KUBERNETES_MINORS).reverse();
const asked = args.has('--oldest')
  ? all.slice(0, 1)
  : (process.env['BERTH_TEST_MINORS']?.split(',').filter(Boolean) ?? all);
const files = args.has('--main') ? { BERTH_TEST_FILES: MAIN_FILES.join(',') } : {};
const minors = asked.map((v) => {
  const m = kubernetesMinorOf(v);
  if (!m) throw new Error(`BERTH_TEST_MINORS: ${v} is not one of ${all.join(', ')}`);
  return m;
});
const results: { minor: string; passed: number; failed: number; skipped: number; seconds: number }[] = [];
for (const minor of minors) {
  process.stdout.write(`\n=== Kubernetes ${kubernetesVersion(minor)} ===\n`);
  const started = Date.now();
  const child = spawn(process.execPath, ['scripts/test.ts'], {
    env: { ...process.env, ...files, BERTH_KUBERNETES_VERSION: minor },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  // Shown as it comes; only the end is kept, for the driver's last line `N passed, N failed, N skipped`.
  let tail = '';
  child.stdout.on('data', (d: Buffer) => {
    process.stdout.write(d);
    tail = (tail + d.toString()).slice(-4096);
  });
  await new Promise((resolve) => child.once('close', resolve));
  const m = /(\d+) passed, (\d+) failed, (\d+) skipped\s*$/.exec(tail);
  const [passed, failed, skipped] = m ? [Number(m[1]), Number(m[2]), Number(m[3])] : [0, 1, 0];
  results.push({
    minor: kubernetesVersion(minor),
    passed,
    failed,
    skipped,
    seconds: (Date.now() - started) / 1000,
  });
}
process.stdout.write('\nmatrix:\n');
for (const r of results)
  process.stdout.write(
    `  ${r.minor}: ${r.passed} passed, ${r.failed} failed, ${r.skipped} skipped (${Math.round(r.seconds)} s)\n`,
  );
const sum = (k: 'passed' | 'failed' | 'skipped') => results.reduce((n, r) => n + r[k], 0);
process.stdout.write(`\n${sum('passed')} passed, ${sum('failed')} failed, ${sum('skipped')} skipped\n`);
process.exitCode = sum('failed') > 0 || sum('passed') === 0 ? 1 : 0;
