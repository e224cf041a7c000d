// How fast `berth --help` and `berth version` answer (target ≤ 300 ms each): they load no command's
// module. Three rounds of ten runs each (--rounds, --runs) as the published package runs them (dist/, compiled by the
// prebench build), as a checkout does (bin/berth.js on the sources, through type stripping), and as
// the released single file does (dist/bin/berth-linux-<arch>, built by the prebench step; target: as
// fast as dist/), beside the floor of Node starting with nothing to do.
// Last output line: {"helpMedianMs": n, "versionMedianMs": n, "sourceHelpMedianMs": n, ...}.
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { packageRoot } from '../src/sandbox/paths.ts';
import { percentile, report, round } from './lib.ts';

const { values } = parseArgs({
  options: { rounds: { type: 'string', default: '3' }, runs: { type: 'string', default: '10' } },
});
const ROUNDS = Number(values.rounds);
const RUNS = Number(values.runs);
const dist = join(packageRoot(), 'dist', 'cli', 'main.js');
const source = join(packageRoot(), 'bin', 'berth.js');
const binary = join(
  packageRoot(),
  'dist',
  'bin',
  `berth-linux-${process.arch === 'x64' ? 'amd64' : process.arch}`,
);

/** Wall milliseconds of one run of Node (or `bin`) with `args`, which must succeed. */
function timed(args: string[], bin = process.execPath): number {
  const start = performance.now();
  const r = spawnSync(bin, args, { encoding: 'utf8' });
  const ms = performance.now() - start;
  if (r.status !== 0) throw new Error(`node ${args.join(' ')} exited ${r.status}: ${r.stderr}`);
  return ms;
}

const median = (xs: number[]) => round(percentile(xs, 50));
const rounds: Record<string, number>[] = [];
for (let n = 1; n <= ROUNDS; n++) {
  const runs = {
    help: [],
    version: [],
    sourceHelp: [],
    sourceVersion: [],
    binaryHelp: [],
    binaryVersion: [],
    floor: [],
  } as Record<string, number[]>;
  for (let i = 0; i < RUNS; i++) {
    runs['floor']!.push(timed(['-e', '']));
    runs['help']!.push(timed([dist, '--help']));
    runs['version']!.push(timed([dist, 'version']));
    runs['sourceHelp']!.push(timed([source, '--help']));
    runs['sourceVersion']!.push(timed([source, 'version']));
    runs['binaryHelp']!.push(timed(['--help'], binary));
    runs['binaryVersion']!.push(timed(['version'], binary));
  }
  const r = Object.fromEntries(Object.entries(runs).map(([k, v]) => [`${k}MedianMs`, median(v)]));
  rounds.push(r);
  console.log(
    `round ${n}: dist --help ${r['helpMedianMs']} ms, version ${r['versionMedianMs']} ms; sources --help ` +
      `${r['sourceHelpMedianMs']} ms, version ${r['sourceVersionMedianMs']} ms; single file --help ` +
      `${r['binaryHelpMedianMs']} ms, version ${r['binaryVersionMedianMs']} ms; node alone ${r['floorMedianMs']} ms (medians of ${RUNS})`,
  );
}
// The slowest round's medians: a target counts only when every round meets it.
report({
  ...Object.fromEntries(Object.keys(rounds[0]!).map((k) => [k, Math.max(...rounds.map((r) => r[k]!))])),
  rounds,
});
