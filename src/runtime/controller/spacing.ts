// Write spacing: how long since an object was last written, so that a controller whose object's
// status moves several times a second (a new instance: granted, programmed, Ready, Available) writes
// it at once after a quiet spell and then at most once per interval, with whatever it says by then,
// as the Job controller batches its syncs. The reconcile that is told to wait requeues itself for
// the rest of the interval; the write it then makes carries every change of the meantime.
//
// A token bucket per key: `burst` writes may go at once after a quiet spell, then one per interval.
// With a burst of 1 that is "one write per interval"; a larger burst lets the changes that come in
// pairs (a pod replaced on a node: one goes, one comes) go out as they come, while a key that keeps
// changing is still written at most once per interval on average.
export class WriteSpacing {
  /** Per key: the tokens left after its last write, and when that was. */
  private readonly at = new Map<string, { tokens: number; at: number }>();
  readonly intervalMs: number;
  readonly burst: number;

  constructor(intervalMs: number, burst = 1) {
    this.intervalMs = intervalMs;
    this.burst = burst;
  }

  /** Milliseconds until the key may be written again: 0 if now. A caller may space a write otherwise. */
  wait(key: string, now = Date.now(), intervalMs = this.intervalMs): number {
    const tokens = this.tokens(key, now, intervalMs);
    return tokens >= 1 ? 0 : Math.round((1 - tokens) * intervalMs);
  }

  wrote(key: string, now = Date.now()): void {
    this.at.set(key, { tokens: Math.max(0, this.tokens(key, now, this.intervalMs) - 1), at: now });
  }

  /** The object is gone: its key is forgotten. */
  forget(key: string): void {
    this.at.delete(key);
  }

  private tokens(key: string, now: number, intervalMs: number): number {
    const last = this.at.get(key);
    if (!last) return this.burst;
    return intervalMs > 0 ? Math.min(this.burst, last.tokens + (now - last.at) / intervalMs) : this.burst;
  }
}
