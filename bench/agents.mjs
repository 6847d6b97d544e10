#!/usr/bin/env node
// `npm run bench:agents`: coding-agent sessions against mashbox and llama-server, in one run, on
// the same GGUF, context, slots, threads and host prompt cache size. The captured first requests
// of Claude Code (Anthropic Messages), Codex (Responses) and Pi (Chat Completions) in
// test/fixtures/clients/ are replayed as concurrent sessions of several turns: each session keeps
// its agent's system prompt and tools; turn k+1 resends turn k's conversation, the answer the
// server streamed (text and tool calls, each call answered by a short tool result) and a new user
// message; sessions of the same agent differ only in their user messages. Per turn it reports the
// time to the first generated token (p50/p99 over sessions) and the prompt tokens computed vs
// cached (usage's cached fields, or `timings.cache_n`/`prompt_n` where the stream carries them),
// and the share of answers that are valid tool calls (every call names a declared tool and its
// arguments validate against that tool's schema), then checks the targets: a returning session
// (turn >= 2) and a new session of an agent already seen (turn 1 of a later session) have >= 90%
// of their prompt cached on mashbox, the later turns' TTFT p50 is at least 3x better than
// llama-server's, and mashbox's share of valid tool calls is not below llama-server's.
// Each session's first request carries what its client would send for a new conversation: Claude
// Code's billing-header block ends in 3 hex digits derived from the conversation's first prompt,
// so every session gets its own (a server that keeps that block in the prompt misses the cache on
// every new conversation); Codex and Pi send per-conversation ids outside the prompt.
//
//   node bench/agents.mjs [--agents claude,codex,pi] [--sessions 6] [--turns 3] [--slots 2]
//     [--ctx 32768] [--cache-ram 8192] [--threads N] [--max-tokens 32] [--max-prompt-tokens N]
//     [--start staggered|together] [--servers mashbox,llama] [--model PATH]
//     [--llama-server PATH (or $LLAMA_SERVER)] [--mashbox-url URL] [--llama-url URL] [--json FILE]
//
// Sessions are dealt round-robin over the agents (6 sessions of 3 agents: 2 each). With
// --start staggered (the default) an agent's next session starts when its previous session's first
// turn has answered, as a user opening a second terminal does; --start together starts all at once.
// --max-prompt-tokens trims each agent's tools (from the end) and then its longest system text
// until its first request is about that many tokens (4 characters a token), to keep a run on a
// small machine short; the measured prompt sizes are printed. mashbox runs from src/ through tsx
// (MASHBOX_NATIVE_ADDON picks the addon); llama-server is the one `npm run build:peer` built. The servers
// run one after the other, never together, and `uptime`'s load is printed around each.
// The two servers render prompts with their own templates: llama-server's rendering of SmolLM2's
// template leaves the tools out, so its prompts are about half as long as mashbox's (compare the
// computed + cached columns) and the TTFT ratios are conservative for mashbox.
import { spawn, execSync } from "node:child_process";
import { readFileSync, writeFileSync, existsSync, mkdtempSync, rmSync } from "node:fs";
import { request as httpRequest } from "node:http";
import { availableParallelism, tmpdir } from "node:os";
import { parseArgs } from "node:util";
import { createHash } from "node:crypto";
import { Ajv2020 } from "ajv/dist/2020.js";
import { peerBin } from "../scripts/build-llama-peer.mjs";
import { fileURLToPath } from "node:url";
import { dirname, resolve } from "node:path";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");

/** llama-server as `npm run build:peer` built it for this node-llama-cpp and CPU, if it has. */
function llamaServerBin() {
  const dir = peerBin();
  return dir ? resolve(dir, "llama-server") : undefined;
}

