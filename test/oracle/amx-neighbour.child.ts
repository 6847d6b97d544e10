// Child of amx-neighbour.test.ts: llama.cpp and this addon in one process, on one libuv thread
// (UV_THREADPOOL_SIZE=1), so that llama.cpp's evaluation and the addon's load-time kernel check
// (which runs the AMX attention) share the thread whose tile configuration ggml sets once.
import { getLlama, LlamaLogLevel, type LlamaModel } from "node-llama-cpp";
import { loadAddon, type NativeEngine } from "../../src/engine/native.js";

const modelPath = process.argv[2];

async function evaluate(model: LlamaModel, tag: string) {
  const ctx = await model.createContext({ contextSize: 256, threads: 1 });
  try {
    const tokens = model.tokenize("def add(a, b):\n    return a + b\n".repeat(3));
    let n = 0;
    for await (const _ of ctx.getSequence().evaluate(tokens, { temperature: 0 })) if (++n >= 4) break;
  } finally {
    await ctx.dispose();
  }
  console.log(`llama.cpp evaluated ${tag}`);
}

const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath });
await evaluate(model, "before");
for (let i = 0; i < 2; i++) {
  const eng = new (loadAddon().Engine)();
  const info = await eng.load({ model_path: modelPath, n_ctx: 256, n_slots: 1, n_threads: 1 } as Parameters<NativeEngine["load"]>[0], () => {});
  console.log(`mashbox kernels ${info.kernels}`);
  eng.close();
  await evaluate(model, `after load ${i + 1}`);
}
await model.dispose();
await llama.dispose();
