// Admission handlers that run in the webhook thread (thread.ts), where neither the informers' events
// nor the main heap's garbage collection can hold an answer. Such a handler decides from a state the
// main thread sends it whenever that state changes (say, the parsed policies), never from a cache.
// It may hint the main thread at work that would change its state (say, an image to read), but
// never waits on an answer: only on the state it is sent.
import { setTimeout as sleep } from 'node:timers/promises';
import type { AdmissionHandler } from './admission.ts';
import type { ServingOptions } from './serving.ts';
import type { LogFormat } from '../observability/log.ts';

/**
 * Declared at the top level of its module (`module` is that module's import.meta.url), so the
 * webhook thread imports the module and finds it by its export's `name`.
 */
export interface ThreadHandler<S, H = never> {
  readonly module: string;
  readonly name: string;
  /** The handler, given a reader of the latest state the thread was sent and a way to hint the main thread. */
  readonly handler: (state: () => S, hint?: (h: H) => void) => AdmissionHandler;
  /**
   * Binds it to the main thread's state: `read` gives it, `onChange` calls back after it changed;
   * `onHint` takes the handler's hints there.
   */
  fed(read: () => S, onChange: (changed: () => void) => void, onHint?: (h: H) => void): FedHandler;
}

/** A ThreadHandler (by module and export) and where its state comes from: served off the main thread. */
export interface FedHandler {
  readonly module: string;
  readonly name: string;
  read(): unknown;
  onChange(changed: () => void): void;
  onHint?(hint: unknown): void;
}

export function threadHandler<S, H = never>(
  module: string,
  name: string,
  handler: (state: () => S, hint?: (h: H) => void) => AdmissionHandler,
): ThreadHandler<S, H> {
  return {
    module,
    name,
    handler,
    fed: (read, onChange, onHint) => ({
      module,
      name,
      read,
      onChange,
      ...(onHint ? { onHint: (h: unknown) => onHint(h as H) } : {}),
    }),
  };
}

/** What the thread is told of a route at start. */
export interface ThreadRoute {
  path: string;
  name: string;
  /** Absent: the thread asks the main thread to answer. */
  threaded?: { module: string; name: string; state: unknown };
}

/** Messages from the main thread to the webhook thread. */
export type ToThread =
  | { type: 'certificate'; cert: string; key: string }
  | { type: 'state'; path: string; state: unknown }
  | { type: 'answer'; id: number; result?: unknown; error?: string }
  | { type: 'metrics'; id: number }
  | { type: 'drain' }
  | { type: 'stop' };

/** Messages from the webhook thread to the main thread. */
export type FromThread =
  | { type: 'listening'; port: number }
  | { type: 'admit'; id: number; path: string; request: unknown }
  | { type: 'hint'; path: string; hint: unknown }
  | { type: 'metrics'; id: number; metrics: unknown }
  | { type: 'stopped' };

/** What the thread starts from (its workerData). */
export interface ThreadInit extends Omit<ServingOptions, 'logger'> {
  logLevel: string;
  logFormat: LogFormat;
  routes: ThreadRoute[];
  /** The replica is leaving its Service already: a thread started again drains from the first answer. */
  draining: boolean;
}

const STATE_POLL_MS = 10;

/**
 * What `read` finds in a thread's state, waiting up to `waitMs` for the state to hold it; undefined
 * if it does not by then. Polled, as a state is replaced whole when the main thread sends it and
 * says nothing else: such waits are short (something the main thread has just learnt or is learning).
 * With `state`, `read` runs again only once that is a new object (a state sent since).
 */
export async function whenStateHolds<T>(
  read: () => T | undefined,
  waitMs: number,
  state?: () => unknown,
): Promise<T | undefined> {
  const deadline = performance.now() + waitMs;
  let seen = state?.();
  let value = read();
  while (value === undefined && performance.now() < deadline) {
    await sleep(STATE_POLL_MS);
    const now = state?.();
    if (state && now === seen) continue;
    seen = now;
    value = read();
  }
  return value;
}
