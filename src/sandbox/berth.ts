// `berth run` as the sandbox, the demo, the tests and the benchmarks start it: the one command line
// they share, every address on 127.0.0.1.
import { extname } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The `berth` command's entry beside this file: the sources run as .ts, the built package as .js. */
export const BERTH_MAIN = fileURLToPath(
  new URL(`../cli/main${extname(fileURLToPath(import.meta.url))}`, import.meta.url),
);

export interface BerthPorts {
  metrics: number;
  health: number;
}

/**
 * The arguments (after node's own) of `berth run` under `kubeconfig`, its metrics and probes on
 * `ports`, its webhook server on a free port (several Berths run side by side), the page off;
 * `args` come last, so they override these (a page of its own, say). `main` is the entry to run
 * (the compiled one, as the image runs it).
 */
export function berthRunArgs(
  kubeconfig: string,
  ports: BerthPorts,
  args: readonly string[],
  main = BERTH_MAIN,
): string[] {
  return [
    main,
    'run',
    `--kubeconfig=${kubeconfig}`,
    `--metrics-bind-address=127.0.0.1:${ports.metrics}`,
    `--health-probe-bind-address=127.0.0.1:${ports.health}`,
    '--webhook-bind-address=127.0.0.1:0',
    '--ui-bind-address=0',
    ...args,
  ];
}
