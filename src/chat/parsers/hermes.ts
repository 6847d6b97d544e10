// The Hermes family's output parser (ChatML, Qwen2.5/Qwen3, Hermes templates, and templates
// without tool support that get the Hermes convention): splits generated text into visible text,
// <think> thinking and tool calls. Calls come in the family's forms (../tool-forms.ts):
// <tool_call>{json}</tool_call>, the bare {"name": …} object at the start of the answer, and the
// same object in a ```json fence.
// Partial tags are held back until they resolve, so no dialect ever shows "<tool_" to a user;
// tool arguments are streamed while they are generated, and a call block that turns out not to
// be a call is given back as plain text.
import type { GenerationEvent, ToolSpec } from "../types.js";
import { CALL_OPENINGS, matchOpening, type CallOpening } from "../tool-forms.js";
import { emitText, heldPrefix, type OutputParser, type ParserOptions } from "./common.js";

const THINK_OPEN = "<think>";
const THINK_CLOSE = "</think>";
const CALL_OPEN = "<tool_call>";
const CALL_CLOSE = "</tool_call>";

/** Keys a model uses for the arguments of a call, in the Hermes convention and its variants. */
const ARG_KEYS = new Set(["arguments", "parameters", "input"]);

const isWs = (c: string) => c === " " || c === "\n" || c === "\t" || c === "\r";

function trailingWs(s: string): number {
  let n = 0;
  while (n < s.length && isWs(s[s.length - 1 - n])) n++;
  return n;
}

function leadingWs(s: string): number {
  let n = 0;
  while (n < s.length && isWs(s[n])) n++;
  return n;
}


const enum Scan {
  ObjectStart, // before the outer "{"
  KeyOrEnd, //    inside the outer object, before a key or "}"
  Key, //         inside a key string
  Colon,
  ValueStart,
  Value, //       inside a value (nested / string / primitive)
  CommaOrEnd,
  Done, //        outer object closed
  Bad, //         not a JSON object: the block is text
}

/**
 * Scans one tool call body character by character. It only needs the outer object's keys
 * and the extent of each value; JSON.parse checks the whole body once it is complete.
 */
class CallScanner {
  state: Scan = Scan.ObjectStart;
  name: string | null = null;
  /** Raw text of the arguments value (JSON), or its decoded text when it is a JSON string. */
  args = "";
  args_is_string = false;
  args_seen = false;
  args_complete = false;
  /** Decoded "input" string of an object-valued arguments ({"input": "…"}, custom tools). */
  input = "";

  private inner_expect_key = false;
  private inner_collect: "key" | "input" | null = null;
  private inner_key = "";
  private inner_keybuf = "";

  private key = "";
  private key_escape = false;
  private value_key = "";
  private value_raw = "";
  private depth = 0;
  private in_string = false;
  private escape = false;
  /** Pending escape sequence inside a string value being decoded (e.g. "\u12"). */
  private esc_buf = "";

  feed(text: string): void {
    for (const c of text) this.step(c);
  }

  /** Feeds `text` up to the end of the object (or the point it is not one); the length taken. */
  feedObject(text: string): number {
    let n = 0;
    for (const c of text) {
      if (this.state === Scan.Done || this.state === Scan.Bad) break;
      this.step(c);
      n += c.length;
    }
    return n;
  }

  private step(c: string): void {
    switch (this.state) {
      case Scan.ObjectStart:
        if (isWs(c)) return;
        this.state = c === "{" ? Scan.KeyOrEnd : Scan.Bad;
        return;
      case Scan.KeyOrEnd:
        if (isWs(c)) return;
        if (c === '"') {
          this.state = Scan.Key;
          this.key = "";
        } else if (c === "}") this.state = Scan.Done;
        else this.state = Scan.Bad;
        return;
      case Scan.Key:
        if (this.key_escape) {
          this.key += c;
          this.key_escape = false;
        } else if (c === "\\") this.key_escape = true;
        else if (c === '"') this.state = Scan.Colon;
        else this.key += c;
        return;
      case Scan.Colon:
        if (isWs(c)) return;
        this.state = c === ":" ? Scan.ValueStart : Scan.Bad;
        return;
      case Scan.ValueStart:
        if (isWs(c)) return;
        this.value_key = this.key;
        this.value_raw = "";
        this.depth = 0;
        this.in_string = false;
        this.escape = false;
        this.esc_buf = "";
        if (this.capturing()) {
          // A second arguments key (e.g. both "arguments" and "input") keeps the first.
          if (this.args_seen) this.value_key = "";
          else {
            this.args_seen = true;
            this.args_is_string = c === '"';
          }
        }
        this.state = Scan.Value;
        this.valueChar(c, true);
        return;
      case Scan.Value:
        this.valueChar(c, false);
        return;
      case Scan.CommaOrEnd:
        if (isWs(c)) return;
        if (c === ",") this.state = Scan.KeyOrEnd;
        else if (c === "}") this.state = Scan.Done;
        else this.state = Scan.Bad;
        return;
      case Scan.Done:
        if (!isWs(c)) this.state = Scan.Bad;
        return;
      case Scan.Bad:
        return;
    }
  }

