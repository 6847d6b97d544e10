// Defaults and small predicates shared by the CLI, the server and the test harness, so that
// "what is loopback" and "which port" are decided in one place.
import { existsSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

/** A file at the package root (models.json, openapi.json), found from src/ or from dist/src/. */
export function packageFile(name: string): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 3; i++) {
    dir = dirname(dir);
    const p = join(dir, name);
    if (existsSync(p)) return p;
  }
  throw new Error(`${name} not found at the mashbox package root`);
}

export const DEFAULTS = {
  host: "127.0.0.1",
  port: 8000,
  /** --ctx when neither it nor the model's file says (autoContext). */
  n_ctx: 4096,
  n_slots: 4,
  cache_ram_mib: 8192,
  /** The host cache's disk tier (--cache-disk), under promptCacheDir() unless --cache-dir. */
  cache_disk_mib: 16384,
  /** Request bodies over this get 413 (--body-limit): a 32k-token context needs well under 1 MiB of JSON. */
  body_limit_mib: 8,
  /** Speculative decoding (--spec): n-gram drafts, since bench/spec.mjs measured them costing nothing on
   * text they cannot predict (prose alone 1.33x, 4 and 8 prose streams 0.98x and 1.00x) and 2.8x on a code edit. */
  spec: "ngram" as "ngram" | "draft" | "off",
} as const;

/** The most --ctx that autoContext picks, and the most K/V tokens it gives all slots together. */
export const AUTO_CTX_MAX = 32768;
export const AUTO_KV_TOKENS = 131072;

/**
 * --ctx when it is not given: the model's training context, so an agent's first prompt (Claude
 * Code's is ~19k tokens) fits without flags, as vLLM sizes max_model_len from the model. It stops
 * at AUTO_CTX_MAX, and at AUTO_KV_TOKENS over all slots, so that many slots or a 128k model do not
 * take gigabytes of K/V nobody asked for; never below DEFAULTS.n_ctx unless the model trains less.
 */
export function autoContext(n_ctx_train: number, n_slots: number): number {
  if (n_ctx_train <= 0) return DEFAULTS.n_ctx;
  const budget = Math.max(DEFAULTS.n_ctx, Math.floor(AUTO_KV_TOKENS / n_slots / 256) * 256);
  return Math.min(n_ctx_train, AUTO_CTX_MAX, budget);
}

/** Where `mashbox pull` keeps models; MASHBOX_HOME moves it (tests, read-only homes). */
export function cacheDir(): string {
  return process.env.MASHBOX_HOME ? join(process.env.MASHBOX_HOME, "models") : join(homedir(), ".cache", "mashbox", "models");
}

/** Default --cache-dir: the prompt cache's disk tier, beside the models. */
export function promptCacheDir(): string {
  return process.env.MASHBOX_HOME ? join(process.env.MASHBOX_HOME, "prompt-cache") : join(homedir(), ".cache", "mashbox", "prompt-cache");
}

/** Bracket-free form of a host ("[::1]" → "::1") lowercased, for comparisons. */
export function bareHost(host: string): string {
  const h = host.trim().toLowerCase();
  return h.startsWith("[") && h.endsWith("]") ? h.slice(1, -1) : h;
}

/**
 * Whether binding to `host` keeps the server reachable from this machine only. Keys are
 * mandatory otherwise, since anyone on the network could then spend the device.
 */
export function isLoopback(host: string): boolean {
  const h = bareHost(host);
  return h === "localhost" || h === "::1" || /^127(\.\d{1,3}){3}$/.test(h);
}
