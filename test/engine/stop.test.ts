// The stop matcher (src/engine/stop.ts) against a naive one that scans every stop string over
// the held text and each piece, which is what the engine did before: on random stop lists and
// random text cut into random pieces, both release the same text piece by piece, find the same
// stop string at the same place, and hold back and flush the same text.
import { expect } from "chai";
import fc from "fast-check";
import { readFileSync } from "node:fs";
import { MAX_STOP_LENGTH, MAX_STOP_STRINGS, StopMatcher } from "../../src/engine/stop.js";
import { heldPrefix } from "../../src/chat/parsers/common.js";

/** The earliest match in held + piece wins, at one position the longest; a proper prefix at the end is held. */
class NaiveStopMatcher {
  private held = "";
  private readonly stops: string[];
  constructor(stops: readonly string[]) {
    this.stops = stops.filter((s) => s.length > 0);
  }
  push(text: string): { text: string; stop: string | null } {
    const pending = this.held + text;
    this.held = "";
    if (this.stops.length === 0) return { text: pending, stop: null };
    let at = -1;
    let stop: string | null = null;
    for (const s of this.stops) {
      const i = pending.indexOf(s);
      if (i >= 0 && (at < 0 || i < at || (i === at && s.length > stop!.length))) {
        at = i;
        stop = s;
      }
    }
    if (stop !== null) return { text: pending.slice(0, at), stop };
    const keep = heldPrefix(pending, this.stops);
    this.held = pending.slice(pending.length - keep);
    return { text: pending.slice(0, pending.length - keep), stop: null };
  }
  flush(): string {
    const t = this.held;
    this.held = "";
    return t;
  }
}

type Step = { text: string; stop: string | null } | { flush: string };

function run(m: { push(t: string): { text: string; stop: string | null }; flush(): string }, pieces: string[]): Step[] {
  const out: Step[] = [];
  for (const p of pieces) {
    const r = m.push(p);
    out.push(r);
    if (r.stop !== null) return out;
  }
  out.push({ flush: m.flush() });
  return out;
}

// A small alphabet so that stop strings overlap, share prefixes and occur in the text often;
// one astral character so surrogate pairs get split across pieces too.
const char = fc.constantFrom("a", "b", "c", "\n", "é", "😀");
const word = (max: number) => fc.array(char, { minLength: 0, maxLength: max }).map((cs) => cs.join(""));

describe("stop matcher", () => {
  it("agrees with the naive matcher on random stop lists and random pieces (property)", () => {
    fc.assert(
      fc.property(fc.array(word(6), { maxLength: 12 }), fc.array(word(5), { maxLength: 30 }), (stops, pieces) => {
        expect(run(new StopMatcher(stops), pieces)).to.deep.equal(run(new NaiveStopMatcher(stops), pieces));
      }),
      { seed: 20261202, numRuns: 3000 },
    );
  });

  it("agrees on stop strings that nest and overlap across many pieces (property)", () => {
    // Stops drawn from the text itself: matches start inside held text, end pieces later, and
    // shorter stops end inside longer ones that started earlier.
    fc.assert(
      fc.property(word(60), fc.array(fc.tuple(fc.nat(60), fc.integer({ min: 1, max: 12 })), { minLength: 1, maxLength: 8 }), fc.array(fc.integer({ min: 1, max: 7 }), { minLength: 1, maxLength: 40 }), (text, spans, cuts) => {
        const stops = spans.map(([at, n]) => text.slice(at, at + n)).filter((s) => s !== "");
        const pieces: string[] = [];
        let i = 0;
        for (let k = 0; i < text.length; k++) {
          const n = cuts[k % cuts.length];
          pieces.push(text.slice(i, i + n));
          i += n;
        }
        expect(run(new StopMatcher(stops), pieces)).to.deep.equal(run(new NaiveStopMatcher(stops), pieces));
      }),
      { seed: 7, numRuns: 2000 },
    );
  });

  it("examples: the earliest match wins, at one position the longest; held text is released when it cannot match", () => {
    const m = new StopMatcher(["cd", "abcdef"]);
    expect(m.push("xab")).to.deep.equal({ text: "x", stop: null });
    expect(m.push("cdef")).to.deep.equal({ text: "", stop: "abcdef" });
    const n = new StopMatcher(["a", "ab"]);
    expect(n.push("xxab")).to.deep.equal({ text: "xx", stop: "ab" });
    const o = new StopMatcher(["END"]);
    expect(o.push("the E")).to.deep.equal({ text: "the ", stop: null });
    expect(o.push("N")).to.deep.equal({ text: "", stop: null });
    expect(o.push("x")).to.deep.equal({ text: "ENx", stop: null });
    expect(o.push("EN")).to.deep.equal({ text: "", stop: null });
    expect(o.flush()).to.equal("EN");
    expect(new StopMatcher([]).push("abc")).to.deep.equal({ text: "abc", stop: null });
  });

  it("the most stop strings of the longest length match like the naive matcher (the contract's bounds)", () => {
    const stops = Array.from({ length: MAX_STOP_STRINGS }, (_, k) => `${"ab".repeat(MAX_STOP_LENGTH / 2 - 4)}#${String(k).padStart(7, "0")}`);
    expect(stops.every((s) => s.length === MAX_STOP_LENGTH)).to.equal(true);
    const text = "ab".repeat(3000) + `#0000042` + "tail";
    const pieces = text.match(/.{1,3}/gs)!;
    expect(run(new StopMatcher(stops), pieces)).to.deep.equal(run(new NaiveStopMatcher(stops), pieces));
    expect(run(new StopMatcher(stops), pieces).at(-1)).to.deep.include({ stop: stops[42] });
  });

  it("openapi.json bounds stop and stop_sequences as the matcher does", () => {
    const doc = JSON.parse(readFileSync("openapi.json", "utf8"));
    for (const name of ["ChatCompletionRequest", "TextCompletionRequest", "AnthropicMessagesRequest", "ResponsesRequest"]) {
      const props = doc.components.schemas[name].properties;
      // A branch may be a named component (the SDK generators need a name for the list).
      const deref = (b: { $ref?: string; type?: string }) => (b.$ref ? doc.components.schemas[b.$ref.split("/").pop()!] : b);
      const branches = props.stop.oneOf.map(deref);
      const list = branches.find((b: { type: string }) => b.type === "array");
      const one = branches.find((b: { type: string }) => b.type === "string");
      expect(list, name).to.not.equal(undefined);
      expect(list.maxItems, name).to.equal(MAX_STOP_STRINGS);
      expect(list.items.maxLength, name).to.equal(MAX_STOP_LENGTH);
      expect(one.maxLength, name).to.equal(MAX_STOP_LENGTH);
      expect(props.stop_sequences.maxItems, name).to.equal(MAX_STOP_STRINGS);
      expect(props.stop_sequences.items.maxLength, name).to.equal(MAX_STOP_LENGTH);
    }
  });
});
