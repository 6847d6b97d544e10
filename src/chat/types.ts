// The vocabulary the chat layer works in: neutral chat history and tools (what a template renders)
// and the parsed output events (what a parser writes). Below the engine: src/engine/types.ts
// re-exports all of it, and nothing here knows about workers, slots or wire formats.

/** Why a generation ended. Dialects map these onto their own wire names. */
export type FinishReason =
  | "stop" //          end-of-generation token (eos / <|im_end|> ...)
  | "stop_sequence" // a caller-supplied stop string matched; GenerationDone.stop_sequence says which
  | "length" //        max_tokens budget or end of the context window
  | "tool_calls" //    the model finished after emitting one or more tool calls
  | "cancelled" //     the client went away
  | "error"; //        the engine failed mid-stream

/** A tool offered to the model, dialect-neutral. */
export interface ToolSpec {
  name: string;
  description?: string;
  /** JSON Schema of the arguments object (function tools). */
  parameters?: Record<string, unknown>;
  /** "function": JSON object arguments; "custom": raw string input (Responses custom tools). */
  kind: "function" | "custom";
  /** Responses namespace tool this one came from, echoed back on the call. */
  namespace?: string;
}

export type ToolChoice =
  | { type: "auto" }
  | { type: "none" }
  | { type: "required" }
  | { type: "tool"; name: string };

/** A tool call the assistant made earlier in the conversation (replayed history). */
export interface ChatToolCall {
  id: string;
  name: string;
  /** JSON text for function tools, raw text for custom tools. */
  arguments: string;
}

/** One turn of neutral chat history. System text is collected separately in ChatPrompt.system. */
export type ChatTurn =
  | { role: "user"; content: string }
  | { role: "assistant"; content: string; thinking?: string; tool_calls?: ChatToolCall[] }
  | { role: "tool"; tool_call_id: string; name?: string; content: string };

/** What the prompt builder renders with the model's own chat template. */
export interface ChatPrompt {
  /** All system text from every place a dialect allows it, joined in order. */
  system: string[];
  turns: ChatTurn[];
  tools: ToolSpec[];
  tool_choice: ToolChoice;
  /** false: at most one call per answer (parallel_tool_calls false, disable_parallel_tool_use); default several. */
  parallel_tool_calls?: boolean;
  /** undefined = template default. */
  enable_thinking?: boolean;
  /** Most tokens of thinking (Anthropic thinking.budget_tokens); then the think block is closed and the answer follows. */
  thinking_budget?: number;
}

export interface Usage {
  prompt_tokens: number;
  /** Prompt tokens served from the prefix cache (not prefilled). */
  cached_tokens: number;
  completion_tokens: number;
  /** Tokens spent inside <think>...</think>. */
  reasoning_tokens: number;
}

/** llama-server's timings block. */
export interface Timings {
  prompt_n: number;
  prompt_ms: number;
  prompt_per_second: number | null;
  predicted_n: number;
  predicted_ms: number;
  predicted_per_second: number | null;
  cache_n: number;
  queue_ms: number;
  /** Speculative decoding (llama-server's names): draft tokens verified, and those the output kept. */
  draft_n?: number;
  draft_n_accepted?: number;
}

/** The parsed output stream. Text, thinking and tool calls never overlap within one event. */
export type GenerationEvent =
  | { type: "start"; prompt_tokens: number; cached_tokens: number }
  | { type: "text"; text: string }
  | { type: "thinking"; text: string }
  | { type: "tool_call_start"; index: number; id: string; name: string; kind: "function" | "custom"; namespace?: string }
  | { type: "tool_call_delta"; index: number; arguments: string }
  | { type: "tool_call_end"; index: number; arguments: string }
  | {
      type: "done";
      finish_reason: FinishReason;
      stop_sequence: string | null;
      usage: Usage;
      timings: Timings;
    }
  | { type: "error"; code: string; message: string };

/** What a chat template is rendered with: the model's template and its special tokens. */
export interface TemplateModel {
  chat_template: string | null;
  bos_token: string | null;
  eos_token: string | null;
  /** The tokenizer starts a prompt with BOS, so a template's leading bos_token is dropped. */
  add_bos?: boolean;
  /** Texts the tokenizer turns into control tokens (only the template may produce them). */
  control_tokens?: string[];
}
