// Tokenizer parity with llama.cpp (node-llama-cpp's bundled build is the oracle): token ids must
// be identical on a mixed corpus, with parse_special on and off, for the default model's vocab and
// llama.cpp's own vocab-only GGUFs, plus llama.cpp's tokenizer test vectors (.inp/.out).
// Detokenization must round-trip and match llama.cpp's, and streamed detokenization must never
// emit a partial UTF-8 sequence.
import { expect } from "chai";
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { getLlama, LlamaLogLevel, type Llama, type LlamaModel, type Token } from "node-llama-cpp";

const ROOT = process.cwd();
const TOOL = process.env.MB_TOKENIZE ?? path.join(ROOT, "native/build/tokenizer/mb_tokenize");
const LLAMA_CPP = path.join(ROOT, ".cache/llama.cpp");
const VOCAB_DIR = path.join(LLAMA_CPP, "models");
const DEFAULT_MODEL = process.env.MB_MODEL ?? `${process.env.HOME}/.cache/mashbox/models/SmolLM2-135M-Instruct.Q4_1.gguf`;
const MODELS_DIR = process.env.MASHBOX_HOME ? path.join(process.env.MASHBOX_HOME, "models") : `${process.env.HOME}/.cache/mashbox/models`;
const QWEN05 = process.env.MB_QWEN05_MODEL ?? path.join(MODELS_DIR, "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf");
const QWEN15 = process.env.MB_QWEN15_MODEL ?? path.join(MODELS_DIR, "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf");

// The vocab GGUFs ship in llama.cpp's source, which node-llama-cpp carries as a git bundle.
function ensureVocabs(): void {
  if (existsSync(VOCAB_DIR)) return;
  const bundle = path.join(ROOT, "node_modules/node-llama-cpp/llama/gitRelease.bundle");
  const r = spawnSync("git", ["clone", "-q", bundle, LLAMA_CPP], { encoding: "utf8" });
  if (r.status !== 0) throw new Error(`cannot clone llama.cpp vocab files: ${r.stderr}`);
}

function tool(args: string[], input: string): string[] {
  const r = spawnSync(TOOL, args, { input, encoding: "utf8", maxBuffer: 256 << 20 });
  if (r.status !== 0) throw new Error(`mb_tokenize ${args.join(" ")} failed: ${r.stderr}`);
  return r.stdout.split("\n").filter((l) => l.length > 0);
}

function mbEncode(model: string, texts: string[], parseSpecial: boolean, addSpecial = false): number[][] {
  const flags = [model, "--jsonl", ...(parseSpecial ? ["--parse-special"] : []), ...(addSpecial ? ["--add-special"] : [])];
  // Empty strings are skipped by --jsonl line parsing only if the line is empty; JSON "" is a line.
  return tool(flags, texts.map((t) => JSON.stringify(t)).join("\n") + "\n").map((l) => JSON.parse(l) as number[]);
}

