// `mashbox run | pull | models | conformance`. Only this file reads process.argv / MASHBOX_API_KEY; the
// programmatic-only server options (validate_responses) have no flag here.
import { existsSync, readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { availableParallelism } from "node:os";
import { unloadedModel } from "./engine/readiness.js";
import { DeferredEngine } from "./engine/deferred.js";
import { checkDevice, checkModelOnDevice, DeviceError } from "./engine/device.js";
import { AUTO_CTX_MAX, AUTO_KV_TOKENS, DEFAULTS, autoContext, isLoopback, promptCacheDir } from "./config.js";
import { keysRequiredMessage, loadApiKeys } from "./security.js";
import { findModel, isPresent, localPath, pull, readRegistry, resolveModel } from "./models.js";
import { CONFORMANCE_COMMAND, CONFORMANCE_OPTIONS } from "./conformance/command.js";

export const USAGE = `Usage:
  mashbox run [model] [options]   Serve a model (OpenAI + Anthropic APIs)
  mashbox pull [model]            Download a model from models.json; prints its path last
  mashbox models                  List the models in models.json and which are present
${CONFORMANCE_COMMAND}
  mashbox --help                  This text

[model] is an id from models.json (default: ${readRegistry().default}) or a path to a .gguf file.
run pulls a missing registry model first; the server answers 503 (Anthropic routes: 529)
with Retry-After until the model is loaded.

run options:
  --host ADDR          Address to bind and answer to (default ${DEFAULTS.host}). Any non-loopback
                       address requires an API key (--api-key-file or MASHBOX_API_KEY).
  --port N             TCP port (default ${DEFAULTS.port}).
  --ctx N              Context length per slot, in tokens (default: the model's training
                       context, at most ${AUTO_CTX_MAX} and ${AUTO_KV_TOKENS} over all slots).
  --slots N            Requests decoded together (default ${DEFAULTS.n_slots}).
  --threads N          CPU threads for the engine (default: all cores, ${availableParallelism()} here).
  --cache-ram MiB      Host memory for saved prompt states (default ${DEFAULTS.cache_ram_mib}).
  --cache-dir DIR      Disk tier of the prompt cache: saved states written behind, read back by
                       the next server of the same model (default $MASHBOX_HOME/prompt-cache).
  --cache-disk MiB     Most disk the tier uses (default ${DEFAULTS.cache_disk_mib}; 0 = off).
  --spec ngram|draft|off  Speculative decoding: guess a few tokens ahead and verify them in the
                       same step; output unchanged (default ${DEFAULTS.spec}, or draft with --draft).
                       ngram guesses from the request's own prompt and output; draft asks --draft.
  --draft MODEL        A small model of the same vocabulary that drafts for [model] (an id from
                       models.json, pulled if missing, or a .gguf path), e.g. qwen2.5-coder-0.5b
                       for qwen2.5-coder-1.5b; implies --spec draft.
  --api-key-file FILE  API keys, one per line, optionally followed by a tenant name; # comments.
                       Keys sharing a tenant name share its queue limit. With keys, /v1/*,
                       /metrics and /openapi.json need Authorization: Bearer KEY or x-api-key.
  --allowed-host NAME  One more Host name to answer to, on any port (repeatable): the Service
                       or gateway hostname clients use. Keys still apply.
  --body-limit MiB     Largest request body accepted; larger ones get 413 (default ${DEFAULTS.body_limit_mib}).
  --stall-timeout S    Close a stream whose client reads nothing for S seconds, cancelling its
                       generation (default 30).
  --metrics-without-key  /metrics needs no API key (for scrapers that cannot send one, such
                       as the Gateway API endpoint picker); it carries no keys or prompts.
  --ui                 Serve the built-in chat page at /.
  --chat-template FILE Jinja chat template for the chat routes, instead of the model's own; a base
                       model without one (gemma3-270m) answers chat requests with 400 unless given.
  --device cpu|cuda    Where the model runs (default cpu). cuda needs a CUDA build (npm run
                       build:cuda) and runs llama and qwen3 models.

${CONFORMANCE_OPTIONS}
Environment:
  MASHBOX_API_KEY      One more API key (its own tenant).
  MASHBOX_HOME         Cache root (default ~/.cache/mashbox); models go to $MASHBOX_HOME/models.
`;

class UsageError extends Error {}

function intOption(name: string, v: string | undefined, def: number, min: number, max = Number.MAX_SAFE_INTEGER): number {
  if (v === undefined) return def;
  if (!/^\d+$/.test(v)) throw new UsageError(`--${name} must be a whole number, got '${v}'`);
  const n = Number(v);
  if (n < min || n > max) throw new UsageError(`--${name} must be between ${min} and ${max}, got ${n}`);
  return n;
}

export interface RunConfig {
  model: string | undefined;
  host: string;
  port: number;
  n_ctx: number;
  /** No --ctx: n_ctx is sized from the model once its file is here (autoContext). */
  ctx_from_model: boolean;
  n_slots: number;
  n_threads: number;
  cache_ram_mib: number;
  cache_dir: string;
  cache_disk_mib: number;
  spec: "ngram" | "draft" | "off";
  /** --draft MODEL: registry id or .gguf path (resolved like the model). */
  draft: string | undefined;
  api_key_file: string | undefined;
  allowed_hosts: string[];
  metrics_without_key: boolean;
  body_limit_mib: number;
  stall_timeout_s: number;
  ui: boolean;
  device: "cpu" | "cuda";
  /** --chat-template FILE's text. */
  chat_template: string | undefined;
}

function readChatTemplate(file: string): string {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (e) {
    throw new UsageError(`--chat-template: cannot read ${file}: ${(e as Error).message}`);
  }
  if (text.trim() === "") throw new UsageError(`--chat-template: ${file} is empty`);
  return text;
}

/** Parses `run` arguments (everything after "run"). Throws UsageError with a one-line reason. */
export function parseRunArgs(args: string[]): RunConfig {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    strict: true,
    options: {
      host: { type: "string" },
      port: { type: "string" },
      ctx: { type: "string" },
      slots: { type: "string" },
      threads: { type: "string" },
      "cache-ram": { type: "string" },
      "cache-dir": { type: "string" },
      "cache-disk": { type: "string" },
      spec: { type: "string" },
      draft: { type: "string" },
      "api-key-file": { type: "string" },
      "allowed-host": { type: "string", multiple: true },
      "metrics-without-key": { type: "boolean" },
      "body-limit": { type: "string" },
      "stall-timeout": { type: "string" },
      ui: { type: "boolean" },
      device: { type: "string" },
      "chat-template": { type: "string" },
      help: { type: "boolean", short: "h" },
    },
  });
  if (positionals.length > 1) throw new UsageError(`run takes one model, got ${positionals.length}: ${positionals.join(" ")}`);
  const device = values.device ?? "cpu";
  if (device !== "cpu" && device !== "cuda") throw new UsageError(`--device must be cpu or cuda, got '${device}'`);
  const spec = values.spec ?? (values.draft !== undefined ? "draft" : DEFAULTS.spec);
  if (spec !== "ngram" && spec !== "draft" && spec !== "off") throw new UsageError(`--spec must be ngram, draft or off, got '${spec}'`);
  if (spec === "draft" && values.draft === undefined) throw new UsageError("--spec draft needs --draft MODEL (the model that drafts)");
  if (values.draft === "") throw new UsageError("--draft needs a model id or a .gguf path");
  for (const h of values["allowed-host"] ?? []) {
    if (!/^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$/.test(h)) throw new UsageError(`--allowed-host takes a host name without port or scheme, got '${h}'`);
  }
  return {
    model: positionals[0],
    host: values.host ?? DEFAULTS.host,
    port: intOption("port", values.port, DEFAULTS.port, 0, 65535),
    n_ctx: intOption("ctx", values.ctx, DEFAULTS.n_ctx, 16, 1 << 20),
    ctx_from_model: values.ctx === undefined,
    n_slots: intOption("slots", values.slots, DEFAULTS.n_slots, 1, 256),
    n_threads: intOption("threads", values.threads, availableParallelism(), 1, 1024),
    cache_ram_mib: intOption("cache-ram", values["cache-ram"], DEFAULTS.cache_ram_mib, 0),
    cache_dir: values["cache-dir"] ?? promptCacheDir(),
    cache_disk_mib: intOption("cache-disk", values["cache-disk"], DEFAULTS.cache_disk_mib, 0),
    spec,
    // --spec ngram|off with --draft: the draft model is not used (and not loaded).
    draft: spec === "draft" ? values.draft : undefined,
    api_key_file: values["api-key-file"],
    allowed_hosts: values["allowed-host"] ?? [],
    metrics_without_key: values["metrics-without-key"] === true,
    body_limit_mib: intOption("body-limit", values["body-limit"], DEFAULTS.body_limit_mib, 1, 4096),
    stall_timeout_s: intOption("stall-timeout", values["stall-timeout"], 30, 1, 86_400),
    ui: values.ui === true,
    device,
    chat_template: values["chat-template"] === undefined ? undefined : readChatTemplate(values["chat-template"]),
  };
}

