// The model's worker process (child_process.fork from engine.ts). It owns the native addon so
// that a native fault kills only this process; the server restarts it. The IPC protocol:
//
//   parent -> worker                                   worker -> parent
//   {t:"load", opts}                                   {t:"ready", info} | {t:"load_error", message}
//   {t:"tokenize", rid, text, add_special, parse_special, literal?}  {t:"reply", rid, ok, value | message}
//   {t:"submit", req: WorkerSubmit}                    {t:"events", evs: NativeEvent[], stats}
//   {t:"cancel", id}                                   {t:"stats", stats}   (periodic while busy)
//                                                      {t:"fault", message}, then it exits
//                                                      (status 70; 71 when the device failed)
//
// A forward pass that throws leaves every sequence of the batch (and the K/V cache) suspect, so
// the worker reports the fault and exits rather than serve on: the parent restarts it exactly as
// after a crash, and the requests of the batch get the one retry they would get then.
import { componentSetSha, deploymentId } from "./identity.js";
import { addonPath, loadAddon, type LazyGrammar, type NativeEngine, type NativeEvent, type NativeLoadOptions, type NativeSampling } from "./native.js";

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
  /** Tool calls under tool_choice auto (see NativeRequest.lazy_grammar). */
  lazy_grammar?: LazyGrammar;
  /** State point in characters of `text` (prompt-cache.ts); absent or 0 = none. */
  state_point_chars?: number;
  /** [begin, end, ...] in characters of `text`: the user's text, never parsed into control tokens. */
  literal?: number[];
}

export type ToWorker =
  | { t: "load"; opts: NativeLoadOptions }
  | { t: "tokenize"; rid: number; text: string; add_special: boolean; parse_special: boolean; literal?: number[] }
  | { t: "submit"; req: WorkerSubmit }
  | { t: "cancel"; id: number };

/** A submit rejected before it reached the scheduler (code is an ErrorCode). */
export interface WorkerReject {
  type: "reject";
  id: number;
  code: "context_length_exceeded" | "invalid_request";
  message: string;
  prompt_tokens: number;
}

export type FromWorker =
  | { t: "ready"; info: import("./native.js").NativeModelInfo; pid: number; stats: import("./native.js").NativeStats }
  | { t: "load_error"; message: string }
  | { t: "reply"; rid: number; ok: boolean; value?: unknown; message?: string }
  | { t: "events"; evs: (NativeEvent | WorkerReject)[]; stats: import("./native.js").NativeStats }
  | { t: "stats"; stats: import("./native.js").NativeStats }
  | { t: "fault"; message: string }
  | { t: "identity"; component_set_sha: string };

/** Exit status after a fault (EX_SOFTWARE). */
const FAULT_EXIT = 70;
/** Exit status after a device fault (a CUDA error in a step): the device context is gone with the process. */
const DEVICE_FAULT_EXIT = 71;

/**
 * The state point in tokens: the common token prefix of the prompt and its first
 * state_point_chars characters tokenized alone (BPE may merge across that boundary).
 */
