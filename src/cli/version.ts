import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot } from '../sandbox/paths.ts';

export const version = (): string =>
  (JSON.parse(readFileSync(join(packageRoot(), 'package.json'), 'utf8')) as { version: string }).version;
