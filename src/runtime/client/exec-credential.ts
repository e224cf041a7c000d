// Kubeconfig users whose credentials a program gives: the client.authentication.k8s.io exec
// credential plugin protocol, as client-go runs it (plugin/pkg/client/auth/exec), without
// @kubernetes/client-node (decision 0047). The plugin is named by a kubeconfig an admin wrote, and
// Berth runs it as kubectl would; a cell's kubeconfig, read from a Secret, may name none
// (cells/decide.ts). What a plugin is told and what it answers is decided here, apart from running it.
import { spawn } from 'node:child_process';

const GROUP = 'client.authentication.k8s.io';
const API_VERSIONS = [`${GROUP}/v1`, `${GROUP}/v1beta1`];
/** A plugin that takes longer is killed: a client must not wait forever for its credentials. */
export const EXEC_TIMEOUT_MS = 30_000;
/** A plugin's output is read up to this much (an ExecCredential is a few KiB): bounded memory. */
export const EXEC_MAX_OUTPUT_BYTES = 4 * 1024 * 1024;

/** The parts of a kubeconfig cluster a plugin may be told (provideClusterInfo). */
export interface ExecCluster {
  server: string;
  'tls-server-name'?: string;
  'insecure-skip-tls-verify'?: boolean;
  'proxy-url'?: string;
  extensions?: unknown;
}

/** What to run: the plugin's command line and environment, and the version it answers in. */
export interface ExecPlan {
  command: string;
  args: string[];
  env: Record<string, string>;
  apiVersion: string;
  installHint?: string;
}

/** A plugin's credentials, and until when they hold (ms since the epoch; none: for the process). */
export interface ExecCredential {
  token?: string;
  cert?: Buffer;
  key?: Buffer;
  expires?: number;
}

const str = (v: unknown): v is string => typeof v === 'string' && v !== '';

/** The exec config's own errors: what client-go's kubeconfig validation and plugin setup refuse. */
function checkExec(e: Record<string, unknown>): string | undefined {
  if (!str(e['command'])) return 'exec has no command';
  if (!API_VERSIONS.includes(e['apiVersion'] as string))
    return `exec apiVersion "${String(e['apiVersion'] ?? '')}" is not one of ${API_VERSIONS.join(', ')}`;
  const mode = e['interactiveMode'];
  if (mode === undefined && e['apiVersion'] === `${GROUP}/v1`)
    return `exec interactiveMode is required by ${GROUP}/v1`;
  if (mode === 'Always')
    return 'exec interactiveMode is Always, but Berth runs a plugin without a terminal: use a plugin that can run with interactiveMode Never or IfAvailable';
  if (mode !== undefined && mode !== 'Never' && mode !== 'IfAvailable')
    return `exec interactiveMode "${String(mode)}" is not Never, IfAvailable or Always`;
  if (e['args'] !== undefined && !(Array.isArray(e['args']) && e['args'].every((a) => typeof a === 'string')))
    return 'exec args is not a list of strings';
  const env = e['env'] ?? [];
  if (
    !Array.isArray(env) ||
    !env.every((v: Record<string, unknown>) => str(v?.['name']) && typeof v['value'] === 'string')
  )
    return 'exec env is not a list of name and value';
  return undefined;
}

/**
 * What to run for a kubeconfig user's `exec`: its command and args, its env over `processEnv`, and
 * KUBERNETES_EXEC_INFO, the ExecCredential request (never interactive; the cluster, with its CA
 * bytes, when provideClusterInfo). Throws, saying why, for a config client-go would refuse.
 */
export function execPlan(
  exec: unknown,
  cluster: ExecCluster,
  ca: () => Buffer | undefined,
  processEnv: NodeJS.ProcessEnv = process.env,
): ExecPlan {
  if (!exec || typeof exec !== 'object' || Array.isArray(exec)) throw new Error('exec is not a mapping');
  const e = exec as Record<string, unknown>;
  const wrong = checkExec(e);
  if (wrong) throw new Error(wrong);
  const apiVersion = e['apiVersion'] as string;
  const spec: Record<string, unknown> = { interactive: false };
  if (e['provideClusterInfo'] === true) {
    // client-go's Cluster: the kubeconfig's fields, the CA as bytes, and this extension's config.
    const caData = ca();
    const config = Array.isArray(cluster.extensions)
      ? (cluster.extensions as Record<string, unknown>[]).find((x) => x?.['name'] === `${GROUP}/exec`)?.[
          'extension'
        ]
      : undefined;
    spec['cluster'] = {
      server: cluster.server,
      ...(cluster['tls-server-name'] ? { 'tls-server-name': cluster['tls-server-name'] } : {}),
      ...(cluster['insecure-skip-tls-verify'] ? { 'insecure-skip-tls-verify': true } : {}),
      ...(caData ? { 'certificate-authority-data': caData.toString('base64') } : {}),
      ...(cluster['proxy-url'] ? { 'proxy-url': cluster['proxy-url'] } : {}),
      ...(config !== undefined ? { config } : {}),
    };
  }
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(processEnv)) if (v !== undefined) env[k] = v;
  for (const { name, value } of (e['env'] ?? []) as { name: string; value: string }[]) env[name] = value;
  env['KUBERNETES_EXEC_INFO'] = JSON.stringify({ apiVersion, kind: 'ExecCredential', spec });
  return {
    command: e['command'] as string,
    args: (e['args'] ?? []) as string[],
    env,
    apiVersion,
    ...(str(e['installHint']) ? { installHint: e['installHint'] } : {}),
  };
}

