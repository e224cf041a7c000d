// A handler for the webhook thread, for admission.test.ts: its warnings are the state it was last
// sent and when (ms since the epoch) it answered; it hints the main thread with each request's uid.
import { threadHandler } from '../../../src/runtime/webhook/threaded.ts';

export const echoState = threadHandler(
  import.meta.url,
  'echoState',
  (state: () => string, hint?: (uid: string) => void) => (req) => {
    hint?.(req.uid);
    return { allowed: true, warnings: [state(), String(Date.now())] };
  },
);

/** Ends the webhook thread, as a crash in it would. */
export const exitThread = threadHandler(import.meta.url, 'exitThread', () => () => process.exit(3));
