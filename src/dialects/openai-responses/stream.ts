import type { GenerationEvent } from "../../engine/types.js";
import type { SseFrame } from "../../http/sse.js";
import { callId, engineError, isIncomplete, responseUsage } from "./wire.js";
import type { ItemStatus, OutputItem, RenderContext, ResponseObject, ResponsesRequest } from "./types.js";

type OpenItem =
  | { kind: "reasoning"; output_index: number; id: string; text: string }
  | { kind: "message"; output_index: number; id: string; text: string }
  | { kind: "function_call"; output_index: number; id: string; call: number; call_id: string; name: string; namespace?: string; args: string }
  | { kind: "custom_tool_call"; output_index: number; id: string; call: number; call_id: string; name: string; args: string };

/**
 * GenerationEvents → Responses SSE frames, in the order and shapes of
 * spec/responses-stream-events.txt. One instance per response. An item opens on the first event
 * of its kind and closes (…done events, output_item.done) when another kind starts or the
 * generation ends; every event carries the next sequence_number, starting at 0.
 */
export class ResponsesStreamEncoder {
  private seq = 0;
  private started = false;
  private finished = false;
  private open: OpenItem | null = null;
  private readonly items: OutputItem[] = [];
  private readonly suffix: string;
  /** The final response once "done" was pushed. */
  final: ResponseObject | null = null;

  constructor(
    private readonly body: ResponsesRequest,
    private readonly rc: RenderContext,
  ) {
    this.suffix = rc.id.replace(/^resp_/, "");
  }

  get ended(): boolean {
    return this.finished;
  }

  push(ev: GenerationEvent): SseFrame[] {
    if (this.finished) return [];
    const out: SseFrame[] = [];
    if (!this.started) {
      this.started = true;
      out.push(this.frame("response.created", { response: this.snapshot("in_progress", null) }));
      out.push(this.frame("response.in_progress", { response: this.snapshot("in_progress", null) }));
    }
    switch (ev.type) {
      case "start":
        break;
      case "thinking": {
        if (this.open?.kind !== "reasoning") {
          this.openItem(out, (output_index) => ({ kind: "reasoning", output_index, id: this.itemId("rs", output_index), text: "" }));
        }
        const item = this.open as Extract<OpenItem, { kind: "reasoning" }>;
        item.text += ev.text;
        out.push(this.frame("response.reasoning_text.delta", { item_id: item.id, output_index: item.output_index, content_index: 0, delta: ev.text }));
        break;
      }
      case "text": {
        if (this.open?.kind !== "message") {
          this.openItem(out, (output_index) => ({ kind: "message", output_index, id: this.itemId("msg", output_index), text: "" }));
        }
        const item = this.open as Extract<OpenItem, { kind: "message" }>;
        item.text += ev.text;
        out.push(this.frame("response.output_text.delta", { item_id: item.id, output_index: item.output_index, content_index: 0, delta: ev.text }));
        break;
      }
      case "tool_call_start": {
        const common = { call: ev.index, call_id: callId(ev.id), name: ev.name, args: "" };
        if (ev.kind === "custom") {
          this.openItem(out, (output_index) => ({ kind: "custom_tool_call", output_index, id: this.itemId("ctc", output_index), ...common }));
        } else {
          const ns = ev.namespace !== undefined ? { namespace: ev.namespace } : {};
          this.openItem(out, (output_index) => ({ kind: "function_call", output_index, id: this.itemId("fc", output_index), ...common, ...ns }));
        }
        break;
      }
      case "tool_call_delta": {
        const item = this.open;
        if ((item?.kind === "function_call" || item?.kind === "custom_tool_call") && item.call === ev.index && ev.arguments !== "") {
          item.args += ev.arguments;
          out.push(this.frame(this.argsEvent(item, "delta"), { item_id: item.id, output_index: item.output_index, delta: ev.arguments }));
        }
        break;
      }
      case "tool_call_end": {
        const item = this.open;
        if ((item?.kind === "function_call" || item?.kind === "custom_tool_call") && item.call === ev.index) {
          // The end event carries the whole arguments; send whatever the deltas did not.
          if (ev.arguments.startsWith(item.args) && ev.arguments.length > item.args.length) {
            const rest = ev.arguments.slice(item.args.length);
            out.push(this.frame(this.argsEvent(item, "delta"), { item_id: item.id, output_index: item.output_index, delta: rest }));
          }
          item.args = ev.arguments;
          this.closeItem(out, "completed");
        }
        break;
      }
      case "done": {
        const incomplete = isIncomplete(ev.finish_reason);
        this.closeItem(out, incomplete ? "incomplete" : "completed");
        const response = this.snapshot(incomplete ? "incomplete" : "completed", ev.usage);
        this.final = response;
        out.push(this.frame(incomplete ? "response.incomplete" : "response.completed", { response }));
        this.finished = true;
        break;
      }
      case "error": {
        const err = engineError(ev);
        out.push(this.frame("error", { code: err.code, message: err.message, param: null, request_id: this.rc.id }));
        const response = this.snapshot("failed", null);
        response.error = { code: err.code, message: err.message };
        out.push(this.frame("response.failed", { response }));
        this.finished = true;
        break;
      }
    }
    return out;
  }