/** Without --ctx, n_ctx from the model's header (autoContext); a header it cannot read leaves the default (the load says why). */
async function sizeContext(cfg: RunConfig, model_path: string): Promise<void> {
  if (!cfg.ctx_from_model) return;
  try {
    const { loadAddon } = await import("./engine/native.js");
    cfg.n_ctx = autoContext(loadAddon().ggufContext(model_path).n_ctx_train, cfg.n_slots);
  } catch {
    cfg.n_ctx = DEFAULTS.n_ctx;
  }
}

/** A draft model that cannot draft for the model (another vocabulary, too little context) is a usage error, before serving. */
async function checkDraft(cfg: RunConfig, model_path: string, model_id: string, draft_path: string, draft_id: string): Promise<void> {
  const { loadAddon } = await import("./engine/native.js");
  const why = loadAddon().checkDraft(model_path, draft_path, cfg.n_ctx, model_id, draft_id);
  if (why !== null) throw new UsageError(why);
}

async function cmdRun(args: string[]): Promise<number> {
  const cfg = parseRunArgs(args);
  if (args.includes("--help") || args.includes("-h")) {
    process.stdout.write(USAGE);
    return 0;
  }
  let keys;
  try {
    keys = loadApiKeys({ file: cfg.api_key_file, env_key: process.env.MASHBOX_API_KEY });
  } catch (e) {
    throw new UsageError((e as Error).message);
  }
  if (!isLoopback(cfg.host) && !keys) throw new UsageError(keysRequiredMessage(cfg.host));
  const cuda = await checkDevice(cfg.device);
  const ref = resolveModel(cfg.model);
  const model_id = ref.kind === "registry" ? ref.entry.id : ref.id;
  let draftRef: ReturnType<typeof resolveModel> | null = null;
  try {
    if (cfg.draft !== undefined) draftRef = resolveModel(cfg.draft);
  } catch (e) {
    throw new UsageError(`--draft: ${(e as Error).message}`);
  }
  const draft_id = draftRef === null ? undefined : draftRef.kind === "registry" ? draftRef.entry.id : draftRef.id;
  // A model still to be pulled is sized and checked once it is here (below).
  if (existsSync(ref.path)) await sizeContext(cfg, ref.path);
  if (cuda && existsSync(ref.path)) checkModelOnDevice(cuda, ref.path, cfg.n_slots, cfg.n_ctx);
  if (draftRef !== null && existsSync(ref.path) && existsSync(draftRef.path)) await checkDraft(cfg, ref.path, model_id, draftRef.path, draft_id!);

  const placeholder = { ...unloadedModel({ id: model_id, path: ref.path, n_ctx: cfg.n_ctx, slots: cfg.n_slots }), spec: cfg.spec, ...(draft_id !== undefined ? { draft_model: draft_id } : {}) };
  const deferred = new DeferredEngine(placeholder);
  const { createApp } = await import("./server.js");
  const app = createApp({ engine: deferred, model_id, host: cfg.host, port: cfg.port, api_keys: keys, ui: cfg.ui, cache_ram_mib: cfg.cache_ram_mib, allowed_hosts: cfg.allowed_hosts, metrics_without_key: cfg.metrics_without_key, body_limit_bytes: cfg.body_limit_mib * 1024 * 1024, sse_stall_ms: cfg.stall_timeout_s * 1000 });
  const { url } = await app.listen(cfg.port, cfg.host);
  process.stderr.write(`mashbox: listening on ${url} — ${model_id}, loading (answers 503/529 until ready)${keys ? `, ${keys.size} API key(s)` : ""}\n`);

  let closing = false;
  let engineClose: (() => Promise<void>) | null = null;
  const shutdown = async (code: number) => {
    if (closing) return;
    closing = true;
    await app.close().catch(() => {});
    if (engineClose) await engineClose().catch(() => {});
    process.exit(code);
  };
  let engineModel: { n_ctx_train: number } | undefined;
  process.once("SIGINT", () => void shutdown(130));
  process.once("SIGTERM", () => void shutdown(143));

  try {
    if (ref.kind === "registry" && !ref.present) {
      await pull(ref.entry);
      await sizeContext(cfg, ref.path);
      if (cuda) checkModelOnDevice(cuda, ref.path, cfg.n_slots, cfg.n_ctx);
    }
    if (draftRef !== null && draftRef.kind === "registry" && !draftRef.present) await pull(draftRef.entry);
    const { createEngine } = await import("./engine/engine.js");
    const engine = createEngine({
      model_path: ref.path,
      model_id,
      n_ctx: cfg.n_ctx,
      n_slots: cfg.n_slots,
      n_threads: cfg.n_threads,
      device: cfg.device,
      cache_ram_mib: cfg.cache_ram_mib,
      cache_dir: cfg.cache_dir,
      cache_disk_mib: cfg.cache_disk_mib,
      spec: cfg.spec,
      ...(draftRef !== null ? { draft_model_path: draftRef.path, draft_model_id: draft_id } : {}),
      chat_template: cfg.chat_template,
      // A worker that keeps failing will not heal here: exit non-zero and let the supervisor
      // (systemd, Kubernetes) replace the whole process.
      on_fatal: (cause) => {
        process.stderr.write(`mashbox: giving up: ${cause}\n`);
        void shutdown(1);
      },
    });
    engineClose = () => engine.close();
    deferred.attach(engine);
    await engine.ready();
    engineModel = engine.model; // replaced when the worker reports ready
  } catch (e) {
    process.stderr.write(`mashbox: ${(e as Error).message}\n`);
    await shutdown(1);
    return 1;
  }
  const where = cuda ? `on ${cuda.probe.name}` : `${cfg.n_threads} threads`;
  const spec = cfg.spec === "draft" ? `, drafts from ${draft_id}` : cfg.spec === "ngram" ? ", n-gram drafts" : "";
  process.stderr.write(`mashbox: ready — ${model_id} (${cfg.n_slots} slots × ${cfg.n_ctx} tokens, ${where}${spec})\n`);
  const trained = engineModel?.n_ctx_train ?? 0;
  if (trained > 0 && cfg.n_ctx > trained)
    process.stderr.write(
      `mashbox: warning: --ctx ${cfg.n_ctx} is past ${model_id}'s training context (${trained} tokens); ` +
        `what it writes after ${trained} tokens of conversation is unlikely to make sense (nothing rescales its positions)\n`,
    );
  return new Promise<number>(() => {}); // serves until a signal
}

