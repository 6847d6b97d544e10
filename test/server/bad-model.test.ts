// A GGUF the engine cannot run is refused at start-up with an error that names the architecture,
// the tensor and what was expected: an unsupported architecture, a missing tensor, a tensor of
// the wrong shape and one of a type no kernel takes. Each broken file is a copy of a fixture
// with a few header bytes changed (same lengths, so every offset stays valid), made here.
// `mashbox run` must exit 1 with the message on stderr; the engine (worker and addon) must
// reject ready() with it.
import { expect } from "chai";
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";
import { createEngine } from "../../src/engine/engine.js";
import { readHeader } from "../helpers/gguf-header.js";

const FIXTURE = "test/fixtures/phi3-q4_k.gguf";
const GGML_Q8_1 = 9; // a type no weight may have (activations only)
// A well-formed file with Q3_K weights (scripts/make_fixtures.py): llama.cpp runs it; every mashbox
// kernel set (ref, avx2, avx512vnni: kernels/dispatch.cpp) has a dot product for F32, F16, BF16,
// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K and MXFP4 only.
const NO_KERNELS = "test/fixtures/no-kernels/llama-q3_k.gguf";
const WEIGHT_TYPES = "one of F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, BF16, MXFP4";

interface BadFile {
  what: string;
  bytes: Buffer;
  message: RegExp[]; // all must appear in the error
}

function badFiles(): BadFile[] {
  const src = readFileSync(FIXTURE);
  const { tensors, end } = readHeader(src);
  const norm = tensors.find((t) => t.name === "blk.0.attn_norm.weight")!;
  expect(norm.type, "the fixture's norms are f32").to.equal(0);
  const copy = () => Buffer.from(src);

  // "phi3" -> "phi9" in the header: the architecture and all its keys, nothing else moves; and a
  // vocabulary type nobody reads ("llama" -> "rwkv5"), which must not hide the architecture
  const arch = copy();
  for (let i = arch.indexOf("phi3"); i >= 0 && i < end; i = arch.indexOf("phi3", i + 4)) arch.write("phi9", i);
  const tokModel = arch.indexOf("tokenizer.ggml.model") + "tokenizer.ggml.model".length + 4 + 8; // key, type, length
  expect(arch.toString("utf8", tokModel, tokModel + 5)).to.equal("llama");
  arch.write("rwkv5", tokModel);

  const missing = copy();
  const down = tensors.find((t) => t.name === "blk.1.ffn_down.weight")!;
  missing.write("blk.1.ffn_dowX.weight", down.nameAt);

  // 256 f32 -> 128: the bytes it claims stay inside its own
  const shape = copy();
  shape.writeBigUInt64LE(norm.ne[0]! / 2n, norm.neAt);

  // f32 -> Q8_1: 256 values in 288 bytes, inside the 1024 it had
  const type = copy();
  type.writeUInt32LE(GGML_Q8_1, norm.typeAt);

  return [
    { what: "an unsupported architecture", bytes: arch, message: [/unsupported architecture 'phi9'/, /expected one of: .*phi3/] },
    {
      what: "a missing tensor",
      bytes: missing,
      message: [/architecture 'phi3'/, /tensor 'blk\.1\.ffn_down\.weight' is missing/, /expected shape \[512, 256\], type one of F32/],
    },
    {
      what: "a tensor of the wrong shape",
      bytes: shape,
      message: [/architecture 'phi3'/, /tensor 'blk\.0\.attn_norm\.weight' has shape \[128\]; expected \[256\]/],
    },
    {
      what: "a tensor of the wrong type",
      bytes: type,
      message: [/architecture 'phi3'/, /tensor 'blk\.0\.attn_norm\.weight' has type Q8_1; expected one of F32, F16/],
    },
  ];
}

