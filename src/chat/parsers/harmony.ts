// The harmony family's output parser (gpt-oss), the counterpart of ./hermes.ts for templates
// that speak OpenAI's harmony format (../family.ts). The prompt ends with "<|start|>assistant"; the model then writes one
// or more messages, each a header and a body:
//
//   <|channel|>analysis<|message|>…<|end|>                         thinking
//   <|start|>assistant<|channel|>final<|message|>…<|return|>        the answer (text)
//   <|start|>assistant<|channel|>commentary<|message|>…<|end|>      a preamble to the user (text)
//   <|start|>assistant to=functions.NAME<|channel|>commentary <|constrain|>json<|message|>{…}<|call|>
//   <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{…}<|call|>
//                                                                   a tool call (the recipient may
//                                                                   sit in the role or the channel part)
//
// The tokenizer renders <|start|>, <|channel|>, <|message|>, <|constrain|> and <|end|> as text for
// this vocabulary (as llama.cpp does), while <|return|> and <|call|> end the generation and are
// never seen here. Headers are held back until their <|message|>; a body streams as it comes, held
// back only where it could be the start of a tag, so no dialect ever shows "<|end". Output that is
// not harmony at all (no header where one must be) is passed through as text.
import type { GenerationEvent, ToolSpec } from "../types.js";
import { emitText as emit, heldPrefix, type OutputParser, type ParserOptions } from "./common.js";

const START = "<|start|>";
const CHANNEL = "<|channel|>";
const MESSAGE = "<|message|>";
const CONSTRAIN = "<|constrain|>";
const END = "<|end|>";
/** Tags that end a body: <|end|> closes the message, <|start|> opens the next one. */
const BODY_ENDS = [END, START, "<|return|>", "<|call|>"];
/** A header longer than this is not a header: the text is given back as the answer. */
const MAX_HEADER = 256;

type Body =
  | { kind: "text" | "thinking" }
  | { kind: "call"; spec: ToolSpec; index: number; args: string }
  /** A call to a tool that was not offered: its body is given back as text when it closes. */
  | { kind: "unknown_call"; args: string };

export class HarmonyParser implements OutputParser {
  /** What the engine appends to end thinking early (thinking.budget_tokens): close analysis, open final. */
  readonly thinking_close = `${END}${START}assistant${CHANNEL}final${MESSAGE}`;
  private readonly tools: Map<string, ToolSpec>;
  private readonly new_call_id: () => string;
  private buf = "";
  /** null: reading a header (everything since the last message ended). */
  private body: Body | null = null;
  private calls = 0;

  constructor(opts: ParserOptions) {
    this.tools = new Map(opts.tools.map((t) => [t.name, t]));
    this.new_call_id = opts.new_call_id;
  }

  get in_thinking(): boolean {
    return this.body?.kind === "thinking";
  }

  get tool_calls(): number {
    return this.calls;
  }

  push(text: string): GenerationEvent[] {
    const out: GenerationEvent[] = [];
    this.buf += text;
    this.drain(out, false);
    return out;
  }

  finish(): GenerationEvent[] {
    const out: GenerationEvent[] = [];
    this.drain(out, true);
    if (this.body) this.closeBody(out);
    // A header cut off by the end of the generation is scaffolding; anything else is text.
    else if (this.buf !== "" && !this.buf.includes("<|")) emit(out, "text", this.buf);
    this.buf = "";
    return out;
  }

  private drain(out: GenerationEvent[], final: boolean): void {
    for (;;) {
      if (this.body === null) {
        if (!this.readHeader(out, final)) return;
        continue;
      }
      let at = -1;
      let tag = "";
      for (const t of BODY_ENDS) {
        const i = this.buf.indexOf(t);
        if (i >= 0 && (at < 0 || i < at)) {
          at = i;
          tag = t;
        }
      }
      if (at < 0) {
        const hold = final ? 0 : heldPrefix(this.buf, BODY_ENDS);
        this.bodyText(out, this.buf.slice(0, this.buf.length - hold));
        this.buf = this.buf.slice(this.buf.length - hold);
        return;
      }
      this.bodyText(out, this.buf.slice(0, at));
      // <|start|> belongs to the next header; the other tags end the message here.
      this.buf = this.buf.slice(tag === START ? at : at + tag.length);
      this.closeBody(out);
    }
  }