/** The registry's default model in the model cache (`mashbox pull` puts it there). */
function defaultModelPath() {
  const reg = JSON.parse(readFileSync(resolve(root, "models.json"), "utf8"));
  const dir = process.env.MASHBOX_MODELS ?? `${process.env.HOME}/.cache/mashbox/models`;
  return resolve(dir, reg.models[reg.default].file);
}
const { values: o } = parseArgs({
  options: {
    agents: { type: "string", default: "claude,codex,pi" },
    sessions: { type: "string", default: "6" },
    turns: { type: "string", default: "3" },
    slots: { type: "string", default: "2" },
    ctx: { type: "string", default: "32768" },
    "cache-ram": { type: "string", default: "8192" },
    threads: { type: "string", default: String(availableParallelism()) },
    "max-tokens": { type: "string", default: "32" },
    "max-prompt-tokens": { type: "string" },
    start: { type: "string", default: "staggered" },
    servers: { type: "string", default: "mashbox,llama" },
    model: { type: "string", default: process.env.MB_BENCH_MODEL ?? defaultModelPath() },
    "llama-server": { type: "string", default: process.env.LLAMA_SERVER ?? llamaServerBin() },
    "mashbox-url": { type: "string" },
    "llama-url": { type: "string" },
    json: { type: "string" },
    "timeout-s": { type: "string", default: "3600" },
  },
});
const AGENTS = o.agents.split(",").filter(Boolean);
const SESSIONS = Number(o.sessions);
const TURNS = Number(o.turns);
const SLOTS = Number(o.slots);
const CTX = Number(o.ctx);
const MAX_TOKENS = Number(o["max-tokens"]);
const MAX_PROMPT = o["max-prompt-tokens"] ? Number(o["max-prompt-tokens"]) : null;
const SERVERS = o.servers.split(",").filter(Boolean);
const CACHED_TARGET = 0.9;
const TTFT_TARGET = 3;

// --- the captured requests -----------------------------------------------------------------------

const CAPTURES = {
  claude: { file: "requests-claude.jsonl", dialect: "anthropic" },
  codex: { file: "requests-codex.jsonl", dialect: "responses" },
  pi: { file: "requests-pi.jsonl", dialect: "chat" },
};
for (const a of AGENTS) if (!CAPTURES[a]) throw new Error(`unknown agent ${a} (claude, codex, pi)`);

function capture(agent) {
  const line = readFileSync(resolve(root, "test/fixtures/clients", CAPTURES[agent].file), "utf8").split("\n").find((l) => l.trim());
  const req = JSON.parse(line);
  return { path: req.path + (req.query && Object.keys(req.query).length ? `?${new URLSearchParams(req.query)}` : ""), body: req.body };
}

const TASKS = [
  "list the files in this folder and say which one is the entry point",
  "why does the build fail on a clean checkout?",
  "add a --verbose flag to the CLI",
  "write a unit test for the config parser",
  "rename the helper parseArgs to parseOptions everywhere",
  "explain what the scheduler does in two sentences",
  "find where the port number is read",
  "make the error message for a missing file clearer",
  "summarise the last commit",
];
const userMessage = (session, turn) => `${TASKS[(session * 5 + turn * 3) % TASKS.length]} (session ${session}, step ${turn})`;

/** The system-side texts of a request that --max-prompt-tokens may shorten, as get/set pairs. */
function systemTexts(dialect, body) {
  const slots = [];
  const addParts = (parts) => {
    if (typeof parts === "string") return;
    for (const p of parts) if (typeof p.text === "string") slots.push({ get: () => p.text, set: (t) => (p.text = t) });
  };
  if (dialect === "anthropic") {
    if (Array.isArray(body.system)) addParts(body.system);
    for (const m of body.messages) if (m.role === "system" && typeof m.content === "string") slots.push({ get: () => m.content, set: (t) => (m.content = t) });
  } else if (dialect === "responses") {
    for (const it of body.input) if (it.role === "developer" || it.role === "system") addParts(it.content);
  } else {
    for (const m of body.messages) if (m.role === "system" && typeof m.content === "string") slots.push({ get: () => m.content, set: (t) => (m.content = t) });
  }
  return slots;
}

function trim(dialect, body, maxTokens) {
  const est = () => JSON.stringify(body).length / 4;
  while (est() > maxTokens && body.tools?.length > 1) body.tools.pop();
  for (let guard = 0; est() > maxTokens && guard < 20; guard++) {
    const texts = systemTexts(dialect, body).sort((a, b) => b.get().length - a.get().length);
    const longest = texts[0];
    if (!longest || longest.get().length <= 200) break;
    const cut = Math.min(longest.get().length - 200, Math.ceil((est() - maxTokens) * 4));
    longest.set(longest.get().slice(0, longest.get().length - cut));
  }
}

