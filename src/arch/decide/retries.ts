// Architecture-aware placement's pure decisions: a pod's transient failures and when it is tried
// again. No I/O.
import { InspectionError, MAX_RETRY_AFTER_MS } from '../../registry/types.ts';

/** A pod's transient failures so far, until it is placed or given up on. */
export interface Retries {
  /** Retries used (`onFailure.retries`). */
  attempts: number;
  /** When the pod first waited out a registry's Retry-After (ms since the epoch). */
  pausedSince?: number;
}

/**
 * How long after its first one a pod keeps waiting out registries' pauses without using its retries:
 * the longest pause the registry client honours, so one full pause fits.
 */
export const MAX_PAUSED_MS = MAX_RETRY_AFTER_MS;

/** The registry refused the credentials, or hid the repository as not found. */
export const refusedByRegistry = (err: Pick<InspectionError, 'reason'>): boolean =>
  err.reason === 'Unauthorized' || err.reason === 'NotFound';

/**
 * After a failed inspection: when to try the pod again and its retries then, or undefined to give
 * up (Failed: released or placed on the fallback). A transient failure waits 1 s, doubling to 30 s,
 * for at most `maxRetries` retries. A registry that asked to wait (Retry-After) is waited out as
 * asked without using a retry, until MAX_PAUSED_MS after the pod's first pause: each try in a pause
 * fails at once, and the backoff alone would spend every retry in seconds (with no retries at all,
 * the policy asked to act at once, and nothing is waited out). A refusal or a not-found
 * while a pull secret the pod names was missing or unreadable is transient too: the secret may come
 * next (applied with its workload), and reading anonymously says nothing of the image.
 */
export function nextTry(
  err: Pick<InspectionError, 'reason' | 'transient' | 'retryAt'>,
  retries: Retries,
  maxRetries: number,
  ctx: { now: number; secretsMissing: boolean },
): { afterMs: number; retries: Retries } | undefined {
  if (!err.transient && !(refusedByRegistry(err) && ctx.secretsMissing)) return undefined;
  const pausedSince = retries.pausedSince ?? ctx.now;
  if (
    maxRetries > 0 &&
    err.retryAt !== undefined &&
    err.retryAt > ctx.now &&
    err.retryAt - pausedSince <= MAX_PAUSED_MS
  )
    return { afterMs: err.retryAt - ctx.now, retries: { ...retries, pausedSince } };
  if (retries.attempts >= maxRetries) return undefined;
  return {
    afterMs: Math.min(1000 * 2 ** retries.attempts, 30_000),
    retries: { ...retries, attempts: retries.attempts + 1 },
  };
}