async function cmdPull(args: string[]): Promise<number> {
  const { positionals } = parseArgs({ args, allowPositionals: true, strict: true, options: {} });
  const reg = readRegistry();
  const id = positionals[0] ?? reg.default;
  const entry = findModel(reg, id);
  if (!entry) throw new UsageError(`unknown model '${id}': pull knows ${reg.models.map((m) => m.id).join(", ")}`);
  const path = await pull(entry);
  process.stdout.write(path + "\n");
  return 0;
}

function cmdModels(): number {
  const reg = readRegistry();
  const rows = reg.models.map((m) => [m.id + (m.id === reg.default ? " (default)" : ""), isPresent(m) ? "present" : "not pulled", isPresent(m) ? localPath(m) : `${m.source.package}==${m.source.version} (PyPI)`, m.description]);
  const widths = [0, 1, 2].map((i) => Math.max(...rows.map((r) => r[i].length), 2));
  for (const r of rows) process.stdout.write(`${r[0].padEnd(widths[0])}  ${r[1].padEnd(widths[1])}  ${r[2].padEnd(widths[2])}  ${r[3]}\n`);
  return 0;
}

/** Runs the CLI; resolves with the exit code (run resolves only on failure). */
export async function main(argv: string[]): Promise<number> {
  const [cmd, ...rest] = argv;
  try {
    if (cmd === undefined || cmd === "--help" || cmd === "-h" || cmd === "help") {
      process.stdout.write(USAGE);
      return cmd === undefined ? 2 : 0;
    }
    if (rest.includes("--help") || rest.includes("-h")) {
      process.stdout.write(USAGE);
      return 0;
    }
    if (cmd === "run") return await cmdRun(rest);
    if (cmd === "pull") return await cmdPull(rest);
    if (cmd === "models") return cmdModels();
    if (cmd === "conformance") {
      const { cmdConformance } = await import("./conformance/command.js");
      return await cmdConformance(rest, (s) => process.stdout.write(s), (s) => process.stderr.write(s));
    }
    throw new UsageError(`unknown command '${cmd}'`);
  } catch (e) {
    const usage = e instanceof UsageError || e instanceof DeviceError || (e as { code?: string }).code?.startsWith("ERR_PARSE_ARGS");
    process.stderr.write(`mashbox: ${(e as Error).message}\n${usage ? "Run mashbox --help for the options.\n" : ""}`);
    return usage ? 2 : 1;
  }
}
