// Where a client connects and how it authenticates: a kubeconfig's current context, or the pod's
// service account. Berth reads kubeconfigs itself because importing @kubernetes/client-node costs
// about 70 MB of resident memory (its KubeConfig loads every generated API model), more than half of
// the labels job's whole budget (issue 17; decision 0002). Exec credential plugins are run by
// exec-credential.ts; a legacy auth-provider is refused (decision 0047).
import { readFileSync, existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { delimiter, dirname, isAbsolute, join, resolve } from 'node:path';
import { yaml } from '../platform/yaml.ts';
import { execCredentials, execPlan, parseExecCredential, runExecPlugin } from './exec-credential.ts';

/** TLS material as node:https takes it. */
export interface TlsMaterial {
  ca?: Buffer;
  cert?: Buffer;
  key?: Buffer;
  servername?: string;
  rejectUnauthorized?: boolean;
}

/** A cluster a client reaches: its server, and its TLS material and credentials as of now. */
export interface ClusterAccess {
  readonly server: string;
  /** The namespace a command acts in when told none: the context's, or the pod's (kubectl's rule). */
  readonly namespace?: string;
  /** Read again on every call: files and plugins rotate credentials. */
  resolve(): Promise<{ tls: TlsMaterial; headers: Record<string, string> }>;
  /** The server refused the credentials (401): an exec plugin is run again at the next resolve. */
  refused?(): void;
}

// The parts of a kubeconfig Berth reads (client-go's names); anything else is ignored.
export interface KubeconfigCluster {
  server?: string;
  'certificate-authority'?: string;
  'certificate-authority-data'?: string;
  'insecure-skip-tls-verify'?: boolean;
  'tls-server-name'?: string;
  'proxy-url'?: string;
  extensions?: unknown;
}
export interface KubeconfigUser {
  token?: string;
  tokenFile?: string;
  username?: string;
  password?: string;
  'client-certificate'?: string;
  'client-certificate-data'?: string;
  'client-key'?: string;
  'client-key-data'?: string;
  exec?: unknown;
  'auth-provider'?: unknown;
}

export interface KubeconfigContext {
  cluster?: string;
  user?: string;
  namespace?: string;
}

/** A kubeconfig's current context, resolved to its cluster and user (paths made absolute). */
export interface Kubeconfig {
  currentContext?: string;
  /** The current context exists. */
  context?: KubeconfigContext;
  cluster?: KubeconfigCluster;
  user?: KubeconfigUser;
}

const SA_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';

/** JSON is YAML too: read as JSON when it is, the YAML library left unloaded (`berth run` in a pod reads none). */
function parseDocument(text: string): unknown {
  if (/^\s*\{/.test(text)) {
    try {
      return JSON.parse(text);
    } catch {
      // A YAML flow mapping, say.
    }
  }
  return yaml().parse(text);
}

/**
 * Parses a kubeconfig (YAML or JSON) and resolves its current context. Relative file names are
 * taken from `dir` (the kubeconfig's folder), as kubectl does. Throws when the text is not a
 * kubeconfig at all; a kubeconfig that lacks a context, cluster or user parses, with those absent.
 * `contextName` (kubectl's --context) replaces the current context, and must exist.
 */
export function parseKubeconfig(text: string, dir?: string, contextName?: string): Kubeconfig {
  const doc = parseDocument(text);
  if (!doc || typeof doc !== 'object' || Array.isArray(doc)) throw new Error('not a YAML or JSON mapping');
  const d = doc as Record<string, unknown>;
  const entries = <T>(key: string, body: string): Map<string, T> => {
    const list = d[key] ?? [];
    if (!Array.isArray(list)) throw new Error(`${key} is not a list`);
    const out = new Map<string, T>();
    for (const e of list as Record<string, unknown>[]) {
      const name = e?.['name'];
      if (typeof name !== 'string') throw new Error(`an entry of ${key} has no name`);
      // The first of a name wins, as in kubectl's merge.
      if (!out.has(name)) out.set(name, (e[body] ?? {}) as T);
    }
    return out;
  };
  const clusters = entries<KubeconfigCluster>('clusters', 'cluster');
  const users = entries<KubeconfigUser>('users', 'user');
  const contexts = entries<KubeconfigContext>('contexts', 'context');
  if (contextName !== undefined && !contexts.has(contextName))
    throw new Error(
      `context "${contextName}" is not in the kubeconfig (it has: ${[...contexts.keys()].join(', ') || 'none'})`,
    );
  const current =
    contextName ?? (typeof d['current-context'] === 'string' ? d['current-context'] : undefined);
  const context = current ? contexts.get(current) : undefined;
  // Absolute, even for a kubeconfig named relative to the working folder: an exec command "./x" beside
  // ./config must stay a path, not become "x", which would be looked up on PATH.
  const abs = (p: string | undefined) => (p && dir && !isAbsolute(p) ? resolve(dir, p) : p);
  const cluster = context?.cluster ? clusters.get(context.cluster) : undefined;
  const user = context?.user ? users.get(context.user) : undefined;
  // An exec command with a slash is a file beside the kubeconfig; without one, it is looked up on PATH.
  const exec = user?.exec as { command?: unknown } | undefined;
  const command = typeof exec?.command === 'string' && exec.command.includes('/') ? exec.command : undefined;
  return {
    ...(current ? { currentContext: current } : {}),
    ...(context ? { context } : {}),
    ...(cluster
      ? {
          cluster: {
            ...cluster,
            ...(cluster['certificate-authority']
              ? { 'certificate-authority': abs(cluster['certificate-authority']) }
              : {}),
          },
        }
      : {}),
    ...(user
      ? {
          user: {
            ...user,
            ...(user.tokenFile ? { tokenFile: abs(user.tokenFile) } : {}),
            ...(user['client-certificate'] ? { 'client-certificate': abs(user['client-certificate']) } : {}),
            ...(user['client-key'] ? { 'client-key': abs(user['client-key']) } : {}),
            ...(command ? { exec: { ...exec, command: abs(command) } } : {}),
          },
        }
      : {}),
  };
}

/** The access a parsed kubeconfig gives; throws, saying why, when it names no usable cluster. */
export function kubeconfigAccess(kc: Kubeconfig): ClusterAccess {
  if (!kc.context) throw new Error('kubeconfig has no current context');
  const server = kc.cluster?.server;
  if (!server) throw new Error('kubeconfig has no current cluster');
  const cluster = kc.cluster!;
  const user = kc.user ?? {};
  if (user['auth-provider']) throw new KubeconfigError(authProviderRefusal(user['auth-provider']));
  const plugin = user.exec === undefined ? undefined : pluginCredentials(user.exec, { ...cluster, server });
  const material = (data: string | undefined, file: string | undefined) =>
    data ? Buffer.from(data, 'base64') : file ? readFile(file) : undefined;
  return {
    server,
    ...(kc.context.namespace ? { namespace: kc.context.namespace } : {}),
    async resolve() {
      const [ca, ownCert, ownKey, given] = await Promise.all([
        material(cluster['certificate-authority-data'], cluster['certificate-authority']),
        material(user['client-certificate-data'], user['client-certificate']),
        material(user['client-key-data'], user['client-key']),
        plugin?.get(),
      ]);
      // What the plugin gives replaces the kubeconfig's own.
      const cert = given?.cert ?? ownCert;
      const key = given?.key ?? ownKey;
      const headers: Record<string, string> = {};
      const token =
        given?.token ??
        user.token ??
        (user.tokenFile ? (await readFile(user.tokenFile, 'utf8')).trim() : undefined);
      if (token) headers['Authorization'] = `Bearer ${token}`;
      else if (user.username !== undefined)
        headers['Authorization'] =
          'Basic ' + Buffer.from(`${user.username}:${user.password ?? ''}`).toString('base64');
      return {
        tls: {
          ...(ca ? { ca } : {}),
          ...(cert ? { cert } : {}),
          ...(key ? { key } : {}),
          ...(cluster['tls-server-name'] ? { servername: cluster['tls-server-name'] } : {}),
          ...(cluster['insecure-skip-tls-verify'] ? { rejectUnauthorized: false } : {}),
        },
        headers,
      };
    },
    ...(plugin ? { refused: plugin.refused } : {}),
  };
}

/**
 * A user's exec plugin's credentials, run at the first resolve; throws KubeconfigError now for an
 * exec config client-go would refuse, and from `get` when the plugin fails.
 */
function pluginCredentials(exec: unknown, cluster: KubeconfigCluster & { server: string }) {
  const ca = () => {
    const data = cluster['certificate-authority-data'];
    const file = cluster['certificate-authority'];
    return data ? Buffer.from(data, 'base64') : file ? readFileSync(file) : undefined;
  };
  let plan: ReturnType<typeof execPlan>;
  try {
    plan = execPlan(exec, cluster, ca);
  } catch (e) {
    throw new KubeconfigError(`the kubeconfig's user cannot be used: ${(e as Error).message}`);
  }
  return execCredentials(async () => {
    try {
      return parseExecCredential(await runExecPlugin(plan), plan.apiVersion);
    } catch (e) {
      throw new KubeconfigError(`the kubeconfig's exec plugin ${plan.command}: ${(e as Error).message}`);
    }
  });
}

/**
 * Why a user with an auth-provider is refused: client-go keeps only oidc's (kubectl dropped gcp and
 * azure in 1.26), and every provider has an exec plugin in its place.
 */
function authProviderRefusal(provider: unknown): string {
  const name = (provider as { name?: unknown })?.name;
  return (
    `the kubeconfig's user authenticates with the auth-provider ${typeof name === 'string' ? `"${name}"` : '(no name)'}, ` +
    'which Berth does not run: use an exec credential plugin (client.authentication.k8s.io) instead, ' +
    'e.g. kubelogin for oidc, gke-gcloud-auth-plugin for GKE, kubelogin (Azure) for AKS'
  );
}

/** A kubeconfig file's access, of its current context or of `context`. */
export function kubeconfigFileAccess(path: string, context?: string): ClusterAccess {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    throw new KubeconfigError(
      `cannot read the kubeconfig ${path}: ${(e as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file' : errorCode(e)}`,
    );
  }
  let kc: Kubeconfig;
  try {
    kc = parseKubeconfig(text, dirname(path), context);
  } catch (e) {
    throw new KubeconfigError(`the kubeconfig ${path} cannot be used: ${(e as Error).message}`);
  }
  return kubeconfigAccess(kc);
}

/** A kubeconfig that is missing, unreadable or unusable: the command never reached a cluster. */
export class KubeconfigError extends Error {
  override name = 'KubeconfigError';
}

const errorCode = (e: unknown): string => (e as NodeJS.ErrnoException).code ?? (e as Error).message;

/** A kubeconfig text's access (a cell's, from a Secret). */
export function kubeconfigTextAccess(text: string): ClusterAccess {
  return kubeconfigAccess(parseKubeconfig(text));
}

/**
 * The pod's service account: KUBERNETES_SERVICE_HOST and _PORT, its CA and its token, read again
 * on every resolve (the kubelet rotates projected tokens).
 */
export function inClusterAccess(dir = SA_DIR, env = process.env): ClusterAccess {
  const host = env['KUBERNETES_SERVICE_HOST'];
  const port = env['KUBERNETES_SERVICE_PORT'];
  if (!host || !port) throw new Error('not in a cluster: KUBERNETES_SERVICE_HOST or _PORT is not set');
  const namespace = existsSync(join(dir, 'namespace'))
    ? readFileSync(join(dir, 'namespace'), 'utf8').trim()
    : undefined;
  return kubeconfigAccess({
    context: namespace ? { namespace } : {},
    cluster: {
      server: `https://${host.includes(':') ? `[${host}]` : host}:${port}`,
      'certificate-authority': join(dir, 'ca.crt'),
    },
    user: { tokenFile: join(dir, 'token') },
  });
}

/**
 * What kubectl would use: the files of $KUBECONFIG (merged, the first of a name winning), else
 * ~/.kube/config, else the pod's service account; `context` instead of the current context.
 */
export function defaultAccess(env = process.env, context?: string): ClusterAccess {
  const files = (env['KUBECONFIG'] ?? '').split(delimiter).filter(Boolean);
  if (files.length === 1) return kubeconfigFileAccess(files[0]!, context);
  if (files.length > 1) {
    const texts = files
      .filter(existsSync)
      .map((f) => yaml().parse(readFileSync(f, 'utf8')) as Record<string, unknown>);
    const merged: Record<string, unknown> = {
      'current-context': texts.find((t) => t?.['current-context'])?.['current-context'],
    };
    for (const key of ['clusters', 'users', 'contexts'])
      merged[key] = texts.flatMap((t) => (Array.isArray(t?.[key]) ? (t[key] as unknown[]) : []));
    const text = JSON.stringify(merged);
    return kubeconfigAccess(parseKubeconfig(text, undefined, context));
  }
  const home = join(homedir(), '.kube', 'config');
  if (existsSync(home)) return kubeconfigFileAccess(home, context);
  if (context === undefined && env['KUBERNETES_SERVICE_HOST']) return inClusterAccess(SA_DIR, env);
  throw new KubeconfigError(
    context !== undefined
      ? `no kubeconfig to find context "${context}" in: give --kubeconfig, or set KUBECONFIG`
      : 'no kubeconfig: give --kubeconfig, set KUBECONFIG, or create ~/.kube/config (not in a cluster either)',
  );
}