/** Replaces the captured "say hi" (the last user text) with this session's first message. */
function setFirstUserText(dialect, body, text) {
  const list = dialect === "responses" ? body.input : body.messages;
  const last = list.findLast((m) => m.role === "user");
  if (typeof last.content === "string") last.content = text;
  else last.content.findLast((p) => typeof p.text === "string").text = text;
}

function firstRequest(agent, session, model) {
  const { path, body: captured } = capture(agent);
  const dialect = CAPTURES[agent].dialect;
  const body = structuredClone(captured);
  body.model = model;
  body.stream = true;
  if (MAX_PROMPT) trim(dialect, body, MAX_PROMPT);
  setFirstUserText(dialect, body, userMessage(session, 1));
  if (dialect === "anthropic") setBillingSuffix(body, userMessage(session, 1));
  // per-session ids, as each client sends its own
  const sid = `bench-session-${session}`;
  if (dialect === "anthropic") {
    body.max_tokens = MAX_TOKENS;
    if (body.metadata) body.metadata = { user_id: JSON.stringify({ session_id: sid }) };
  } else if (dialect === "responses") {
    body.max_output_tokens = MAX_TOKENS;
    if (body.prompt_cache_key) body.prompt_cache_key = sid;
    delete body.client_metadata;
  } else {
    body.max_completion_tokens = MAX_TOKENS;
  }
  return { path, body, dialect };
}

/**
 * Claude Code's first system block, `x-anthropic-billing-header: cc_version=V.XXX; ...`, ends its
 * version with 3 hex digits that change with the conversation's first prompt ("say hi" -> 123,
 * "list the files here" -> 8a5); the capture has 123. Any 3 digits a prompt maps to will do.
 */
function setBillingSuffix(body, firstPrompt) {
  const block = Array.isArray(body.system) ? body.system.find((b) => typeof b.text === "string" && b.text.startsWith("x-anthropic-billing-header:")) : null;
  if (!block) return;
  const hex = createHash("sha256").update(firstPrompt).digest("hex").slice(0, 3);
  block.text = block.text.replace(/(cc_version=[0-9.]+\.)[0-9a-f]{3};/, `$1${hex};`);
}

/** The declared tools of a request as name -> JSON Schema of the arguments, in any dialect. */
function declaredTools(dialect, body) {
  const out = new Map();
  for (const t of body.tools ?? []) {
    if (dialect === "anthropic" && typeof t.name === "string") out.set(t.name, t.input_schema ?? {});
    else if (dialect === "responses" && t.type === "function") out.set(t.name, t.parameters ?? {});
    else if (dialect === "chat" && t.type === "function") out.set(t.function.name, t.function.parameters ?? {});
  }
  return out;
}

const ajv = new Ajv2020({ strict: false, allErrors: false, validateFormats: false });
const validators = new Map();
/** Whether every call of an answer names a declared tool with schema-valid JSON arguments (false when it has none). */
function validToolCalls(req, answer) {
  if (!answer.tool_calls.length) return false;
  const tools = declaredTools(req.dialect, req.body);
  return answer.tool_calls.every((c) => {
    if (!tools.has(c.name)) return false;
    let args;
    try {
      args = JSON.parse(c.arguments || "{}");
    } catch {
      return false;
    }
    const key = JSON.stringify(tools.get(c.name));
    let v = validators.get(key);
    if (!v) {
      try {
        v = ajv.compile(tools.get(c.name));
      } catch {
        v = () => true; // a schema ajv cannot compile: the name check is all that can be said
      }
      validators.set(key, v);
    }
    return v(args) === true;
  });
}

