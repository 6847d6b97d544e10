// Forced-call grammars are built from caller-supplied JSON Schemas, so building one can take
// long or fail: it runs on a worker thread (never the HTTP thread, never the scheduler), one
// build at a time, under a time limit. A build past the limit terminates the thread (the next
// build starts a fresh one). Results, failures included, are remembered by their input: an
// agent sends the same tools every turn.
import { Worker } from "node:worker_threads";
import { createHash } from "node:crypto";
import { ApiError, clipped } from "../errors.js";
import type { ToolSpec } from "./types.js";
import type { ToolFamily } from "../chat/tool-forms.js";

export interface GrammarTask {
  id: number;
  tools: ToolSpec[];
  starts_in_thinking: boolean;
  /** The model speaks harmony (gpt-oss): the call in its message shape. */
  harmony: boolean;
  /** tool_choice auto: the lazy grammar of the family's call forms instead of one forced call. */
  lazy?: ToolFamily;
  /** Lazy grammar: false = one call only. */
  parallel?: boolean;
}
export type GrammarReply = { id: number; ok: true; grammar: string } | { id: number; ok: false; tool: string | null; reason: string };

/** Wall time one build may take. */
export const GRAMMAR_TIME_LIMIT_MS = 2000;
const CACHE_ENTRIES = 64;

interface Pending {
  task: GrammarTask;
  resolve: (grammar: string) => void;
  reject: (err: ApiError) => void;
}

/** The 400 for a tool whose schema cannot constrain a call (forced, or under tool_choice auto). */
export function toolSchemaError(tools: string[], reason: string, forced = true): ApiError {
  // Names are the client's: each is cut, and a long list names its first few.
  const names = tools.slice(0, 8).map((t) => `'${clipped(t)}'`);
  if (tools.length > 8) names.push(`${tools.length - 8} more`);
  const which = tools.length === 1 ? `tool ${names[0]}` : `tools ${names.join(", ")}`;
  return new ApiError("invalid_request", `The parameters schema of ${which} cannot constrain a ${forced ? "forced " : ""}tool call: ${reason}.`, { param: "tools" });
}

/**
 * The tool a forced call's text names and its arguments so far; null before the name is whole.
 * Two call shapes: the JSON object most templates use, and harmony's call message (gpt-oss),
 * whose tags must not reach the client in an error either.
 */
export function callSoFar(text: string): { tool: string; args: string } | null {
  const harmony = /to=functions\.([^\s<]+) ?<\|constrain\|>json<\|message\|>([\s\S]*)$/.exec(text);
  if (harmony) return { tool: harmony[1], args: harmony[2] };
  // The layout a forced call writes, or the whitespace an opened call may have under tool_choice auto.
  const m = /\{\s*"name"\s*:\s*("(?:[^"\\]|\\.)*"), "arguments": ([\s\S]*)$/.exec(text);
  if (!m) return null;
  try {
    return { tool: JSON.parse(m[1]) as string, args: m[2] };
  } catch {
    return null;
  }
}

/**
 * Why a forced call's grammar fails where `text` (the call so far) leads: `why` is the grammar
 * engine's limit ("too ambiguous ..."). The same words whether the trial found it up front or a
 * generation met it.
 */
export function deadEndReason(why: string, text: string): { tool: string | null; reason: string } {
  const call = callSoFar(text);
  const at = call ? call.args : text;
  const shown = at.length > 80 ? "…" + at.slice(-80) : at;
  const where = call ? `after the arguments ${JSON.stringify(shown)}` : `after ${JSON.stringify(shown)}`;
  return {
    tool: call?.tool ?? null,
    reason: `the grammar engine cannot follow it: ${why.replace(/^grammar: /, "")} ${where} (alternatives that begin alike, such as anyOf branches, nested)`,
  };
}

export class GrammarPool {
  private worker: Worker | null = null;
  /** The thread has loaded its code (start-up is not charged to a build's time limit). */
  private workerReady = false;
  private queue: Pending[] = [];
  private running: Pending | null = null;
  private timer: NodeJS.Timeout | null = null;
  private nextId = 1;
  private cache = new Map<string, Promise<string>>();

