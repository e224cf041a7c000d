// The one bounded map every cache of Berth's uses (the events correlator's, the registry client's):
// their keys come from objects any user can create, so none may grow without bound.
/** A Map of at most `max` entries that evicts the least recently used. */
export class Lru<V> {
  readonly #map = new Map<string, V>();
  readonly #max: number;
  readonly #onEvict: ((value: V) => void) | undefined;

  constructor(max: number, onEvict?: (value: V) => void) {
    this.#max = max;
    this.#onEvict = onEvict;
  }

  get size(): number {
    return this.#map.size;
  }

  /** The value, now marked most recently used. */
  get(key: string): V | undefined {
    const value = this.#map.get(key);
    if (value !== undefined) {
      this.#map.delete(key);
      this.#map.set(key, value);
    }
    return value;
  }

  /** The value, leaving the order alone. */
  peek(key: string): V | undefined {
    return this.#map.get(key);
  }

  /** Every entry, oldest first, leaving the order alone. */
  entries(): IterableIterator<[string, V]> {
    return this.#map.entries();
  }

  set(key: string, value: V): void {
    this.#map.delete(key);
    this.#map.set(key, value);
    for (const [oldest, evicted] of this.#map) {
      if (this.#map.size <= this.#max) break;
      this.#map.delete(oldest);
      this.#onEvict?.(evicted);
    }
  }

  delete(key: string): void {
    this.#map.delete(key);
  }
}