/** Appends the streamed answer (each tool call answered) and the next user message. */
function nextTurn(req, answer, text) {
  const { dialect, body } = req;
  const calls = answer.tool_calls;
  if (dialect === "anthropic") {
    const content = [];
    if (answer.text) content.push({ type: "text", text: answer.text });
    for (const c of calls) content.push({ type: "tool_use", id: c.id, name: c.name, input: parseJson(c.arguments) });
    if (!content.length) content.push({ type: "text", text: "(no answer)" });
    body.messages.push({ role: "assistant", content });
    body.messages.push({ role: "user", content: [...calls.map((c) => ({ type: "tool_result", tool_use_id: c.id, content: "ok" })), { type: "text", text }] });
  } else if (dialect === "responses") {
    if (answer.text || !calls.length) body.input.push({ type: "message", role: "assistant", content: [{ type: "output_text", text: answer.text || "(no answer)" }] });
    for (const c of calls) body.input.push({ type: "function_call", call_id: c.id, name: c.name, arguments: c.arguments });
    for (const c of calls) body.input.push({ type: "function_call_output", call_id: c.id, output: "ok" });
    body.input.push({ type: "message", role: "user", content: [{ type: "input_text", text }] });
  } else {
    const msg = { role: "assistant", content: answer.text || (calls.length ? null : "(no answer)") };
    if (calls.length) msg.tool_calls = calls.map((c) => ({ id: c.id, type: "function", function: { name: c.name, arguments: c.arguments } }));
    body.messages.push(msg);
    for (const c of calls) body.messages.push({ role: "tool", tool_call_id: c.id, content: "ok" });
    body.messages.push({ role: "user", content: [{ type: "text", text }] });
  }
}

function parseJson(s) {
  try {
    const v = JSON.parse(s || "{}");
    return v && typeof v === "object" && !Array.isArray(v) ? v : {};
  } catch {
    return {};
  }
}

// --- one streamed request ------------------------------------------------------------------------

/** Streams one request; returns TTFT (first generated token of any kind), the answer and the cache counts. */
function send(base, req) {
  return new Promise((resolveReq) => {
    const url = new URL(req.path, base);
    const payload = JSON.stringify(req.body);
    const t0 = performance.now();
    const r = httpRequest(
      url,
      {
        method: "POST",
        // One connection a request: llama-server's small HTTP thread pool stalls behind idle
        // kept-alive sockets, and a reused socket it has closed fails as "socket hang up".
        agent: false,
        headers: { connection: "close", "content-type": "application/json", accept: "text/event-stream", "anthropic-version": "2023-06-01", "content-length": Buffer.byteLength(payload) },
      },
      (res) => {
        let buf = "";
        const out = { status: res.statusCode, ttft_ms: null, text: "", tool_calls: [], usage: null, timings: null, error: null };
        const blocks = new Map(); // anthropic content block index -> tool call
        const chatCalls = new Map(); // chat tool call index -> tool call
        const first = () => {
          if (out.ttft_ms === null) out.ttft_ms = performance.now() - t0;
        };
        const onEvent = (data) => {
          if (data === "[DONE]") return;
          let ev;
          try {
            ev = JSON.parse(data);
          } catch {
            return;
          }
          if (ev.timings) out.timings = ev.timings;
          if (ev.error) out.error = JSON.stringify(ev.error).slice(0, 300);
          if (req.dialect === "anthropic") {
            if (ev.type === "message_start") out.usage = { ...ev.message.usage };
            else if (ev.type === "message_delta" && ev.usage) out.usage = { ...out.usage, ...ev.usage };
            else if (ev.type === "content_block_start" && ev.content_block.type === "tool_use") {
              first();
              const c = { id: ev.content_block.id, name: ev.content_block.name, arguments: "" };
              blocks.set(ev.index, c);
              out.tool_calls.push(c);
            } else if (ev.type === "content_block_delta") {
              first();
              if (ev.delta.type === "text_delta") out.text += ev.delta.text;
              else if (ev.delta.type === "input_json_delta") blocks.get(ev.index) && (blocks.get(ev.index).arguments += ev.delta.partial_json);
            }
          } else if (req.dialect === "responses") {
            if (typeof ev.type === "string" && ev.type.endsWith(".delta")) first();
            if (ev.type === "response.output_text.delta") out.text += ev.delta;
            else if (ev.type === "response.output_item.done" && ev.item.type === "function_call")
              out.tool_calls.push({ id: ev.item.call_id, name: ev.item.name, arguments: ev.item.arguments });
            else if (ev.type === "response.completed" || ev.type === "response.incomplete" || ev.type === "response.failed") {
              if (ev.response?.usage) out.usage = ev.response.usage;
              if (ev.type === "response.failed") out.error = JSON.stringify(ev.response?.error).slice(0, 300);
            }
          } else {
            if (ev.usage) out.usage = ev.usage;
            const d = ev.choices?.[0]?.delta;
            if (!d) return;
            if (d.content || d.reasoning_content || d.tool_calls?.length) first();
            if (d.content) out.text += d.content;
            for (const tc of d.tool_calls ?? []) {
              let c = chatCalls.get(tc.index);
              if (!c) {
                c = { id: tc.id ?? `call_${tc.index}`, name: "", arguments: "" };
                chatCalls.set(tc.index, c);
                out.tool_calls.push(c);
              }
              if (tc.function?.name) c.name += tc.function.name;
              if (tc.function?.arguments) c.arguments += tc.function.arguments;
            }
          }
        };
        res.setEncoding("utf8");
        res.on("data", (chunk) => {
          buf += chunk;
          let i;
          while ((i = buf.search(/\r?\n\r?\n/)) >= 0) {
            const frame = buf.slice(0, i);
            buf = buf.slice(buf.slice(i).match(/^\r?\n\r?\n/)[0].length + i);
            const data = frame
              .split(/\r?\n/)
              .filter((l) => l.startsWith("data:"))
              .map((l) => l.slice(5).trimStart())
              .join("\n");
            if (data) onEvent(data);
          }
        });
        res.on("end", () => {
          if (res.statusCode !== 200) out.error = `${res.statusCode} ${buf.slice(0, 300)}`;
          out.e2e_ms = performance.now() - t0;
          Object.assign(out, counts(req.dialect, out));
          resolveReq(out);
        });
        res.on("error", (e) => resolveReq({ ...failed(e), status: res.statusCode }));
      },
    );
    const failed = (e) => ({ status: null, ttft_ms: null, text: "", tool_calls: [], error: e.message, e2e_ms: performance.now() - t0, cached: null, computed: null });
    r.on("error", (e) => resolveReq(failed(e)));
    r.end(payload);
  });
}

