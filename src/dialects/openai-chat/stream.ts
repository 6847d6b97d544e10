import type { GenerationEvent } from "../../engine/types.js";
import type { SseFrame } from "../../http/sse.js";
import type { ChatCompletionChunk, RenderContext } from "./types.js";
import { callId, chatUsage, finishReason, streamError, timings } from "./wire.js";

type Delta = ChatCompletionChunk["choices"][number]["delta"];

/**
 * GenerationEvents → chat.completion.chunk frames. One instance per response: a first chunk
 * with the assistant role, one chunk per text / reasoning / tool-call piece, the chunk with the
 * finish_reason (and timings), the usage chunk when stream_options.include_usage asked for it,
 * then data: [DONE]. An engine error ends the stream with an error payload and [DONE].
 */
export class ChatStreamEncoder {
  private started = false;
  private finished = false;
  /** Arguments text sent per call, so tool_call_end can send what deltas did not. */
  private readonly sent = new Map<number, string>();

  constructor(
    private readonly rc: RenderContext,
    private readonly opts: { include_usage?: boolean } = {},
  ) {}

  private chunk(delta: Delta, finish: ChatCompletionChunk["choices"][number]["finish_reason"] = null): ChatCompletionChunk {
    return {
      id: this.rc.id,
      object: "chat.completion.chunk",
      created: this.rc.created,
      model: this.rc.model_id,
      choices: [{ index: 0, delta, finish_reason: finish, logprobs: null }],
    };
  }

  private open(out: SseFrame[]): void {
    if (this.started) return;
    this.started = true;
    out.push({ data: this.chunk({ role: "assistant", content: "" }) });
  }

  /** True once "done" or "error" went out ([DONE] sent): later events are dropped. */
  get ended(): boolean {
    return this.finished;
  }

  push(ev: GenerationEvent): SseFrame[] {
    if (this.finished) return [];
    const out: SseFrame[] = [];
    switch (ev.type) {
      case "start":
        this.open(out);
        break;
      case "text":
        this.open(out);
        if (ev.text !== "") out.push({ data: this.chunk({ content: ev.text }) });
        break;
      case "thinking":
        this.open(out);
        if (ev.text !== "") out.push({ data: this.chunk({ reasoning_content: ev.text }) });
        break;
      case "tool_call_start":
        this.open(out);
        this.sent.set(ev.index, "");
        out.push({ data: this.chunk({ tool_calls: [{ index: ev.index, id: callId(ev.id), type: "function", function: { name: ev.name, arguments: "" } }] }) });
        break;
      case "tool_call_delta":
        this.sent.set(ev.index, (this.sent.get(ev.index) ?? "") + ev.arguments);
        if (ev.arguments !== "") out.push({ data: this.chunk({ tool_calls: [{ index: ev.index, function: { arguments: ev.arguments } }] }) });
        break;
      case "tool_call_end": {
        const sent = this.sent.get(ev.index) ?? "";
        if (ev.arguments.startsWith(sent) && ev.arguments.length > sent.length) {
          out.push({ data: this.chunk({ tool_calls: [{ index: ev.index, function: { arguments: ev.arguments.slice(sent.length) } }] }) });
        }
        this.sent.set(ev.index, ev.arguments);
        break;
      }
      case "done": {
        this.open(out);
        const last = this.chunk({}, finishReason(ev.finish_reason));
        last.timings = timings(ev.timings);
        out.push({ data: last });
        if (this.opts.include_usage) {
          out.push({
            data: {
              id: this.rc.id,
              object: "chat.completion.chunk",
              created: this.rc.created,
              model: this.rc.model_id,
              choices: [],
              usage: chatUsage(ev.usage),
              timings: timings(ev.timings),
            } satisfies ChatCompletionChunk,
          });
        }
        out.push({ data: "[DONE]" });
        this.finished = true;
        break;
      }
      case "error":
        out.push({ data: streamError(ev, this.rc.id) }, { data: "[DONE]" });
        this.finished = true;
        break;
    }
    return out;
  }
}
