// What a failed command says, and its exit code (docs/reference/exit-codes.md): the cause in a
// user's words rather than a stack's. A missing kubeconfig names where Berth looked, a missing
// CRD which one and how to install it, a refusal what was refused and as whom (the apiserver's own
// words carry the user). Errors are known by name, not class: main.ts loads this file at once, and
// the client (its metrics, its TLS) is no part of `berth --help`.
import type { ApiError } from '../runtime/client/client.ts';

export const EXIT = {
  ok: 0,
  failed: 1,
  usage: 2,
  notReady: 3,
  noCluster: 4,
  refused: 5,
  crdsMissing: 6,
  unsupportedKubernetes: 7,
} as const;

const NETWORK = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ENOTFOUND',
  'EAI_AGAIN',
  'ETIMEDOUT',
  'EHOSTUNREACH',
]);

/** The resource of a berth.dev path (`/apis/berth.dev/v1alpha1/namespaces/x/cells/y` → cells). */
function berthResource(message: string): string | undefined {
  // The client's message starts `GET /apis/...: `.
  const path = (message.split(' ')[1] ?? '').replace(/:$/, '');
  const parts = path.split('?')[0]!.split('/');
  if (parts[1] !== 'apis' || parts[2] !== 'berth.dev') return undefined;
  const rest = parts.slice(4);
  return rest[0] === 'namespaces' ? rest[2] : rest[0];
}

/** A missing type answers a plain 404 page; a missing object, a Status naming it. */
const namesObject = (body: unknown): boolean =>
  typeof body === 'object' &&
  body !== null &&
  (body as { details?: { name?: string } }).details?.name !== undefined;

/** The line a failed command prints (after `berth: `), and its exit code. */
export function describeError(e: unknown): { message: string; exitCode: number } {
  const name = (e as Error | undefined)?.name;
  if (name === 'KubeconfigError') return { message: (e as Error).message, exitCode: EXIT.noCluster };
  if (name === 'UnsupportedKubernetesError')
    return { message: (e as Error).message, exitCode: EXIT.unsupportedKubernetes };
  if (name === 'ApiError' && e instanceof Error) {
    const api = e as ApiError;
    const resource = berthResource(api.message);
    if (api.status === 404 && resource && !namesObject(api.body))
      return {
        message:
          `the cluster does not serve ${resource}.berth.dev: Berth's CRDs are not installed there ` +
          '(berth install, or helm install berth deploy/helm/berth)',
        exitCode: EXIT.crdsMissing,
      };
    if (api.status === 403)
      return {
        message: `forbidden: ${String((api.body as { message?: string } | undefined)?.message ?? api.message)} (${api.message.split(':')[0]})`,
        exitCode: EXIT.refused,
      };
    if (api.status === 401)
      return {
        message: `the cluster refused the kubeconfig's credentials (401 Unauthorized: expired or revoked?) on ${api.message.split(':')[0]}`,
        exitCode: EXIT.refused,
      };
  }
  const code = (e as { code?: unknown } | undefined)?.code;
  if (typeof code === 'string' && NETWORK.has(code))
    return { message: `cannot reach the cluster: ${(e as Error).message}`, exitCode: EXIT.noCluster };
  return { message: e instanceof Error ? e.message : String(e), exitCode: EXIT.failed };
}

/** A usage error's exit code: 2, but 1 for `plan`, whose 2 says only that something would change. */
export const usageExitCode = (command: string | undefined): number =>
  command === 'plan' ? EXIT.failed : EXIT.usage;

/** commander's error line (`error: unknown option '--x'`) as Berth starts every error line: `berth: `. */
export const berthErrorLine = (line: string): string => `berth: ${line.replace(/^error: /, '')}`;
