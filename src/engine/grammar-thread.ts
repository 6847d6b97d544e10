// Worker-thread entry for grammar-pool.ts: builds forced-call grammars off the HTTP thread.
import { parentPort } from "node:worker_threads";
import { toolCallGrammar, ToolSchemaError } from "../chat/tool-grammar.js";
import type { GrammarReply, GrammarTask } from "./grammar-pool.js";

// Loaded and listening: the pool starts a build's clock only now.
parentPort!.postMessage({ ready: true });

parentPort!.on("message", (task: GrammarTask) => {
  let reply: GrammarReply;
  try {
    reply = { id: task.id, ok: true, grammar: toolCallGrammar(task.tools, { starts_in_thinking: task.starts_in_thinking }) };
  } catch (e) {
    reply =
      e instanceof ToolSchemaError
        ? { id: task.id, ok: false, tool: e.tool, reason: e.reason }
        : { id: task.id, ok: false, tool: null, reason: (e as Error)?.message ?? String(e) };
  }
  parentPort!.postMessage(reply);
});
