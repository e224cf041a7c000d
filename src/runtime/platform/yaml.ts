// yaml, loaded at the first document read or written: some 8 MB resident (decision 0021) that a
// Berth in a cluster (the service account, no kubeconfig file, no rule files) never needs. Types
// come from `import type`, which is erased.
import { createRequire } from 'node:module';
import type * as Yaml from 'yaml';

let library: typeof Yaml | undefined;
export const yaml = (): typeof Yaml => (library ??= createRequire(import.meta.url)('yaml') as typeof Yaml);