/** Prompt tokens computed and cached: timings when the stream has them, else the dialect's usage. */
function counts(dialect, out) {
  if (out.timings && typeof out.timings.cache_n === "number") return { cached: out.timings.cache_n, computed: out.timings.prompt_n };
  const u = out.usage;
  if (!u) return { cached: null, computed: null };
  if (dialect === "anthropic") return { cached: u.cache_read_input_tokens ?? 0, computed: (u.input_tokens ?? 0) + (u.cache_creation_input_tokens ?? 0) };
  if (dialect === "responses") {
    const cached = u.input_tokens_details?.cached_tokens ?? 0;
    return { cached, computed: u.input_tokens - cached };
  }
  const cached = u.prompt_tokens_details?.cached_tokens ?? 0;
  return { cached, computed: u.prompt_tokens - cached };
}

// --- sessions ------------------------------------------------------------------------------------

async function runSessions(base, model) {
  const results = [];
  const firstTurnDone = new Map(); // `${agent}:${k}` -> promise resolved after that session's turn 1
  const session = async (s) => {
    const agent = AGENTS[s % AGENTS.length];
    const k = Math.floor(s / AGENTS.length); // this agent's k-th session
    let release;
    firstTurnDone.set(`${agent}:${k}`, new Promise((r) => (release = r)));
    if (o.start === "staggered" && k > 0) await firstTurnDone.get(`${agent}:${k - 1}`);
    const req = firstRequest(agent, s, model);
    for (let turn = 1; turn <= TURNS; turn++) {
      const r = await send(base, req);
      r.valid_tool_calls = validToolCalls(req, r);
      const kind = turn > 1 ? "returning" : k > 0 ? "new session" : "cold";
      results.push({ agent, session: s, turn, kind, ...pick(r) });
      const pct = r.cached !== null ? ((100 * r.cached) / Math.max(1, r.cached + r.computed)).toFixed(1) : "?";
      process.stderr.write(
        `  ${agent}#${s} turn ${turn} (${kind}): ${r.error ? `ERROR ${r.error}` : `TTFT ${(r.ttft_ms / 1000).toFixed(2)} s, computed ${r.computed}, cached ${r.cached} (${pct}%), ${r.tool_calls.length} tool calls${r.tool_calls.length ? (r.valid_tool_calls ? " (valid)" : " (INVALID)") : ""}`}\n`,
      );
      if (turn === 1) release();
      if (r.error) break;
      nextTurn(req, r, userMessage(s, turn + 1));
    }
    release();
  };
  await Promise.all(Array.from({ length: SESSIONS }, (_, s) => session(s)));
  return results;
}

