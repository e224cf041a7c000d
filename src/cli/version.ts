import { SUMMARIES } from '../command/summaries.ts';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Command } from 'commander';
import { packageRoot } from '../sandbox/paths.ts';
import { outputOption, print } from '../command/flags.ts';

export const version = (): string =>
  (JSON.parse(readFileSync(join(packageRoot(), 'package.json'), 'utf8')) as { version: string }).version;

/** `berth version`: Berth's version and the Node.js it runs on (kubectl version's shape, client side). */
export const versionCommand = (): Command =>
  new Command('version')
    .description(SUMMARIES.version.description)
    .addOption(outputOption())
    .action(async (o: { output: 'text' | 'json' | 'yaml' }) => {
      const v = { berthVersion: version(), nodeVersion: process.version };
      await print(o.output, v, () => v.berthVersion);
    });