const CORPUS: string[] = [
  "Hello world",
  " Hello world",
  "Hello World!",
  "hello, how are you? I'm fine, thanks. You're welcome; we've done it, they'll see, he'd go.",
  "IT'S LOUD. DON'T SHOUT! WE'LL SEE, YOU'VE GOT IT, I'D SAY.",
  "",
  " ",
  "  ",
  "   ",
  "\t",
  "\n",
  "\n\n",
  "\n\n\n",
  "\t\n",
  "   leading and trailing   ",
  "a  b   c    d\t\te\n\nf \n g",
  "line one\r\nline two\r\n\r\n",
  "1 12 123 1234 12345 123456 1234567 3.14159 -42 1e10 0x1F",
  "The year 2024 had 366 days; ١٢٣ and ۴۵۶ are numbers too. Ⅻ ½ ²",
  "café naïve résumé Ångström façade coöperate",
  "cafe\u0301 (combining accent) e\u0300\u0301\u0302",
  "中文字符测试，你好世界！日本語のテキスト。한국어 텍스트입니다.",
  "Привет, мир! Ελληνικά κείμενα. Tiếng Việt có dấu.",
  "مرحبا بالعالم! שלום עולם. (RTL text mixed with LTR)",
  "emoji: 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🇺🇸 ❤️ ✨ 🤖",
  "mixed😀text中文and123numbers",
  // Assigned in Unicode 15/15.1 (CJK Ext H, Kawi, Kaktovik numerals): catches a stale category table.
  // A contraction after them splits differently when they are letters/numbers vs unassigned.
  "new: \u{31350}'s \u{11F04}\u{11F05}x \u{2EBF0}'re \u{1D2C0}'s \u{1D2C1}7",
  "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
  "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }\n\t// comment\n",
  "const x = {\"key\": [1, 2, 3], 'other': null}; // JSON-ish",
  "<html><body class=\"main\">Text &amp; more</body></html>",
  "SELECT * FROM users WHERE id = 42 AND name LIKE '%bob%';",
  "$$ \\frac{a}{b} = \\sum_{i=0}^{n} x_i^2 $$",
  "!!! ??? ... --- *** ### @@@ ~~~ ``` ||| ^^^ +++ === <<< >>>",
  "https://example.com/path?query=value&other=1#anchor",
  "user@example.com, @mention #hashtag",
  "\u00a0non-breaking\u00a0space\u2003em\u2003space\u3000ideographic",
  "zero\u200bwidth\u200cjoiner\u200d",
  "tab\tseparated\tvalues\t1\t2\t3",
  "ALLCAPS lowercase MiXeD CamelCase snake_case kebab-case",
  "'s 't 're 've 'm 'll 'd ' 'S 'T",
  "a'b a''b ''' \"quoted\" “curly” ‘single’ «guillemets»",
  "Ünïcödé ß ﬁ ligature ﬀ Ǆ ǅ ǆ",
  "\u0000 null and \u0007 bell and \u001b escape",
  "   \n   \n",
  "word\n\n\n\nword",
  "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
  "<|im_start|>system\nYou are helpful.<|im_end|><|endoftext|>",
  "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
  "<s>[INST] hello [/INST] hi</s>",
  "<|user|>\n  Hi there<|end|>\n<|assistant|>  ok </s>  next",
  "text<|im_end|>more <|im_start|> spaced <|endoftext|>",
  "<|im_start|><|im_start|><|im_end|>",
  "broken <|im_sta rt|> token < |im_end| >",
  "<repo_name>x<file_sep>y<reponame>",
  "[PAD151646] and [PAD151700]",
  "▁ already has sentencepiece space ▁▁",
  "<0x41> looks like a byte token",
  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
  "          many spaces before text",
  "The quick brown fox jumps over the lazy dog. ".repeat(8),
];

interface Vocab {
  name: string;
  file: string;
  vectors: boolean;  // has llama.cpp .inp/.out test vectors
  corpus: boolean;   // run the mixed corpus and detokenization checks
  cleanSpaces: boolean;  // llama.cpp's detokenize post-processes spaces around punctuation
  spaceprefix: boolean;  // SentencePiece: llama.cpp drops the first leading space on detokenize
  sentencepiece?: boolean;  // "▁" in the input is SentencePiece's space: it comes back as " "
}