const pick = (r) => ({ status: r.status, ttft_ms: r.ttft_ms, e2e_ms: r.e2e_ms, computed: r.computed, cached: r.cached, error: r.error, tool_calls: r.tool_calls.length, valid_tool_calls: r.valid_tool_calls, text_chars: r.text.length });

// --- servers -------------------------------------------------------------------------------------

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const load = () => execSync("uptime").toString().trim().replace(/^.*load/, "load");

async function waitReady(base, child, name) {
  const deadline = Date.now() + 300_000;
  while (Date.now() < deadline) {
    if (child && child.exitCode !== null) throw new Error(`${name} exited with ${child.exitCode}`);
    try {
      const res = await fetch(`${base}/health`);
      if (res.status === 200) return;
    } catch {}
    await sleep(500);
  }
  throw new Error(`${name} not ready after 300 s`);
}

async function modelId(base) {
  const res = await fetch(`${base}/v1/models`);
  return (await res.json()).data[0].id;
}

function startServer(name, port) {
  const common = { stdio: ["ignore", "ignore", "pipe"], env: process.env };
  let child;
  if (name === "mashbox") {
    const code = "const m = await import('./src/cli.ts'); process.exit(await m.main(process.argv.slice(1)));";
    // A disk tier of its own: the default one (under the mashbox home) may hold earlier runs' states
    // of these very prompts, which would make the cold turns warm and the comparison unfair.
    const cacheDir = mkdtempSync(resolve(tmpdir(), "mashbox-agents-cache-"));
    process.on("exit", () => rmSync(cacheDir, { recursive: true, force: true }));
    child = spawn(
      process.execPath,
      ["--import", "tsx", "--input-type=module", "-e", code, "run", o.model, "--port", String(port), "--ctx", String(CTX), "--slots", String(SLOTS), "--threads", o.threads, "--cache-ram", o["cache-ram"], "--cache-dir", cacheDir],
      { ...common, cwd: root },
    );
  } else {
    const bin = o["llama-server"];
    if (!bin || !existsSync(bin)) throw new Error("llama-server not found: pass --llama-server PATH or set LLAMA_SERVER (npm run build:peer builds it)");
    child = spawn(
      bin,
      ["-m", o.model, "--host", "127.0.0.1", "--port", String(port), "--override-kv", `llama.context_length=int:${CTX}`, "-c", String(CTX * SLOTS), "-np", String(SLOTS),
        "--cache-ram", o["cache-ram"], "-t", o.threads, "--jinja", "--no-webui"],
      common,
    );
  }
  const log = [];
  child.stderr.setEncoding("utf8");
  child.stderr.on("data", (d) => {
    log.push(d);
    if (log.length > 400) log.splice(0, 200);
  });
  return { child, log };
}

// --- report --------------------------------------------------------------------------------------

function pctl(xs, p) {
  if (!xs.length) return null;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)];
}
const sec = (ms) => (ms === null || ms === undefined ? "—" : (ms / 1000).toFixed(2));
const sum = (xs) => xs.reduce((a, b) => a + b, 0);

