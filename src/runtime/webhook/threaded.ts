// Admission handlers that run in the webhook thread (thread.ts), where neither the informers' events
// nor the main heap's garbage collection can hold an answer. Such a handler decides from a state the
// main thread sends it whenever that state changes (say, the parsed policies), never from a cache.
import type { AdmissionHandler } from './admission.ts';
import type { ServingOptions } from './serving.ts';

/**
 * Declared at the top level of its module (`module` is that module's import.meta.url), so the
 * webhook thread imports the module and finds it by its export's `name`.
 */
export interface ThreadHandler<S> {
  readonly module: string;
  readonly name: string;
  /** The handler, given a reader of the latest state the thread was sent. */
  readonly handler: (state: () => S) => AdmissionHandler;
  /** Binds it to the main thread's state: `read` gives it, `onChange` calls back after it changed. */
  fed(read: () => S, onChange: (changed: () => void) => void): FedHandler;
}

/** A ThreadHandler (by module and export) and where its state comes from: served off the main thread. */
export interface FedHandler {
  readonly module: string;
  readonly name: string;
  read(): unknown;
  onChange(changed: () => void): void;
}

export function threadHandler<S>(
  module: string,
  name: string,
  handler: (state: () => S) => AdmissionHandler,
): ThreadHandler<S> {
  const threaded: ThreadHandler<S> = {
    module,
    name,
    handler,
    fed: (read, onChange) => ({ module, name, read, onChange }),
  };
  return threaded;
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
  | { type: 'metrics'; id: number; metrics: unknown }
  | { type: 'stopped' };

/** What the thread starts from (its workerData). */
export interface ThreadInit extends Omit<ServingOptions, 'logger'> {
  logLevel: string;
  routes: ThreadRoute[];
  /** The replica is leaving its Service already: a thread started again drains from the first answer. */
  draining: boolean;
}
