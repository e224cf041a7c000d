// Registry reads shared fairly between namespaces (issue 59), as the apiserver's API Priority and
// Fairness shares its seats between flows: every namespace is a flow with a share of the seats it
// may hold at most, and a seat that frees goes to the waiting flow holding the fewest. Pure: no I/O.
//
// The share is fixed rather than borrowed back: a seat cannot be taken from a read in flight, and a
// tenant decides how long its reads hold theirs (a registry that never answers holds one for the
// whole request timeout, and again for each retry), so seats lent to an idle cluster's one busy
// namespace would come back too late for another namespace's pod. A fixed share keeps the rest of
// the seats for the others at all times (decision 0040).

interface Waiter {
  weight: number;
  /** Arrival order, across flows: of two flows holding as many seats, the one waiting longest goes first. */
  seq: number;
  grant: () => void;
}

interface Flow {
  held: number;
  queue: Waiter[];
}

/** Why a request would wait: its flow holds its share, or every seat is held. */
export type WaitCause = 'share' | 'limit';

/**
 * A counting semaphore of `limit` units shared between flows (namespaces): a flow holds at most
 * `share` units; among flows whose next waiter fits their share, units go to the one holding the
 * fewest (ties: the longest waiting), and within a flow in order. A weight takes that many units at
 * once (bytes of a body); one above the share waits for the whole share. Flows are forgotten once
 * they hold and want nothing, so the map holds only flows with a request in flight or waiting.
 */
export class FairSemaphore {
  readonly #limit: number;
  readonly #share: number;
  readonly #flows = new Map<string, Flow>();
  #held = 0;
  #waiting = 0;
  #seq = 0;

  constructor(limit: number, share: number) {
    if (!(limit >= 1)) throw new Error(`a semaphore needs a limit of at least 1, not ${limit}`);
    if (!(share >= 1)) throw new Error(`a flow's share must be at least 1, not ${share}`);
    this.#limit = limit;
    this.#share = Math.min(share, limit);
  }

  get held(): number {
    return this.#held;
  }

  get waiting(): number {
    return this.#waiting;
  }

  /** Requests of `flow` waiting now. */
  waitingIn(flow: string): number {
    return this.#flows.get(flow)?.queue.length ?? 0;
  }

  /** Units `flow` holds now. */
  heldBy(flow: string): number {
    return this.#flows.get(flow)?.held ?? 0;
  }

  /** Whether a request of `flow` made now would wait, and why; undefined when it would not. */
  wouldWait(flow: string, weight = 1): WaitCause | undefined {
    const w = this.#weight(weight);
    const f = this.#flows.get(flow);
    if (f && (f.queue.length > 0 || f.held + w > this.#share)) return 'share';
    // A waiter that fits its share waits for the limit: one holding as few goes first.
    const fairest = this.#fairest();
    if (fairest && fairest.held <= (f?.held ?? 0)) return 'limit';
    return this.#held + w > this.#limit ? 'limit' : undefined;
  }

  async acquire(flow: string, signal?: AbortSignal, weight = 1): Promise<() => void> {
    signal?.throwIfAborted();
    const w = this.#weight(weight);
    let f = this.#flows.get(flow);
    if (!f) {
      f = { held: 0, queue: [] };
      this.#flows.set(flow, f);
    }
    const mine = f;
    await new Promise<void>((resolve, reject) => {
      const waiter: Waiter = {
        weight: w,
        seq: this.#seq++,
        grant: () => {
          signal?.removeEventListener('abort', onAbort);
          resolve();
        },
      };
      const onAbort = () => {
        const i = mine.queue.indexOf(waiter);
        if (i >= 0) {
          mine.queue.splice(i, 1);
          this.#waiting--;
        }
        this.#forgetIdle(flow, mine);
        this.#dispatch();
        reject(signal!.reason);
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      mine.queue.push(waiter);
      this.#waiting++;
      this.#dispatch();
    });
    let released = false;
    return () => {
      if (released) return;
      released = true;
      mine.held -= w;
      this.#held -= w;
      this.#forgetIdle(flow, mine);
      this.#dispatch();
    };
  }

  #weight(weight: number): number {
    return Math.max(1, Math.min(weight, this.#share));
  }

  #forgetIdle(name: string, f: Flow): void {
    if (f.held === 0 && f.queue.length === 0 && this.#flows.get(name) === f) this.#flows.delete(name);
  }

  /** The flow holding the fewest units among those whose next waiter fits their share; of two, the one waiting longest. */
  #fairest(): Flow | undefined {
    let best: Flow | undefined;
    for (const f of this.#flows.values()) {
      const head = f.queue[0];
      if (!head || f.held + head.weight > this.#share) continue;
      if (!best || f.held < best.held || (f.held === best.held && head.seq < best.queue[0]!.seq)) best = f;
    }
    return best;
  }

  /** Grants while the fairest waiter fits the limit; when it does not, nobody overtakes it. */
  #dispatch(): void {
    for (;;) {
      const best = this.#fairest();
      if (!best || this.#held + best.queue[0]!.weight > this.#limit) return;
      const next = best.queue.shift()!;
      this.#waiting--;
      best.held += next.weight;
      this.#held += next.weight;
      next.grant();
    }
  }
}
