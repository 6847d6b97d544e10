import type { GenerationEvent } from "../../engine/types.js";
import type { SseFrame } from "../../http/sse.js";
import { engineError, messageUsage, stopReason, toolUseId } from "./response.js";
import { THINKING_SIGNATURE, type MessageUsage } from "./types.js";

type OpenBlock =
  | { kind: "text"; index: number }
  | { kind: "thinking"; index: number }
  | { kind: "tool_use"; index: number; call: number; sent: string };

/**
 * GenerationEvents → Messages SSE frames. One instance per response. Blocks open lazily on the
 * first event of their kind and close when another kind starts or the generation ends, so the
 * block indexes on the wire are dense and in output order.
 */
export class MessagesStreamEncoder {
  private next_index = 0;
  private open: OpenBlock | null = null;
  private started = false;
  private finished = false;
  private usage: MessageUsage = { input_tokens: 0, cache_read_input_tokens: 0, cache_creation_input_tokens: 0, output_tokens: 0 };

  constructor(private readonly opts: { id: string; model: string; omit_thinking?: boolean }) {}

  /** True once the stream has ended (message_stop or error); later events are dropped. */
  get ended(): boolean {
    return this.finished;
  }

  push(ev: GenerationEvent): SseFrame[] {
    if (this.finished) return [];
    const out: SseFrame[] = [];
    if (!this.started && ev.type !== "error") this.start(out, ev.type === "start" ? ev : { prompt_tokens: 0, cached_tokens: 0 });
    switch (ev.type) {
      case "start":
        break;
      case "text":
        if (this.open?.kind !== "text") this.openBlock(out, { kind: "text", index: this.next_index }, { type: "text", text: "" });
        out.push(this.frame("content_block_delta", { index: this.open!.index, delta: { type: "text_delta", text: ev.text } }));
        break;
      case "thinking":
        if (this.open?.kind !== "thinking") {
          this.openBlock(out, { kind: "thinking", index: this.next_index }, { type: "thinking", thinking: "", signature: "" });
        }
        if (!this.opts.omit_thinking) {
          out.push(this.frame("content_block_delta", { index: this.open!.index, delta: { type: "thinking_delta", thinking: ev.text } }));
        }
        break;
      case "tool_call_start":
        this.openBlock(
          out,
          { kind: "tool_use", index: this.next_index, call: ev.index, sent: "" },
          { type: "tool_use", id: toolUseId(ev.id), name: ev.name, input: {} },
        );
        break;
      case "tool_call_delta": {
        const block = this.open;
        if (block?.kind === "tool_use" && block.call === ev.index && ev.arguments !== "") {
          block.sent += ev.arguments;
          out.push(this.frame("content_block_delta", { index: block.index, delta: { type: "input_json_delta", partial_json: ev.arguments } }));
        }
        break;
      }
      case "tool_call_end": {
        const block = this.open;
        if (block?.kind === "tool_use" && block.call === ev.index) {
          // The end event carries the whole arguments; send whatever the deltas did not.
          if (ev.arguments.startsWith(block.sent) && ev.arguments.length > block.sent.length) {
            const rest = ev.arguments.slice(block.sent.length);
            block.sent = ev.arguments;
            out.push(this.frame("content_block_delta", { index: block.index, delta: { type: "input_json_delta", partial_json: rest } }));
          }
          this.closeBlock(out);
        }
        break;
      }
      case "done":
        this.closeBlock(out);
        this.usage = messageUsage(ev.usage);
        out.push(
          this.frame("message_delta", {
            delta: { stop_reason: stopReason(ev.finish_reason), stop_sequence: ev.finish_reason === "stop_sequence" ? ev.stop_sequence : null },
            usage: { ...this.usage },
          }),
        );
        out.push(this.frame("message_stop", {}));
        this.finished = true;
        break;
      case "error": {
        // Open blocks stay unclosed: the client must not mistake a cut answer for a whole one.
        const err = engineError(ev);
        out.push({ event: "error", data: { type: "error", error: err.body("anthropic").error, request_id: this.opts.id } });
        this.finished = true;
        break;
      }
    }
    return out;
  }

  /** Anthropic's own keep-alive: the API sends ping events while a response is slow to come. */
  keepalive(): SseFrame[] {
    return this.started ? [this.frame("ping", {})] : [];
  }

  private start(out: SseFrame[], ev: { prompt_tokens: number; cached_tokens: number }): void {
    this.started = true;
    this.usage = messageUsage({ prompt_tokens: ev.prompt_tokens, cached_tokens: ev.cached_tokens, completion_tokens: 0 });
    out.push(
      this.frame("message_start", {
        message: {
          id: this.opts.id,
          type: "message",
          role: "assistant",
          model: this.opts.model,
          content: [],
          stop_reason: null,
          stop_sequence: null,
          usage: { ...this.usage },
        },
      }),
    );
    out.push(this.frame("ping", {}));
  }

  private openBlock(out: SseFrame[], block: OpenBlock, content_block: Record<string, unknown>): void {
    this.closeBlock(out);
    this.open = block;
    this.next_index++;
    out.push(this.frame("content_block_start", { index: block.index, content_block }));
  }

  private closeBlock(out: SseFrame[]): void {
    const block = this.open;
    if (!block) return;
    if (block.kind === "thinking") {
      out.push(this.frame("content_block_delta", { index: block.index, delta: { type: "signature_delta", signature: THINKING_SIGNATURE } }));
    }
    out.push(this.frame("content_block_stop", { index: block.index }));
    this.open = null;
  }

  private frame(type: string, fields: Record<string, unknown>): SseFrame {
    return { event: type, data: { type, ...fields } };
  }
}
