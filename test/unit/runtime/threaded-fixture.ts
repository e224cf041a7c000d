// A handler for the webhook thread, for admission.test.ts: its warnings are the state it was last
// sent and when (ms since the epoch) it answered.
import { threadHandler } from '../../../src/runtime/webhook/threaded.ts';

export const echoState = threadHandler(import.meta.url, 'echoState', (state: () => string) => () => ({
  allowed: true,
  warnings: [state(), String(Date.now())],
}));

/** Ends the webhook thread, as a crash in it would. */
export const exitThread = threadHandler(import.meta.url, 'exitThread', () => () => process.exit(3));
