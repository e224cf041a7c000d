import { SUMMARIES } from '../command/summaries.ts';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Command } from 'commander';
import { packageRoot } from '../sandbox/paths.ts';
import { outputOption, print } from '../command/flags.ts';

/** What the single-file build (scripts/cli-binary.ts) bakes in; undefined when run from a package. */
declare const BERTH_BUILD: { version: string; commit: string } | undefined;
const baked = typeof BERTH_BUILD === 'undefined' ? undefined : BERTH_BUILD;

export const version = (): string =>
  baked?.version ??
  (JSON.parse(readFileSync(join(packageRoot(), 'package.json'), 'utf8')) as { version: string }).version;

/** The git commit built: baked into the single file, or set by the release in the image's environment. */
export const commit = (): string => baked?.commit ?? (process.env['BERTH_COMMIT'] || 'unknown');

/** `berth version`: Berth's version and commit, and the Node.js it runs on (kubectl version's shape, client side). */
export const versionCommand = (): Command =>
  new Command('version')
    .description(SUMMARIES.version.description)
    .addOption(outputOption())
    .action(async (o: { output: 'text' | 'json' | 'yaml' }) => {
      const v = { berthVersion: version(), gitCommit: commit(), nodeVersion: process.version };
      await print(o.output, v, () => `${v.berthVersion} (commit ${v.gitCommit})`);
    });