  /** Consumes a complete header into this.body; false when more text is needed. */
  private readHeader(out: GenerationEvent[], final: boolean): boolean {
    const end = this.buf.indexOf(MESSAGE);
    if (end < 0) {
      if (!final && this.buf.length <= MAX_HEADER && couldBeHeader(this.buf)) return false;
      if (final) return false; // finish() decides what a cut-off header is
      // Not harmony: the rest is the answer.
      this.body = { kind: "text" };
      return true;
    }
    const header = this.buf.slice(0, end);
    if (!couldBeHeader(header)) {
      this.body = { kind: "text" };
      return true;
    }
    this.buf = this.buf.slice(end + MESSAGE.length);
    const channel = /<\|channel\|>([A-Za-z0-9_.-]+)/.exec(header)?.[1] ?? "final";
    const recipient = /\bto=([^\s<]+)/.exec(header)?.[1] ?? null;
    if (recipient !== null && recipient.startsWith("functions.")) {
      const spec = this.tools.get(recipient.slice("functions.".length));
      if (!spec) {
        this.body = { kind: "unknown_call", args: "" };
        return true;
      }
      const index = this.calls++;
      out.push({
        type: "tool_call_start",
        index,
        id: this.new_call_id(),
        name: spec.name,
        kind: spec.kind,
        ...(spec.namespace !== undefined ? { namespace: spec.namespace } : {}),
      });
      this.body = { kind: "call", spec, index, args: "" };
      return true;
    }
    // analysis is the model's reasoning; final and commentary (a preamble) are for the user.
    this.body = { kind: channel === "analysis" ? "thinking" : "text" };
    return true;
  }

  private bodyText(out: GenerationEvent[], s: string): void {
    if (s === "") return;
    const b = this.body!;
    if (b.kind === "call") {
      b.args += s;
      // A custom tool's input is unwrapped from {"input": …} once complete; a function's JSON
      // arguments stream as written.
      if (b.spec.kind === "function") out.push({ type: "tool_call_delta", index: b.index, arguments: s });
    } else if (b.kind === "unknown_call") {
      b.args += s;
    } else {
      emit(out, b.kind, s);
    }
  }

  private closeBody(out: GenerationEvent[]): void {
    const b = this.body!;
    this.body = null;
    if (b.kind === "unknown_call") {
      emit(out, "text", b.args);
      return;
    }
    if (b.kind !== "call") return;
    let args = b.args;
    if (b.spec.kind === "custom") {
      args = customInput(b.args);
      if (args !== "") out.push({ type: "tool_call_delta", index: b.index, arguments: args });
    }
    out.push({ type: "tool_call_end", index: b.index, arguments: args });
  }
}

/** The text could be (the start of) a harmony header: it opens with one of its parts. */
function couldBeHeader(s: string): boolean {
  const t = s.trimStart();
  if (t === "") return true;
  for (const open of [START, CHANNEL, CONSTRAIN, "to=", "assistant"]) {
    if (t.startsWith(open) || open.startsWith(t)) return true;
  }
  return false;
}

/** The raw input of a custom tool, offered to the template as {"input": string}. */
function customInput(args: string): string {
  try {
    const v = JSON.parse(args);
    if (typeof v === "string") return v;
    if (v !== null && typeof v === "object" && typeof (v as Record<string, unknown>).input === "string") {
      return (v as Record<string, string>).input;
    }
  } catch {
    // not JSON: the text is the input
  }
  return args;
}