const VOCABS: Vocab[] = [
  { name: "smollm (SmolLM2-135M, MB_MODEL)", file: DEFAULT_MODEL, vectors: false, corpus: true, cleanSpaces: false, spaceprefix: false },
  // The real Qwen2.5-Coder files (the default model and the 1.5B): their vocabulary adds the
  // tool-calling and FIM control tokens to llama.cpp's qwen2 test vocab.
  { name: "qwen2.5-coder-0.5b (default model)", file: QWEN05, vectors: false, corpus: true, cleanSpaces: false, spaceprefix: false },
  { name: "qwen2.5-coder-1.5b", file: QWEN15, vectors: false, corpus: true, cleanSpaces: false, spaceprefix: false },
  { name: "qwen2", file: path.join(VOCAB_DIR, "ggml-vocab-qwen2.gguf"), vectors: true, corpus: true, cleanSpaces: false, spaceprefix: false },
  { name: "llama-bpe", file: path.join(VOCAB_DIR, "ggml-vocab-llama-bpe.gguf"), vectors: true, corpus: true, cleanSpaces: true, spaceprefix: false },
  { name: "llama-spm", file: path.join(VOCAB_DIR, "ggml-vocab-llama-spm.gguf"), vectors: true, corpus: true, cleanSpaces: false, spaceprefix: true },
  { name: "gpt-2", file: path.join(VOCAB_DIR, "ggml-vocab-gpt-2.gguf"), vectors: true, corpus: true, cleanSpaces: true, spaceprefix: false },
  { name: "qwen35", file: path.join(VOCAB_DIR, "ggml-vocab-qwen35.gguf"), vectors: true, corpus: false, cleanSpaces: false, spaceprefix: false },
  { name: "starcoder", file: path.join(VOCAB_DIR, "ggml-vocab-starcoder.gguf"), vectors: true, corpus: false, cleanSpaces: true, spaceprefix: false },
  { name: "refact", file: path.join(VOCAB_DIR, "ggml-vocab-refact.gguf"), vectors: true, corpus: false, cleanSpaces: true, spaceprefix: false },
  { name: "command-r", file: path.join(VOCAB_DIR, "ggml-vocab-command-r.gguf"), vectors: true, corpus: false, cleanSpaces: false, spaceprefix: false },
  { name: "mpt", file: path.join(VOCAB_DIR, "ggml-vocab-mpt.gguf"), vectors: true, corpus: false, cleanSpaces: true, spaceprefix: false },
  { name: "phi-3 (spm)", file: path.join(VOCAB_DIR, "ggml-vocab-phi-3.gguf"), vectors: true, corpus: true, cleanSpaces: false, spaceprefix: true },
  // Gemma 3's 262,144-token SentencePiece vocabulary (no space prefix), as the gemma3 fixture
  // carries it from the real model (npm run fixtures after mashbox pull gemma3-270m).
  { name: "gemma3 (spm, 262k)", file: path.join(ROOT, "test/fixtures/gemma3-q8_0.gguf"), vectors: false, corpus: true, cleanSpaces: false, spaceprefix: false, sentencepiece: true },
];

function firstDiff(a: number[], b: number[]): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i;
  return a.length === b.length ? -1 : n;
}

function expectSame(label: string, texts: string[], ours: number[][], theirs: number[][]): number {
  const bad: string[] = [];
  texts.forEach((t, i) => {
    const d = firstDiff(ours[i], theirs[i]);
    if (d >= 0)
      bad.push(`${JSON.stringify(t.slice(0, 60))}: at ${d} mb=${JSON.stringify(ours[i].slice(d, d + 6))} llama=${JSON.stringify(theirs[i].slice(d, d + 6))}`);
  });
  expect(bad, `${label}: ${bad.length}/${texts.length} differ\n${bad.slice(0, 10).join("\n")}`).to.deep.equal([]);
  return texts.length;
}