async function statePoint(engine: NativeEngine, r: WorkerSubmit, prompt: Int32Array): Promise<number> {
  if (!r.state_point_chars || r.state_point_chars <= 0) return 0;
  const head = await engine.tokenizeAsync(r.text.slice(0, r.state_point_chars), r.add_special, r.parse_special, r.literal);
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
  /** Submits whose prompt is being tokenized (a cancel then drops them before the scheduler). */
  const tokenizing = new Set<number>();
  let active = 0;
  let faulted = false;
  // The server is gone, or stops us: nothing left to serve. Closing the engine first lets the
  // host cache's disk tier save what the slots hold and finish its writes.
  const stop = () => {
    try {
      engine?.close();
    } finally {
      process.exit(0);
    }
  };
  process.on("disconnect", stop);
  process.on("SIGTERM", stop);

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
        // Hashed while the weights load (a cached digest costs a stat); a first hash of a big
        // file may finish after the worker is ready, and follows as its own message.
        const componentSet = componentSetSha(m.opts.model_path);
        componentSet.catch(() => {}); // unreadable: Health keeps null
        engine
          .load(m.opts, (evs) => {
            const fault = evs.find((e) => e.type === "error" && e.fault === true) as Extract<NativeEvent, { type: "error" }> | undefined;
            if (fault) {
              // Exit once the message is out; events after it would be for a suspect engine.
              const device = fault.device_fault === true;
              const m: FromWorker = { t: "fault", message: `${device ? "the device failed during a step" : "a forward pass failed"}: ${fault.message}` };
              const code = device ? DEVICE_FAULT_EXIT : FAULT_EXIT;
              if (process.connected) process.send!(m, () => process.exit(code));
              else process.exit(code);
              faulted = true;
            }
            if (faulted) return;
            for (const e of evs) if (e.type === "done" || e.type === "error") active--;
            send({ t: "events", evs, stats: engine!.stats() });
          })
          .then(async (loaded) => {
            const deployment_id = await deploymentId(addonPath(), loaded.kernels);
            // Stats with it: what a restarted worker found in the host cache shows at once.
            send({ t: "ready", info: { ...loaded, deployment_id }, pid: process.pid, stats: engine!.stats() });
            componentSet.then((component_set_sha) => send({ t: "identity", component_set_sha }), () => {});
          })
          .catch((e: Error) => send({ t: "load_error", message: e.message }));
        break;
      }
      case "tokenize": {
        // Off this thread (tokenizeAsync): a long text must not hold up events or other requests.
        engine!
          .tokenizeAsync(m.text, m.add_special, m.parse_special, m.literal)
          .then((ids) => send({ t: "reply", rid: m.rid, ok: true, value: ids.length }))
          .catch((e: Error) => send({ t: "reply", rid: m.rid, ok: false, message: e.message }));
        break;
      }
      case "submit": {
        const r = m.req;
        const reject = (code: WorkerReject["code"], message: string, prompt_tokens: number) =>
          send({ t: "events", evs: [{ type: "reject", id: r.id, code, message, prompt_tokens }], stats: engine!.stats() });
        tokenizing.add(r.id);
        void (async () => {
          let prompt: Int32Array;
          let state_point: number;
          try {
            // Tokenizing stops at n_ctx tokens: a prompt that long is refused anyway.
            prompt = await engine!.tokenizeAsync(r.text, r.add_special, r.parse_special, r.literal, n_ctx);
            state_point = prompt.length < n_ctx ? await statePoint(engine!, r, prompt) : 0;
          } catch (e) {
            if (tokenizing.delete(r.id)) reject("invalid_request", (e as Error).message, 0);
            return;
          }
          if (!tokenizing.delete(r.id)) return; // cancelled meanwhile: the parent has finished it
          // Like llama-server: the prompt must leave room for at least one generated token.
          if (prompt.length >= n_ctx || prompt.length === 0) {
            if (prompt.length === 0) reject("invalid_request", "The prompt is empty.", 0);
            else reject("context_length_exceeded", `The prompt is at least ${prompt.length} tokens; the context window is ${n_ctx} tokens.`, prompt.length);
            return;
          }
          try {
            // The grammar is compiled on this thread: one the engine cannot take is refused (a
            // 400) before the request is queued.
            engine!.submit({ id: r.id, prompt, max_tokens: r.max_tokens, sampling: r.sampling, grammar: r.grammar, ...(r.lazy_grammar ? { lazy_grammar: r.lazy_grammar } : {}), state_point });
          } catch (e) {
            reject("invalid_request", (e as Error).message, prompt.length);
            return;
          }
          active++;
        })();
        break;
      }
      case "cancel":
        if (!tokenizing.delete(m.id)) engine?.cancel(m.id);
        break;
    }
  });
}

main();
