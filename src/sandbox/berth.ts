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

export interface BerthRunOptions {
  /** The entry to run (default the sources' or the package's beside this file; the compiled one, as the image runs it). */
  main?: string;
  /** The CA of the apiserver's webhook client certificate (Sandbox.webhookClientCa), for --webhook-client-ca. */
  webhookClientCa?: string | undefined;
}

/**
 * The arguments (after node's own) of `berth run` under `kubeconfig`, its metrics and probes on
 * `ports`, its webhook server on a free port (several Berths run side by side) taking only the
 * apiserver's calls when the sandbox's apiserver presents a client certificate, the page off;
 * `args` come last, so they override these (a page of its own, say).
 */
export function berthRunArgs(
  kubeconfig: string,
  ports: BerthPorts,
  args: readonly string[],
  opts: BerthRunOptions = {},
): string[] {
  return [
    opts.main ?? BERTH_MAIN,
    'run',
    `--kubeconfig=${kubeconfig}`,
    `--metrics-bind-address=127.0.0.1:${ports.metrics}`,
    `--health-probe-bind-address=127.0.0.1:${ports.health}`,
    '--webhook-bind-address=127.0.0.1:0',
    ...(opts.webhookClientCa ? [`--webhook-client-ca=${opts.webhookClientCa}`] : []),
    '--ui-bind-address=0',
    ...args,
  ];
}
