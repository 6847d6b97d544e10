// --device cuda's start-up checks that run without a GPU: the device-memory message names what the
// model needs and what the device has; and the device reaches Model::load through the worker and
// the addon (a CPU build refuses it there, so a model asked for on CUDA never loads on the CPU).
import { expect } from "chai";
import { cudaFitError } from "../../src/engine/device.js";
import { createEngine } from "../../src/engine/engine.js";
import { loadAddon } from "../../src/engine/native.js";

const GiB = 2 ** 30;

describe("--device cuda", function () {
  this.timeout(60000);

  it("a model that does not fit names the bytes it needs and the device's", () => {
    const fp = { architecture: "qwen3", weight_bytes: 5 * GiB, kv_bytes: 2.5 * GiB, scratch_bytes: 0.25 * GiB };
    expect(cudaFitError(fp, { name: "NVIDIA H200", total_bytes: 139.8 * GiB }, 4, 4096)).to.equal(null);
    const err = cudaFitError(fp, { name: "NVIDIA T4", total_bytes: 7.5 * GiB }, 4, 4096);
    expect(err).to.be.a("string");
    expect(err).to.include("7.75 GiB"); // weights + KV + scratch
    expect(err).to.include("weights 5.00 GiB");
    expect(err).to.include("KV cache 2.50 GiB for 4 slots × 4096 tokens");
    expect(err).to.include("NVIDIA T4 has 7.50 GiB in all");
    expect(err).to.match(/--slots|--ctx|--device cpu/);
    // exactly the device's size fits
    expect(cudaFitError(fp, { name: "x", total_bytes: 7.75 * GiB }, 4, 4096)).to.equal(null);
  });

  it("reaches Model::load: an addon without the CUDA model refuses the load instead of running on the CPU", async function () {
    if (loadAddon().cudaArchitectures) this.skip(); // a CUDA build: the load would need a device
    const engine = createEngine({ model_path: "test/fixtures/llama-q8_0.gguf", model_id: "t", n_ctx: 64, n_slots: 1, n_threads: 1, device: "cuda" });
    try {
      let message = "";
      await engine.ready().catch((e: Error) => (message = e.message));
      expect(message).to.match(/model failed to load: model: device cuda: this build has no CUDA model/);
      expect(engine.state).to.equal("failed");
    } finally {
      await engine.close();
    }
  });
});
