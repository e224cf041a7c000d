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

/** What a writer asks of its spacing: how long a key's write waits, and what it did. */
export interface Spacing {
  wait(key: string, now?: number): number;
  wrote(key: string, now?: number): void;
  /** The key needs no write any more (its change was undone before it went out). */
  settled?(key: string): void;
  forget(key: string): void;
}

// Trailing coalescing, for writes whose changes come in runs (a node's claims as a workload's pods
// land): a key not written for `quietMs` is written at once; a change to a key written more recently
// waits until it is `windowMs` old, and the write then carries every change of the meantime. So no
// change waits longer than the window, and a run of changes costs one write per window, where a
// token bucket writes at the interval's start and again at its end.
export class WriteWindow implements Spacing {
  /** Per key: when it was last written. */
  private readonly last = new Map<string, number>();
  /** Per key: when its first change not yet written was seen. */
  private readonly since = new Map<string, number>();
  readonly windowMs: number;
  readonly quietMs: number;

  constructor(windowMs: number, quietMs: number) {
    this.windowMs = windowMs;
    this.quietMs = quietMs;
  }

  wait(key: string, now = Date.now()): number {
    const since = this.since.get(key);
    if (since !== undefined) return Math.max(0, since + this.windowMs - now);
    const last = this.last.get(key);
    if (last === undefined || now - last >= this.quietMs) return 0;
    this.since.set(key, now);
    return this.windowMs;
  }

  wrote(key: string, now = Date.now()): void {
    this.last.set(key, now);
    this.since.delete(key);
  }

  settled(key: string): void {
    this.since.delete(key);
  }

  forget(key: string): void {
    this.last.delete(key);
    this.since.delete(key);
  }
}
