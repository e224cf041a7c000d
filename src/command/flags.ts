// The flags every command shares, shaped like kubectl's: --kubeconfig and --context on each command
// that talks to a cluster, -n defaulting to the context's namespace, -A where listing, -o json|yaml
// where an object is printed, Go durations, list flags, whole numbers and workers; and how a command
// says its steps. The capabilities' flags and commands use them as the `berth` command does (the
// command kit, a room below both in docs/architecture.md). The client and the YAML printer are
// imported when used: `berth --help` and `berth version` load this file and must answer at once.
import { InvalidArgumentError, Option, type Command } from 'commander';
import type { KubeClient } from '../runtime/client/client.ts';

export interface ClusterFlags {
  kubeconfig?: string;
  context?: string;
}

export const kubeconfigOption = (
  description = 'kubeconfig to use (default: $KUBECONFIG, ~/.kube/config)',
): Option => new Option('--kubeconfig <path>', description);
export const contextOption = (): Option =>
  new Option('--context <name>', 'the kubeconfig context to use (default: its current context)');

/** --kubeconfig and --context, added to `cmd`. */
export const clusterFlags = (cmd: Command, kubeconfig?: string): Command =>
  cmd.addOption(kubeconfigOption(kubeconfig)).addOption(contextOption());

/** A client of the cluster the flags name (close it when done). */
export async function clientOf(o: ClusterFlags, userAgent = 'berth-cli'): Promise<KubeClient> {
  const { KubeClient } = await import('../runtime/client/client.ts');
  return KubeClient.fromFile(o.kubeconfig, {
    userAgent,
    ...(o.context !== undefined ? { context: o.context } : {}),
  });
}

/** Runs `run` against the cluster the flags name, then closes the client. */
export async function withClient<T>(o: ClusterFlags, run: (client: KubeClient) => Promise<T>): Promise<T> {
  const client = await clientOf(o);
  try {
    return await run(client);
  } finally {
    client.close();
  }
}

/** -n (the context's namespace when not given, as kubectl) and, where listing, -A. */
export function namespaceFlags(cmd: Command, what: string, allNamespaces = false): Command {
  cmd.option('-n, --namespace <ns>', `${what} (default: the context's namespace)`);
  return allNamespaces ? cmd.option('-A, --all-namespaces', 'in every namespace', false) : cmd;
}

/** The namespace a command acts in: -n, else the context's, else `default`. */
export const namespaceOf = (o: { namespace?: string }, client: KubeClient): string =>
  o.namespace ?? client.access.namespace ?? 'default';

export type Format = 'text' | 'json' | 'yaml';

/** `-o, --output`: json or yaml, and text (the default) where the command has a text form. */
export const outputOption = (text = true): Option => {
  const formats: Format[] = text ? ['text', 'json', 'yaml'] : ['json', 'yaml'];
  return new Option('-o, --output <format>', 'output format').choices(formats).default(formats[0]);
};

/** A list as kubectl prints one (`kind: List`). */
export const asList = (items: unknown[]): Record<string, unknown> => ({
  apiVersion: 'v1',
  kind: 'List',
  items,
});

/** `value` as `format` says, ending in a newline; `text` for the text form. */
export async function formatted(format: Format, value: unknown, text: () => string): Promise<string> {
  if (format === 'json') return `${JSON.stringify(value, null, 2)}\n`;
  if (format === 'yaml') return (await import('yaml')).stringify(value, { lineWidth: 0 });
  const t = text();
  return t.endsWith('\n') ? t : `${t}\n`;
}

/** Writes `value` to stdout in `format` (formatted). */
export async function print(format: Format, value: unknown, text: () => string): Promise<void> {
  process.stdout.write(await formatted(format, value, text));
}

const UNITS: Record<string, number> = {
  ns: 1e-9,
  us: 1e-6,
  µs: 1e-6,
  μs: 1e-6,
  ms: 1e-3,
  s: 1,
  m: 60,
  h: 3600,
};

/**
 * A Go duration (time.ParseDuration: `30s`, `2m`, `1h30m`, `1.5s`, `500ms`) in seconds; a bare
 * number is seconds, as Berth's flags took before (the chart, tests and users' configs pass them).
 * Scanned left to right, no regular expression; throws on anything else.
 */
export function parseDuration(text: string): number {
  const s = text.trim();
  if (s !== '' && Number.isFinite(Number(s)) && /^[0-9.]+$/.test(s)) return Number(s);
  let i = 0;
  let total = 0;
  const bad = () => new InvalidArgumentError(`"${text}" is not a duration (30s, 2m, 1h30m, or seconds)`);
  if (s === '') throw bad();
  while (i < s.length) {
    const start = i;
    while (i < s.length && ((s[i]! >= '0' && s[i]! <= '9') || s[i] === '.')) i++;
    const n = s.slice(start, i);
    if (n === '' || n === '.' || n.split('.').length > 2) throw bad();
    const u = i;
    while (i < s.length && !(s[i]! >= '0' && s[i]! <= '9') && s[i] !== '.') i++;
    const factor = UNITS[s.slice(u, i)];
    if (factor === undefined) throw bad();
    total += Number(n) * factor;
  }
  return total;
}