// llama.cpp's whole-sequence detokenizer post-processing for vocabs with clean_spaces (gpt-2,
// llama-bpe): drops the space before ?!., and around a lone apostrophe, and before 's 'm 're 've.
function cleanSpaces(t: string): string {
  return t
    .replace(/ ([?!.,])/g, "$1")
    .replace(/ ' /g, "'")
    .replace(/ '(s|m|re|ve)/g, "'$1");
}

describe("tokenizer parity with llama.cpp", function () {
  this.timeout(300000);
  let llama: Llama;

  before(async function () {
    expect(existsSync(TOOL), `${TOOL} not built (npm run build:native)`).to.equal(true);
    ensureVocabs();
    llama = await getLlama({
      gpu: false,
      build: "never",
      logLevel: LlamaLogLevel.error,
      // Vocab-only GGUFs have no tensors; llama.cpp logs a failed full load before the vocab-only
      // one succeeds. Keep every other message.
      logger: (_level, message) => {
        if (!/missing tensor|failed to load model/.test(message)) console.error(message);
      },
    });
  });

  for (const v of VOCABS) {
    describe(v.name, function () {
      let model: LlamaModel;
      const llamaEncode = (texts: string[], special: boolean) =>
        texts.map((t) => Array.from(model.tokenize(t, special)) as number[]);

      before(async function () {
        expect(existsSync(v.file), `missing ${v.file}`).to.equal(true);
        model = await llama.loadModel({ modelPath: v.file, vocabOnly: true });
      });
      after(async () => {
        await model?.dispose();
      });

      if (v.vectors) {
        it("matches llama.cpp's test vectors (.inp/.out)", function () {
          const inp = readFileSync(v.file + ".inp", "utf8").split("\n__ggml_vocab_test__\n");
          // The file ends with a separator line; the last split element is the empty tail.
          if (inp[inp.length - 1] === "") inp.pop();
          const out = readFileSync(v.file + ".out", "utf8").split("\n");
          const expected = inp.map((_, i) => out[i].trim().split(/\s+/).filter((s) => s !== "").map(Number));
          expectSame("vectors", inp, mbEncode(v.file, inp, false), expected);
          // The oracle agrees with its own vectors, so corpus mismatches are ours, not its.
          expectSame("oracle vs vectors", inp, llamaEncode(inp, false), expected);
        });
      }

      if (v.corpus) {
        it("matches llama.cpp on the corpus with parse_special=false", function () {
          expectSame("plain", CORPUS, mbEncode(v.file, CORPUS, false), llamaEncode(CORPUS, false));
        });

        it("matches llama.cpp on the corpus with parse_special=true", function () {
          expectSame("special", CORPUS, mbEncode(v.file, CORPUS, true), llamaEncode(CORPUS, true));
        });

        // Runs over 64 KiB are merged in pieces (tokenizer.cpp, kMaxMergeBytes): a long text of
        // ordinary words (for SentencePiece one run, cut before a word) must still match exactly.
        it("matches llama.cpp on a 200 KB text (longer than one merge piece)", function () {
          let long = "";
          for (let i = 0; long.length < 200_000; i++) long += CORPUS[i % CORPUS.length] + (i % 7 === 0 ? "\n" : " ");
          expectSame("long", [long], mbEncode(v.file, [long], false), llamaEncode([long], false));
        });

        it("adds BOS/EOS with add_special exactly as the vocab metadata says", function () {
          const info = JSON.parse(tool([v.file, "--info"], "")[0]) as { bos: number; eos: number };
          const plain = mbEncode(v.file, ["Hello world"], false)[0];
          const withSpecial = mbEncode(v.file, ["Hello world"], false, true)[0];
          // node-llama-cpp never adds specials itself; it reports whether the model wants BOS.
          const wantsBos = model.tokens.shouldPrependBosToken;
          const expected = [...(wantsBos ? [info.bos] : []), ...plain];
          expect(withSpecial).to.deep.equal(expected);
          if (wantsBos) expect(model.tokens.bos).to.equal(info.bos);
        });

        it("detokenizes like llama.cpp and round-trips text", function () {
          const ids = mbEncode(v.file, CORPUS, false);
          const ours = tool([v.file, "--detokenize", "--hex"], ids.map((t) => JSON.stringify(t)).join("\n") + "\n")
            .map((l) => Buffer.from(JSON.parse(l) as string, "hex").toString("utf8"));
          CORPUS.forEach((text, i) => {
            let mine = ours[i];
            // llama.cpp's whole-sequence detokenizer drops SentencePiece's added leading space;
            // pieces (what the server streams) keep it.
            if (v.spaceprefix && mine.startsWith(" ")) mine = mine.slice(1);
            if (!v.cleanSpaces)
              expect(mine, `detok of ${JSON.stringify(text)}`).to.equal(model.detokenize(ids[i] as Token[], false));
            // Byte-level BPE is lossless except for NUL-free control chars; SPM maps unknowns.
            if (!v.spaceprefix) expect(mine, `round trip of ${JSON.stringify(text)}`).to.equal(v.sentencepiece ? text.replaceAll("▁", " ") : text);
          });
        });

        it("renders every token's piece like llama.cpp, with and without special tokens", function () {
          const n = Number((JSON.parse(tool([v.file, "--info"], "")[0]) as { n_vocab: number }).n_vocab);
          for (const render of [false, true]) {
            // One line per id; empty pieces are empty lines, so split the raw output by hand.
            const r = spawnSync(TOOL, [v.file, "--pieces", ...(render ? ["--render-special"] : [])], {
              encoding: "utf8",
              maxBuffer: 256 << 20,
            });
            expect(r.status).to.equal(0);
            const raw = r.stdout.split("\n");
            expect(raw.length - 1).to.equal(n);
            const bad: string[] = [];
            for (let id = 0; id < n; id++) {
              let mine = Buffer.from(raw[id], "hex").toString("utf8");
              // Single-token detokenize in llama.cpp strips SentencePiece's leading space.
              if (v.spaceprefix && mine.startsWith(" ")) mine = mine.slice(1);
              if (v.cleanSpaces) mine = cleanSpaces(mine);
              const theirs = model.detokenize([id as Token], render);
              if (mine !== theirs) bad.push(`${id}: mb=${JSON.stringify(mine)} llama=${JSON.stringify(theirs)}`);
            }
            expect(bad, `render_special=${render}: ${bad.length} differ\n${bad.slice(0, 10).join("\n")}`).to.deep.equal([]);
          }
        });

        it("marks the same end-of-generation tokens", function () {
          const info = JSON.parse(tool([v.file, "--info"], "")[0]) as { n_vocab: number; eog: number[] };
          const theirs: number[] = [];
          for (let id = 0; id < info.n_vocab; id++) if (model.isEogToken(id as Token)) theirs.push(id);
          expect(info.eog).to.deep.equal(theirs);
          expect(theirs.length).to.be.greaterThan(0);
        });

        it("streams detokenized text without ever emitting a partial code point", function () {
          const texts = CORPUS.filter((t) => /[^\x00-\x7f]/.test(t));
          const ids = mbEncode(v.file, texts, false);
          const lines = tool([v.file, "--stream"], ids.map((t) => JSON.stringify(t)).join("\n") + "\n");
          const fatal = new TextDecoder("utf-8", { fatal: true });
          let splitTokens = 0;
          lines.forEach((line, i) => {
            const chunks = (JSON.parse(line) as string[]).map((h) => Buffer.from(h, "hex"));
            for (const c of chunks) fatal.decode(c);  // throws on any partial or invalid sequence
            splitTokens += chunks.filter((c) => c.length === 0).length;
            let whole = Buffer.concat(chunks).toString("utf8");
            if (v.spaceprefix && whole.startsWith(" ")) whole = whole.slice(1);
            if (!v.spaceprefix) expect(whole).to.equal(v.sentencepiece ? texts[i]!.replaceAll("▁", " ") : texts[i]);
          });
          // The corpus must actually contain tokens that end mid-character, or this proves nothing.
          expect(splitTokens).to.be.greaterThan(1);
        });
      }
    });
  }

  // A prompt as long as a coding agent's first one, in one piece (speed is bench/bench.mjs's: the
  // tool's --time): ids as llama.cpp's, so pre-tokenizer chunking holds at length.
  it("tokenizes a 10k-token prompt as llama.cpp does", async function () {
    const unit = CORPUS.filter((t) => !t.includes("<")).join("\n");
    let text = "";
    while (text.length < 45000) text += unit;
    const r = spawnSync(TOOL, [DEFAULT_MODEL], { input: text, encoding: "utf8", maxBuffer: 64 << 20 });
    expect(r.status, r.stderr).to.equal(0);
    const ours = JSON.parse(r.stdout) as number[];
    expect(ours.length).to.be.greaterThan(10000);
    const model = await llama.loadModel({ modelPath: DEFAULT_MODEL, vocabOnly: true });
    try {
      expectSame("10k prompt", [text], [ours], [Array.from(model.tokenize(text, false)) as number[]]);
    } finally {
      await model.dispose();
    }
  });
});