  constructor(private readonly time_limit_ms = GRAMMAR_TIME_LIMIT_MS) {}

  /** The grammar of one call to one of `tools`; rejects with a 400 ApiError naming the tool. */
  build(tools: ToolSpec[], starts_in_thinking: boolean, harmony = false, lazy?: ToolFamily, parallel = true): Promise<string> {
    const key = createHash("sha256").update(JSON.stringify([tools, starts_in_thinking, harmony, lazy ?? null, parallel])).digest("hex");
    const known = this.cache.get(key);
    if (known) {
      this.cache.delete(key); // most recently used last
      this.cache.set(key, known);
      return known;
    }
    const p = new Promise<string>((resolve, reject) => {
      this.queue.push({ task: { id: this.nextId++, tools, starts_in_thinking, harmony, ...(lazy ? { lazy, parallel } : {}) }, resolve, reject });
      this.pump();
    });
    p.catch(() => {});
    this.cache.set(key, p);
    if (this.cache.size > CACHE_ENTRIES) this.cache.delete(this.cache.keys().next().value!);
    return p;
  }

  async close(): Promise<void> {
    const w = this.worker;
    this.worker = null;
    if (this.timer) clearTimeout(this.timer);
    for (const p of [...(this.running ? [this.running] : []), ...this.queue]) p.reject(new ApiError("engine_error", "The engine stopped."));
    this.running = null;
    this.queue = [];
    await w?.terminate();
  }

  private pump(): void {
    if (this.running || this.queue.length === 0) return;
    const w = this.thread();
    if (!this.workerReady) return; // pumped again once the thread says it is ready
    const job = this.queue.shift()!;
    this.running = job;
    w.postMessage(job.task);
    this.timer = setTimeout(() => {
      // Past its time: the thread is stuck in this build. Drop it; the next build starts another.
      const w = this.worker;
      this.worker = null;
      void w?.terminate();
      this.settle(job, { id: job.task.id, ok: false, tool: null, reason: `building its grammar took over ${this.time_limit_ms} ms` });
    }, this.time_limit_ms);
  }

  private settle(job: Pending, r: GrammarReply): void {
    if (this.running !== job) return;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.running = null;
    if (r.ok) job.resolve(r.grammar);
    else job.reject(toolSchemaError(r.tool !== null ? [r.tool] : job.task.tools.map((t) => t.name), r.reason, job.task.lazy === undefined));
    this.pump();
  }

  private thread(): Worker {
    if (this.worker) return this.worker;
    const isTs = import.meta.url.endsWith(".ts");
    const entry = new URL(isTs ? "./grammar-thread.ts" : "./grammar-thread.js", import.meta.url);
    // From the TypeScript sources (tests, a checkout without a build) the thread registers tsx
    // itself: a worker thread does not inherit the parent's --import hooks.
    const w = isTs
      ? new Worker(`import("tsx/esm/api").then((tsx) => { tsx.register(); return import(${JSON.stringify(entry.href)}); });`, { eval: true })
      : new Worker(entry);
    w.unref();
    w.on("message", (r: GrammarReply | { ready: true }) => {
      if (this.worker !== w) return;
      if ("ready" in r) {
        this.workerReady = true;
        this.pump();
      } else if (this.running && this.running.task.id === r.id) this.settle(this.running, r);
    });
    w.on("error", (e) => {
      if (this.worker !== w) return;
      this.worker = null;
      if (this.running) this.settle(this.running, { id: this.running.task.id, ok: false, tool: null, reason: e.message });
      else for (const p of this.queue.splice(0)) p.reject(toolSchemaError(p.task.tools.map((t) => t.name), `its grammar could not be built: ${e.message}`, p.task.lazy === undefined));
    });
    w.on("exit", () => {
      if (this.worker === w) this.worker = null;
    });
    this.worker = w;
    this.workerReady = false;
    return w;
  }
}
