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

/** The SSE framing: POSTs a JSON body and yields each event's data (after "data: ") until the stream ends. */
export async function* sseData(url: string, body: unknown): AsyncGenerator<string> {
  const res = await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  expect(res.status === 200 && !!res.body, `status ${res.status}`);
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  for (let r = await reader.read(); !r.done; r = await reader.read()) {
    const lines = (buf + r.value).split("\n");
    buf = lines.pop()!;
    for (const line of lines) if (line.startsWith("data: ") && line !== "data: [DONE]") yield line.slice("data: ".length);
  }
}