function summarize(results) {
  const rows = [];
  const groups = [];
  for (let t = 1; t <= TURNS; t++) {
    if (t === 1) {
      groups.push({ label: "1 (cold: first session of an agent)", rs: results.filter((r) => r.turn === 1 && r.kind === "cold") });
      groups.push({ label: "1 (new session of a seen agent)", rs: results.filter((r) => r.turn === 1 && r.kind === "new session") });
    } else groups.push({ label: String(t), rs: results.filter((r) => r.turn === t) });
  }
  for (const g of groups) {
    const ok = g.rs.filter((r) => !r.error && r.ttft_ms !== null);
    const ttfts = ok.map((r) => r.ttft_ms);
    const computed = sum(ok.map((r) => r.computed ?? 0));
    const cached = sum(ok.map((r) => r.cached ?? 0));
    const minPct = ok.length ? Math.min(...ok.map((r) => (r.cached ?? 0) / Math.max(1, (r.cached ?? 0) + (r.computed ?? 0)))) : null;
    const valid = ok.filter((r) => r.valid_tool_calls).length;
    rows.push({ label: g.label, n: g.rs.length, errors: g.rs.length - ok.length, p50: pctl(ttfts, 50), p99: pctl(ttfts, 99), computed, cached, minPct, valid, wall: sum(ok.map((r) => r.e2e_ms)) });
  }
  return rows;
}

function printTable(name, rows) {
  console.log(`\n${name}`);
  console.log("| turn | requests | TTFT p50 s | TTFT p99 s | prompt tokens computed | cached | cached % (all) | lowest cached % of one request | valid tool calls | request wall s (sum) |");
  console.log("|---|---|---|---|---|---|---|---|---|---|");
  for (const r of rows) {
    const all = r.computed + r.cached;
    console.log(
      `| ${r.label} | ${r.n}${r.errors ? ` (${r.errors} failed)` : ""} | ${sec(r.p50)} | ${sec(r.p99)} | ${r.computed} | ${r.cached} | ${all ? ((100 * r.cached) / all).toFixed(1) : "—"} | ${r.minPct === null ? "—" : (100 * r.minPct).toFixed(1)} | ${r.valid}/${r.n - r.errors} | ${sec(r.wall)} |`,
    );
  }
}

function perAgent(name, results) {
  console.log(`\n${name}, per agent (TTFT s and cached/prompt tokens of each session's turns)`);
  for (const agent of AGENTS) {
    const rs = results.filter((r) => r.agent === agent).sort((a, b) => a.session - b.session || a.turn - b.turn);
    const bySession = new Map();
    for (const r of rs) bySession.set(r.session, [...(bySession.get(r.session) ?? []), r]);
    for (const [s, turns] of bySession)
      console.log(`  ${agent}#${s}: ` + turns.map((r) => (r.error ? `t${r.turn} ERROR` : `t${r.turn} ${sec(r.ttft_ms)} s ${r.cached}/${r.cached + r.computed}`)).join(", "));
  }
}

