// Parity with llama.cpp (node-llama-cpp) on the real Qwen2.5-Coder-0.5B and -1.5B-Instruct files
// (Q4_K_M: Q4_K, Q5_0, Q6_K and Q8_0 tensors; `mashbox pull qwen2.5-coder-0.5b` / `-1.5b`,
// scripts/test.mjs pulls both): a conversation rendered through each model's own tool-calling
// chat template (tools declared, a tool call and its result replayed, an answer), and on the
// 0.5B a prompt longer than 8k tokens (its 32k training context; SmolLM2's ends at 8k).
//  - Tokens: the server's path (the template through renderChatPromptParts, then the engine's
//    tokenizer with the request's text kept literal) gives llama.cpp's ids for the same text.
//  - Logits, teacher-forced, within twice llama.cpp's flash on/off spread (teacher-forced.ts):
//    the whole sequence in one forward() (prefill kernels) and its last tokens one at a time
//    after it (decode kernels at the sequence's depth). Sized for CI: the short conversations run
//    on AVX2 and the best set (the scalar reference is covered by the fixtures), the >8k prompt
//    on the best set only, in one forward() and token by token at ~8.3k depth.
import { expect } from "chai";
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { getLlama, LlamaLogLevel, type Llama, type LlamaModel } from "node-llama-cpp";
import { renderChatPromptParts } from "../../src/chat/template.js";
import { loadAddon, type NativeEngine, type NativeModelInfo } from "../../src/engine/native.js";
import type { ChatPrompt } from "../../src/engine/types.js";
import { agreement, barOf, expectWithinSpread, llamaDists, mbDists, report, TOOL, type Agreement, type Dists } from "./teacher-forced.js";

const MODELS_DIR = process.env.MASHBOX_HOME ? path.join(process.env.MASHBOX_HOME, "models") : `${process.env.HOME}/.cache/mashbox/models`;
const QWEN05 = process.env.MB_QWEN05_MODEL ?? path.join(MODELS_DIR, "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf");
const QWEN15 = process.env.MB_QWEN15_MODEL ?? path.join(MODELS_DIR, "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf");
// MB_KERNELS narrows every case to that one set ("" = the CPU's best).
const ONLY = process.env.MB_KERNELS;

const TOOLS: ChatPrompt["tools"] = [
  {
    kind: "function",
    name: "read_file",
    description: "Read a file of the repository.",
    parameters: { type: "object", properties: { path: { type: "string", description: "Path from the repository root." } }, required: ["path"] },
  },
  {
    kind: "function",
    name: "run_tests",
    description: "Run the test suite, or the tests whose names match a pattern.",
    parameters: { type: "object", properties: { pattern: { type: "string" } } },
  },
];

/** A coding agent's turn: tools declared, a tool call and its result, then the answer being written. */
function agentChat(userText: string): ChatPrompt {
  return {
    system: ["You are a coding assistant. Use the tools to look at the code before you answer."],
    turns: [
      { role: "user", content: userText },
      { role: "assistant", content: "", tool_calls: [{ id: "call_1", name: "read_file", arguments: JSON.stringify({ path: "src/models.ts" }) }] },
      { role: "tool", tool_call_id: "call_1", name: "read_file", content: "export function localPath(entry, dir) {\n  return join(dir, entry.file);\n}\n" },
      { role: "assistant", content: "`localPath` joins the cache directory with the registry entry's file name, so a pulled model always lives at `<cache>/<file>`. To test it, call it with a temporary directory:\n\n```ts\nexpect(localPath(entry, \"/tmp/x\")).to.equal(\"/tmp/x/\" + entry.file);\n```\n" },
    ],
    tools: TOOLS,
    tool_choice: { type: "auto" },
  };
}

// The repository's own TypeScript, in a fixed order, as the long user message (a coding agent's
// prompt is mostly code). The code quotes <|im_start|> and <|im_end|>, which the server keeps as
// plain text where llama.cpp's parse_special would not (prompt-tokens.test.ts checks that): "<|"
// becomes "< |" so both read the same text; cut to LONG_CHARS (~3.9 characters a token) so the prompt stays near
// 8.8k tokens as the files change.
const LONG_CHARS = 31_000;
function longCode(): string {
  const dir = path.join(process.cwd(), "src");
  const files = ["chat/template.ts", "models.ts", "cli.ts", "errors.ts", "server.ts", "config.ts"].map((f) => path.join(dir, f));
  for (const f of readdirSync(path.join(dir, "engine")).sort()) if (f.endsWith(".ts")) files.push(path.join(dir, "engine", f));
  let text = "";
  for (const f of files) {
    if (text.length >= LONG_CHARS) break;
    text += `// ${path.relative(process.cwd(), f)}\n${readFileSync(f, "utf8")}\n`;
  }
  return "Review this code and tell me where a pull could leave a partial file behind.\n\n" + text.slice(0, LONG_CHARS).replaceAll("<|", "< |");
}

interface Case {
  name: string;
  model: string;
  chat: () => ChatPrompt;
  minTokens: number;
  /** Every stride-th position, and every position of the last `tail` (decoded one at a time). */
  stride: number;
  tail: number;
  /** Kernel sets run on the whole sequence in one forward(), and those also run on the tail token by token. */
  sets: string[];
  decodeSets: string[];
}

