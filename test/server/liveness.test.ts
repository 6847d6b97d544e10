// Liveness that agents see (issue 11.4): a streamed request sends its first protocol event as
// soon as it is admitted, while a long prompt is still being prefilled, not SSE comments until
// the first token (SDK-level watchdogs never see comments). A ~13k-token prompt on a fixture
// model with one thread prefills for about a second; each route's first event must come within
// 1 s of the request, and well before the first content: an event sent at the first token instead
// would come with it. The bound is relative because the prefill's length depends on the kernels.
import { expect } from "chai";
import { startLiveServer, type LiveServer } from "../helpers/live.js";

/** Reads SSE frames as they arrive; comments are counted apart from events. */
class SseReader {
  private buf = "";
  private readonly dec = new TextDecoder();
  comments = 0;
  constructor(private readonly reader: ReadableStreamDefaultReader<Uint8Array>) {}
  /** The next event (comments skipped), or null at the end of the stream. */
  async next(): Promise<{ event?: string; data: string } | null> {
    for (;;) {
      const end = this.buf.indexOf("\n\n");
      if (end >= 0) {
        const raw = this.buf.slice(0, end);
        this.buf = this.buf.slice(end + 2);
        if (raw.startsWith(":")) {
          this.comments++;
          continue;
        }
        const event = /^event: (.*)$/m.exec(raw)?.[1];
        const data = /^data: (.*)$/m.exec(raw)?.[1] ?? "";
        return event === undefined ? { data } : { event, data };
      }
      const { value, done } = await this.reader.read();
      if (done) return null;
      this.buf += this.dec.decode(value, { stream: true });
    }
  }
}

// Every route gets its own first word, so no prompt shares a prefix with an earlier one.
const filler = " the quick brown fox jumps over the lazy dog".repeat(1450);
const routes: Array<{ name: string; path: string; body: (lead: string) => unknown; first: (ev: { event?: string; data: string }) => void; isContent: (ev: { event?: string; data: string }) => boolean }> = [
  {
    name: "Messages: message_start",
    path: "/v1/messages",
    body: (lead) => ({ model: "m", max_tokens: 8, stream: true, messages: [{ role: "user", content: lead + filler }] }),
    first: (ev) => {
      expect(ev.event).to.equal("message_start");
      expect(JSON.parse(ev.data).message.usage.input_tokens).to.be.greaterThan(9000);
    },
    isContent: (ev) => ev.event === "content_block_start",
  },
  {
    name: "Responses: response.created, then response.in_progress",
    path: "/v1/responses",
    body: (lead) => ({ stream: true, max_output_tokens: 8, input: lead + filler }),
    first: (ev) => expect(ev.event).to.equal("response.created"),
    isContent: (ev) => ev.event === "response.output_item.added",
  },
  {
    name: "Chat Completions: the assistant role delta",
    path: "/v1/chat/completions",
    body: (lead) => ({ stream: true, max_tokens: 8, messages: [{ role: "user", content: lead + filler }] }),
    first: (ev) => expect(JSON.parse(ev.data).choices[0].delta).to.deep.equal({ role: "assistant", content: "" }),
    isContent: (ev) => {
      const d = ev.data === "[DONE]" ? null : JSON.parse(ev.data).choices[0]?.delta;
      return !!d && (d.content || d.reasoning_content || d.tool_calls);
    },
  },
  {
    name: "Completions: an empty piece",
    path: "/v1/completions",
    body: (lead) => ({ stream: true, max_tokens: 8, prompt: lead + filler }),
    first: (ev) => expect(JSON.parse(ev.data).choices[0]).to.include({ text: "", finish_reason: null }),
    isContent: (ev) => ev.data === "[DONE]" || JSON.parse(ev.data).choices[0]?.text !== "",
  },
];

describe("liveness: the first protocol event comes at admission, during a long prefill", function () {
  this.timeout(120_000);
  let server: LiveServer;
  before(async () => {
    server = await startLiveServer({ ctx: 16384, slots: 1 });
  });
  after(async () => {
    await server?.close();
  });

  routes.forEach((route, i) => {
    it(route.name, async () => {
      // The previous test's cancelled prefill must have left the slot first.
      for (let t = 0; t < 200 && server.engine.stats().slots_in_use > 0; t++) await new Promise((r) => setTimeout(r, 50));
      const ac = new AbortController();
      const t0 = performance.now();
      const res = await fetch(server.url + route.path, {
        method: "POST",
        signal: ac.signal,
        headers: { "content-type": "application/json" },
        body: JSON.stringify(route.body(["alpha", "bravo", "charlie", "delta"][i])),
      });
      try {
        expect(res.status).to.equal(200);
        const sse = new SseReader(res.body!.getReader());
        const first = await sse.next();
        const ms = performance.now() - t0;
        expect(first, "an event").to.not.equal(null);
        route.first(first!);
        expect(ms, "ms from the request to its first event").to.be.lessThan(1000);
        if (route.path === "/v1/responses") expect((await sse.next())?.event).to.equal("response.in_progress");
        // The first content marks the end of the prefill; the first event must have come in
        // its first half, so it did not wait for the first token.
        let ev = await sse.next();
        while (ev && !route.isContent(ev)) ev = await sse.next();
        const contentMs = performance.now() - t0;
        expect(ev, "content").to.not.equal(null);
        expect(contentMs, "ms to the first content (the prefill)").to.be.greaterThan(200);
        expect(ms, "ms to the first event, against half the ms to the first content").to.be.lessThan(contentMs / 2);
      } finally {
        ac.abort();
      }
    });
  });
});