async function main() {
  console.log(
    `agents ${AGENTS.join(",")}: ${SESSIONS} sessions x ${TURNS} turns, start ${o.start}; --slots ${SLOTS} --ctx ${CTX} --cache-ram ${o["cache-ram"]} MiB, ${o.threads} threads, ` +
      `max ${MAX_TOKENS} generated tokens a turn${MAX_PROMPT ? `, first prompts trimmed to ~${MAX_PROMPT} tokens` : ""}; model ${o.model}`,
  );
  if (SERVERS.includes("llama") && !o["llama-url"] && !(o["llama-server"] && existsSync(o["llama-server"])))
    throw new Error("llama-server not found: pass --llama-server PATH or set LLAMA_SERVER (npm run build:peer builds it), --llama-url URL, or --servers mashbox");
  const report = { config: { ...o }, servers: {} };
  let port = 18900 + (process.pid % 500);
  for (const name of SERVERS) {
    const given = name === "mashbox" ? o["mashbox-url"] : o["llama-url"];
    let srv = null;
    const base = given ?? `http://127.0.0.1:${++port}`;
    if (!given) srv = startServer(name, port);
    try {
      await waitReady(base, srv?.child, name);
      const model = await modelId(base);
      const loadBefore = load();
      console.log(`\n${name} at ${base} (model ${model}); ${loadBefore}`);
      const t0 = performance.now();
      const timer = setTimeout(() => {
        console.error(`${name}: over --timeout-s, stopping`);
        srv?.child.kill("SIGTERM");
        process.exit(2);
      }, Number(o["timeout-s"]) * 1000);
      const results = await runSessions(base, model);
      clearTimeout(timer);
      const wall = (performance.now() - t0) / 1000;
      const loadAfter = load();
      let health = null;
      if (name === "mashbox") health = await (await fetch(`${base}/v1/health`)).json().catch(() => null);
      report.servers[name] = { results, rows: summarize(results), wall_s: wall, load_before: loadBefore, load_after: loadAfter, health };
      console.log(`${name}: ${wall.toFixed(0)} s; ${loadAfter}`);
      if (health) console.log(`  host cache ${(health.host_cache_bytes / 2 ** 20).toFixed(1)} MiB, ${health.host_cache_evictions} evictions`);
    } finally {
      if (srv) {
        srv.child.kill("SIGTERM");
        await new Promise((r) => (srv.child.exitCode !== null ? r() : srv.child.once("exit", r)));
        const errs = srv.log.join("").split("\n").filter((l) => /error|fail|exception/i.test(l)).slice(-5);
        if (errs.length) console.log(`  ${name} log: ${errs.join(" | ")}`);
      }
    }
  }

  for (const [name, s] of Object.entries(report.servers)) {
    printTable(name, s.rows);
    perAgent(name, s.results);
  }
  const mb = report.servers.mashbox;
  const ll = report.servers.llama;
  console.log("\nTargets");
  if (mb) {
    const check = (kind) => {
      const rs = mb.results.filter((r) => r.kind === kind && !r.error);
      if (!rs.length) return `no ${kind} requests`;
      const low = Math.min(...rs.map((r) => r.cached / Math.max(1, r.cached + r.computed)));
      return `${kind}: lowest ${(100 * low).toFixed(1)}% cached over ${rs.length} requests (target >= ${100 * CACHED_TARGET}%) ${low >= CACHED_TARGET ? "PASS" : "FAIL"}`;
    };
    console.log(`  mashbox ${check("returning")}`);
    console.log(`  mashbox ${check("new session")}`);
    const errors = mb.results.filter((r) => r.error).length;
    if (errors) console.log(`  mashbox: ${errors} failed requests FAIL`);
  }
  if (mb && ll) {
    const later = (s) => pctl(s.results.filter((r) => r.turn > 1 && !r.error).map((r) => r.ttft_ms), 50);
    const m = later(mb);
    const l = later(ll);
    const ratio = m && l ? l / m : null;
    console.log(`  later turns (2..${TURNS}) TTFT p50: mashbox ${sec(m)} s, llama-server ${sec(l)} s: ${ratio ? ratio.toFixed(2) : "—"}x (target >= ${TTFT_TARGET}x) ${ratio >= TTFT_TARGET ? "PASS" : "FAIL"}`);
    const share = (srv) => {
      const ok = srv.results.filter((r) => !r.error);
      return ok.length ? ok.filter((r) => r.valid_tool_calls).length / ok.length : 0;
    };
    const vm = share(mb);
    const vl = share(ll);
    console.log(`  answers that are valid tool calls: mashbox ${(100 * vm).toFixed(0)}%, llama-server ${(100 * vl).toFixed(0)}% (target: not below) ${vm >= vl ? "PASS" : "FAIL"}`);
    for (let i = 0; i < mb.rows.length; i++) {
      const a = mb.rows[i];
      const b = ll.rows[i];
      console.log(`  turn ${a.label}: TTFT p50 ${sec(b.p50)} / ${sec(a.p50)} = ${a.p50 && b.p50 ? (b.p50 / a.p50).toFixed(2) : "—"}x, p99 ${a.p99 && b.p99 ? (b.p99 / a.p99).toFixed(2) : "—"}x; computed ${b.computed} vs ${a.computed}`);
    }
  }
  if (o.json) writeFileSync(o.json, JSON.stringify(report, null, 2));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