  private itemId(prefix: string, output_index: number): string {
    return `${prefix}_${this.suffix}_${output_index}`;
  }

  private argsEvent(item: OpenItem, phase: "delta" | "done"): string {
    return item.kind === "custom_tool_call" ? `response.custom_tool_call_input.${phase}` : `response.function_call_arguments.${phase}`;
  }

  /** The item as the wire shows it, from the open state. */
  private render(item: OpenItem, status: ItemStatus, full: boolean): OutputItem {
    switch (item.kind) {
      case "reasoning":
        return { id: item.id, type: "reasoning", status, summary: [], content: full ? [{ type: "reasoning_text", text: item.text }] : [] };
      case "message":
        return { id: item.id, type: "message", status, role: "assistant", content: full ? [{ type: "output_text", text: item.text }] : [] };
      case "function_call":
        return {
          id: item.id,
          type: "function_call",
          status,
          call_id: item.call_id,
          name: item.name,
          arguments: full ? item.args : "",
          ...(item.namespace !== undefined ? { namespace: item.namespace } : {}),
        };
      case "custom_tool_call":
        return { id: item.id, type: "custom_tool_call", status, call_id: item.call_id, name: item.name, input: full ? item.args : "" };
    }
  }

  /** Closes the open item first, so the new one's output_index counts it. */
  private openItem(out: SseFrame[], make: (output_index: number) => OpenItem): void {
    this.closeItem(out, "completed");
    const item = make(this.items.length);
    this.open = item;
    out.push(this.frame("response.output_item.added", { output_index: item.output_index, item: this.render(item, "in_progress", false) }));
    if (item.kind === "reasoning" || item.kind === "message") {
      const part = item.kind === "reasoning" ? { type: "reasoning_text", text: "" } : { type: "output_text", text: "" };
      out.push(this.frame("response.content_part.added", { item_id: item.id, output_index: item.output_index, content_index: 0, part }));
    }
  }

  private closeItem(out: SseFrame[], status: ItemStatus): void {
    const item = this.open;
    if (!item) return;
    const at = { item_id: item.id, output_index: item.output_index };
    switch (item.kind) {
      case "reasoning":
        out.push(this.frame("response.reasoning_text.done", { ...at, content_index: 0, text: item.text }));
        out.push(this.frame("response.content_part.done", { ...at, content_index: 0, part: { type: "reasoning_text", text: item.text } }));
        break;
      case "message":
        out.push(this.frame("response.output_text.done", { ...at, content_index: 0, text: item.text }));
        out.push(this.frame("response.content_part.done", { ...at, content_index: 0, part: { type: "output_text", text: item.text } }));
        break;
      case "function_call":
        out.push(this.frame("response.function_call_arguments.done", { ...at, name: item.name, arguments: item.args }));
        break;
      case "custom_tool_call":
        out.push(this.frame("response.custom_tool_call_input.done", { ...at, input: item.args }));
        break;
    }
    const done = this.render(item, status, true);
    this.items.push(done);
    out.push(this.frame("response.output_item.done", { output_index: item.output_index, item: this.render(item, status, true) }));
    this.open = null;
  }

  private snapshot(status: ResponseObject["status"], usage: Parameters<typeof responseUsage>[0] | null): ResponseObject {
    const response: ResponseObject = {
      id: this.rc.id,
      object: "response",
      created_at: this.rc.created_at,
      status,
      model: this.body.model ?? this.rc.model_id,
      // Deep copies: frames are serialized later and must not see items change under them.
      output: status === "in_progress" ? [] : structuredClone(this.items),
      parallel_tool_calls: this.body.parallel_tool_calls ?? false,
      tool_choice: this.body.tool_choice ?? "auto",
      tools: this.body.tools ?? [],
      usage: usage ? responseUsage(usage) : null,
    };
    if (status === "incomplete") response.incomplete_details = { reason: "max_output_tokens" };
    return response;
  }

  private frame(type: string, fields: Record<string, unknown>): SseFrame {
    return { event: type, data: { type, sequence_number: this.seq++, ...fields } };
  }
}