  private capturing(): boolean {
    return ARG_KEYS.has(this.value_key);
  }

  private valueChar(c: string, first: boolean): void {
    const capture = this.capturing() && this.value_key !== "";
    // Primitive values (numbers, true/false/null) end at the delimiter that follows them.
    if (first && c !== '"' && c !== "{" && c !== "[") {
      this.depth = -1;
    }
    if (this.depth === -1) {
      if (c === "," || c === "}" || isWs(c)) {
        this.endValue();
        if (c === ",") this.state = Scan.KeyOrEnd;
        else if (c === "}") this.state = Scan.Done;
        else this.state = Scan.CommaOrEnd;
        return;
      }
      this.value_raw += c;
      if (capture) this.args += c;
      return;
    }
    this.value_raw += c;
    if (capture && !this.args_is_string) {
      this.args += c;
      this.innerChar(c);
    }
    if (this.in_string) {
      if (capture && this.args_is_string && this.depth === 0) this.decodeStringChar(c, "args");
      if (this.escape) this.escape = false;
      else if (c === "\\") this.escape = true;
      else if (c === '"') {
        this.in_string = false;
        if (this.depth === 0) this.endValue();
      }
      return;
    }
    if (c === '"') this.in_string = true;
    else if (c === "{" || c === "[") this.depth++;
    else if (c === "}" || c === "]") {
      this.depth--;
      if (this.depth === 0) this.endValue();
    }
  }

  /**
   * Follows the keys of an object-valued arguments (depth 1) to decode its "input" string as it
   * streams. Runs before the generic string/depth tracking sees `c`.
   */
  private innerChar(c: string): void {
    if (this.in_string) {
      if (this.depth !== 1) return;
      const closing = c === '"' && !this.escape;
      if (this.inner_collect === "input") {
        if (closing) this.inner_collect = null;
        else this.decodeStringChar(c, "input");
      } else if (this.inner_collect === "key") {
        if (closing) {
          this.inner_key = this.inner_keybuf;
          this.inner_collect = null;
        } else this.inner_keybuf += c;
      }
      return;
    }
    if (this.depth === 0 && c === "{") this.inner_expect_key = true;
    else if (this.depth === 1) {
      if (c === '"') {
        if (this.inner_expect_key) {
          this.inner_collect = "key";
          this.inner_keybuf = "";
        } else if (this.inner_key === "input" && this.input === "") this.inner_collect = "input";
      } else if (c === ",") this.inner_expect_key = true;
      else if (c === ":") this.inner_expect_key = false;
    }
  }

  /** Decodes a string value as it streams, holding incomplete escapes. */
  private decodeStringChar(c: string, target: "args" | "input"): void {
    const put = (t: string) => {
      if (target === "args") this.args += t;
      else this.input += t;
    };
    if (this.esc_buf !== "") {
      this.esc_buf += c;
      const e = this.esc_buf;
      if (e.length === 2 && e[1] !== "u") {
        const map: Record<string, string> = { n: "\n", t: "\t", r: "\r", b: "\b", f: "\f", '"': '"', "\\": "\\", "/": "/" };
        put(map[e[1]] ?? e[1]);
        this.esc_buf = "";
      } else if (e.length === 6) {
        const code = parseInt(e.slice(2), 16);
        put(Number.isNaN(code) ? e : String.fromCharCode(code));
        this.esc_buf = "";
      }
      return;
    }
    if (c === "\\" && !this.escape) {
      this.esc_buf = "\\";
      return;
    }
    if (c === '"' && !this.escape) return; // the closing quote
    put(c);
  }

  private endValue(): void {
    if (this.value_key === "name") {
      try {
        const v = JSON.parse(this.value_raw);
        if (typeof v === "string") this.name = v;
      } catch {
        // leave the name unknown; the block falls back to text
      }
    }
    if (this.capturing() && this.value_key !== "") this.args_complete = true;
    this.state = Scan.CommaOrEnd;
  }
}