function runCli(model: string, env: NodeJS.ProcessEnv = process.env): Promise<{ code: number | null; stderr: string }> {
  const child = spawn(process.execPath, ["bin/mashbox.js", "run", model, "--port", "0", "--threads", "1", "--slots", "1", "--ctx", "256"], {
    stdio: ["ignore", "ignore", "pipe"],
    env,
  });
  let stderr = "";
  child.stderr!.setEncoding("utf8");
  child.stderr!.on("data", (d: string) => (stderr += d));
  const timer = setTimeout(() => child.kill("SIGKILL"), 50_000);
  return new Promise((resolve) =>
    child.once("exit", (code) => {
      clearTimeout(timer);
      resolve({ code, stderr });
    }),
  );
}

describe("a model the engine cannot run is refused at start-up, naming what was expected", function () {
  this.timeout(60_000);
  let dir: string;
  const cases = existsSync(FIXTURE) ? badFiles() : [];

  before(function () {
    if (!existsSync(FIXTURE)) throw new Error(`${FIXTURE} missing (npm run fixtures)`);
    dir = mkdtempSync(join(tmpdir(), "mb-bad-model-"));
  });
  after(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it("the unbroken fixture loads (so each failure below is the broken bytes')", async () => {
    const engine = createEngine({ model_path: FIXTURE, model_id: "phi3", n_ctx: 64, n_slots: 1, n_threads: 1 });
    try {
      await engine.ready();
      expect(engine.state).to.equal("ready");
    } finally {
      await engine.close();
    }
  });

  for (const [i, c] of cases.entries()) {
    it(`${c.what}: mashbox run exits 1 with the error; the engine rejects ready() with it`, async () => {
      const file = join(dir, `bad-${i}.gguf`);
      writeFileSync(file, c.bytes);

      const run = await runCli(file);
      expect(run.code, run.stderr).to.equal(1);
      for (const m of c.message) expect(run.stderr).to.match(m);

      const engine = createEngine({ model_path: file, model_id: "bad", n_ctx: 64, n_slots: 1, n_threads: 1 });
      let err: unknown;
      await engine.ready().catch((e) => (err = e));
      try {
        expect(engine.state).to.equal("failed");
        for (const m of c.message) expect(String(err)).to.match(m);
      } finally {
        await engine.close();
      }
    });
  }

  it("a GGUF llama.cpp runs, with Q3_K weights no kernel set multiplies: refused under every set, naming the tensor and its type", async function () {
    if (!existsSync(NO_KERNELS)) throw new Error(`${NO_KERNELS} missing (npm run fixtures)`);
    // a valid file: llama.cpp loads it and evaluates a token
    const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
    try {
      const model = await llama.loadModel({ modelPath: NO_KERNELS });
      const ctx = await model.createContext({ contextSize: 64, threads: 1 });
      await ctx.getSequence().evaluateWithoutGeneratingNewTokens(model.tokenize("Hello"));
      await ctx.dispose();
      await model.dispose();
    } finally {
      await llama.dispose();
    }
    const message = new RegExp(`tensor 'blk\\.0\\.attn_q\\.weight' has type Q3_K; expected ${WEIGHT_TYPES}`);
    for (const kernels of ["ref", "avx2", ""]) {
      const env = { ...process.env };
      if (kernels) env.MB_KERNELS = kernels;
      else delete env.MB_KERNELS;
      const run = await runCli(NO_KERNELS, env);
      expect(run.code, `${kernels || "best"}: ${run.stderr}`).to.equal(1);
      expect(run.stderr, kernels || "best").to.match(/architecture 'llama'/).and.match(message);
    }
    const engine = createEngine({ model_path: NO_KERNELS, model_id: "q3_k", n_ctx: 64, n_slots: 1, n_threads: 1 });
    let err: unknown;
    await engine.ready().catch((e) => (err = e));
    try {
      expect(engine.state).to.equal("failed");
      expect(String(err)).to.match(message);
    } finally {
      await engine.close();
    }
  });
});
