// Worker-thread entry for grammar-pool.ts: builds forced-call grammars off the HTTP thread, then
// tries each one in the native grammar engine (compile, and a bounded search for an input its
// matcher gives up on), so a schema the engine cannot take is refused before a generation meets
// the dead end halfway through.
import { parentPort } from "node:worker_threads";
import { lazyToolCallGrammar, toolCallGrammar, ToolSchemaError } from "../chat/tool-grammar.js";
import { loadAddon } from "./native.js";
import { deadEndReason, type GrammarReply, type GrammarTask } from "./grammar-pool.js";

/** States of a grammar the trial explores: a few milliseconds for the schemas agents send. */
export const GRAMMAR_TRIAL_STATES = 2048;

type CheckGrammar = (text: string, max_states: number) => { reason: string; input: Buffer | null } | null;
let checkGrammar: CheckGrammar | null = null;
try {
  const fn = (loadAddon() as unknown as { checkGrammar?: CheckGrammar }).checkGrammar;
  if (typeof fn === "function") checkGrammar = fn;
} catch {
  // No addon: no engine either, so nothing would run the grammar.
}

function build(task: GrammarTask): GrammarReply {
  const grammar = task.lazy ? lazyToolCallGrammar(task.tools, task.lazy, { parallel: task.parallel }) : toolCallGrammar(task.tools, { starts_in_thinking: task.starts_in_thinking, harmony: task.harmony });
  const found = checkGrammar?.(grammar, GRAMMAR_TRIAL_STATES) ?? null;
  if (found === null) return { id: task.id, ok: true, grammar };
  const reason = found.reason.replace(/^grammar: /, "");
  if (found.input === null) return { id: task.id, ok: false, tool: task.tools.length === 1 ? task.tools[0].name : null, reason: `the grammar engine cannot take it (${reason})` };
  // Said as a generation meets it: after what the grammar still took, before the byte it cannot.
  const { tool, reason: why } = deadEndReason(reason, found.input.subarray(0, -1).toString("utf8"));
  return { id: task.id, ok: false, tool, reason: why };
}

// Loaded and listening: the pool starts a build's clock only now.
parentPort!.postMessage({ ready: true });

parentPort!.on("message", (task: GrammarTask) => {
  let reply: GrammarReply;
  try {
    reply = build(task);
  } catch (e) {
    reply =
      e instanceof ToolSchemaError
        ? { id: task.id, ok: false, tool: e.tool, reason: e.reason }
        : { id: task.id, ok: false, tool: null, reason: (e as Error)?.message ?? String(e) };
  }
  parentPort!.postMessage(reply);
});
