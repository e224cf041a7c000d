// Pull secrets matched to an image the way the kubelet matches them (kubernetes/kubernetes
// pkg/credentialprovider/keyring.go and secrets/secrets.go, v1.35.4): keys lose their scheme and a
// leading /v1/ or /v2/, are tried in reverse lexical order, match by port, by glob per host label
// and by path prefix, and every match is returned. Only Docker Hub images fall back to the
// `index.docker.io` key (the kubelet also gives it to `localhost/...`; Berth does not).
import { parse as parseYaml } from 'yaml';
import type { Credential } from './auth.ts';
import { isDockerHub } from './reference.ts';
import type { PullSecret } from './types.ts';

export const SecretType = {
  dockerConfigJson: 'kubernetes.io/dockerconfigjson',
  dockercfg: 'kubernetes.io/dockercfg',
} as const;

interface Entry {
  key: string;
  labels: string[];
  port: string;
  path: string;
  credentials: Credential[];
}

export interface Keyring {
  /** In matching order (reverse lexical by key). */
  entries: Entry[];
  /** Secrets or entries that could not be read, for the message of a failed inspection. */
  problems: string[];
}

const dockerHubKey = 'index.docker.io';

/** Go's net.SplitHostPort, falling back to the whole host and no port as the kubelet does on error. */
function splitHostPort(hostport: string): { host: string; port: string } {
  const v6 = /^\[([^\]]*)\]:([^:]*)$/.exec(hostport);
  if (v6) return { host: v6[1]!, port: v6[2]! };
  const m = /^([^:[\]]*):([^:]*)$/.exec(hostport);
  return m ? { host: m[1]!, port: m[2]! } : { host: hostport, port: '' };
}

/** A schemeless URL (`host[:port][/path]`) as Go's url.Parse splits `https://` + it. */
function splitUrl(u: string): { labels: string[]; port: string; path: string } {
  const slash = u.indexOf('/');
  const hostport = slash < 0 ? u : u.slice(0, slash);
  const path = slash < 0 ? '' : u.slice(slash);
  const { host, port } = splitHostPort(hostport);
  return { labels: host.split('.'), port, path };
}

