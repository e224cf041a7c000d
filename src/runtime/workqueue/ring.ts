/** FIFO ring buffer: O(1) push and shift, shrinking again after a burst. */
export class Ring<T> {
  #items: (T | undefined)[] = new Array<T | undefined>(16);
  #head = 0;
  #size = 0;

  get size(): number {
    return this.#size;
  }

  push(item: T): void {
    if (this.#size === this.#items.length) this.#resize(this.#items.length * 2);
    this.#items[(this.#head + this.#size) & (this.#items.length - 1)] = item;
    this.#size++;
  }

  /** Callers check size first: T itself may include undefined. */
  shift(): T {
    const item = this.#items[this.#head] as T;
    this.#items[this.#head] = undefined;
    this.#head = (this.#head + 1) & (this.#items.length - 1);
    this.#size--;
    if (this.#items.length > 1024 && this.#size < this.#items.length >> 2) {
      this.#resize(this.#items.length >> 1);
    }
    return item;
  }

  /** Keeps only the items `keep` accepts, in order. */
  retain(keep: (item: T) => boolean): void {
    const n = this.#size;
    for (let i = 0; i < n; i++) {
      const item = this.shift();
      if (keep(item)) this.push(item);
    }
  }

  // Capacity stays a power of two so that wrapping is a mask.
  #resize(capacity: number): void {
    const items = new Array<T | undefined>(capacity);
    for (let i = 0; i < this.#size; i++) items[i] = this.#items[(this.#head + i) & (this.#items.length - 1)];
    this.#items = items;
    this.#head = 0;
  }
}
