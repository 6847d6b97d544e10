// llama.cpp and mashbox in one process with AMX on both sides. ggml configures a thread's tiles once
// and trusts them to stay configured; a neighbour that releases them on that thread makes ggml's
// next tile load an invalid opcode (it did: SIGILL in tinygemm_kernel_amx, killing the mocha run).
// The AMX attention must hand the thread's tile configuration back as it found it.
import { expect } from "chai";
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const HERE = path.dirname(fileURLToPath(import.meta.url));
// a weight type ggml's AMX matmuls take (Q4_1)
const MODEL = process.env.MB_MODEL ?? `${process.env.HOME}/.cache/mashbox/models/SmolLM2-135M-Instruct.Q4_1.gguf`;

describe("AMX beside llama.cpp in one process", function () {
  this.timeout(300_000);
  it("llama.cpp still evaluates after mashbox's AMX attention ran on its thread", function () {
    if (!existsSync(MODEL)) throw new Error(`${MODEL} missing: node bin/mashbox.js pull smollm2-135m`);
    const r = spawnSync(process.execPath, ["--import", "tsx", path.join(HERE, "amx-neighbour.child.ts"), MODEL], {
      encoding: "utf8",
      env: { ...process.env, UV_THREADPOOL_SIZE: "1", MB_KERNELS: "amx" },
    });
    if (r.status === 0 && !r.stdout.includes("mashbox kernels avx512amx")) this.skip(); // no usable AMX on this CPU
    expect(r.signal, `child died: ${r.stderr}`).to.equal(null);
    expect(r.status, r.stderr).to.equal(0);
    expect(r.stdout.match(/^llama\.cpp evaluated .*$/gm)).to.deep.equal([
      "llama.cpp evaluated before",
      "llama.cpp evaluated after load 1",
      "llama.cpp evaluated after load 2",
    ]);
  });
});
