import { homedir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The package root: two levels above this file in src/sandbox/ as in dist/sandbox/. */
export const packageRoot = (): string => resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');

export const controlPlaneSourceDir = (): string => join(packageRoot(), 'controlplane');

export const cacheDir = (): string =>
  process.env['BERTH_CACHE_DIR'] ?? join(process.env['XDG_CACHE_HOME'] ?? join(homedir(), '.cache'), 'berth');

export const stateDir = (): string =>
  process.env['BERTH_STATE_DIR'] ??
  join(process.env['XDG_STATE_HOME'] ?? join(homedir(), '.local', 'state'), 'berth');

export const sandboxDir = (name: string): string => join(stateDir(), 'sandboxes', name);
