// Scripted output for tests, through the production path: a request carrying the test-only
// header x-test-script is given a one-literal grammar (`root ::= "<the text>"`), so the real
// engine's constrained decoder emits exactly that text, token by token, through the real
// tokenizer, detokenizer, stop matcher, output parser and stream encoders. Nothing in src/
// knows about this: the test server's request listener is wrapped to put the header's text in
// an AsyncLocalStorage, and the engine is wrapped to read it when a request is submitted.
import { AsyncLocalStorage } from "node:async_hooks";
import type { Server } from "node:http";
import { gbnfLiteral } from "../../src/chat/tool-grammar.js";
import type { Engine } from "../../src/engine/types.js";

/** Header carrying the scripted text, percent-encoded UTF-8. */
export const SCRIPT_HEADER = "x-test-script";

const current = new AsyncLocalStorage<string>();

/** Headers that make a test server emit exactly `text` for this request. */
export function scriptHeader(text: string): Record<string, string> {
  return { [SCRIPT_HEADER]: encodeURIComponent(text) };
}

/** The scripted text of the request being handled, if it has one (in-memory engines read it). */
export function currentScript(): string | undefined {
  return current.getStore();
}

/** A grammar whose only sentence is `text`. */
export function literalGrammar(text: string): string {
  return `root ::= ${gbnfLiteral(text)}\n`;
}

/** Runs every request of `server` with its x-test-script text (if any) as currentScript(). */
export function serveScripts(server: Server): void {
  const listeners = server.listeners("request") as ((req: any, res: any) => void)[];
  server.removeAllListeners("request");
  server.on("request", (req, res) => {
    const raw = req.headers[SCRIPT_HEADER];
    let text: string | undefined;
    try {
      text = typeof raw === "string" ? decodeURIComponent(raw) : undefined;
    } catch {
      res.writeHead(400).end(`${SCRIPT_HEADER}: not percent-encoded UTF-8`);
      return;
    }
    const run = () => {
      for (const l of listeners) l.call(server, req, res);
    };
    if (text === undefined) run();
    else current.run(text, run);
  });
}

/** `engine`, with each submit of a scripted request constrained to its script. */
export function scriptingEngine<E extends Engine>(engine: E): E {
  return new Proxy(engine, {
    get(target, prop, receiver) {
      if (prop === "submit") {
        return (req: Parameters<Engine["submit"]>[0], signal?: AbortSignal) => {
          const text = currentScript();
          return target.submit(text === undefined ? req : { ...req, grammar: literalGrammar(text) }, signal);
        };
      }
      const v = Reflect.get(target, prop, target);
      return typeof v === "function" ? v.bind(target) : v;
    },
  });
}
