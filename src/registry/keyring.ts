// Pull secrets matched to an image the way the kubelet matches them (kubernetes/kubernetes
// pkg/credentialprovider/keyring.go and secrets/secrets.go, v1.35.4): keys lose their scheme and a
// leading /v1/ or /v2/, are tried in reverse lexical order, match by port, by glob per host label
// and by path prefix, and every match is returned. Only Docker Hub images fall back to the
// `index.docker.io` key (the kubelet also gives it to `localhost/...`; Berth does not).
import { yaml } from '../runtime/platform/yaml.ts';
import type { Credential } from './auth.ts';
import { globMatch } from './glob.ts';
import { isDockerHub } from './reference.ts';
import type { PullSecret } from './types.ts';

export const SecretType = {
  dockerConfigJson: 'kubernetes.io/dockerconfigjson',
  dockercfg: 'kubernetes.io/dockercfg',
} as const;

/** A credential and the pull secret (`namespace/name`) it came from: the cache's reader (registry/known.ts). */
export interface SecretCredential extends Credential {
  secret: string;
}

interface Entry {
  key: string;
  labels: string[];
  port: string;
  path: string;
  credentials: SecretCredential[];
}

export interface Keyring {
  /** In matching order (reverse lexical by key). */
  entries: Entry[];
  /** Secrets or entries that could not be read, for the message of a failed inspection. */
  problems: string[];
}

const dockerHubKey = 'index.docker.io';
/**
 * Bounds on what a namespace user writes into a pull secret, so that matching a pod's images
 * costs at most entries × key × image name steps (globMatch is pattern × name): no image name is
 * longer than 255 characters, nor need a key be; a docker config rarely holds more than a few.
 */
export const MAX_KEY_LENGTH = 255;
export const MAX_KEYRING_ENTRIES = 64;
/** A key as messages quote it: a user's text, so never unbounded. */
const quoted = (location: string) =>
  JSON.stringify(location.length > 80 ? `${location.slice(0, 80)}…` : location);

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

/** The kubelet's URLsMatch: same port, same number of host labels, each a glob match, path a string prefix. */
function matches(entry: Entry, image: ReturnType<typeof splitUrl>): boolean {
  if (entry.port !== image.port || entry.labels.length !== image.labels.length) return false;
  for (const [i, glob] of entry.labels.entries()) {
    if (!globMatch(glob, image.labels[i]!, { sep: '/' })) return false;
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
  const byKey = new Map<string, SecretCredential[]>();
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
      if (location.length > MAX_KEY_LENGTH) {
        problems.push(
          `pull secret ${secret.name}: entry ${quoted(location)} is longer than ${MAX_KEY_LENGTH} characters`,
        );
        continue;
      }
      const key = keyOf(location);
      const v = (typeof value === 'object' && value !== null ? value : {}) as Record<string, unknown>;
      // As the kubelet's DockerConfigEntry: `auth` wins over username and password when present.
      const pair =
        typeof v['auth'] === 'string' && v['auth']
          ? decodeAuth(v['auth'])
          : { username: String(v['username'] ?? ''), password: String(v['password'] ?? '') };
      if (!key || !pair) {
        problems.push(
          `pull secret ${secret.name}: entry ${quoted(location)} cannot be read (auth must be base64 of user:password)`,
        );
        continue;
      }
      const list = byKey.get(key);
      if (!list && byKey.size >= MAX_KEYRING_ENTRIES) {
        problems.push(
          `pull secret ${secret.name}: entry ${quoted(location)} is past the ${MAX_KEYRING_ENTRIES} keys Berth reads`,
        );
        continue;
      }
      const credential = { ...pair, source: `${secret.name} (${location})`, secret: secret.name };
      byKey.set(key, [...(list ?? []), credential]);
    }
  }
  const keys = [...byKey.keys()].sort().reverse();
  return { entries: keys.map((key) => ({ key, ...splitUrl(key), credentials: byKey.get(key)! })), problems };
}

/**
 * Every credential whose key matches the repository (`domain/path`), in the kubelet's order, each
 * user and password once. Empty: pull anonymously.
 */
export function lookup(keyring: Keyring, domain: string, path: string): SecretCredential[] {
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
  const doc = yaml().parse(text) as Record<string, unknown> | null;
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