interface OpenCall {
  scanner: CallScanner;
  /** "tag": ends at </tool_call>; "object": ends with the JSON object (bare, or in a fence). */
  form: "tag" | "object";
  /** Inside a ```json fence: its closing ``` is part of the call. */
  fenced: boolean;
  /** What opened it before the body (given back with the body if it is not a call after all). */
  prefix: string;
  body: string;
  /** Set once tool_call_start went out. */
  index: number | null;
  spec: ToolSpec | null;
  /** Arguments text already sent as deltas. */
  sent: number;
}

export class HermesParser implements OutputParser {
  /** What the engine appends to end thinking early (thinking.budget_tokens). */
  readonly thinking_close = "\n</think>\n\n";
  private readonly tools: Map<string, ToolSpec>;
  private readonly new_call_id: () => string;
  private mode: "text" | "thinking" | "call";
  private buf = "";
  /** Whitespace held back: it is dropped when a tag follows it, kept when text does. */
  private pending_ws = "";
  private skip_leading_ws: boolean;
  /** <think> is only a tag before any visible output (models think first, then answer). */
  private think_allowed: boolean;
  private call: OpenCall | null = null;
  private calls = 0;
  /** Openings of a call besides <tool_call> (bare and fenced objects); none without tools. */
  private readonly openings: CallOpening[];
  /** Visible text of the answer came out: a bare object is no longer a call. */
  private answer_started = false;
  /** Between the calls of a ```json fence, before its closing ```. */
  private in_fence = false;

  constructor(opts: ParserOptions) {
    this.tools = new Map(opts.tools.map((t) => [t.name, t]));
    this.new_call_id = opts.new_call_id;
    this.mode = opts.starts_in_thinking ? "thinking" : "text";
    this.skip_leading_ws = opts.starts_in_thinking;
    this.think_allowed = !opts.starts_in_thinking;
    this.openings = opts.tools.length > 0 ? CALL_OPENINGS.hermes.filter((o) => o.form === "bare" || o.form === "fence") : [];
  }

  /** Inside a think block now. */
  get in_thinking(): boolean {
    return this.mode === "thinking";
  }

  /** Calls emitted so far (a generation that made any ends with finish_reason "tool_calls"). */
  get tool_calls(): number {
    return this.calls;
  }

  push(text: string): GenerationEvent[] {
    const out: GenerationEvent[] = [];
    this.buf += text;
    this.drain(out);
    return out;
  }

  finish(): GenerationEvent[] {
    const out: GenerationEvent[] = [];
    this.drain(out);
    if (this.mode === "call") this.closeCall(out, false);
    else if (this.mode === "thinking") {
      if (this.buf !== "") this.emit(out, "thinking", this.pending_ws + this.buf);
    } else {
      // A trailing newline after a tool call is formatting, not an answer.
      const tail = this.calls > 0 ? (this.pending_ws + this.buf).trimEnd() : this.pending_ws + this.buf;
      const text = this.skip_leading_ws ? tail.trimStart() : tail;
      if (text !== "") this.emit(out, "text", text);
    }
    this.buf = "";
    this.pending_ws = "";
    return out;
  }

  private emit(out: GenerationEvent[], type: "text" | "thinking", text: string): void {
    emitText(out, type, text);
  }

  private textTags(): string[] {
    const tags: string[] = [];
    if (this.tools.size > 0) tags.push(CALL_OPEN);
    if (this.think_allowed) tags.push(THINK_OPEN);
    return tags;
  }

