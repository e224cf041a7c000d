// Write spacing: how long since an object was last written, so that a controller whose object's
// status moves several times a second (a new instance: granted, programmed, Ready, Available) writes
// it at once after a quiet spell and then at most once per interval, with whatever it says by then,
// as the Job controller batches its syncs. The reconcile that is told to wait requeues itself for
// the rest of the interval; the write it then makes carries every change of the meantime.
export class WriteSpacing {
  private readonly at = new Map<string, number>();
  readonly intervalMs: number;

  constructor(intervalMs: number) {
    this.intervalMs = intervalMs;
  }

  /** Milliseconds until the key may be written again: 0 if now. A caller may space a write otherwise. */
  wait(key: string, now = Date.now(), intervalMs = this.intervalMs): number {
    const last = this.at.get(key);
    return last === undefined ? 0 : Math.max(0, last + intervalMs - now);
  }

  wrote(key: string, now = Date.now()): void {
    this.at.set(key, now);
  }

  /** The object is gone: its key is forgotten. */
  forget(key: string): void {
    this.at.delete(key);
  }
}
