// The delaying layer's priority queue: keys waiting for their ready time.
export interface Waiting<K> {
  key: K;
  readyAt: number;
  // Breaks ties between equal deadlines in the order they were added.
  seq: number;
  index: number;
}

/** Min-heap of delayed keys by ready time, one entry per key (client-go's waitForPriorityQueue). */
export class WaitingHeap<K> {
  readonly #heap: Waiting<K>[] = [];
  readonly #byKey = new Map<K, Waiting<K>>();
  #seq = 0;

  get size(): number {
    return this.#heap.length;
  }

  peek(): Waiting<K> | undefined {
    return this.#heap[0];
  }

  /** An earlier deadline moves a waiting key forward; a later one is ignored. */
  insert(key: K, readyAt: number): void {
    const existing = this.#byKey.get(key);
    if (existing) {
      if (readyAt < existing.readyAt) {
        existing.readyAt = readyAt;
        this.#up(existing.index);
      }
      return;
    }
    const entry = { key, readyAt, seq: this.#seq++, index: this.#heap.length };
    this.#heap.push(entry);
    this.#byKey.set(key, entry);
    this.#up(entry.index);
  }

  pop(): K {
    const top = this.#heap[0] as Waiting<K>;
    const last = this.#heap.pop() as Waiting<K>;
    if (last !== top) {
      last.index = 0;
      this.#heap[0] = last;
      this.#down(0);
    }
    this.#byKey.delete(top.key);
    return top.key;
  }

  /** Removes the keys `drop` selects and returns them; the others keep their order. */
  removeWhere(drop: (key: K) => boolean): K[] {
    const removed: K[] = [];
    const kept: Waiting<K>[] = [];
    for (const e of this.#heap) {
      if (drop(e.key)) removed.push(e.key);
      else kept.push(e);
    }
    if (removed.length === 0) return removed;
    for (const key of removed) this.#byKey.delete(key);
    this.#heap.length = 0;
    for (const e of kept) {
      e.index = this.#heap.length;
      this.#heap.push(e);
    }
    for (let i = (this.#heap.length >> 1) - 1; i >= 0; i--) this.#down(i);
    return removed;
  }

  clear(): void {
    this.#heap.length = 0;
    this.#byKey.clear();
  }

  #less(a: Waiting<K>, b: Waiting<K>): boolean {
    return a.readyAt < b.readyAt || (a.readyAt === b.readyAt && a.seq < b.seq);
  }

  #swap(i: number, j: number): void {
    const a = this.#heap[i] as Waiting<K>;
    const b = this.#heap[j] as Waiting<K>;
    this.#heap[i] = b;
    this.#heap[j] = a;
    b.index = i;
    a.index = j;
  }

  #up(i: number): void {
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!this.#less(this.#heap[i] as Waiting<K>, this.#heap[parent] as Waiting<K>)) return;
      this.#swap(i, parent);
      i = parent;
    }
  }

  #down(i: number): void {
    const n = this.#heap.length;
    while (true) {
      const left = 2 * i + 1;
      if (left >= n) return;
      const right = left + 1;
      let min = left;
      if (right < n && this.#less(this.#heap[right] as Waiting<K>, this.#heap[left] as Waiting<K>))
        min = right;
      if (!this.#less(this.#heap[min] as Waiting<K>, this.#heap[i] as Waiting<K>)) return;
      this.#swap(i, min);
      i = min;
    }
  }
}
