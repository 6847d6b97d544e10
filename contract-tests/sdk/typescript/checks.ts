// One "ok NAME" / "FAIL NAME: why" line per check, for contract-tests/sdk/run.mjs to count.
export class Checks {
  failed = 0;
  constructor(private readonly sdk: string) {}

  async run(name: string, fn: () => Promise<void>): Promise<void> {
    try {
      await fn();
      console.log(`ok ${this.sdk} ${name}`);
    } catch (e) {
      this.failed++;
      console.log(`FAIL ${this.sdk} ${name}: ${String((e as Error)?.stack ?? e).split("\n").slice(0, 2).join(" ").slice(0, 400)}`);
    }
  }
}

export function expect(condition: boolean, what: string): asserts condition {
  if (!condition) throw new Error(what);
}