/** The keyring key of a config entry: no scheme, no leading /v1/ or /v2/, host plus path. */
export function keyOf(location: string): string | undefined {
  // Go's url.Parse ends the URL at `?` or `#`: a `?` in a key is a query, never a glob.
  const schemeless = location.replace(/^https?:\/\//, '').replace(/[?#].*$/s, '');
  const slash = schemeless.indexOf('/');
  const host = slash < 0 ? schemeless : schemeless.slice(0, slash);
  if (!host || /\s/.test(schemeless)) return undefined;
  let path = slash < 0 ? '' : schemeless.slice(slash);
  if (path.startsWith('/v2/') || path.startsWith('/v1/')) path = path.slice(3);
  return path && path !== '/' ? host + path : host;
}

/**
 * Go's filepath.Match as a RegExp (no `/` in a host label, so the separator never matters): `*`,
 * `?`, `[...]` with `^` negation and ranges, `\` escapes. Undefined for a bad pattern, which the
 * kubelet treats as no match.
 */
export function globRegExp(pattern: string): RegExp | undefined {
  let re = '';
  let i = 0;
  const esc = (c: string) => c.replace(/[\\^$.*+?()[\]{}|/-]/g, '\\$&');
  while (i < pattern.length) {
    const c = pattern[i++]!;
    if (c === '*') re += '[^/]*';
    else if (c === '?') re += '[^/]';
    else if (c === '\\') {
      if (i >= pattern.length) return undefined;
      re += esc(pattern[i++]!);
    } else if (c === '[') {
      let cls = '';
      if (pattern[i] === '^') {
        cls += '^';
        i++;
      }
      let ranges = 0;
      while (true) {
        if (i >= pattern.length) return undefined;
        if (pattern[i] === ']' && ranges > 0) break;
        const lo = pattern[i] === '\\' ? pattern[++i] : pattern[i];
        if (lo === undefined || lo === ']' || lo === '-') return undefined;
        i++;
        cls += esc(lo);
        if (pattern[i] === '-') {
          const hi = pattern[i + 1] === '\\' ? pattern[i + 2] : pattern[i + 1];
          if (hi === undefined || hi === ']' || hi === '-' || hi < lo) return undefined;
          i += pattern[i + 1] === '\\' ? 3 : 2;
          cls += '-' + esc(hi);
        }
        ranges++;
      }
      i++;
      re += `[${cls}]`;
    } else re += esc(c);
  }
  return new RegExp(`^${re}$`);
}

/** The kubelet's URLsMatch: same port, same number of host labels, each a glob match, path a string prefix. */
function matches(entry: Entry, image: ReturnType<typeof splitUrl>): boolean {
  if (entry.port !== image.port || entry.labels.length !== image.labels.length) return false;
  for (const [i, glob] of entry.labels.entries()) {
    if (!globRegExp(glob)?.test(image.labels[i]!)) return false;
  }
  return image.path.startsWith(entry.path);
}

function decodeAuth(auth: string): { username: string; password: string } | undefined {
  const text = Buffer.from(auth, 'base64').toString('utf8');
  const colon = text.indexOf(':');
  return colon < 0 ? undefined : { username: text.slice(0, colon), password: text.slice(colon + 1) };
}

/** The docker config map of one secret (`auths` of .dockerconfigjson, the bare map of .dockercfg). */
function configOf(secret: PullSecret): Record<string, unknown> {
  const field =
    secret.type === SecretType.dockerConfigJson
      ? '.dockerconfigjson'
      : secret.type === SecretType.dockercfg
        ? '.dockercfg'
        : undefined;
  if (!field)
    throw new Error(`type ${secret.type} is not ${SecretType.dockerConfigJson} or ${SecretType.dockercfg}`);
  const data = secret.data[field];
  if (!data) throw new Error(`it has no ${field}`);
  const doc: unknown = JSON.parse(Buffer.from(data, 'base64').toString('utf8'));
  const map = field === '.dockerconfigjson' ? (doc as { auths?: unknown } | null)?.auths : doc;
  if (typeof map !== 'object' || map === null || Array.isArray(map))
    throw new Error(`its ${field} holds no auths map`);
  return map as Record<string, unknown>;
}

/** The keyring of pull secrets in order (the pod's, then the cluster-wide one). */
export function buildKeyring(secrets: PullSecret[]): Keyring {
  const byKey = new Map<string, Credential[]>();
  const problems: string[] = [];
  for (const secret of secrets) {
    let config: Record<string, unknown>;
    try {
      config = configOf(secret);
    } catch (e) {
      problems.push(`pull secret ${secret.name} cannot be read: ${(e as Error).message}`);
      continue;
    }
    for (const [location, value] of Object.entries(config)) {
      const key = keyOf(location);
      const v = (typeof value === 'object' && value !== null ? value : {}) as Record<string, unknown>;
      // As the kubelet's DockerConfigEntry: `auth` wins over username and password when present.
      const pair =
        typeof v['auth'] === 'string' && v['auth']
          ? decodeAuth(v['auth'])
          : { username: String(v['username'] ?? ''), password: String(v['password'] ?? '') };
      if (!key || !pair) {
        problems.push(
          `pull secret ${secret.name}: entry "${location}" cannot be read (auth must be base64 of user:password)`,
        );
        continue;
      }
      const list = byKey.get(key) ?? [];
      list.push({ ...pair, source: `${secret.name} (${location})` });
      byKey.set(key, list);
    }
  }
  const keys = [...byKey.keys()].sort().reverse();
  return { entries: keys.map((key) => ({ key, ...splitUrl(key), credentials: byKey.get(key)! })), problems };
}

/**
 * Every credential whose key matches the repository (`domain/path`), in the kubelet's order, each
 * user and password once. Empty: pull anonymously.
 */
export function lookup(keyring: Keyring, domain: string, path: string): Credential[] {
  const image = splitUrl(`${domain}/${path}`);
  let found = keyring.entries.filter((e) => matches(e, image)).flatMap((e) => e.credentials);
  if (found.length === 0 && isDockerHub(domain)) {
    found = keyring.entries.find((e) => e.key === dockerHubKey)?.credentials ?? [];
  }
  const seen = new Set<string>();
  return found.filter((c) => {
    const k = `${c.username}\0${c.password}`;
    return seen.has(k) ? false : (seen.add(k), true);
  });
}

/**
 * A pull secret from a file, for a command line: a Kubernetes Secret (YAML or JSON, `data` or
 * `stringData`), a docker `config.json` (`auths`), or a bare `.dockercfg` map.
 */
export function pullSecretFromFile(text: string, name: string): PullSecret {
  const doc = parseYaml(text) as Record<string, unknown> | null;
  if (typeof doc !== 'object' || doc === null) throw new Error(`${name} is not a Secret or a docker config`);
  const b64 = (s: string) => Buffer.from(s).toString('base64');
  if (doc['kind'] === 'Secret') {
    const meta = (doc['metadata'] ?? {}) as { name?: string; namespace?: string };
    const data: Record<string, string> = { ...((doc['data'] ?? {}) as Record<string, string>) };
    for (const [k, v] of Object.entries((doc['stringData'] ?? {}) as Record<string, string>))
      data[k] = b64(v);
    const secretName = meta.name ? `${meta.namespace ?? 'default'}/${meta.name}` : name;
    return { name: secretName, type: String(doc['type'] ?? ''), data };
  }
  if ('auths' in doc) {
    return {
      name,
      type: SecretType.dockerConfigJson,
      data: { '.dockerconfigjson': b64(JSON.stringify(doc)) },
    };
  }
  return { name, type: SecretType.dockercfg, data: { '.dockercfg': b64(JSON.stringify(doc)) } };
}