/** The credentials in a plugin's output; throws, saying why, when it is not an ExecCredential of `apiVersion`. */
export function parseExecCredential(stdout: string, apiVersion: string): ExecCredential {
  let doc: unknown;
  try {
    doc = JSON.parse(stdout);
  } catch (e) {
    throw new Error(`its output is not JSON (${(e as Error).message})`, { cause: e });
  }
  const d = (doc && typeof doc === 'object' ? doc : {}) as Record<string, unknown>;
  if (d['apiVersion'] !== apiVersion || d['kind'] !== 'ExecCredential')
    throw new Error(
      `it answered ${String(d['kind'] ?? 'no kind')} ${String(d['apiVersion'] ?? 'of no apiVersion')}, not ExecCredential ${apiVersion} as the kubeconfig says`,
    );
  const s = d['status'];
  if (!s || typeof s !== 'object') throw new Error('its ExecCredential has no status');
  const {
    token,
    clientCertificateData: cert,
    clientKeyData: key,
    expirationTimestamp: at,
  } = s as Record<string, unknown>;
  if (!str(token) && !str(cert) && !str(key))
    throw new Error('its ExecCredential has no token and no client certificate');
  if (str(cert) !== str(key))
    throw new Error('its ExecCredential has a client certificate or key without the other');
  const expires = at === undefined ? undefined : Date.parse(String(at));
  if (expires !== undefined && !Number.isFinite(expires))
    throw new Error(`its expirationTimestamp "${String(at)}" is not a time`);
  return {
    ...(str(token) ? { token } : {}),
    ...(str(cert) && str(key) ? { cert: Buffer.from(cert), key: Buffer.from(key) } : {}),
    ...(expires !== undefined ? { expires } : {}),
  };
}

/** Whether credentials are to be asked for again: past their expirationTimestamp. */
export const expired = (c: ExecCredential, now: number): boolean =>
  c.expires !== undefined && now >= c.expires;

/** The last `max` bytes of a plugin's stderr, for an error message. */
const tail = (s: string, max = 2048) => (s.length > max ? `…${s.slice(-max)}` : s).trim();

/**
 * Runs a plugin (no stdin, no shell) and gives its stdout; rejects, saying why, when it cannot be
 * started, prints more than `maxBytes`, runs longer than `timeoutMs` (killed either way) or fails.
 */
export function runExecPlugin(
  plan: ExecPlan,
  timeoutMs = EXEC_TIMEOUT_MS,
  maxBytes = EXEC_MAX_OUTPUT_BYTES,
): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(plan.command, plan.args, { env: plan.env, stdio: ['ignore', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    let size = 0;
    let stderr = '';
    let failed: string | undefined;
    const kill = (why: string) => {
      failed ??= why;
      child.kill('SIGKILL');
    };
    const timer = setTimeout(() => kill(`it did not finish in ${timeoutMs / 1000} s (killed)`), timeoutMs);
    child.stdout.on('data', (b: Buffer) => {
      size += b.length;
      if (size > maxBytes) kill(`it printed more than ${maxBytes} bytes (killed)`);
      else out.push(b);
    });
    child.stderr.on('data', (b: Buffer) => (stderr = tail(stderr + b.toString('utf8'), 8192)));
    child.on('error', (e: NodeJS.ErrnoException) => {
      clearTimeout(timer);
      reject(
        new Error(
          e.code === 'ENOENT'
            ? `its command ${plan.command} is not found${plan.installHint ? `: ${plan.installHint.trim()}` : ''}`
            : `its command ${plan.command} cannot be run: ${e.code ?? e.message}`,
        ),
      );
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      const why = failed ?? (code === 0 ? undefined : `it exited with ${code ?? signal}`);
      if (!why) return resolve(Buffer.concat(out).toString('utf8'));
      const said = tail(stderr);
      reject(new Error(said ? `${why}: ${said}` : why));
    });
  });
}

/**
 * A plugin's credentials, kept until they expire or the server refuses them, and asked for once
 * however many callers want them meanwhile.
 */
export function execCredentials(run: () => Promise<ExecCredential>, now = Date.now) {
  let held: ExecCredential | undefined;
  let running: Promise<ExecCredential> | undefined;
  return {
    get(): Promise<ExecCredential> {
      if (held && !expired(held, now())) return Promise.resolve(held);
      running ??= run()
        .then((c) => (held = c))
        .finally(() => (running = undefined));
      return running;
    },
    /** The server refused them (401): the next get runs the plugin again. */
    refused(): void {
      held = undefined;
    },
  };
}
