// `--device cuda` before anything listens or loads: an addon with the CUDA model and a device,
// and a model that fits in its memory; otherwise a DeviceError that says what was asked and what
// was found. Never a silent fall-back to the CPU.
import type { CudaFootprint, CudaProbe, NativeAddon } from "./native.js";

/** A device request that cannot be met; the CLI reports it as a usage error (exit 2). */
export class DeviceError extends Error {}

const gib = (bytes: number) => `${(bytes / 2 ** 30).toFixed(2)} GiB`;

/**
 * The start-up error for a model whose weights and KV cache (with the CUDA model's scratch) do
 * not fit in the device's memory, naming both numbers; null when they fit. The CUDA model checks
 * the device's free memory again when it loads.
 */
export function cudaFitError(fp: CudaFootprint, device: Pick<CudaProbe, "name" | "total_bytes">, n_slots: number, n_ctx: number): string | null {
  const need = fp.weight_bytes + fp.kv_bytes + fp.scratch_bytes;
  if (need <= device.total_bytes) return null;
  return (
    `--device cuda: the model needs ${gib(need)} of device memory (weights ${gib(fp.weight_bytes)}, KV cache ${gib(fp.kv_bytes)} for ${n_slots} slots × ${n_ctx} tokens, scratch ${gib(fp.scratch_bytes)}), ` +
    `but ${device.name} has ${gib(device.total_bytes)} in all. Use fewer --slots, a smaller --ctx, or --device cpu.`
  );
}

/** The CUDA addon and device for `--device cuda`; null for the CPU. */
export async function checkDevice(device: "cpu" | "cuda"): Promise<{ addon: NativeAddon; probe: CudaProbe } | null> {
  if (device === "cpu") return null;
  let addon: NativeAddon;
  try {
    const { loadAddon } = await import("./native.js");
    addon = loadAddon();
  } catch (e) {
    throw new DeviceError(`--device cuda: the native addon cannot be loaded (${(e as Error).message})`);
  }
  if (addon.cuda !== true || !addon.cudaProbe) throw new DeviceError("--device cuda: this build of mashbox has no CUDA backend (the native addon was built for the CPU). Use --device cpu, or build with CUDA.");
  const d = addon.cudaProbe();
  if (d.count === 0) throw new DeviceError(`--device cuda: asked for a CUDA device, found none (${d.error}). Use --device cpu.`);
  // An addon linked with the kernels but built before the CUDA model existed: refuse rather than
  // serve from the CPU behind the user's back.
  if (!addon.cudaArchitectures || !addon.cudaFootprint)
    throw new DeviceError(`--device cuda: found ${d.name} (compute capability ${d.cc}, ${(d.total_bytes / 2 ** 30).toFixed(0)} GiB), but this build's engine runs models on the CPU only. Use --device cpu, or rebuild with npm run build:cuda.`);
  return { addon, probe: d };
}

/** Rows per forward() of the engine the CLI starts (createEngine's default max_batch). */
const ENGINE_MAX_BATCH = 512;

/** The model file against the device: an architecture the CUDA model runs, and room for it. */
export function checkModelOnDevice(cuda: { addon: NativeAddon; probe: CudaProbe }, model_path: string, n_slots: number, n_ctx: number): void {
  let fp: CudaFootprint;
  try {
    fp = cuda.addon.cudaFootprint!(model_path, n_slots, n_ctx, ENGINE_MAX_BATCH);
  } catch (e) {
    throw new DeviceError(`--device cuda: ${(e as Error).message}`);
  }
  const err = cudaFitError(fp, cuda.probe, n_slots, n_ctx);
  if (err) throw new DeviceError(err);
}