  private drain(out: GenerationEvent[]): void {
    for (;;) {
      if (this.mode === "call") {
        if (!this.feedCall(out)) return;
        continue;
      }
      if (this.mode === "text" && this.in_fence) {
        const r = this.inFence();
        if (r === "hold") return;
        if (r === "call") continue;
      }
      const tags = this.mode === "text" ? this.textTags() : [THINK_CLOSE];
      let at = -1;
      let tag = "";
      for (const t of tags) {
        const i = this.buf.indexOf(t);
        if (i >= 0 && (at < 0 || i < at)) {
          at = i;
          tag = t;
        }
      }
      if (tag === THINK_OPEN && (this.pending_ws + this.buf.slice(0, at)).trim() !== "") {
        // Visible text came first: from here on "<think>" is just text.
        this.think_allowed = false;
        continue;
      }
      const opening = this.mode === "text" ? this.findOpening(at < 0 ? this.buf.length : at) : null;
      if (opening && opening.len === "partial") {
        // What could still open a call is held back, like a partial tag.
        this.flushSegment(out, this.buf.slice(0, opening.at), false);
        this.buf = this.buf.slice(opening.at);
        return;
      }
      if (opening) {
        this.flushSegment(out, this.buf.slice(0, opening.at), true);
        this.pending_ws = "";
        const brace = this.buf.indexOf("{", opening.at);
        this.openObjectCall(this.buf.slice(opening.at, brace), opening.form === "fence");
        this.buf = this.buf.slice(brace);
        continue;
      }
      if (at < 0) {
        const hold = heldPrefix(this.buf, tags);
        this.flushSegment(out, this.buf.slice(0, this.buf.length - hold), false);
        this.buf = this.buf.slice(this.buf.length - hold);
        return;
      }
      this.flushSegment(out, this.buf.slice(0, at), true);
      this.buf = this.buf.slice(at + tag.length);
      this.pending_ws = "";
      if (tag === THINK_OPEN) {
        this.mode = "thinking";
        this.think_allowed = false;
        this.skip_leading_ws = true;
      } else if (tag === THINK_CLOSE) {
        this.mode = "text";
        this.skip_leading_ws = true;
        this.answer_started = false;
      } else {
        this.mode = "call";
        this.think_allowed = false;
        this.call = { scanner: new CallScanner(), form: "tag", fenced: false, prefix: CALL_OPEN, body: "", index: null, spec: null, sent: 0 };
      }
    }
  }

  /**
   * The earliest bare or fenced opening in buf[0, before): where it starts and its length, or
   * "partial" where the text runs out inside what could still become one.
   */
  private findOpening(before: number): { at: number; len: number | "partial"; form: CallOpening["form"] } | null {
    if (this.openings.length === 0) return null;
    for (let i = 0; i < before; i++) {
      const c = this.buf[i];
      if (c !== "{" && c !== "`") continue;
      for (const o of this.openings) {
        if (o.pieces[0][0] !== c) continue;
        if (o.at_start && (this.answer_started || (this.pending_ws + this.buf.slice(0, i)).trim() !== "")) continue;
        const len = matchOpening(o, this.buf, i);
        if (len !== 0) return { at: i, len, form: o.form };
      }
    }
    return null;
  }

  private openObjectCall(prefix: string, fenced: boolean): void {
    this.mode = "call";
    this.think_allowed = false;
    this.call = { scanner: new CallScanner(), form: "object", fenced, prefix, body: "", index: null, spec: null, sent: 0 };
  }

  /**
   * After a call inside a fence: the fence's closing ``` (dropped), another call, or text.
   * "hold": wait for more; "call": a call opened; "text": go on as text.
   */
  private inFence(): "hold" | "call" | "text" {
    const ws = leadingWs(this.buf);
    const rest = this.buf.slice(ws);
    if (rest.startsWith("```")) {
      this.buf = rest.slice(3);
      this.in_fence = false;
      this.skip_leading_ws = true;
      return "text";
    }
    if ("```".startsWith(rest)) return "hold";
    const next = this.openings.find((o) => o.form === "bare");
    const m = next ? matchOpening(next, rest, 0) : 0;
    if (m === "partial") return "hold";
    this.in_fence = false;
    if (m === 0) return "text";
    this.buf = rest;
    this.openObjectCall("", true);
    return "call";
  }

  /** Emits a run of text or thinking; `before_tag` drops the whitespace that leads up to a tag. */
  private flushSegment(out: GenerationEvent[], seg: string, before_tag: boolean): void {
    let s = this.pending_ws + seg;
    this.pending_ws = "";
    if (this.skip_leading_ws) {
      s = s.slice(leadingWs(s));
      if (s !== "") this.skip_leading_ws = false;
    }
    const tail = trailingWs(s);
    if (before_tag) s = s.slice(0, s.length - tail);
    else {
      this.pending_ws = s.slice(s.length - tail);
      s = s.slice(0, s.length - tail);
    }
    if (s === "") return;
    if (this.mode === "text") {
      this.think_allowed = false;
      this.answer_started = true;
    }
    this.emit(out, this.mode === "thinking" ? "thinking" : "text", s);
  }

