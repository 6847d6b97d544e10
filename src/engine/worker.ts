// The model's worker process (child_process.fork from engine.ts). It owns the native addon so
// that a native fault kills only this process; the server restarts it. The IPC protocol:
//
//   parent -> worker                                   worker -> parent
//   {t:"load", opts}                                   {t:"ready", info} | {t:"load_error", message}
//   {t:"tokenize", rid, text, add_special, parse_special}  {t:"reply", rid, ok, value | message}
//   {t:"submit", req: WorkerSubmit}                    {t:"events", evs: NativeEvent[], stats}
//   {t:"cancel", id}                                   {t:"stats", stats}   (periodic while busy)
//   {t:"crash"}   only honoured when MB_TEST_HOOKS=1 (set by createEngine({test_hooks: true}))
import { loadAddon, type NativeEngine, type NativeEvent, type NativeLoadOptions, type NativeSampling } from "./native.js";

/** A submit: prompt text is tokenized here, saving a round trip per request. */
export interface WorkerSubmit {
  id: number;
  text: string;
  add_special: boolean;
  parse_special: boolean;
  max_tokens: number;
  sampling: NativeSampling;
  /** Output grammar (see NativeRequest.grammar); absent = unconstrained. */
  grammar?: string;
  /** Test-only scripted output, tokenized without specials. */
  script_text?: string;
  /** State point in characters of `text` (prompt-cache.ts); absent or 0 = none. */
  state_point_chars?: number;
}

export type ToWorker =
  | { t: "load"; opts: NativeLoadOptions }
  | { t: "tokenize"; rid: number; text: string; add_special: boolean; parse_special: boolean }
  | { t: "submit"; req: WorkerSubmit }
  | { t: "cancel"; id: number }
  | { t: "crash" };

/** A submit rejected before it reached the scheduler (code is an ErrorCode). */
export interface WorkerReject {
  type: "reject";
  id: number;
  code: "context_length_exceeded" | "invalid_request";
  message: string;
  prompt_tokens: number;
}

export type FromWorker =
  | { t: "ready"; info: import("./native.js").NativeModelInfo; pid: number }
  | { t: "load_error"; message: string }
  | { t: "reply"; rid: number; ok: boolean; value?: unknown; message?: string }
  | { t: "events"; evs: (NativeEvent | WorkerReject)[]; stats: import("./native.js").NativeStats }
  | { t: "stats"; stats: import("./native.js").NativeStats };

/**
 * The state point in tokens: the common token prefix of the prompt and its first
 * state_point_chars characters tokenized alone (BPE may merge across that boundary).
 */
function statePoint(engine: NativeEngine, r: WorkerSubmit, prompt: Int32Array): number {
  if (!r.state_point_chars || r.state_point_chars <= 0) return 0;
  const head = engine.tokenize(r.text.slice(0, r.state_point_chars), r.add_special, r.parse_special);
  const n = Math.min(head.length, prompt.length);
  let i = 0;
  while (i < n && head[i] === prompt[i]) i++;
  return i;
}

function main(): void {
  const send = (m: FromWorker) => {
    if (process.connected) process.send!(m);
  };
  let engine: NativeEngine | null = null;
  let n_ctx = 0;
  let active = 0;
  // The server is gone: nothing left to serve.
  process.on("disconnect", () => process.exit(0));

  const timer = setInterval(() => {
    if (engine && active > 0) send({ t: "stats", stats: engine.stats() });
  }, 500);
  timer.unref();

  process.on("message", (m: ToWorker) => {
    switch (m.t) {
      case "load": {
        try {
          engine = new (loadAddon().Engine)();
        } catch (e) {
          send({ t: "load_error", message: (e as Error).message });
          break;
        }
        n_ctx = m.opts.n_ctx;
        engine
          .load(m.opts, (evs) => {
            for (const e of evs) if (e.type === "done" || e.type === "error") active--;
            send({ t: "events", evs, stats: engine!.stats() });
          })
          .then((info) => {
            send({ t: "ready", info, pid: process.pid });
            // What a restarted worker found in the host cache shows before its first request.
            send({ t: "stats", stats: engine!.stats() });
          })
          .catch((e: Error) => send({ t: "load_error", message: e.message }));
        break;
      }
      case "tokenize": {
        try {
          const ids = engine!.tokenize(m.text, m.add_special, m.parse_special);
          send({ t: "reply", rid: m.rid, ok: true, value: ids.length });
        } catch (e) {
          send({ t: "reply", rid: m.rid, ok: false, message: (e as Error).message });
        }
        break;
      }
      case "submit": {
        const r = m.req;
        let prompt: Int32Array;
        let script: Int32Array | undefined;
        try {
          prompt = engine!.tokenize(r.text, r.add_special, r.parse_special);
          if (r.script_text !== undefined) script = engine!.tokenize(r.script_text, false, false);
        } catch (e) {
          send({ t: "events", evs: [{ type: "reject", id: r.id, code: "invalid_request", message: (e as Error).message, prompt_tokens: 0 }], stats: engine!.stats() });
          break;
        }
        // Like llama-server: the prompt must leave room for at least one generated token.
        if (prompt.length >= n_ctx || prompt.length === 0) {
          const msg = prompt.length === 0
            ? "The prompt is empty."
            : `The prompt is ${prompt.length} tokens; the context window is ${n_ctx} tokens.`;
          send({
            t: "events",
            evs: [{ type: "reject", id: r.id, code: prompt.length === 0 ? "invalid_request" : "context_length_exceeded", message: msg, prompt_tokens: prompt.length }],
            stats: engine!.stats(),
          });
          break;
        }
        active++;
        engine!.submit({ id: r.id, prompt, max_tokens: r.max_tokens, sampling: r.sampling, grammar: r.grammar, script, state_point: statePoint(engine!, r, prompt) });
        break;
      }
      case "cancel":
        engine?.cancel(m.id);
        break;
      case "crash":
        // Test-only stand-in for a native fault: the same signal a bad pointer would raise.
        if (process.env.MB_TEST_HOOKS === "1") process.kill(process.pid, "SIGSEGV");
        break;
    }
  });
}

main();