/** A flag's parser: a duration (parseDuration) of at least `min` and at most `max` seconds. */
export const durationWithin =
  (min: number, max = Infinity) =>
  (v: string): number => {
    const n = parseDuration(v);
    if (n < min || n > max)
      throw new InvalidArgumentError(`not a duration from ${min}s${max < Infinity ? ` to ${max}s` : ''}`);
    return n;
  };

/** An option taking a duration (parseDuration), in seconds, `dflt` seconds when not given. */
export const durationOption = (
  flags: string,
  description: string,
  dflt: number | undefined,
  min = 0,
  max = Infinity,
): Option => {
  const o = new Option(flags, `${description} (a duration: 30s, 2m, 1h30m)`).argParser(
    durationWithin(min, max),
  );
  return dflt === undefined ? o : o.default(dflt, `${dflt}s`);
};

/** A comma-separated flag's values. */
export const commaList = (v: string): string[] =>
  v
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);

/**
 * A list flag, as kubectl takes one: repeatable, and each value comma-separated
 * (`--workload-namespace shop --workload-namespace payments`, or `--workload-namespace shop,payments`).
 * Given, it replaces the default rather than adding to it; without a default it is undefined unless given.
 */
export const listOption = (flags: string, description: string, dflt?: readonly string[]): Option => {
  const parse = (v: string, previous: readonly string[] | undefined): string[] =>
    (previous === dflt ? [] : [...(previous ?? [])]).concat(commaList(v));
  const o = new Option(flags, `${description} (repeat the flag, or separate with commas)`).argParser(parse);
  return dflt === undefined ? o : o.default(dflt, dflt.join(','));
};

/** What --berth-namespace says on the commands that decide as Berth does (plan, explain). */
export const BERTH_NAMESPACE = "Berth's namespace, whose pods policies leave alone unless they name it";

/**
 * `--berth-namespace`: Berth's own namespace (its Lease, its webhook certificate's Secret), one name
 * on every command. `deprecated` are the names a command gave it before, still taken so that no
 * script breaks, hidden from the help and warned about on stderr.
 */
export function berthNamespaceFlag(
  cmd: Command,
  description: string,
  dflt: string,
  deprecated: string[] = [],
): Command {
  cmd.addOption(new Option('--berth-namespace <ns>', description).default(dflt));
  for (const old of deprecated) {
    cmd.addOption(new Option(`${old} <ns>`).hideHelp());
    cmd.on(`option:${old.replace(/^--/, '')}`, (v: string) => {
      process.stderr.write(`berth: warning: ${old} is deprecated, use --berth-namespace\n`);
      cmd.setOptionValueWithSource('berthNamespace', v, 'cli');
    });
  }
  return cmd;
}

/** How a dry run is asked for: `--dry-run`, or as kubectl users type it, `--dry-run=server|client`. */
const DRY_RUN_MODES = ['server', 'client'] as const;

/**
 * `--dry-run[=server|client]`: say what would change, change nothing. Berth's dry runs read the
 * cluster and send no write, so both modes do the same; kubectl's spelling is taken as it is typed.
 */
export const dryRunOption = (description = 'say what would change, change nothing'): Option =>
  new Option('--dry-run [mode]', `${description} (server and client alike: nothing is sent)`)
    .preset('client')
    .argParser((v: string) => {
      if (!(DRY_RUN_MODES as readonly string[]).includes(v))
        throw new InvalidArgumentError(
          `"${v}" is not a dry-run mode (server or client; put a name before --dry-run)`,
        );
      return v;
    });

/** Says a command's step on stdout, marked when the command changes nothing. */
export const sayStep =
  (dryRun: boolean) =>
  (s: string): void => {
    process.stdout.write(`${dryRun ? '(dry run) ' : ''}${s}\n`);
  };

/** A flag's parser for a whole number of at least `min`: `berth run` refuses anything else at once. */
export const atLeast = (min: number) => (v: string) => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < min)
    throw new InvalidArgumentError(`not a whole number of at least ${min}`);
  return n;
};

/** An option taking a whole number of at least `min` (1 unless said), `dflt` when not given. */
export const wholeNumber = (flags: string, description: string, dflt: number, min = 1): Option =>
  new Option(flags, description).default(dflt).argParser(atLeast(min));

/** A `--<name>-workers <n>` option: how many objects a controller reconciles at once. */
export const workers = (flags: string, description: string, dflt: number): Option =>
  wholeNumber(flags, description, dflt);

/** The `--<flag> <n>` option every node controller has: how many nodes it reconciles at once. */
export const workersOption = (flag: string, controller: string): Option =>
  workers(`--${flag} <n>`, `concurrent node reconciles of the ${controller} controller`, 16);
