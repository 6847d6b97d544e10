// A single-consumer async queue: the iterator Engine.submit() returns. The producer pushes
// events and ends it (or fails it, which rejects the consumer's next next()); a consumer that
// stops iterating early runs onReturn, which the engine uses to cancel the generation.
export class Channel<T> implements AsyncIterable<T> {
  private items: T[] = [];
  private waiter: { resolve: (r: IteratorResult<T>) => void; reject: (e: unknown) => void } | null = null;
  private ended = false;
  private failure: unknown = null;
  onReturn: (() => void) | null = null;

  push(item: T): void {
    if (this.ended) return;
    if (this.waiter) {
      const w = this.waiter;
      this.waiter = null;
      w.resolve({ value: item, done: false });
    } else this.items.push(item);
  }

  end(): void {
    if (this.ended) return;
    this.ended = true;
    if (this.waiter && this.items.length === 0) {
      const w = this.waiter;
      this.waiter = null;
      w.resolve({ value: undefined, done: true });
    }
  }

  fail(err: unknown): void {
    if (this.ended) return;
    this.failure = err;
    this.ended = true;
    if (this.waiter) {
      const w = this.waiter;
      this.waiter = null;
      w.reject(err);
    }
  }

  [Symbol.asyncIterator](): AsyncIterator<T> {
    return {
      next: () => {
        if (this.items.length > 0) return Promise.resolve({ value: this.items.shift()!, done: false });
        if (this.failure !== null) {
          const f = this.failure;
          this.failure = null;
          return Promise.reject(f);
        }
        if (this.ended) return Promise.resolve({ value: undefined, done: true });
        return new Promise((resolve, reject) => (this.waiter = { resolve, reject }));
      },
      return: () => {
        this.onReturn?.();
        this.ended = true;
        this.items = [];
        return Promise.resolve({ value: undefined, done: true });
      },
    };
  }
}