  /** Feeds buffered text to the open call; true when the call closed and parsing continues. */
  private feedCall(out: GenerationEvent[]): boolean {
    const call = this.call!;
    if (call.form === "object") {
      const n = call.scanner.feedObject(this.buf);
      call.body += this.buf.slice(0, n);
      this.buf = this.buf.slice(n);
      this.streamCall(out);
      const st = call.scanner.state;
      if (st !== Scan.Done && st !== Scan.Bad) return false;
      this.closeCall(out, true);
      if (call.fenced && call.index !== null) this.in_fence = true;
      return true;
    }
    const end = this.buf.indexOf(CALL_CLOSE);
    const hold = end >= 0 ? 0 : heldPrefix(this.buf, [CALL_CLOSE]);
    const take = end >= 0 ? end : this.buf.length - hold;
    const chunk = this.buf.slice(0, take);
    call.body += chunk;
    call.scanner.feed(chunk);
    this.buf = this.buf.slice(take);
    this.streamCall(out);
    if (end < 0) return false;
    this.buf = this.buf.slice(CALL_CLOSE.length);
    this.closeCall(out, true);
    return true;
  }

  private streamCall(out: GenerationEvent[]): void {
    const call = this.call!;
    const sc = call.scanner;
    if (call.index === null && sc.name !== null && sc.state !== Scan.Bad) {
      const spec = this.tools.get(sc.name);
      if (!spec) return; // an unknown tool: decided at the end (text)
      call.spec = spec;
      call.index = this.calls++;
      out.push({
        type: "tool_call_start",
        index: call.index,
        id: this.new_call_id(),
        name: spec.name,
        kind: spec.kind,
        ...(spec.namespace !== undefined ? { namespace: spec.namespace } : {}),
      });
    }
    if (call.index === null || sc.state === Scan.Bad) return;
    const source = this.streamed(call);
    if (source.length > call.sent) {
      out.push({ type: "tool_call_delta", index: call.index, arguments: source.slice(call.sent) });
      call.sent = source.length;
    }
  }

  /** What a call streams: its arguments, or for a custom tool the raw input inside {"input": …}. */
  private streamed(call: OpenCall): string {
    const sc = call.scanner;
    return call.spec?.kind === "custom" && !sc.args_is_string ? sc.input : sc.args;
  }

  private closeCall(out: GenerationEvent[], closed: boolean): void {
    const call = this.call!;
    this.call = null;
    this.mode = "text";
    this.skip_leading_ws = true;
    const sc = call.scanner;
    let parsed: Record<string, unknown> | null = null;
    try {
      const v = JSON.parse(call.body);
      if (v !== null && typeof v === "object" && !Array.isArray(v)) parsed = v as Record<string, unknown>;
    } catch {
      parsed = null;
    }
    const name = parsed && typeof parsed.name === "string" ? parsed.name : null;
    const spec = name !== null ? this.tools.get(name) ?? null : null;
    if (call.index === null && (parsed === null || spec === null)) {
      // Not a call after all: give the block back as the text the model wrote.
      const text = call.prefix + call.body + (closed && call.form === "tag" ? CALL_CLOSE : "");
      this.emit(out, "text", text);
      this.skip_leading_ws = false;
      this.answer_started = true;
      return;
    }
    if (call.index === null) {
      this.streamCall(out); // the name only became known with the whole body
    }
    const index = call.index!;
    const kind = call.spec!.kind;
    let full: string;
    if (parsed === null) {
      // Started streaming, then the JSON broke (cut off at the end): keep what was streamed.
      full = this.streamed(call).slice(0, call.sent);
    } else {
      const value = ["arguments", "parameters", "input"].map((k) => parsed![k]).find((v) => v !== undefined);
      if (kind === "custom") {
        if (typeof value === "string") full = value;
        else if (value && typeof value === "object" && typeof (value as Record<string, unknown>).input === "string") full = (value as Record<string, string>).input;
        else full = value === undefined ? "" : JSON.stringify(value);
      } else if (value === undefined) full = "{}";
      else full = sc.args_complete ? sc.args : typeof value === "string" ? value : JSON.stringify(value);
    }
    const sentText = this.streamed(call).slice(0, call.sent);
    if (full.startsWith(sentText) && full.length > sentText.length) {
      out.push({ type: "tool_call_delta", index, arguments: full.slice(sentText.length) });
    } else if (!full.startsWith(sentText)) {
      // Cannot happen for well-formed JSON; the end event carries the truth either way.
      full = sentText;
    }
    out.push({ type: "tool_call_end", index, arguments: full });
  }
}