// The >8k prompt costs llama.cpp two ~8.3k-token evaluations (flash off and on), minutes of CPU on
// a 2-core runner: it runs on the best set only (the 0.5B's short case covers AVX2, the fixtures
// the scalar reference).

const CASES: Case[] = [
  { name: "0.5B, tool-calling template", model: QWEN05, chat: () => agentChat("Where does a pulled model go, and how do I test that?"), minTokens: 300, stride: 8, tail: 32, sets: ["avx2", ""], decodeSets: ["avx2", ""] },
  { name: "0.5B, >8k-token prompt", model: QWEN05, chat: () => agentChat(longCode()), minTokens: 8193, stride: 256, tail: 16, sets: [""], decodeSets: [""] },
  { name: "1.5B, tool-calling template", model: QWEN15, chat: () => agentChat("Where does a pulled model go, and how do I test that?"), minTokens: 300, stride: 16, tail: 16, sets: ["avx2", ""], decodeSets: [""] },
];

describe("Qwen2.5-Coder 0.5B and 1.5B vs llama.cpp (tokens through the tool-calling template, teacher-forced logits)", function () {
  this.timeout(1_800_000);
  let llama: Llama;
  let dir: string;
  // one engine and one llama.cpp model per file, for all its cases
  const loaded = new Map<string, { eng: NativeEngine; info: NativeModelInfo; ref: LlamaModel }>();

  before(async function () {
    if (!existsSync(TOOL)) throw new Error(`${TOOL} not built (npm run build:native)`);
    for (const f of [QWEN05, QWEN15]) if (!existsSync(f)) throw new Error(`${f} missing: node bin/mashbox.js pull ${f === QWEN05 ? "qwen2.5-coder-0.5b" : "qwen2.5-coder-1.5b"}`);
    llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
    dir = mkdtempSync(path.join(os.tmpdir(), "mb-qwen-"));
  });
  after(async function () {
    for (const { eng, ref } of loaded.values()) {
      eng.close();
      await ref.dispose();
    }
    await llama?.dispose();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  async function load(model: string) {
    let m = loaded.get(model);
    if (!m) {
      const eng = new (loadAddon().Engine)();
      const info = await eng.load({ model_path: model, n_ctx: 256, n_slots: 1, n_threads: 1 } as Parameters<NativeEngine["load"]>[0], () => {});
      m = { eng, info, ref: await llama.loadModel({ modelPath: model }) };
      loaded.set(model, m);
    }
    return m;
  }

  /** The prompt tokens as the server makes them, checked against llama.cpp's tokenization of the same text. */
  async function promptTokens(c: Case): Promise<{ seq: number[]; ref: LlamaModel; V: number }> {
    const { eng, info, ref } = await load(c.model);
    expect(info.architecture).to.equal("qwen2");
    expect(info.n_ctx_train).to.equal(32768);
    const p = renderChatPromptParts(c.chat(), { chat_template: info.chat_template, bos_token: info.bos_token, eos_token: info.eos_token, add_bos: info.add_bos, control_tokens: info.control_tokens });
    // the template's tool branch rendered: the tools block, the replayed call and its result
    expect(p.text).to.include("<tools>").and.include('"name": "read_file"').and.include("<tool_call>").and.include("<tool_response>");
    const ours = Array.from(eng.tokenize(p.text, true, true, p.literal));
    const theirs = Array.from(ref.tokenize(p.text, true), Number);
    expect(ours.length, "prompt length").to.equal(theirs.length);
    const at = ours.findIndex((t, i) => t !== theirs[i]);
    expect(at, `first differing token at ${at}: mb ${JSON.stringify(ours.slice(at, at + 6))} llama ${JSON.stringify(theirs.slice(at, at + 6))}`).to.equal(-1);
    const imStart = Number(ref.tokenize("<|im_start|>", true)[0]);
    expect(ours.filter((t) => t === imStart).length, "turns as control tokens").to.equal(5);
    expect(ours.length).to.be.at.least(c.minTokens);
    return { seq: ours, ref, V: info.n_vocab };
  }

  for (const c of CASES) {
    const sets = ONLY !== undefined ? [ONLY] : c.sets;
    it(`${c.name}: the server's prompt tokens are llama.cpp's, and logits stay within twice its flash on/off spread (kernels: ${sets.map((k) => k || "best").join(", ")})`, async function () {
      const { seq, ref, V } = await promptTokens(c);
      const from = seq.length - c.tail;
      const positions = seq.map((_, i) => i).filter((i) => i % c.stride === c.stride - 1 || i >= from);
      const a: Dists = await llamaDists(ref, seq, positions, V, false);
      const b: Dists = await llamaDists(ref, seq, positions, V, true);
      const tailAt = positions.findIndex((i) => i >= from);
      const spread = agreement(b, a);
      const bar = barOf(spread);
      const runs: Record<string, Agreement> = {};
      for (const k of sets) {
        runs[`${k || "best"} prefill`] = agreement(mbDists(c.model, seq, positions, V, dir, undefined, k), a);
        if (ONLY !== undefined || c.decodeSets.includes(k))
          runs[`${k || "best"} decode`] = agreement(mbDists(c.model, seq, positions.slice(tailAt), V, dir, from - 1, k), a.slice(tailAt));
      }
      console.log(report(`${path.basename(c.model)}, ${c.name}`, seq.length, spread, runs, bar));
      expectWithinSpread(spread, runs, bar);
    });
  }
});
